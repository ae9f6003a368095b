"""Hierarchical compression of a group of memories into one summary row.

Compression never destroys anything: a summary is a new row (:class:`SummaryDraft`) with
parent pointers and a version, and its id is derived from them, so a replay writes the same
row and a rollback (``pipelines.cognition.quality``) only retires the summary. A retry after
a rollback is the next version and aims at half the previous ratio. Final eviction is the
decay model's business (``pipelines.cognition.decay``) and is logged there.

:func:`plan_groups` says which rows one summary covers; :func:`compress_group` runs the
two-stage protocol (``pipelines.cognition.protocol``) over them with the LLM port, one retry
on a malformed answer, then the offline rules (``pipelines.cognition.offline_compress``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from pipelines.answers import ask_with_fallback
from pipelines.cognition.levels import DEFAULT_LEVELS, LevelPolicy
from pipelines.cognition.offline_compress import OFFLINE, OFFLINE_RULES_VERSION, compress_offline
from pipelines.cognition.protocol import (
    AnnotateRequest,
    AnnotationBatch,
    CompressionLLM,
    CompressRequest,
    Segment,
    SegmentAnnotation,
    SourceMemory,
    SummaryOutput,
    check_annotations,
    check_summary,
)
from pipelines.cognition.segments import segment_sources
from pipelines.records import ID_NAMESPACE, Level
from pipelines.text.words import (
    word_count,
)


class SummaryDraft(BaseModel):
    """A summary row to insert: new, versioned, pointing at what it summarises."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    task_id: str
    session_id: str
    level: Level
    version: int = Field(ge=1)
    parent_ids: tuple[uuid.UUID, ...]
    timestamp: datetime
    timestamp_end: datetime
    content: str
    source_words: int = Field(ge=0)
    summary_words: int = Field(ge=0)
    annotate_only: bool = False
    annotated_by: str
    compressed_by: str
    malformed_answers: int = Field(0, ge=0)
    kinds: dict[str, int] = Field(default_factory=dict)
    # The compressor that made it (:func:`compressor_id`); "" for rows from before the mark.
    compressor: str = ""

    @property
    def ratio(self) -> float:
        return self.source_words / max(1, self.summary_words)

    def metadata(self) -> dict[str, object]:
        """What the worker stores in the row's ``metadata`` (JSON)."""
        return {
            "parent_ids": [str(p) for p in self.parent_ids],
            "version": self.version,
            "source_words": self.source_words,
            "summary_words": self.summary_words,
            "timestamp_end": self.timestamp_end.isoformat(),
            "annotate_only": self.annotate_only,
            "annotated_by": self.annotated_by,
            "compressed_by": self.compressed_by,
            "malformed_answers": self.malformed_answers,
            "kinds": self.kinds,
            "compressor": self.compressor,
        }


class CompressionResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    draft: SummaryDraft
    segments: tuple[Segment, ...]
    annotations: tuple[SegmentAnnotation, ...]


def compressor_id(llm: CompressionLLM | None) -> str:
    """Who compresses: the engine behind the port and the version of the offline rules it
    falls back on ("openai:deepseek-chat+rules-2"). A compression-resistant mark holds for
    this compressor only."""
    return f"{(llm or OFFLINE).name}+rules-{OFFLINE_RULES_VERSION}"


def summary_id(
    tenant_id: str, level: Level, version: int, parent_ids: Iterable[uuid.UUID]
) -> uuid.UUID:
    parents = ",".join(sorted(str(p) for p in parent_ids))
    return uuid.uuid5(
        ID_NAMESPACE, f"summary\x1f{tenant_id}\x1f{int(level)}\x1f{version}\x1f{parents}"
    )


def compress_group(
    sources: Sequence[SourceMemory],
    level: Level,
    llm: CompressionLLM | None = None,
    *,
    version: int = 1,
    annotate_only: bool = False,
    policy: LevelPolicy = DEFAULT_LEVELS,
    attempt: int | None = None,
) -> CompressionResult:
    """Run the protocol over one group and return the summary row to write.

    ``annotate_only`` is the mode of a compression-resistant memory: stage 1 only, rendered
    with chatter dropped and nothing else cut. ``attempt`` (default: the version) sets the
    target ratio: a new compressor's first try at rows that resisted the old one aims at
    the full ratio while its version goes on counting. Raises TransientLLMError to be
    retried.
    """
    if not sources:
        raise ValueError("nothing to compress")
    if level not in (Level.L1, Level.L2, Level.L3):
        raise ValueError(f"compression produces L1-L3, not L{int(level)}")
    if any(s.level >= level for s in sources):
        raise ValueError(f"an L{int(level)} summary needs lower-level sources")
    if len({s.tenant_id for s in sources}) != 1:
        raise ValueError("a summary never mixes tenants")
    # Stable on the caller's order: turns written in the same second keep their sequence.
    ordered = sorted(sources, key=lambda s: s.timestamp)
    engine: CompressionLLM = llm or OFFLINE
    segments = segment_sources(ordered)
    if not segments:
        raise ValueError("the sources hold no text")
    annotate_request = AnnotateRequest(segments=segments)

    def annotate() -> AnnotationBatch:
        batch = engine.annotate_segments(annotate_request)
        check_annotations(batch, annotate_request)
        return batch

    batch, annotated_by, bad_annotations = ask_with_fallback(
        annotate, lambda: OFFLINE.annotate_segments(annotate_request), engine.name
    )
    source_words = sum(s.source_words for s in ordered)
    target = max(1, math.ceil(source_words / policy.ratio(level, attempt or version)))
    compress_request = CompressRequest(
        level=level, target_words=target, segments=segments, annotations=tuple(batch.segments)
    )
    if annotate_only:
        output = compress_offline(compress_request, annotate_only=True)
        compressed_by, bad_summaries = "annotate-only", 0
    else:

        def compress() -> SummaryOutput:
            return check_summary(engine.compress_segments(compress_request), compress_request)

        output, compressed_by, bad_summaries = ask_with_fallback(
            compress, lambda: compress_offline(compress_request), engine.name
        )
    kinds: dict[str, int] = {}
    for annotation in batch.segments:
        kinds[annotation.kind.value] = kinds.get(annotation.kind.value, 0) + 1
    parent_ids = tuple(s.id for s in ordered)
    first = ordered[0]
    draft = SummaryDraft(
        id=summary_id(first.tenant_id, level, version, parent_ids),
        tenant_id=first.tenant_id,
        task_id=first.task_id,
        session_id=first.session_id
        if len({s.session_id for s in ordered}) == 1
        else f"{first.task_id}:L{int(level)}",
        level=level,
        version=version,
        parent_ids=parent_ids,
        timestamp=first.timestamp,
        timestamp_end=ordered[-1].timestamp,
        content=output.text,
        source_words=source_words,
        summary_words=word_count(output.text),
        annotate_only=annotate_only,
        annotated_by=annotated_by,
        compressed_by=compressed_by,
        malformed_answers=bad_annotations + bad_summaries,
        kinds=kinds,
        compressor=compressor_id(llm),
    )
    return CompressionResult(draft=draft, segments=segments, annotations=tuple(batch.segments))


def plan_groups(
    sources: Sequence[SourceMemory], level: Level, policy: LevelPolicy = DEFAULT_LEVELS
) -> list[list[SourceMemory]]:
    """Cut the rows to promote into groups that one summary each will cover.

    L1: one session of one task, at most a day and ``l1_group_max_words`` raw words.
    L2: one task, at most a week of L1 rows. L3: the whole task (call it at completion).
    """
    if level not in (Level.L1, Level.L2, Level.L3):
        raise ValueError(f"no groups for L{int(level)}")
    keyed: dict[tuple[str, ...], list[SourceMemory]] = {}
    for source in sorted(sources, key=lambda s: s.timestamp):
        key: tuple[str, ...] = (source.tenant_id, source.task_id)
        if level == Level.L1:
            key += (source.session_id,)
        keyed.setdefault(key, []).append(source)
    if level == Level.L3:
        return list(keyed.values())
    span_s = policy.l1_group_span_s if level == Level.L1 else policy.l2_group_span_s
    max_words = policy.l1_group_max_words if level == Level.L1 else None
    groups: list[list[SourceMemory]] = []
    for rows in keyed.values():
        current: list[SourceMemory] = []
        words = 0
        for row in rows:
            too_long = bool(current) and (
                (row.timestamp - current[0].timestamp).total_seconds() > span_s
                or (max_words is not None and words + row.source_words > max_words)
            )
            if too_long:
                groups.append(current)
                current, words = [], 0
            current.append(row)
            words += row.source_words
        if current:
            groups.append(current)
    return groups


def sources_from_drafts(drafts: Iterable[SummaryDraft]) -> list[SourceMemory]:
    """Summary rows as the sources of the next level."""
    return [
        SourceMemory(
            id=d.id,
            tenant_id=d.tenant_id,
            task_id=d.task_id,
            session_id=d.session_id,
            timestamp=d.timestamp,
            content=d.content,
            level=d.level,
            source_words=d.source_words,
        )
        for d in drafts
    ]
