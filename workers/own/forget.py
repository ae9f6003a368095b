"""Forgetting: an erasure that reaches every copy, resumable and verified.

``request_forget`` (the caller's process, one transaction) empties the rows at once — every
version of the memory, or every row of the task, session or tenant: content, summary and
metadata go, a tombstone keeps id, scope, times and the reason — and records the request in
``forget_requests``, the audit log and the outbox of the rest. From that COMMIT on, nothing in
PostgreSQL returns the text. ``run_forget`` (the store's owner) then reaches the copies: the
summaries that contained the rows (erased; what they covered is live again for the compress
sweep to summarise anew), knowledge that cited them (sources removed and confidence
recomputed, or erased with its last source), links, outbox jobs, dead letters, decision
reasons and eviction records, the vector points of every generation, the Redis windows and
the Celery answers that carried them. It verifies that no point is left and marks the request
done. Each step is idempotent: a worker killed mid-way leaves the request claimable again
when its lease expires, and the next run finishes it.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict

from pipelines.answers import ask_with_fallback
from pipelines.cognition.knowledge import OfflineKnowledge
from pipelines.errors import NotFound
from pipelines.own.versions import ForgetCall, ForgetTarget, restated
from workers.clients import Clients
from workers.db.rows import fetch_rows, row_to_memory
from workers.own.reach import (
    TOMBSTONE_SET,
    drop_tenant_windows,
    erase_traces,
    log_events,
    points_left,
    purge_points,
    purge_results,
    rederive_knowledge,
    rewrite_windows,
    unwind_summaries,
)

log = logging.getLogger(__name__)


class ForgetReceipt(BaseModel):
    """``already`` is True when the target was forgotten before (the earlier request's
    receipt comes back; nothing is erased twice)."""

    model_config = ConfigDict(frozen=True)

    request_id: uuid.UUID
    target: ForgetTarget
    target_id: str
    memories: int
    status: str
    already: bool = False


# Every version of a memory: the rows its corrections link it to, both ways.
VERSION_CHAIN = """
WITH RECURSIVE chain(id) AS (
    SELECT id FROM memories WHERE id = %(id)s AND tenant_id = %(tenant)s
  UNION
    SELECT m.id FROM memories m JOIN chain c
      ON m.supersedes = c.id OR m.corrected_by = c.id
      OR m.id = (SELECT supersedes FROM memories WHERE id = c.id)
      OR m.id = (SELECT corrected_by FROM memories WHERE id = c.id)
    WHERE m.tenant_id = %(tenant)s
)
SELECT id FROM chain
"""

_SCOPE_COLUMN = {ForgetTarget.TASK: "task_id", ForgetTarget.SESSION: "session_id"}


def target_ids(conn: Connection[Any], call: ForgetCall) -> list[uuid.UUID]:
    """The rows ``call`` erases; :class:`NotFound` when a memory, task or session has none in
    the tenant (the same answer whether it exists elsewhere or nowhere)."""
    if call.target is ForgetTarget.MEMORY:
        params = {"id": call.target_id, "tenant": call.tenant_id}
        ids = [r[0] for r in conn.execute(VERSION_CHAIN, params).fetchall()]
    elif call.target is ForgetTarget.TENANT:
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM memories WHERE tenant_id = %s", (call.tenant_id,)
            ).fetchall()
        ]
    else:
        column = _SCOPE_COLUMN[call.target]
        ids = [
            r[0]
            for r in conn.execute(
                f"SELECT id FROM memories WHERE tenant_id = %s AND {column} = %s",
                (call.tenant_id, call.target_id),
            ).fetchall()
        ]
    if not ids and call.target is not ForgetTarget.TENANT:
        raise NotFound(f"{call.target.value}_id", call.target_id)
    return ids


def request_forget(conn: Connection[Any], call: ForgetCall) -> ForgetReceipt:
    """Erase the rows now and queue the rest (see the module docstring); one transaction."""
    with conn.transaction():
        # One forget at a time per tenant: a concurrent request for an overlapping target
        # waits here instead of erasing the same rows twice.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"forget|{call.tenant_id}",))
        ids = target_ids(conn, call)
        erased = [
            r[0]
            for r in conn.execute(
                f"UPDATE memories SET {TOMBSTONE_SET} WHERE id = ANY(%(ids)s) "
                "AND status <> 'forgotten' RETURNING id",
                {"reason": call.reason, "ids": ids},
            ).fetchall()
        ]
        if not erased:
            earlier = conn.execute(
                "SELECT id, status FROM forget_requests WHERE tenant_id = %s AND "
                "(memory_ids && %s::uuid[] OR (target = %s AND target_id = %s)) "
                "ORDER BY created_at DESC LIMIT 1",
                (call.tenant_id, ids, call.target.value, call.target_id),
            ).fetchone()
            if earlier is not None:
                return ForgetReceipt(
                    request_id=earlier[0],
                    target=call.target,
                    target_id=call.target_id,
                    memories=0,
                    status=earlier[1],
                    already=True,
                )
        request_id = uuid.uuid4()
        conn.execute(
            "INSERT INTO forget_requests (id, tenant_id, target, target_id, reason, actor, "
            "memory_ids) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                request_id,
                call.tenant_id,
                call.target.value,
                call.target_id,
                call.reason,
                call.actor,
                erased,
            ),
        )
        log_events(
            conn,
            call.tenant_id,
            "forgotten",
            erased,
            reason=call.reason,
            actor=call.actor,
            related_id=request_id,
        )
    return ForgetReceipt(
        request_id=request_id,
        target=call.target,
        target_id=call.target_id,
        memories=len(erased),
        status="pending",
    )


def forget_receipt(conn: Connection[Any], tenant_id: str, request_id: uuid.UUID) -> ForgetReceipt:
    row = conn.execute(
        "SELECT target, target_id, cardinality(memory_ids), status FROM forget_requests "
        "WHERE id = %s AND tenant_id = %s",
        (request_id, tenant_id),
    ).fetchone()
    if row is None:
        raise NotFound("request_id", str(request_id))
    return ForgetReceipt(
        request_id=request_id,
        target=ForgetTarget(row[0]),
        target_id=row[1],
        memories=int(row[2]),
        status=row[3],
    )


# -- the owner's part -------------------------------------------------------------------------

CLAIM_REQUESTS = """
UPDATE forget_requests SET status = 'running', attempts = attempts + 1,
       lease_until = now() + make_interval(secs => %(lease_s)s), updated_at = now()
WHERE id IN (
    SELECT id FROM forget_requests
    WHERE status IN ('pending', 'running') AND lease_until <= now()
    ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
RETURNING id, attempts
"""


class WindowBusy(RuntimeError):
    """A session's window is being summarised by a reader: the request waits a moment."""


def claim_forget_requests(ctx: Clients, limit: int) -> list[tuple[uuid.UUID, int]]:
    lease_s = ctx.settings.job_lease_s
    with ctx.pool.connection() as conn:
        rows = conn.execute(CLAIM_REQUESTS, {"lease_s": lease_s, "limit": limit}).fetchall()
    return [(r[0], r[1]) for r in rows]


def run_forget(ctx: Clients, request_id: uuid.UUID) -> dict[str, Any]:
    """Reach every copy of a request's rows, verify, and close it (idempotent)."""
    with ctx.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        request = cur.execute(
            "SELECT * FROM forget_requests WHERE id = %s", (request_id,)
        ).fetchone()
    if request is None or request["status"] == "done":
        return {"skipped": 1}
    tenant_id: str = request["tenant_id"]
    ids: list[uuid.UUID] = list(request["memory_ids"])
    reason = f"erased with forget request {request_id}: {request['reason']}"
    target = ForgetTarget(request["target"])
    with ctx.pool.connection() as conn, conn.transaction():
        summaries = unwind_summaries(
            conn, tenant_id, ids, erase=True, reason=reason, actor=request["actor"]
        )
        everything = [*ids, *(s for s in summaries if s not in set(ids))]
        knowledge = rederive_knowledge(
            conn, tenant_id, everything, erase=True, reason=reason, actor=request["actor"]
        )
        knowledge["erase"] += restate_knowledge(
            ctx, conn, tenant_id, knowledge["keep"], reason=reason, actor=request["actor"]
        )
        traces = erase_traces(conn, everything)
        checkpoints = _erase_checkpoints(conn, tenant_id, target, request["target_id"])
        if target is ForgetTarget.TENANT:
            knowledge["erase"] += [
                r[0]
                for r in conn.execute(
                    "DELETE FROM semantic_memories WHERE tenant_id = %s RETURNING id",
                    (tenant_id,),
                ).fetchall()
            ]
            conn.execute("DELETE FROM consolidation_waiting WHERE tenant_id = %s", (tenant_id,))
        sessions = conn.execute(
            "SELECT DISTINCT task_id, session_id FROM memories WHERE id = ANY(%s)",
            (everything,),
        ).fetchall()
    semantic = [*knowledge["erase"]]
    purge_points(ctx, [*everything, *semantic])
    if target is ForgetTarget.TENANT:
        drop_tenant_windows(ctx, tenant_id)
    elif not rewrite_windows(
        ctx, tenant_id, [(t, s) for t, s in sessions], remove={str(i) for i in everything}
    ):
        raise WindowBusy(f"a window of tenant {tenant_id} is being summarised")
    needles = {str(i) for i in everything}
    results = purge_results(ctx, needles)
    left = points_left(ctx, [*everything, *semantic])
    if left:
        raise RuntimeError(f"{left} vector point(s) still present after the purge")
    stats = {
        "memories": len(ids),
        "summaries": len(summaries),
        "knowledge_erased": len(knowledge["erase"]),
        "knowledge_rederived": len(knowledge["keep"]),
        "checkpoints": checkpoints,
        "celery_results": results,
        "points_left": left,
        **traces,
    }
    with ctx.pool.connection() as conn:
        conn.execute(
            "UPDATE forget_requests SET status = 'done', stats = %s, finished_at = now(), "
            "last_error = NULL, updated_at = now() WHERE id = %s",
            (Jsonb(stats), request_id),
        )
    return stats


def restate_knowledge(
    ctx: Clients,
    conn: Connection[Any],
    tenant_id: str,
    semantic_ids: list[uuid.UUID],
    *,
    reason: str,
    actor: str,
) -> list[uuid.UUID]:
    """Knowledge that keeps sources after an erasure may still be worded by the erased
    memory (consolidation states a cluster in its first mention's words): state it again
    from the sources left, as consolidation's extractor reads them, or erase it when they
    no longer state knowledge of its kind. Returns the ids erased."""
    erased: list[uuid.UUID] = []
    for semantic_id in semantic_ids:
        row = conn.execute(
            "SELECT kind, content, source_ids, conditions FROM semantic_memories WHERE id = %s",
            (semantic_id,),
        ).fetchone()
        if row is None:
            continue
        kind, content, source_ids, conditions = row
        memories = [row_to_memory(r) for r in fetch_rows(conn, source_ids).values()]
        memories = [m for m in memories if m.status.value in ("stored", "corrected")]
        llm = ctx.llm_for(tenant_id)
        batch, _, _ = ask_with_fallback(
            lambda: llm.extract_knowledge(memories),  # noqa: B023
            lambda: OfflineKnowledge().extract_knowledge(memories),  # noqa: B023
            llm.name,
        )
        statement = restated(content, conditions, kind, batch)
        if statement is None:
            conn.execute(
                "UPDATE semantic_memories SET conflicts_with = NULL WHERE conflicts_with = %s",
                (semantic_id,),
            )
            conn.execute("DELETE FROM semantic_memories WHERE id = %s", (semantic_id,))
            erased.append(semantic_id)
            why = f"{reason} — the sources left state no {kind} any more"
            event = "forgotten"
        else:
            conn.execute(
                "UPDATE semantic_memories SET content = %s, updated_at = now() WHERE id = %s",
                (statement, semantic_id),
            )
            why = f"{reason} — stated again from the {len(memories)} source(s) left"
            event = "rederived"
        log_events(
            conn, tenant_id, event, [semantic_id], reason=why, actor=actor, subject="semantic"
        )
    return erased


def fail_forget(ctx: Clients, request_id: uuid.UUID, error: str, *, dead: bool) -> None:
    """A failed run: claimable again after a short wait, or dead with its reason."""
    with ctx.pool.connection() as conn:
        conn.execute(
            "UPDATE forget_requests SET status = %s, last_error = %s, "
            "lease_until = now() + interval '2 seconds', updated_at = now() "
            "WHERE id = %s AND status <> 'done'",
            ("dead" if dead else "pending", error[:2000], request_id),
        )


def _erase_checkpoints(
    conn: Connection[Any], tenant_id: str, target: ForgetTarget, target_id: str
) -> int:
    """A task's checkpoints go with the task, a tenant's with the tenant. A memory's or a
    session's text copied into a checkpoint's state by the agent is the agent's own
    (docs/owning-memories.md)."""
    if target is ForgetTarget.TENANT:
        conn.execute("DELETE FROM checkpoint_sequences WHERE tenant_id = %s", (tenant_id,))
        return conn.execute("DELETE FROM checkpoints WHERE tenant_id = %s", (tenant_id,)).rowcount
    if target is ForgetTarget.TASK:
        # The counter goes too: its row names the task. A task saved again after its erasure
        # starts at 1, as a new task does.
        conn.execute(
            "DELETE FROM checkpoint_sequences WHERE tenant_id = %s AND task_id = %s",
            (tenant_id, target_id),
        )
        return conn.execute(
            "DELETE FROM checkpoints WHERE tenant_id = %s AND task_id = %s", (tenant_id, target_id)
        ).rowcount
    return 0


def due_requests(conn: Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM forget_requests WHERE status IN ('pending', 'running') "
        "AND lease_until <= now()"
    ).fetchone()
    return int(row[0]) if row else 0
