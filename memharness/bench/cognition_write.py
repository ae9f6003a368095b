"""The write decision over the labeled write-filter set: which turns it keeps and drops.

Input: ``write_filter.jsonl`` in ``data_dir`` (``tests/data/cognition/`` in the project),
turns written by hand in English and Chinese, each labeled ``keep`` (a statement of a
person's fact, a setting, a choice, a plan, an event, a number or a constraint, short or long)
or ``drop`` (acknowledgements, small talk, noise), one JSON object a line with ``id``,
``lang``, ``category``, ``label`` and ``content``.

Each turn goes through the production decision, exactly as a write travels: the tier-1 rule
of ``record()`` (``tier1_filter``), then, when it passes, tiers 2 and 3 through the given LLM
(``decide_write``, the write workers' call). Exact repeats, the one other thing the write
path drops, are the database's unique index and are not part of a turn's decision. A model
error on a turn is reported with its id and the turn left out of the figures, since the
workers would retry it.

Per language: keep precision and recall (a kept ``keep`` turn is a true positive), the facts
dropped (the target is none) and the drops kept, each with their ids, and the tier that
dropped each dropped turn. ``run`` is pure apart from reading the file; the ``memharness
bench cognition`` command calls it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from memharness.bench.sampling import Sample, take
from pipelines.errors import LLMError
from pipelines.write.decide import WriteLLM, decide_write
from pipelines.write.filter import tier1_filter

DATA_FILE = "write_filter.jsonl"
LANGUAGES = ("en", "zh")


def load_turns(data_dir: Path) -> list[dict[str, str]]:
    """The labeled turns; a line without its fields or with an unknown label is an error."""
    turns: list[dict[str, str]] = []
    for number, line in enumerate((data_dir / DATA_FILE).read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        turn = json.loads(line)
        missing = {"id", "lang", "category", "label", "content"} - turn.keys()
        if missing or turn["label"] not in ("keep", "drop") or turn["lang"] not in LANGUAGES:
            raise ValueError(f"{DATA_FILE}:{number}: a malformed turn: {line[:80]}")
        turns.append(turn)
    return turns


def judge_turn(content: str, llm: WriteLLM) -> tuple[bool, int]:
    """What the write path does with one turn: kept or not, and the tier that decided."""
    first = tier1_filter(content)
    if not first.keep:
        return False, 1
    outcome = decide_write(content, None, llm)
    return outcome.keep, outcome.verdicts[-1].tier


def _figures(results: list[tuple[dict[str, str], bool, int]]) -> dict[str, Any]:
    keeps = [turn for turn, kept, _ in results if turn["label"] == "keep"]
    kept = [turn for turn, was_kept, _ in results if was_kept]
    true_kept = [turn for turn in kept if turn["label"] == "keep"]
    facts_dropped = [
        turn["id"] for turn, was_kept, _ in results if turn["label"] == "keep" and not was_kept
    ]
    drops_kept = [turn["id"] for turn in kept if turn["label"] == "drop"]
    dropped_by_tier = Counter(f"tier{tier}" for _, was_kept, tier in results if not was_kept)
    return {
        "turns": len(results),
        "keep_labeled": len(keeps),
        "drop_labeled": len(results) - len(keeps),
        "keep_precision": round(len(true_kept) / len(kept), 4) if kept else 0.0,
        "keep_recall": round(len(true_kept) / len(keeps), 4) if keeps else 0.0,
        "facts_dropped": len(facts_dropped),
        "facts_dropped_ids": facts_dropped,
        "drops_kept": len(drops_kept),
        "drops_kept_ids": drops_kept,
        "dropped_by_tier": dict(sorted(dropped_by_tier.items())),
    }


def run(llm: WriteLLM, data_dir: Path, sample: Sample | None = None) -> dict[str, Any]:
    """The write decision of ``llm`` over the labeled set (or ``sample`` of it), per language
    (see the module)."""
    results: dict[str, list[tuple[dict[str, str], bool, int]]] = {lang: [] for lang in LANGUAGES}
    errors: list[dict[str, str]] = []
    for turn in take(load_turns(data_dir), sample, lambda t: t["lang"]):
        try:
            kept, tier = judge_turn(turn["content"], llm)
        except LLMError as exc:
            errors.append({"id": turn["id"], "error": f"{type(exc).__name__}: {exc}"})
            continue
        results[turn["lang"]].append((turn, kept, tier))
    return {
        "llm": llm.name,
        "data": str(data_dir / DATA_FILE),
        "languages": {lang: _figures(results[lang]) for lang in LANGUAGES},
        "errors": errors,
    }
