"""The knowledge section of ``memharness bench cognition``: what nightly consolidation turns
into semantic knowledge, scored on the labeled histories of ``knowledge.jsonl``.

Each line is one short history written by hand for this project (English and Chinese, 5 to
15 turns): who owns what, the technology stack, preferences restated in other words on other
days, conventions, patterns, mistakes, and hard negatives that must yield nothing (status
reports and summaries, one-off remarks, questions, chatter and acknowledgements,
hypotheticals). ``expect`` lists the items a good consolidation makes (a kind and the
keywords its statement must contain); ``must_not`` the turns that must not become knowledge.

Each history is its own tenant: its turns become level-0 memories as the write worker stores
them ("speaker: text", Chinese "speaker：text"; the turn's user, task, and ``day`` days after a
fixed epoch), and the real plan runs on them: ``pipelines.cognition.consolidate.consolidate``
with an empty store, the hashing embedder, and the given LLM as the extractor (offline: the
cue rules), as ``workers/cognition/consolidate.py`` calls it. The produced items are the
semantic rows the plan would write (created, conditional and flagged rows, with the sources
that merges add); a preference that stays episodic is not one.

Scored per language, overall and per kind: precision = produced rows matching an expected item
(same kind, the statement holds every keyword, case-folded) / produced; recall = expected items
matched / expected. A second row matching an already matched item is a duplicate: the
restatements did not join, and it counts as wrong. Reported besides: the wrong rows (history,
kind, statement, why) and the ``must_not`` turns that became a source of knowledge.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.cognition.consolidate import ChangeAction, consolidate
from pipelines.cognition.knowledge import KnowledgeExtractor
from pipelines.errors import LLMError
from pipelines.records import ID_NAMESPACE, EpisodicMemory, MemoryStatus, MemoryType
from pipelines.text.words import fold
from workers.adapters.embed_hashing import HashingEmbedder

DATA_FILE = "knowledge.jsonl"
LANGS = ("en", "zh")
# A fixed first day: the plan compares times (recurrence over days), never the calendar.
_EPOCH = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
# Turns of one day are a minute apart, so they stay in order.
_TURN_GAP = timedelta(minutes=1)
# The run happens a month after the first day: every history's turns are in its window.
_RUN_AFTER = timedelta(days=30)
_PRODUCING = (ChangeAction.CREATE, ChangeAction.MERGE, ChangeAction.CONDITIONAL, ChangeAction.FLAG)


@dataclass(frozen=True)
class Expected:
    kind: str
    must_contain: tuple[str, ...]

    def matches(self, kind: str, statement: str) -> bool:
        folded = fold(statement)
        return kind == self.kind and all(fold(word) in folded for word in self.must_contain)


@dataclass(frozen=True)
class History:
    id: str
    lang: str
    memories: tuple[EpisodicMemory, ...]
    turn_of: dict[uuid.UUID, str]
    expect: tuple[Expected, ...]
    must_not: tuple[str, ...]


@dataclass(frozen=True)
class Produced:
    kind: str
    statement: str
    action: str
    source_turns: tuple[str, ...]


def _memory(history_id: str, lang: str, turn: dict[str, Any], index: int) -> EpisodicMemory:
    text = str(turn["content"])
    speaker = turn.get("speaker")
    content = (f"{speaker}：{text}" if lang == "zh" else f"{speaker}: {text}") if speaker else text
    return EpisodicMemory(
        id=uuid.uuid5(ID_NAMESPACE, f"bench-knowledge\x1f{history_id}\x1f{turn['id']}"),
        tenant_id=f"knowledge-{history_id}",
        user_id=turn.get("user_id"),
        task_id=str(turn.get("task_id") or "t-main"),
        session_id=f"{history_id}-day{turn['day']}",
        timestamp=_EPOCH + timedelta(days=int(turn["day"])) + index * _TURN_GAP,
        type=MemoryType(turn["type"]) if turn.get("type") else None,
        content=content,
        status=MemoryStatus.STORED,
        metadata={"speaker": speaker} if speaker else {},
    )


def load_histories(data_dir: Path) -> list[History]:
    """The labeled histories of ``data_dir/knowledge.jsonl``, in file order."""
    path = data_dir / DATA_FILE
    histories = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if row["lang"] not in LANGS:
            raise ValueError(f"{path}:{number}: lang {row['lang']!r} not in {LANGS}")
        memories = tuple(
            _memory(row["id"], row["lang"], turn, index) for index, turn in enumerate(row["turns"])
        )
        histories.append(
            History(
                id=row["id"],
                lang=row["lang"],
                memories=memories,
                turn_of={m.id: t["id"] for m, t in zip(memories, row["turns"], strict=True)},
                expect=tuple(
                    Expected(kind=e["kind"], must_contain=tuple(e["must_contain"]))
                    for e in row["expect"]
                ),
                must_not=tuple(row["must_not"]),
            )
        )
    return histories


def produce(history: History, extractor: KnowledgeExtractor) -> list[Produced]:
    """The semantic rows the consolidation plan of one history would write, as they stand
    after the run (a merge into a row of the same run extends that row's sources)."""
    last = max(m.timestamp for m in history.memories)
    plan = consolidate(history.memories, [], HashingEmbedder(), last + _RUN_AFTER, extractor)
    rows: dict[uuid.UUID, Produced] = {}
    for change in plan.changes:
        if change.action not in _PRODUCING:
            continue
        row = change.semantic
        first = rows.get(row.id)
        rows[row.id] = Produced(
            kind=change.kind.value,
            statement=row.content,
            action=first.action if first else change.action.value,
            source_turns=tuple(history.turn_of.get(s, str(s)) for s in row.source_memory_ids),
        )
    return list(rows.values())


@dataclass
class _Tally:
    produced: int = 0
    correct: int = 0
    duplicates: int = 0
    expected: int = 0
    matched: int = 0

    def figures(self) -> dict[str, Any]:
        return {
            "produced": self.produced,
            "correct": self.correct,
            "wrong": self.produced - self.correct,
            "duplicates": self.duplicates,
            "expected": self.expected,
            "matched": self.matched,
            "precision": _ratio(self.correct, self.produced),
            "recall": _ratio(self.matched, self.expected),
        }


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 3) if den else None


def score(histories: Sequence[History], produced: dict[str, list[Produced]]) -> dict[str, Any]:
    """Precision and recall per language and kind; the wrong rows and the leaked turns."""
    tallies: dict[tuple[str, str], _Tally] = {}

    def tally(lang: str, kind: str) -> list[_Tally]:
        keys = [(lang, kind), (lang, "all"), ("all", kind), ("all", "all")]
        return [tallies.setdefault(key, _Tally()) for key in keys]

    wrong: list[dict[str, Any]] = []
    leaked: list[dict[str, str]] = []
    for history in histories:
        rows = produced.get(history.id, [])
        for expected in history.expect:
            for t in tally(history.lang, expected.kind):
                t.expected += 1
        matched: set[int] = set()
        for row in rows:
            for t in tally(history.lang, row.kind):
                t.produced += 1
            hits = [i for i, e in enumerate(history.expect) if e.matches(row.kind, row.statement)]
            fresh = [i for i in hits if i not in matched]
            if fresh:
                matched.add(fresh[0])
                for t in tally(history.lang, row.kind):
                    t.correct += 1
                for t in tally(history.lang, history.expect[fresh[0]].kind):
                    t.matched += 1
                continue
            if hits:
                why = "duplicate"
                for t in tally(history.lang, row.kind):
                    t.duplicates += 1
            elif any(e.matches(e.kind, row.statement) for e in history.expect):
                why = "wrong kind"
            else:
                why = "unexpected"
            wrong.append(
                {"history": history.id, "kind": row.kind, "statement": row.statement, "why": why}
            )
        for row in rows:
            for turn in row.source_turns:
                if turn in history.must_not:
                    leaked.append(
                        {"history": history.id, "lang": history.lang, "turn": turn,
                         "kind": row.kind}
                    )  # fmt: skip
    by_lang: dict[str, Any] = {}
    for lang in (*LANGS, "all"):
        kinds = sorted({kind for (lg, kind) in tallies if lg == lang and kind != "all"})
        overall = tallies.get((lang, "all"), _Tally()).figures()
        overall["must_not_leaked"] = sum(1 for item in leaked if lang in ("all", item["lang"]))
        overall["per_kind"] = {kind: tallies[(lang, kind)].figures() for kind in kinds}
        by_lang[lang] = overall
    return {"by_lang": by_lang, "wrong": wrong, "must_not_leaked": leaked}


def table(scored: dict[str, Any]) -> str:
    lines = ["knowledge: lang kind | precision recall (correct/produced, matched/expected)"]
    for lang in (*LANGS, "all"):
        figures = scored["by_lang"][lang]
        rows = [("all", figures), *figures["per_kind"].items()]
        for kind, cell in rows:
            lines.append(
                f"  {lang:<3} {kind:<11} | {cell['precision']} {cell['recall']} "
                f"({cell['correct']}/{cell['produced']}, {cell['matched']}/{cell['expected']})"
            )
        lines.append(f"  {lang:<3} must_not turns that became knowledge: "
                     f"{figures['must_not_leaked']}")  # fmt: skip
    return "\n".join(lines)


def run(llm: KnowledgeExtractor, data_dir: Path) -> dict[str, Any]:
    histories = load_histories(data_dir)
    produced: dict[str, list[Produced]] = {}
    errors: list[dict[str, str]] = []
    for history in histories:
        try:
            produced[history.id] = produce(history, llm)
        except LLMError as exc:
            # the worker would retry the run; the history is left out rather than scored empty
            errors.append({"history": history.id, "error": f"{type(exc).__name__}: {exc}"})
    scored_histories = [h for h in histories if h.id in produced]
    scored = score(scored_histories, produced)
    print(table(scored), file=sys.stderr, flush=True)
    headline: dict[str, Any] = {}
    for lang in LANGS:
        figures = scored["by_lang"][lang]
        headline[f"precision_{lang}"] = figures["precision"]
        headline[f"recall_{lang}"] = figures["recall"]
        headline[f"duplicates_{lang}"] = figures["duplicates"]
        headline[f"must_not_leaked_{lang}"] = figures["must_not_leaked"]
    return {
        "llm": llm.name,
        "data": str(data_dir / DATA_FILE),
        "histories": len(histories),
        "scored": len(scored_histories),
        "errors": errors,
        **scored,
        "produced": {hid: [row.__dict__ for row in rows] for hid, rows in sorted(produced.items())},
        "headline": headline,
    }
