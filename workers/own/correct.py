"""Corrections: a new version supersedes the old memory, in one transaction, and the owner
settles what was built on the old one (``settle_corrections``).

The synchronous part (``correct_memory``, in the agent's process) is the write path plus two
statements: the new row with its outbox job (it is decided, embedded and linked like any
write, and always kept), the old row marked ``corrected``, both logged, and a ``settle`` job
for the old id. The settle job, on the store's owner, deletes the old row's vector points,
corrects its turn in the Redis window, retires the summaries that carry it (the compress
sweep re-summarises their rows) and re-derives the knowledge that cited it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import Connection, errors
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict

from pipelines.answers import ask_with_fallback
from pipelines.cognition.knowledge import OfflineKnowledge
from pipelines.errors import Conflict, InvalidInput, NotFound
from pipelines.own.contradict import Supersession, Verdict
from pipelines.own.versions import (
    KnowledgeAction,
    RetiredKnowledge,
    check_memory_id,
    check_reason,
    correction_id,
    replacement_knowledge,
)
from pipelines.requests.write import prepare_write
from workers.clients import Clients
from workers.db.jobs import EMBED_JOB, ClaimedJob, claim_jobs
from workers.db.rows import fetch_rows, row_to_memory
from workers.own.reach import (
    log_events,
    purge_points,
    rederive_knowledge,
    rewrite_windows,
    unwind_summaries,
)
from workers.write.sql import memory_params

log = logging.getLogger(__name__)

SETTLE_JOB = "settle"
# Who the automatic path of corrections acts as, in the event log: what an undo looks for.
AUTOMATIC_ACTOR = "memharness"


class CorrectionReceipt(BaseModel):
    """``memory_id`` is the new version; ``supersedes`` the one it replaced."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    supersedes: uuid.UUID
    version: int
    status: str


INSERT_VERSION = """
WITH m AS (
    INSERT INTO memories (id, tenant_id, user_id, agent_id, task_id, session_id, ts, type,
                          content, content_hash, idempotency_key, modality, metadata,
                          supersedes, version, change_reason)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO jobs (kind, memory_id) SELECT 'write', id FROM m RETURNING memory_id
"""


def supersede(
    conn: Connection[Any],
    tenant_id: str,
    old_id: uuid.UUID,
    new_id: uuid.UUID,
    *,
    old_version: int,
    reason: str,
    actor: str,
) -> bool:
    """Mark ``old_id`` corrected by ``new_id``, log both sides and queue the settle job.
    Conditional on the old row being live, so a replay changes nothing; False then."""
    changed = conn.execute(
        "UPDATE memories SET status = 'corrected', corrected_by = %s, change_reason = %s, "
        "updated_at = now() WHERE id = %s AND tenant_id = %s AND status IN ('stored', 'pending')",
        (new_id, reason, old_id, tenant_id),
    ).rowcount
    if not changed:
        return False
    conn.execute(
        "UPDATE memories SET supersedes = coalesce(supersedes, %s), "
        "version = greatest(version, %s) WHERE id = %s",
        (old_id, old_version + 1, new_id),
    )
    log_events(
        conn, tenant_id, "superseded", [old_id], reason=reason, actor=actor, related_id=new_id
    )
    log_events(
        conn, tenant_id, "corrected", [new_id], reason=reason, actor=actor, related_id=old_id
    )
    conn.execute(
        "INSERT INTO jobs (kind, memory_id) VALUES (%s, %s) ON CONFLICT (kind, memory_id) "
        "DO UPDATE SET status = 'pending', lease_until = now(), updated_at = now() "
        "WHERE jobs.status = 'done'",
        (SETTLE_JOB, old_id),
    )
    return True


def correct_memory(
    conn: Connection[Any],
    memory_id: object,
    new_content: object,
    *,
    tenant_id: str,
    reason: object,
    actor: object,
    type: object = None,
    metadata: Mapping[str, Any] | None = None,
    content_max_bytes: int,
    metadata_max_bytes: int,
) -> CorrectionReceipt:
    """Correct a memory (see the module docstring); one transaction on ``conn``. Raises
    :class:`InvalidInput`, :class:`NotFound` (no such memory in this tenant) or
    :class:`Conflict` (forgotten, already corrected, not an episode)."""
    old_id = check_memory_id(memory_id)
    why = check_reason("reason", reason)
    who = check_reason("actor", actor, max_chars=128)
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        old = cur.execute(
            "SELECT id, tenant_id, user_id, agent_id, task_id, session_id, type, modality, "
            "metadata, status, level, version, corrected_by, content_hash FROM memories "
            "WHERE id = %s AND tenant_id = %s FOR UPDATE",
            (old_id, tenant_id),
        ).fetchone()
        if old is None:
            raise NotFound("memory_id", str(old_id))
        new = prepare_write(
            new_content,
            tenant_id=tenant_id,
            task_id=old["task_id"],
            session_id=old["session_id"],
            type=old["type"] if type is None else type,
            user_id=old["user_id"],
            agent_id=old["agent_id"],
            modality=old["modality"],
            metadata=dict(old["metadata"] or {}) if metadata is None else metadata,
            content_max_bytes=content_max_bytes,
            metadata_max_bytes=metadata_max_bytes,
        )
        new_id = correction_id(old_id, new.content_hash)
        replay = _refuse(old, new_id)
        if replay is not None:
            return replay
        if bytes(old["content_hash"]) == new.content_hash:
            raise InvalidInput("new_content", "is the memory's content already", "a change")
        params = memory_params(new.model_copy(update={"id": new_id, "idempotency_key": None}))
        inserted = cur.execute(INSERT_VERSION, (*params, old_id, old["version"] + 1, why))
        if inserted.fetchone() is None:
            existing = cur.execute(
                "SELECT id FROM memories WHERE tenant_id = %s AND task_id = %s AND "
                "session_id = %s AND content_hash = %s AND level = 0",
                (tenant_id, old["task_id"], old["session_id"], new.content_hash),
            ).fetchone()
            if existing is None:
                raise Conflict("memory_id", "changed while it was being corrected; try again")
            # The session already holds the corrected statement: that row is the new version.
            new_id = existing["id"]
        supersede(
            conn, tenant_id, old_id, new_id, old_version=old["version"], reason=why, actor=who
        )
        version = cur.execute("SELECT version FROM memories WHERE id = %s", (new_id,)).fetchone()
    return CorrectionReceipt(
        memory_id=new_id,
        supersedes=old_id,
        version=int(version["version"]) if version else old["version"] + 1,
        status="accepted",
    )


def _refuse(old: Mapping[str, Any], new_id: uuid.UUID) -> CorrectionReceipt | None:
    """A replayed correction's receipt, or the reason this memory cannot be corrected."""
    status = old["status"]
    if status == "forgotten":
        raise Conflict("memory_id", "was forgotten: there is nothing left to correct")
    if status == "corrected":
        if old["corrected_by"] == new_id:
            return CorrectionReceipt(
                memory_id=new_id, supersedes=old["id"], version=old["version"] + 1, status="replay"
            )
        raise Conflict(
            "memory_id",
            f"was already corrected by {old['corrected_by']}: correct the current version",
        )
    if old["level"] != 0:
        raise Conflict("memory_id", "is a summary: correct the memories it summarises")
    if status not in ("stored", "pending"):
        raise Conflict(
            "memory_id", f"is {status}: only a stored or pending memory can be corrected"
        )
    return None


def apply_supersessions(conn: Connection[Any], found: Sequence[Supersession]) -> dict[str, int]:
    """The automatic path: what the link pass found, in one transaction. A supersession
    marks the older memory corrected; a conflict keeps both and records the pair (once: a
    pair a person already settled by an undo stays settled). Counts of each."""
    applied = {"superseded": 0, "conflicts": 0}
    with conn.transaction():
        for item in found:
            if item.verdict is Verdict.CONFLICT:
                applied["conflicts"] += record_conflict(conn, item)
                continue
            if conn.execute(
                "SELECT 1 FROM memory_conflicts WHERE older_id = %s AND newer_id = %s",
                (item.old_id, item.new_id),
            ).fetchone():
                continue  # this pair was settled before (an undo): not again
            row = conn.execute(
                "SELECT tenant_id, version FROM memories WHERE id = %s AND status = 'stored'",
                (item.old_id,),
            ).fetchone()
            if row is None:
                continue
            tenant_id, version = row
            applied["superseded"] += supersede(
                conn,
                tenant_id,
                item.old_id,
                item.new_id,
                old_version=version,
                reason=item.reason,
                actor=AUTOMATIC_ACTOR,
            )
    return applied


def record_conflict(conn: Connection[Any], item: Supersession, *, actor: str = "memharness") -> int:
    """Record that two live memories may disagree (both kept); logged on both sides. 1 when
    recorded, 0 when the pair was recorded before or a side is no longer live."""
    added = conn.execute(
        "INSERT INTO memory_conflicts (tenant_id, older_id, newer_id, reason, actor) "
        "SELECT o.tenant_id, o.id, n.id, %s, %s FROM memories o JOIN memories n "
        "ON n.id = %s AND n.tenant_id = o.tenant_id AND n.status IN ('stored', 'pending') "
        "WHERE o.id = %s AND o.status = 'stored' ON CONFLICT DO NOTHING RETURNING tenant_id",
        (item.reason[:2000], actor, item.new_id, item.old_id),
    ).fetchone()
    if added is None:
        return 0
    log_events(
        conn,
        added[0],
        "conflict",
        [item.old_id],
        reason=item.reason,
        actor=actor,
        related_id=item.new_id,
    )
    log_events(
        conn,
        added[0],
        "conflict",
        [item.new_id],
        reason=item.reason,
        actor=actor,
        related_id=item.old_id,
    )
    return 1


class UndoReceipt(BaseModel):
    """``restored_id`` is live again beside ``kept_id``, the memory that had superseded it."""

    model_config = ConfigDict(frozen=True)

    restored_id: uuid.UUID
    kept_id: uuid.UUID
    status: str  # "restored", or "replay" when it was restored before


def undo_supersession(
    conn: Connection[Any], memory_id: object, *, tenant_id: str, reason: object, actor: object
) -> UndoReceipt:
    """Undo an automatic supersession: the superseded memory is live again (re-indexed by an
    ``embed`` job), the memory that superseded it stays, and the pair is kept as settled so
    the rule does not propose it again. Only automatic supersessions are undone this way: a
    person's correction is changed by correcting again. Raises :class:`InvalidInput`,
    :class:`NotFound` or :class:`Conflict`."""
    old_id = check_memory_id(memory_id)
    why = check_reason("reason", reason)
    who = check_reason("actor", actor, max_chars=128)
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        old = cur.execute(
            "SELECT id, status, corrected_by, level FROM memories "
            "WHERE id = %s AND tenant_id = %s FOR UPDATE",
            (old_id, tenant_id),
        ).fetchone()
        if old is None:
            raise NotFound("memory_id", str(old_id))
        if old["status"] == "stored":
            kept = cur.execute(
                "SELECT newer_id FROM memory_conflicts WHERE older_id = %s AND status = 'kept' "
                "AND tenant_id = %s ORDER BY updated_at DESC LIMIT 1",
                (old_id, tenant_id),
            ).fetchone()
            if kept is not None:
                return UndoReceipt(restored_id=old_id, kept_id=kept["newer_id"], status="replay")
            raise Conflict("memory_id", "is not superseded: there is nothing to undo")
        if old["status"] != "corrected" or old["corrected_by"] is None:
            raise Conflict(
                "memory_id", f"is {old['status']}: only a superseded memory can be restored"
            )
        event = cur.execute(
            "SELECT actor FROM memory_events WHERE memory_id = %s AND event = 'superseded' "
            "AND related_id = %s ORDER BY at DESC LIMIT 1",
            (old_id, old["corrected_by"]),
        ).fetchone()
        if event is None or event["actor"] != AUTOMATIC_ACTOR:
            raise Conflict(
                "memory_id",
                "was corrected by a person, not automatically: correct the current version",
            )
        new_id = old["corrected_by"]
        cur.execute(
            "UPDATE memories SET status = 'stored', corrected_by = NULL, change_reason = NULL, "
            "updated_at = now() WHERE id = %s",
            (old_id,),
        )
        cur.execute(
            "UPDATE memories SET supersedes = NULL WHERE id = %s AND supersedes = %s",
            (new_id, old_id),
        )
        cur.execute(
            "INSERT INTO memory_conflicts (tenant_id, older_id, newer_id, status, reason, actor) "
            "VALUES (%s, %s, %s, 'kept', %s, %s) ON CONFLICT (older_id, newer_id) DO UPDATE "
            "SET status = 'kept', reason = EXCLUDED.reason, actor = EXCLUDED.actor, "
            "updated_at = now()",
            (tenant_id, old_id, new_id, why, who),
        )
        # Back into the index: settling the supersession removed its points.
        cur.execute(
            "INSERT INTO jobs (kind, memory_id) VALUES (%s, %s) ON CONFLICT (kind, memory_id) "
            "DO UPDATE SET status = 'pending', attempts = 0, lease_until = now(), "
            "updated_at = now()",
            (EMBED_JOB, old_id),
        )
        log_events(conn, tenant_id, "restored", [old_id], reason=why, actor=who, related_id=new_id)
        log_events(
            conn,
            tenant_id,
            "supersession_undone",
            [new_id],
            reason=why,
            actor=who,
            related_id=old_id,
        )
    return UndoReceipt(restored_id=old_id, kept_id=new_id, status="restored")


# -- the owner's part -------------------------------------------------------------------------


def settle_corrections(ctx: Clients, limit: int) -> dict[str, int]:
    """Settle a batch of corrected memories (see the module docstring). A job whose Redis
    window is locked by a summarising reader is handed back for a later pass."""
    stats = {"corrections": 0, "stale_summaries": 0, "knowledge": 0, "busy": 0}
    with ctx.pool.connection() as conn:
        jobs = claim_jobs(conn, kind=SETTLE_JOB, limit=limit, lease_s=ctx.settings.job_lease_s)
    if not jobs:
        return stats
    with ctx.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT o.id, o.tenant_id, o.task_id, o.session_id, o.corrected_by, "
            "n.content AS new_content FROM memories o "
            "LEFT JOIN memories n ON n.id = o.corrected_by "
            "WHERE o.id = ANY(%s) AND o.status = 'corrected'",
            ([j.memory_id for j in jobs],),
        ).fetchall()
    by_id = {row["id"]: row for row in rows}
    purge_points(ctx, list(by_id))
    now = datetime.now(UTC)
    done: list[int] = []
    busy: list[int] = []
    touched: set[str] = set()
    try:
        _settle_each(ctx, jobs, by_id, now, stats, done, busy, touched)
    except Exception:
        # The task is retried: hand back what this pass claimed and did not finish, so the
        # retry takes it at once instead of waiting for the jobs' lease to run out.
        finished = set(done)
        with ctx.pool.connection() as conn:
            conn.execute(
                "UPDATE jobs SET status = 'pending', lease_until = now(), updated_at = now() "
                "WHERE id = ANY(%s) AND status = 'running'",
                ([j.job_id for j in jobs if j.job_id not in finished],),
            )
        raise
    with ctx.pool.connection() as conn:
        if done:
            conn.execute(
                "UPDATE jobs SET status = 'done', updated_at = now() WHERE id = ANY(%s)", (done,)
            )
        if busy:  # a reader is summarising that window: try again in a moment
            conn.execute(
                "UPDATE jobs SET status = 'pending', attempts = attempts - 1, "
                "lease_until = now() + interval '1 second' WHERE id = ANY(%s)",
                (busy,),
            )
    stats["busy"] = len(busy)
    stats["tenants"] = len(touched)
    return stats


def _settle_each(
    ctx: Clients,
    jobs: Sequence[ClaimedJob],
    by_id: Mapping[uuid.UUID, Mapping[str, Any]],
    now: datetime,
    stats: dict[str, int],
    done: list[int],
    busy: list[int],
    touched: set[str],
) -> None:
    """One job after another, each in its own transaction; a deadlock (PostgreSQL picked this
    transaction as the victim) hands that job back as busy instead of failing the batch."""
    for job in jobs:
        row = by_id.get(job.memory_id)
        if row is None:
            done.append(job.job_id)  # not corrected (any more): nothing to settle
            continue
        replace = {}
        if row["new_content"]:
            replace[str(row["id"])] = (str(row["corrected_by"]), row["new_content"])
        if not rewrite_windows(
            ctx,
            row["tenant_id"],
            [(row["task_id"], row["session_id"])],
            remove=set(),
            replace=replace,
        ):
            busy.append(job.job_id)
            continue
        reason = f"memory {row['id']} was corrected by {row['corrected_by']}"
        try:
            with ctx.pool.connection() as conn, conn.transaction():
                stale = unwind_summaries(
                    conn,
                    row["tenant_id"],
                    [row["id"]],
                    erase=False,
                    reason=reason,
                    actor="memharness",
                )
                knowledge = rederive_knowledge(
                    conn,
                    row["tenant_id"],
                    [row["id"]],
                    erase=False,
                    reason=reason,
                    actor="memharness",
                )
                replace_retired(ctx, conn, knowledge[KnowledgeAction.RETIRE.value], now)
                conn.execute(
                    "UPDATE jobs SET status = 'done', updated_at = now() WHERE id = %s",
                    (job.job_id,),
                )
        except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
            log.info("settling %s met a concurrent sweep, handed back: %s", row["id"], exc)
            busy.append(job.job_id)
            continue
        if stale:
            purge_points(ctx, stale)
        stats["corrections"] += 1
        stats["stale_summaries"] += len(stale)
        stats["knowledge"] += sum(len(v) for v in knowledge.values())
        touched.add(row["tenant_id"])


def replace_retired(
    ctx: Clients, conn: Connection[Any], retired: Sequence[uuid.UUID], now: datetime
) -> int:
    """Knowledge whose every source was corrected is stated again from the corrections, when
    they state knowledge of the same kind (the extractor reads them as consolidation does)."""
    if not retired:
        return 0
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT s.id, s.tenant_id, s.kind, s.scope, s.user_id, s.agent_id, "
            "array_agg(DISTINCT m.corrected_by) AS correcting FROM semantic_memories s "
            "JOIN memories m ON m.id = ANY(s.source_ids) AND m.corrected_by IS NOT NULL "
            "WHERE s.id = ANY(%s) AND s.kind IS NOT NULL GROUP BY s.id",
            (list(retired),),
        ).fetchall()
    added = 0
    for row in rows:
        item = RetiredKnowledge(
            id=row["id"],
            tenant_id=row["tenant_id"],
            kind=row["kind"],
            scope=row["scope"],
            user_id=row["user_id"],
            agent_id=row["agent_id"],
            correcting_ids=tuple(row["correcting"]),
        )
        memories = [row_to_memory(r) for r in fetch_rows(conn, item.correcting_ids).values()]
        llm = ctx.llm_for(item.tenant_id)
        batch, _, _ = ask_with_fallback(
            lambda: llm.extract_knowledge(memories),  # noqa: B023
            lambda: OfflineKnowledge().extract_knowledge(memories),  # noqa: B023
            llm.name,
        )
        new = replacement_knowledge(item, batch, now)
        if new is None:
            continue
        reason = f"re-derived from the correction of {item.id}"
        added += conn.execute(
            "INSERT INTO semantic_memories (id, tenant_id, user_id, agent_id, scope, content, "
            "confidence, source_ids, conditions, embedding_version, status, kind, reason, "
            "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'active', "
            "%s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
            (
                new.id,
                new.tenant_id,
                new.user_id,
                new.agent_id,
                new.scope,
                new.content,
                new.confidence,
                list(new.source_memory_ids),
                new.conditions,
                ctx.embedder.version,
                item.kind,
                reason,
                now,
                now,
            ),
        ).rowcount
        log_events(
            conn,
            item.tenant_id,
            "rederived",
            [item.id],
            reason=f"{reason}: now {new.content!r}",
            actor="memharness",
            related_id=new.id,
            subject="semantic",
        )
    return added
