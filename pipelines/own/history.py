"""A memory's history and a context's trace, the pure part: the records ``history()`` and
``explain()`` return, and how they are put together.

History: every version of the memory (corrections link them both ways), then one timeline of
what happened to them: written, corrected/superseded, compressed into a summary, a summary
rolled back or gone stale, evicted, cited by knowledge, forgotten, each with its time and
reason. A forgotten version keeps its id, scope, times and reason; its content is ''.

Trace: for each item placed in an assembled context, where it came from (which memory, which
level and compressed version, which partition) and why it was chosen (the retrieval terms:
how it was recalled, the fused, dense and rerank scores, relevance and priority).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from pipelines.read.assemble import AssembledContext
from pipelines.read.budget import Partition


class MemoryVersion(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    version: int
    status: str
    content: str
    timestamp: datetime
    level: int
    supersedes: uuid.UUID | None = None
    corrected_by: uuid.UUID | None = None
    change_reason: str | None = None
    forgotten_at: datetime | None = None


class HistoryEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: datetime
    event: str
    memory_id: uuid.UUID
    version: int | None = None
    related_id: uuid.UUID | None = None
    reason: str | None = None
    actor: str | None = None


class MemoryHistory(BaseModel):
    """``current_id`` is the version reads return now (None when every version was
    corrected away or forgotten)."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    current_id: uuid.UUID | None
    versions: tuple[MemoryVersion, ...]
    events: tuple[HistoryEvent, ...]


def build_history(
    memory_id: uuid.UUID, versions: Iterable[MemoryVersion], events: Iterable[HistoryEvent]
) -> MemoryHistory:
    ordered = sorted(versions, key=lambda v: (v.version, v.timestamp, str(v.id)))
    current = next(
        (v.id for v in reversed(ordered) if v.status in ("stored", "pending")),
        None,
    )
    timeline = sorted(events, key=lambda e: (e.at, e.event, str(e.memory_id)))
    return MemoryHistory(
        memory_id=memory_id, current_id=current, versions=tuple(ordered), events=tuple(timeline)
    )


# -- the trace of an assembled context -------------------------------------------------------


class TraceItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    partition: str
    compressed_version: int
    tokens: int
    truncated: bool
    level: int | None = None
    memory_version: int | None = None
    recalled_by: tuple[str, ...] = ()
    fused: float | None = None
    dense: float | None = None
    rerank: float | None = None
    relevance: float | None = None
    priority: float | None = None
    knowledge: bool = False
    why: str


def trace_context(context: AssembledContext) -> list[TraceItem]:
    """Which memories an assembled context came from and why each was chosen."""
    retrieval = context.retrieval
    candidates = {c.memory.id: c for c in retrieval.candidates} if retrieval else {}
    knowledge = {k.knowledge.id: k for k in retrieval.knowledge} if retrieval else {}
    items: list[TraceItem] = []
    for partition in context.partitions:
        for placed in partition.items:
            candidate = candidates.get(placed.id)
            base = {
                "id": placed.id,
                "partition": str(partition.name),
                "compressed_version": placed.version,
                "tokens": placed.tokens,
                "truncated": placed.truncated,
            }
            if candidate is not None:
                how = "+".join(candidate.sources) or "recall"
                items.append(
                    TraceItem(
                        **base,
                        level=int(candidate.memory.level),
                        recalled_by=candidate.sources,
                        fused=candidate.fused,
                        dense=candidate.dense,
                        rerank=candidate.rerank,
                        relevance=candidate.relevance,
                        priority=candidate.priority,
                        why=(
                            f"recalled by {how}; relevance {candidate.relevance:.3f}, "
                            f"priority {candidate.priority:.3f}"
                        ),
                    )
                )
            elif placed.knowledge is not None or placed.id in knowledge:
                found = knowledge.get(placed.id)
                mark = placed.knowledge
                confidence = f", confidence {mark.confidence:.2f}" if mark else ""
                items.append(
                    TraceItem(
                        **base,
                        level=4,
                        knowledge=True,
                        relevance=found.relevance if found else None,
                        priority=found.priority if found else None,
                        why=f"semantic knowledge saying part of the query{confidence}",
                    )
                )
            else:
                items.append(TraceItem(**base, why=_placed_why(str(partition.name))))
    return items


_PLACED_WHY = {
    Partition.RECENT_INTERACTIONS: "the session's recent interactions (working memory)",
    Partition.TASK_CONTEXT: "the task's own context, given by the caller",
    Partition.SYSTEM: "the system prompt, given by the caller",
    Partition.WORKING_VARIABLES: "a working variable, given by the caller",
    Partition.SCRATCH: "scratch notes, given by the caller",
}


def _placed_why(partition: str) -> str:
    return _PLACED_WHY.get(Partition(partition), f"placed in the {partition} partition")
