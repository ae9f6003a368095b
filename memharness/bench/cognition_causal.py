"""Causal links over the labeled dependency chains: does affected_by() reach every dependent?

Input: ``causal.jsonl`` in ``data_dir`` (``tests/data/cognition/`` in the project), chains
written by hand in English and Chinese: a few turns over a few days, in which something is
late or broken and other work depends on it ("the mobile release is blocked by the auth
migration", 支付模块的联调依赖认证模块完成, "X 延期会影响 Y"), with unrelated turns, chatter and a
question about the chain. Each line holds ``id``, ``lang``, ``turns`` (``id``, ``day``,
``speaker``, ``content``), ``query`` (what an agent asks: "What does the delay of X
affect?"), ``expect`` (the turns affected_by() must reach) and ``must_not`` (turns it must
not reach); ``"split": "holdout"`` marks the chains written after the offline rules were
last changed, reported apart as well.

Each chain is its own tenant and goes through the production code as the link worker runs
it: every turn, in time order, is linked to the turns before it
(:func:`pipelines.cognition.link.link_on_write`, with the given LLM port proposing the
causal edges and the offline rules as its fallback), then :func:`affected_by` answers the
query over those links. Vector neighbours are left out (no embedder): entity and causal
links are what affected_by() follows.

Per language: precision (reached turns that are expected / reached), recall (expected turns
reached / expected), the chains answered completely (every expected turn, no ``must_not``
turn), the ids of the chains that miss and of the turns reached wrongly. ``run`` is pure
apart from reading the file; ``memharness bench cognition`` calls it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.cognition.causal import CausalProposer
from pipelines.cognition.link import InMemoryLinks, affected_by, link_on_write
from pipelines.errors import LLMError
from pipelines.records import ID_NAMESPACE, EpisodicMemory

DATA_FILE = "causal.jsonl"
LANGUAGES = ("en", "zh")
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def load_chains(data_dir: Path) -> list[dict[str, Any]]:
    """The labeled chains; a line without its fields, or naming turns it lacks, is an error."""
    chains: list[dict[str, Any]] = []
    for number, line in enumerate((data_dir / DATA_FILE).read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        chain = json.loads(line)
        missing = {"id", "lang", "turns", "query", "expect", "must_not"} - chain.keys()
        ids = {t.get("id") for t in chain.get("turns", [])}
        named = set(chain.get("expect", [])) | set(chain.get("must_not", []))
        if missing or chain["lang"] not in LANGUAGES or not chain["expect"] or not named <= ids:
            raise ValueError(f"{DATA_FILE}:{number}: a malformed chain: {line[:80]}")
        chains.append(chain)
    return chains


def chain_memories(chain: dict[str, Any]) -> list[tuple[str, EpisodicMemory]]:
    """The chain's turns as stored episodes of their own tenant, in time order."""
    tenant = f"causal-{chain['id']}"
    out = []
    for index, turn in enumerate(chain["turns"]):
        at = T0 + timedelta(days=int(turn["day"]), minutes=index)
        out.append(
            (
                turn["id"],
                EpisodicMemory(
                    id=uuid.uuid5(ID_NAMESPACE, f"{tenant}\x1f{turn['id']}"),
                    tenant_id=tenant,
                    task_id="chain",
                    session_id=f"day-{turn['day']}",
                    timestamp=at,
                    content=f"{turn['speaker']}: {turn['content']}",
                    importance=0.5,
                ),
            )
        )
    return sorted(out, key=lambda pair: (pair[1].timestamp, str(pair[1].id)))


def answer_chain(chain: dict[str, Any], llm: CausalProposer) -> dict[str, Any]:
    """Link the chain as the workers do, then ask its query: the turn ids reached."""
    pairs = chain_memories(chain)
    turn_of = {memory.id: turn_id for turn_id, memory in pairs}
    memories = [memory for _, memory in pairs]
    store = InMemoryLinks()
    causal = 0
    for position, memory in enumerate(memories):
        links = link_on_write(
            memory, entity_candidates=memories[:position], vector_hits=[], causal=llm
        )
        causal += sum(link.kind == "causal" for link in links)
        store.add(links)
    roots, reached = affected_by(chain["query"], memories, store)
    return {
        "starts": sorted(turn_of[m.id] for m in roots),
        "reached": sorted(turn_of[r.memory_id] for r in reached if r.memory_id in turn_of),
        "causal_links": causal,
    }


def _figures(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    reached_total = expected_total = hit_total = 0
    complete: list[str] = []
    missed: list[dict[str, Any]] = []
    wrong: list[dict[str, Any]] = []
    for chain, answer in results:
        reached = set(answer["reached"])
        expected = set(chain["expect"])
        hits = reached & expected
        reached_total += len(reached)
        expected_total += len(expected)
        hit_total += len(hits)
        forbidden = reached & set(chain["must_not"])
        if hits == expected and not forbidden:
            complete.append(chain["id"])
        if hits != expected:
            missed.append({"id": chain["id"], "missing": sorted(expected - hits), **answer})
        if reached - expected:
            wrong.append({"id": chain["id"], "turns": sorted(reached - expected)})
    return {
        "chains": len(results),
        "complete": len(complete),
        "complete_rate": round(len(complete) / len(results), 4) if results else 0.0,
        "precision": round(hit_total / reached_total, 4) if reached_total else 0.0,
        "recall": round(hit_total / expected_total, 4) if expected_total else 0.0,
        "expected_turns": expected_total,
        "reached_turns": reached_total,
        "missed": missed,
        "reached_wrongly": wrong,
    }


def run(llm: CausalProposer, data_dir: Path) -> dict[str, Any]:
    """affected_by() over the labeled chains with ``llm`` proposing causes, per language."""
    results: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
        lang: [] for lang in LANGUAGES
    }
    errors: list[dict[str, str]] = []
    for chain in load_chains(data_dir):
        try:
            answer = answer_chain(chain, llm)
        except LLMError as exc:
            errors.append({"id": chain["id"], "error": f"{type(exc).__name__}: {exc}"})
            continue
        results[chain["lang"]].append((chain, answer))
    languages = {lang: _figures(results[lang]) for lang in LANGUAGES}
    for lang in LANGUAGES:
        # The chains written after the rules were last changed, scored apart.
        held = [(c, a) for c, a in results[lang] if c.get("split") == "holdout"]
        languages[lang]["holdout"] = {
            k: v for k, v in _figures(held).items() if k not in ("missed", "reached_wrongly")
        }
    headline: dict[str, float] = {}
    for lang, figures in languages.items():
        headline[f"precision_{lang}"] = figures["precision"]
        headline[f"recall_{lang}"] = figures["recall"]
        headline[f"complete_rate_{lang}"] = figures["complete_rate"]
    return {
        "llm": llm.name,
        "data": str(data_dir / DATA_FILE),
        "languages": languages,
        "errors": errors,
        "headline": headline,
    }
