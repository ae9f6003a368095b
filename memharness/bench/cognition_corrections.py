"""The corrections section of ``memharness bench cognition``: which older statement a newer
one supersedes, scored on the labeled pairs of ``corrections.jsonl``.

Each line is one older/newer pair written by hand for this project (English and Chinese):
``label`` "supersede" when the newer statement truly corrects the older one (a changed
preference, a reassigned owner, a moved deadline, a replaced technology, a changed setting or
limit), "keep" for hard negatives where both must stay (a question about the older statement,
a restatement or a copy, an elaboration, a report that mentions it, another speaker's
opinion, an agreement, a different subject sharing words, a negation that does not
contradict, a statement limited to its own situation, an unrelated turn of a chat).

Each pair becomes two level-0 memories of its own tenant, as the write worker stores them: the
content "speaker: text" (Chinese "speaker：text") when the pair names a speaker, the types the
pair gives, the same user unless ``user_id`` says otherwise, the newer ``days_apart`` days
(and an hour) after the older. Then:

* rules: ``pipelines.own.contradicted(new, [old])``, the pure rule. A proposal
  whose ``verdict`` is SUPERSEDE is an automatic supersession; CONFLICT keeps both and is
  counted as a recorded conflict.
* confirmed: ``pipelines.own.contradict.confirm(llm, new, [old], proposals)``, the model
  port's answer on each proposal (one ``confirm_correction`` call each; pairs without a
  proposal cost nothing), scored the same way. A model may only weaken a proposal, and one
  that fails keeps both memories as a conflict (the runner counts the failed calls).

Pairs marked ``"split": "holdout"`` (48, 24 per language) were written before the rules
that now decide them (the value-replacement rule and the wider cues of 2026-12-07); the others
were in view while the rules were written. Each language's figures are also given per split.

Scored per language: supersession precision and recall (predicted = SUPERSEDE, gold = the
label "supersede"), conflicts per label, the wrong supersessions by id and category, and a
per-category table. Precision is null when nothing was superseded.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.own.contradict import Supersession, Verdict, confirm, contradicted
from pipelines.ports import LLM
from pipelines.records import ID_NAMESPACE, EpisodicMemory, MemoryStatus, MemoryType

DATA_FILE = "corrections.jsonl"
LANGS = ("en", "zh")
LABELS = ("supersede", "keep")
SPLITS = ("dev", "holdout")
# A fixed day for every older statement: the rule compares times, never the calendar.
_EPOCH = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
# The newer statement is at least this much later, so a pair said the same day stays ordered.
_SAME_DAY_GAP = timedelta(hours=1)
# Decisions of one pair.
SUPERSEDE, CONFLICT, KEEP = "supersede", "conflict", "keep"


@dataclass(frozen=True)
class Pair:
    id: str
    lang: str
    category: str
    label: str
    older: EpisodicMemory
    newer: EpisodicMemory
    split: str = "dev"


def _content(side: dict[str, Any], lang: str) -> str:
    text = str(side["content"])
    speaker = side.get("speaker")
    if not speaker:
        return text
    return f"{speaker}：{text}" if lang == "zh" else f"{speaker}: {text}"


def _memory(
    pair_id: str, role: str, side: dict[str, Any], lang: str, at: datetime
) -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.uuid5(ID_NAMESPACE, f"bench-cognition\x1f{pair_id}\x1f{role}"),
        tenant_id=f"cognition-{pair_id}",
        user_id=side.get("user_id"),
        task_id="cognition-corrections",
        session_id=f"{pair_id}-{role}",
        timestamp=at,
        type=MemoryType(side["type"]) if side.get("type") else None,
        content=_content(side, lang),
        status=MemoryStatus.STORED,
        metadata={"speaker": side["speaker"]} if side.get("speaker") else {},
    )


def load_pairs(data_dir: Path) -> list[Pair]:
    """The labeled pairs of ``data_dir/corrections.jsonl``, in file order."""
    pairs = []
    path = data_dir / DATA_FILE
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if row["label"] not in LABELS or row["lang"] not in LANGS:
            raise ValueError(f"{path}:{number}: label or lang out of {LABELS}, {LANGS}")
        newer_at = _EPOCH + timedelta(days=int(row["days_apart"])) + _SAME_DAY_GAP
        pairs.append(
            Pair(
                id=row["id"],
                lang=row["lang"],
                category=row["category"],
                label=row["label"],
                older=_memory(row["id"], "older", row["older"], row["lang"], _EPOCH),
                newer=_memory(row["id"], "newer", row["newer"], row["lang"], newer_at),
                split=str(row.get("split", "dev")),
            )
        )
    return pairs


def decision_of(pair: Pair, proposals: Sequence[Supersession]) -> str:
    """What happens to the pair's older memory: superseded, kept with a recorded conflict,
    or kept."""
    verdicts = {p.verdict for p in proposals if p.old_id == pair.older.id}
    if Verdict.SUPERSEDE in verdicts:
        return SUPERSEDE
    return CONFLICT if verdicts else KEEP


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 3) if den else None


def _split_figures(pairs: Sequence[Pair], decisions: dict[str, str], split: str) -> dict[str, Any]:
    """Precision and recall on one split: "dev" pairs were in view while the rules were
    written, "holdout" pairs were written before the rules that now decide them."""
    chosen = [p for p in pairs if p.split == split]
    tp = sum(p.label == SUPERSEDE and decisions[p.id] == SUPERSEDE for p in chosen)
    fp = sum(p.label == KEEP and decisions[p.id] == SUPERSEDE for p in chosen)
    gold = sum(p.label == SUPERSEDE for p in chosen)
    return {
        "pairs": len(chosen),
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, gold),
        "wrong_supersessions": fp,
    }


def score(pairs: Sequence[Pair], decisions: dict[str, str]) -> dict[str, Any]:
    """Supersession precision and recall per language and overall, conflicts per label, the
    wrong supersessions and the per-category table."""
    by_lang: dict[str, Any] = {}
    for lang in (*LANGS, "all"):
        chosen = [p for p in pairs if lang == "all" or p.lang == lang]
        tp = sum(p.label == SUPERSEDE and decisions[p.id] == SUPERSEDE for p in chosen)
        fp = sum(p.label == KEEP and decisions[p.id] == SUPERSEDE for p in chosen)
        gold = sum(p.label == SUPERSEDE for p in chosen)
        conflicts = Counter(p.label for p in chosen if decisions[p.id] == CONFLICT)
        by_lang[lang] = {
            "pairs": len(chosen),
            "supersede_labeled": gold,
            "keep_labeled": len(chosen) - gold,
            "superseded": tp + fp,
            "correct_supersessions": tp,
            "wrong_supersessions": fp,
            "precision": _ratio(tp, tp + fp),
            "recall": _ratio(tp, gold),
            "conflicts": {label: conflicts[label] for label in LABELS},
            "by_split": {split: _split_figures(chosen, decisions, split) for split in SPLITS},
        }
    per_category: dict[str, Any] = {}
    for pair in pairs:
        cell = per_category.setdefault(pair.category, {"label": pair.label}).setdefault(
            pair.lang, {"pairs": 0, SUPERSEDE: 0, CONFLICT: 0, KEEP: 0}
        )
        cell["pairs"] += 1
        cell[decisions[pair.id]] += 1
    wrong = [
        {"id": p.id, "category": p.category}
        for p in pairs
        if p.label == KEEP and decisions[p.id] == SUPERSEDE
    ]
    return {
        "by_lang": by_lang,
        "per_category": dict(sorted(per_category.items(), key=lambda kv: (kv[1]["label"], kv[0]))),
        "wrong_supersessions": wrong,
    }


def table(name: str, scored: dict[str, Any]) -> str:
    """The per-category table a reader sees on stderr: superseded / conflict of each cell."""
    lines = [f"{name}: category (label) | en superseded/conflict/pairs | zh ..."]
    for category, row in scored["per_category"].items():
        cells = []
        for lang in LANGS:
            cell = row.get(lang)
            cells.append(
                f"{cell[SUPERSEDE]:>3}/{cell[CONFLICT]:>3}/{cell['pairs']:>3}" if cell else "  -"
            )
        lines.append(f"  {category:<22} ({row['label']:<9}) | " + " | ".join(cells))
    for lang in LANGS:
        figures = scored["by_lang"][lang]
        lines.append(
            f"  {lang}: precision {figures['precision']} recall {figures['recall']} "
            f"({figures['correct_supersessions']} right, {figures['wrong_supersessions']} wrong)"
            + "".join(
                f"; {split} P {cell['precision']} R {cell['recall']}"
                for split, cell in figures["by_split"].items()
            )
        )
    return "\n".join(lines)


def _headline(name: str, scored: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lang in LANGS:
        out[f"{name}_precision_{lang}"] = scored["by_lang"][lang]["precision"]
        out[f"{name}_recall_{lang}"] = scored["by_lang"][lang]["recall"]
    return out


def run(llm: LLM, data_dir: Path) -> dict[str, Any]:
    pairs = load_pairs(data_dir)
    proposals = {p.id: contradicted(p.newer, [p.older]) for p in pairs}
    rules = score(pairs, {p.id: decision_of(p, proposals[p.id]) for p in pairs})
    print(table("rules", rules), file=sys.stderr, flush=True)
    result: dict[str, Any] = {
        "pairs": len(pairs),
        "scored": len(proposals),
        "proposed": sum(bool(found) for found in proposals.values()),
        "rules": rules,
        "headline": _headline("rules", rules),
    }
    decisions = {
        pair.id: decision_of(pair, confirm(llm, pair.newer, [pair.older], proposals[pair.id]))
        if proposals[pair.id]
        else KEEP
        for pair in pairs
    }
    confirmed = score(pairs, decisions)
    confirmed["llm"] = llm.name
    print(table(f"confirmed by {llm.name}", confirmed), file=sys.stderr, flush=True)
    result["confirmed"] = confirmed
    result["headline"].update(_headline("confirmed", confirmed))
    return result
