"""Compression health: a memory's failed compressions and whether it resists compression,
and how the next compression of a group follows from its parents' health.

A summary that fails its quality check (:mod:`pipelines.cognition.quality`) counts a failure
against each parent; after three a parent is compression-resistant, marked with the
compressor that failed (``pipelines.cognition.compress.compressor_id``: the engine and the
offline rules version). The mark holds for that compressor alone: a group holding a row
resistant to the compressor at work is compressed annotate-only, while a row that resisted
another compressor (a new model, new rules, or a mark from before compressors were recorded)
is compressed normally again, at the full target ratio.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from pipelines.cognition.protocol import SourceMemory


class CompressionHealth(BaseModel):
    """A memory's compression history: failures so far and whether it resists compression."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    failures: int = Field(0, ge=0)
    resistant: bool = False
    # The compressor whose summaries kept failing (``compress.compressor_id``): the mark
    # holds for it alone, so a new model or new rules try the memory again.
    resistant_to: str | None = None

    def resists(self, compressor: str) -> bool:
        """Resistant to this compressor: annotate-only for it."""
        return self.resistant and self.resistant_to == compressor

    def resisted_another(self, compressor: str) -> bool:
        """Marked resistant by another compressor (or before compressors were recorded)."""
        return self.resistant and self.resistant_to != compressor


def split_resistant(
    group: Sequence[SourceMemory],
    health: Mapping[uuid.UUID, CompressionHealth],
    compressor: str,
) -> tuple[list[SourceMemory], list[SourceMemory]]:
    """(normal, resistant): the rows resistant to ``compressor`` get their own annotate-only
    summary; rows that resisted another compressor are compressed normally again."""

    def resists(source: SourceMemory) -> bool:
        return health.get(source.id, CompressionHealth(memory_id=source.id)).resists(compressor)

    return [s for s in group if not resists(s)], [s for s in group if resists(s)]


class CompressionPlan(BaseModel):
    """How to compress a group given its parents' health: the version (one past the worst
    failure count, so every try is a new row), annotate-only when a parent resists this
    compressor, and the attempt that sets the target ratio (1 when a parent resisted
    another compressor: the new one starts at the full ratio)."""

    model_config = ConfigDict(frozen=True)

    version: int = Field(ge=1)
    annotate_only: bool
    attempt: int = Field(ge=1)


def plan_compression(
    sources: Sequence[SourceMemory],
    health: Mapping[uuid.UUID, CompressionHealth],
    compressor: str,
) -> CompressionPlan:
    records = [health.get(s.id, CompressionHealth(memory_id=s.id)) for s in sources]
    version = max((r.failures for r in records), default=0) + 1
    annotate_only = any(r.resists(compressor) for r in records)
    fresh = not annotate_only and any(r.resisted_another(compressor) for r in records)
    return CompressionPlan(
        version=version, annotate_only=annotate_only, attempt=1 if fresh else version
    )
