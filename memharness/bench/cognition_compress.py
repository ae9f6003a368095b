"""Compression on the hand-labeled segments: what a summary keeps, per language.

Data: ``compression.jsonl`` in ``data_dir`` (``tests/data/cognition/`` in this project),
written by hand for this project. One JSON object a line::

    {"id": "zh-06", "lang": "en" | "zh", "category": "chatter-heavy",
     "turns": [{"speaker": "测试小林", "content": "...", "type": "observation"}, ...],
     "facts": ["312 个用例", ["replica lagged", "replica lag"], ...]}

``type`` is optional (a ``pipelines.records.MemoryType`` value, what the write path would
type the turn as; the compressor does not read it). Each fact is a short string a correct
summary must contain, or a list of alternatives of which one must be there. A fact is
**kept** when :func:`pipelines.quality.answer_recoverable` finds it in the summary: all its
content words there after the project's normalisation (case, number words, a light stemmer;
Chinese as character bigrams), and each date it names contained in a date the summary
states; a fact with Chinese in it is also kept when the summary holds it as text, spacing
aside (its lone characters are no bigrams of the summary). The summary's own timestamp is
not counted as one of its dates (unlike ``bench compression``), so a date must be written
to count.

Protocol: each segment is one group of L0 memories, turn *i* being ``"speaker: content"`` at
2026-03-02 09:00 UTC + *i* minutes, compressed to L1 with the given LLM port through the
production path (:func:`pipelines.quality.attempt_compression`: the two-stage protocol, the
quality check, rollback and a gentler retry, annotate-only after three failures) until a
summary is kept. Per language it reports the ratio of source to summary size, in the
project's words (``pipelines.text.words.word_count``: whitespace words, a Han run at 1.5
characters a word) and in DeepSeek-V4 tokens, fact recall (kept facts / facts), rollbacks,
and the segments whose summary lost a fact, with the facts lost.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memharness.bench.sampling import Sample, take
from pipelines.cognition.health import CompressionHealth
from pipelines.cognition.protocol import CompressionLLM, SourceMemory
from pipelines.cognition.quality import (
    DatedText,
    QualityVerdict,
    TextIndex,
    answer_recoverable,
    attempt_compression,
)
from pipelines.errors import LLMError
from pipelines.read.tokens import TokenCounter
from pipelines.records import ID_NAMESPACE, Level, MemoryType
from pipelines.text.words import has_han, word_count

DATA_FILE = "compression.jsonl"
START = datetime(2026, 3, 2, 9, tzinfo=UTC)
# attempt_compression keeps an annotate-only summary at the fourth try; past this many
# attempts something is wrong with the loop, not the segment.
MAX_ATTEMPTS = 8

Fact = str | list[str]


class Turn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    speaker: str = Field(min_length=1)
    content: str = Field(min_length=1)
    type: MemoryType | None = None


class LabeledSegment(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    lang: str = Field(pattern="^(en|zh)$")
    category: str = Field(min_length=1)
    turns: list[Turn] = Field(min_length=1)
    facts: list[Fact] = Field(min_length=1)


def load_segments(data_dir: Path) -> list[LabeledSegment]:
    lines = (data_dir / DATA_FILE).read_text(encoding="utf-8").splitlines()
    return [LabeledSegment.model_validate_json(line) for line in lines if line.strip()]


def segment_sources(segment: LabeledSegment) -> list[SourceMemory]:
    rows = []
    for i, turn in enumerate(segment.turns):
        content = f"{turn.speaker}: {turn.content}"
        rows.append(
            SourceMemory(
                id=uuid.uuid5(ID_NAMESPACE, f"labeled-compression\x1f{segment.id}\x1f{i}"),
                tenant_id="bench",
                task_id=f"labeled-{segment.lang}",
                session_id=segment.id,
                timestamp=START + timedelta(minutes=i),
                content=content,
                source_words=word_count(content),
            )
        )
    return rows


def fact_kept(fact: Fact, index: TextIndex) -> bool:
    """One alternative recoverable (module docstring), or, with Chinese in it, written in the
    summary as it is, spacing aside: a lone character of a fact (8 万, 姓何) is no bigram of
    the summary's runs (万条消息), so only the text finds it."""
    alternatives = [fact] if isinstance(fact, str) else fact
    return any(
        (has_han(text) and index.has_phrase(text)) or answer_recoverable(text, index).recoverable
        for text in alternatives
    )


class SegmentResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    lang: str
    category: str
    summary: str
    source_words: int
    summary_words: int
    source_tokens: int
    summary_tokens: int
    facts: int
    kept: int
    lost: tuple[str, ...]
    rollbacks: int
    annotate_only: bool


def compress_segment(
    segment: LabeledSegment, llm: CompressionLLM, counter: TokenCounter
) -> SegmentResult:
    """One segment through the production gate, until a summary is kept."""
    sources = segment_sources(segment)
    now = sources[-1].timestamp
    health: dict[uuid.UUID, CompressionHealth] = {}
    rollbacks = 0
    for _ in range(MAX_ATTEMPTS):
        attempt = attempt_compression(sources, Level.L1, health, now, llm)
        if attempt.outcome.verdict is QualityVerdict.KEEP:
            break
        rollbacks += 1
        health.update({h.memory_id: h for h in attempt.outcome.health})
    else:
        raise AssertionError(f"{segment.id}: no summary kept in {MAX_ATTEMPTS} attempts")
    draft = attempt.draft
    index = TextIndex([DatedText(text=draft.content, anchor=None)])
    lost = tuple(
        fact if isinstance(fact, str) else " | ".join(fact)
        for fact in segment.facts
        if not fact_kept(fact, index)
    )
    return SegmentResult(
        id=segment.id,
        lang=segment.lang,
        category=segment.category,
        summary=draft.content,
        source_words=draft.source_words,
        summary_words=draft.summary_words,
        source_tokens=sum(counter.count(s.content) for s in sources),
        summary_tokens=counter.count(draft.content),
        facts=len(segment.facts),
        kept=len(segment.facts) - len(lost),
        lost=lost,
        rollbacks=rollbacks,
        annotate_only=draft.annotate_only,
    )


def summarise(results: Sequence[SegmentResult]) -> dict[str, Any]:
    source_words = sum(r.source_words for r in results)
    summary_words = sum(r.summary_words for r in results)
    source_tokens = sum(r.source_tokens for r in results)
    summary_tokens = sum(r.summary_tokens for r in results)
    facts = sum(r.facts for r in results)
    return {
        "segments": len(results),
        "ratio": round(source_tokens / max(1, summary_tokens), 3),
        "ratio_words": round(source_words / max(1, summary_words), 3),
        "fact_recall": round(sum(r.kept for r in results) / facts, 4) if facts else None,
        "facts": facts,
        "rollbacks": sum(r.rollbacks for r in results),
        "annotate_only": sum(r.annotate_only for r in results),
        "smaller_than_source": sum(r.summary_words < r.source_words for r in results),
        "lost": {r.id: list(r.lost) for r in results if r.lost},
    }


def run(
    llm: CompressionLLM,
    data_dir: Path,
    counter: TokenCounter | None = None,
    sample: Sample | None = None,
) -> dict[str, Any]:
    """Compress every labeled segment (or ``sample`` of them) with ``llm``; figures per
    language (module docstring). A segment whose model call failed (a timeout, a server gone)
    is reported with its id and left out of the figures, since the workers would retry it.

    ``counter`` counts tokens (default: the DeepSeek-V4 tokenizer, shipped in its wheel).
    """
    if counter is None:
        from workers.adapters.tokenizer import load_token_counter

        counter = load_token_counter()
    results: list[SegmentResult] = []
    errors: list[dict[str, str]] = []
    for segment in take(load_segments(data_dir), sample, lambda s: s.lang):
        try:
            results.append(compress_segment(segment, llm, counter))
        except LLMError as exc:
            errors.append({"id": segment.id, "error": f"{type(exc).__name__}: {exc}"})
    by_lang: dict[str, list[SegmentResult]] = {}
    for result in results:
        by_lang.setdefault(result.lang, []).append(result)
    return {
        "compressor": llm.name,
        "tokenizer": getattr(counter, "name", type(counter).__name__),
        "languages": {lang: summarise(rows) for lang, rows in sorted(by_lang.items())},
        "errors": errors,
    }


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, ensure_ascii=False, sort_keys=True)
