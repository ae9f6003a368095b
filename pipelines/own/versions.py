"""Corrections and erasures, the pure part: the checks of a call, the ids they get, and what a
correction or an erasure does to the knowledge built on the memories it touches.

A correction never overwrites: it adds a version (``supersedes`` the old id) and the old row is
``corrected`` (kept, never recalled). An erasure empties rows in place. Either way the semantic
knowledge that cited the old rows is re-derived: its sources lose them, its confidence is
recomputed from the sources left, and knowledge with no source left is retired (corrected) or
erased (forgotten).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from pipelines.cognition.consolidate import MAX_CONFIDENCE, TOPIC_OVERLAP, semantic_id
from pipelines.cognition.knowledge import KnowledgeBatch
from pipelines.cognition.stance import topic_of, topic_overlap
from pipelines.errors import InvalidInput
from pipelines.records import ID_NAMESPACE, SemanticMemory, check_id

REASON_MAX_CHARS = 500
ACTOR_MAX_CHARS = 128


class ForgetTarget(StrEnum):
    MEMORY = "memory"
    TASK = "task"
    SESSION = "session"
    TENANT = "tenant"


class ForgetCall(BaseModel):
    """A checked ``forget`` call: what to erase (one memory, a task, a session or the whole
    tenant), why, and who asked."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    target: ForgetTarget
    target_id: str
    reason: str
    actor: str


def check_reason(field: str, value: object, *, max_chars: int = REASON_MAX_CHARS) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, got {type(value).__name__}")
    text = " ".join(value.split())
    if not text:
        raise InvalidInput(field, "is required: say why", f"1-{max_chars} characters")
    if len(text) > max_chars:
        raise InvalidInput(
            field, f"is {len(text)} characters, over the limit", f"{max_chars} characters"
        )
    return text


def check_memory_id(value: object, field: str = "memory_id") -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a UUID string, got {type(value).__name__}")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput(field, f"malformed UUID {value[:40]!r}") from None


def check_forget_call(
    *,
    tenant_id: object,
    reason: object,
    actor: object,
    memory_id: object = None,
    task_id: object = None,
    session_id: object = None,
    whole_tenant: bool = False,
) -> ForgetCall:
    """Exactly one target: a memory, a task, a session, or ``whole_tenant=True``."""
    tenant = check_id("tenant_id", tenant_id)
    assert tenant is not None
    given = [
        name
        for name, value in (
            ("memory_id", memory_id),
            ("task_id", task_id),
            ("session_id", session_id),
        )
        if value is not None
    ]
    if whole_tenant:
        given.append("whole_tenant")
    if len(given) != 1:
        raise InvalidInput(
            "target",
            f"give exactly one of memory_id, task_id, session_id, whole_tenant=True; got "
            f"{', '.join(given) or 'none'}",
            "one target",
        )
    why = check_reason("reason", reason)
    who = check_reason("actor", actor, max_chars=ACTOR_MAX_CHARS)
    if memory_id is not None:
        target, target_id = ForgetTarget.MEMORY, str(check_memory_id(memory_id))
    elif task_id is not None:
        target, target_id = ForgetTarget.TASK, str(check_id("task_id", task_id))
    elif session_id is not None:
        target, target_id = ForgetTarget.SESSION, str(check_id("session_id", session_id))
    else:
        target, target_id = ForgetTarget.TENANT, tenant
    return ForgetCall(tenant_id=tenant, target=target, target_id=target_id, reason=why, actor=who)


def correction_id(old_id: uuid.UUID, content_hash: bytes) -> uuid.UUID:
    """The id of the version that corrects ``old_id`` with this content: a replayed
    correction finds its own row instead of adding a third version."""
    return uuid.uuid5(ID_NAMESPACE, f"correction\x1f{old_id}\x1f{content_hash.hex()}")


# -- knowledge built on what changed ---------------------------------------------------------


class KnowledgeAction(StrEnum):
    KEEP = "keep"  # sources left: fewer sources, confidence recomputed
    RETIRE = "retire"  # no source left after a correction: kept for history, never used
    ERASE = "erase"  # no source left after an erasure: the row goes


class Rederivation(BaseModel):
    model_config = ConfigDict(frozen=True)

    action: KnowledgeAction
    source_ids: tuple[uuid.UUID, ...]
    confidence: float
    reason: str


def rederive(
    source_ids: Sequence[uuid.UUID],
    confidence: float,
    removed: Collection[uuid.UUID],
    *,
    erased: bool,
) -> Rederivation:
    """What happens to knowledge when ``removed`` of its sources were corrected or erased.

    Consolidation raises confidence by noisy-OR, one term per source; with k of n sources
    left the recomputed confidence is ``1 - (1 - c) ** (k / n)`` (exact when the sources
    counted alike, which the offline extractor's uniform per-mention confidence makes true).
    """
    left = tuple(s for s in source_ids if s not in removed)
    gone = len(source_ids) - len(left)
    if not left:
        what = "erased" if erased else "corrected"
        return Rederivation(
            action=KnowledgeAction.ERASE if erased else KnowledgeAction.RETIRE,
            source_ids=(),
            confidence=confidence,
            reason=f"all {len(source_ids)} source(s) were {what}",
        )
    share = len(left) / max(1, len(source_ids))
    recomputed = round(1.0 - (1.0 - min(confidence, 0.9999)) ** share, 4)
    return Rederivation(
        action=KnowledgeAction.KEEP,
        source_ids=left,
        confidence=recomputed,
        reason=(
            f"{gone} of {len(source_ids)} source(s) {'erased' if erased else 'corrected'}; "
            f"confidence {confidence:.3f} -> {recomputed:.3f}"
        ),
    )


class RetiredKnowledge(BaseModel):
    """Knowledge retired because every source of it was corrected, and what corrected them."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    kind: str
    scope: str
    user_id: str | None
    agent_id: str | None
    correcting_ids: tuple[uuid.UUID, ...]


def replacement_knowledge(
    retired: RetiredKnowledge, batch: KnowledgeBatch, now: datetime
) -> SemanticMemory | None:
    """The knowledge the corrections state instead, if they state one of the same kind: its
    sources are the correcting memories, its confidence the one-mention confidence
    consolidation gives (0.8 of the extractor's), its conditions the corrections' own."""
    correcting = set(retired.correcting_ids)
    for item in batch.items:
        if item.kind.value != retired.kind or not set(item.source_ids) <= correcting:
            continue
        return SemanticMemory(
            id=semantic_id(retired.tenant_id, retired.scope, item.kind, item.statement),
            tenant_id=retired.tenant_id,
            user_id=retired.user_id,
            agent_id=retired.agent_id,
            content=item.statement,
            confidence=round(min(MAX_CONFIDENCE, item.confidence * 0.8), 4),
            source_memory_ids=tuple(dict.fromkeys(item.source_ids)),
            scope=retired.scope,
            conditions=item.conditions,
            created_at=now,
            updated_at=now,
        )
    return None


def restated(content: str, conditions: str | None, kind: str, batch: KnowledgeBatch) -> str | None:
    """The statement of the remaining sources that says what ``content`` said: the extracted
    item of the same kind sharing the most of its topic (at least half, consolidation's
    measure); None when no item of the kind says it any more."""
    topic = topic_of(content, conditions)
    best: tuple[float, str] | None = None
    for item in batch.items:
        if item.kind.value != kind:
            continue
        overlap = topic_overlap(topic_of(item.statement, item.conditions), topic)
        if overlap >= TOPIC_OVERLAP and (best is None or overlap > best[0]):
            best = (overlap, item.statement)
    return None if best is None else best[1]
