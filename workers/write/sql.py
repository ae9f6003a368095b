"""SQL of the write path: the synchronous insert, the outbox claims and the batch finish.

Every statement is idempotent: inserts use ``ON CONFLICT DO NOTHING`` on deterministic ids,
updates are conditional on the state they expect, so a replayed message changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pipelines.errors import InvalidInput
from pipelines.write.decide import TierVerdict
from pipelines.write.request import NewMemory

# One round trip: the memory and its outbox row, inserted by one statement, so both or
# neither exist. A conflict (same id, or an exact repeat in the session) inserts nothing.
INSERT_MEMORY_WITH_JOB = """
WITH m AS (
    INSERT INTO memories (id, tenant_id, user_id, agent_id, task_id, session_id, ts, type,
                          content, content_hash, idempotency_key, modality, metadata)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO jobs (kind, memory_id) SELECT 'write', id FROM m RETURNING memory_id
"""

FIND_CONFLICT = """
SELECT id, content_hash FROM memories
WHERE id = %s
   OR (tenant_id = %s AND task_id = %s AND session_id = %s AND content_hash = %s AND level = 0)
ORDER BY (id = %s) DESC
LIMIT 1
"""

INSERT_DECISION = """
INSERT INTO write_decisions (memory_id, tenant_id, tier, verdict, memory_type, confidence,
                             reason, source)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (memory_id, tier) DO NOTHING
"""


def memory_params(new: NewMemory) -> tuple[Any, ...]:
    return (
        new.id,
        new.tenant_id,
        new.user_id,
        new.agent_id,
        new.task_id,
        new.session_id,
        new.timestamp,
        new.type.value if new.type else None,
        new.content,
        new.content_hash,
        new.idempotency_key,
        new.modality.value,
        Jsonb(new.metadata),
    )


@dataclass(frozen=True)
class Conflict:
    existing_id: uuid.UUID
    same_id: bool
    same_content: bool


def conflict_params(new: NewMemory) -> tuple[Any, ...]:
    return (new.id, new.tenant_id, new.task_id, new.session_id, new.content_hash, new.id)


def conflict_from_row(new: NewMemory, row: tuple[Any, ...] | None) -> Conflict | None:
    if row is None:
        return None
    existing_id, content_hash = row
    return Conflict(
        existing_id=existing_id,
        same_id=existing_id == new.id,
        same_content=bytes(content_hash) == new.content_hash,
    )


def find_conflict(conn: Connection[Any], new: NewMemory) -> Conflict | None:
    return conflict_from_row(new, conn.execute(FIND_CONFLICT, conflict_params(new)).fetchone())


def conflict_outcome(new: NewMemory, conflict: Conflict) -> tuple[uuid.UUID, str, bool]:
    """What an insert that wrote nothing means: (existing id, reason, record a tier-1 drop).

    The same id is a replay of this very write (same content required); another id with the
    same content hash is an exact repeat in the session, which tier 1 records as dropped.
    """
    if conflict.same_id:
        if not conflict.same_content:
            raise InvalidInput(
                "idempotency_key",
                f"{new.idempotency_key!r} was already used for different content "
                f"(memory {conflict.existing_id})",
            )
        return conflict.existing_id, "idempotent replay", False
    return (
        conflict.existing_id,
        f"exact repeat of memory {conflict.existing_id} in this session",
        True,
    )


def drop_params(new: NewMemory, reason: str) -> tuple[Any, ...]:
    """INSERT_DECISION's parameters for a write that tier 1 dropped."""
    return (new.id, new.tenant_id, 1, "drop", None, None, reason, "rules")


def fetch_memories(conn: Connection[Any], ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT id, tenant_id, user_id, agent_id, task_id, session_id, ts, type, content, "
            "level, modality, status, metadata, supersedes FROM memories WHERE id = ANY(%s)",
            (list(ids),),
        )
        return {row["id"]: row for row in cur.fetchall()}


@dataclass(frozen=True)
class StoredResult:
    job_id: int
    memory_id: uuid.UUID
    tenant_id: str
    memory_type: str
    importance: float
    summary: str
    embedding_version: str
    verdicts: tuple[TierVerdict, ...]


@dataclass(frozen=True)
class DiscardedResult:
    job_id: int
    memory_id: uuid.UUID
    tenant_id: str
    memory_type: str
    reason: str
    verdicts: tuple[TierVerdict, ...]


@dataclass(frozen=True)
class DeadResult:
    job_id: int
    memory_id: uuid.UUID
    tenant_id: str
    reason: str


@dataclass(frozen=True)
class RetryResult:
    job_id: int
    error: str
    backoff_s: float
    # False: the job was handed back untried (the drain ran out of time before it): its claim
    # gives back the attempt it took and leaves the job's last real error as it was. With a
    # model answering in tens of seconds, a batch's later jobs are released drain after drain
    # and would otherwise be dead-lettered "after 5 attempts" without ever being tried.
    spent: bool = True


def _decision_rows(
    memory_id: uuid.UUID, tenant_id: str, verdicts: Sequence[TierVerdict]
) -> list[tuple[Any, ...]]:
    return [
        (
            memory_id,
            tenant_id,
            v.tier,
            "keep" if v.keep else "drop",
            v.type.value,
            v.confidence,
            v.reason,
            v.source,
        )
        for v in verdicts
    ]


def _storable(reason: str) -> str:
    # An error's text may quote a value PostgreSQL text cannot hold; the reason must land.
    return reason.replace("\x00", "\\0")


def finish_batch(
    conn: Connection[Any],
    *,
    stored: Sequence[StoredResult],
    discarded: Sequence[DiscardedResult],
    dead: Sequence[DeadResult],
    retries: Sequence[RetryResult],
    done_job_ids: Sequence[int],
) -> list[uuid.UUID]:
    """Apply a whole batch in one transaction: the old state or the new, never half.

    Memory updates are conditional on ``status = 'pending'``; a job is closed only while it is
    still ``running`` under this claim, so a replay of the same batch changes nothing.
    Returns the ids of ``stored`` that were corrected or forgotten while the batch ran: their
    vector points were upserted for nothing and must go.
    """
    moved_on: list[uuid.UUID] = []
    with conn.transaction(), conn.cursor() as cur:
        if stored:
            cur.executemany(
                "UPDATE memories SET status = 'stored', status_reason = NULL, type = %s, "
                "importance = %s, summary = %s, embedding_version = %s, updated_at = now() "
                "WHERE id = %s AND status = 'pending'",
                [
                    (r.memory_type, r.importance, r.summary, r.embedding_version, r.memory_id)
                    for r in stored
                ],
            )
            moved_on = [
                row[0]
                for row in cur.execute(
                    "SELECT id FROM memories WHERE id = ANY(%s) "
                    "AND status IN ('corrected', 'forgotten')",
                    ([r.memory_id for r in stored],),
                ).fetchall()
            ]
        if discarded:
            cur.executemany(
                "UPDATE memories SET status = 'discarded', status_reason = %s, type = %s, "
                "updated_at = now() WHERE id = %s AND status = 'pending'",
                [(r.reason, r.memory_type, r.memory_id) for r in discarded],
            )
        if dead:
            cur.executemany(
                "UPDATE memories SET status = 'dead', status_reason = %s, updated_at = now() "
                "WHERE id = %s AND status = 'pending'",
                [(_storable(r.reason), r.memory_id) for r in dead],
            )
            cur.executemany(
                "UPDATE jobs SET status = 'dead', dead_reason = %s, updated_at = now() "
                "WHERE id = %s AND status = 'running'",
                [(_storable(r.reason), r.job_id) for r in dead],
            )
            cur.executemany(
                INSERT_DECISION,
                [
                    (r.memory_id, r.tenant_id, 2, "dead", None, None, _storable(r.reason), "worker")
                    for r in dead
                ],
            )
        decisions: list[tuple[Any, ...]] = []
        for kept in stored:
            decisions.extend(_decision_rows(kept.memory_id, kept.tenant_id, kept.verdicts))
        for dropped in discarded:
            decisions.extend(_decision_rows(dropped.memory_id, dropped.tenant_id, dropped.verdicts))
        if decisions:
            cur.executemany(INSERT_DECISION, decisions)
        tried = [r for r in retries if r.spent]
        if tried:
            cur.executemany(
                "UPDATE jobs SET status = 'pending', last_error = %s, "
                "lease_until = now() + make_interval(secs => %s), updated_at = now() "
                "WHERE id = %s AND status = 'running'",
                [(_storable(r.error[:2000]), r.backoff_s, r.job_id) for r in tried],
            )
        untried = [r for r in retries if not r.spent]
        if untried:
            cur.executemany(
                "UPDATE jobs SET status = 'pending', attempts = greatest(attempts - 1, 0), "
                "lease_until = now() + make_interval(secs => %s), updated_at = now() "
                "WHERE id = %s AND status = 'running'",
                [(r.backoff_s, r.job_id) for r in untried],
            )
        finished = [*done_job_ids, *(r.job_id for r in stored), *(r.job_id for r in discarded)]
        if finished:
            cur.execute(
                "UPDATE jobs SET status = 'done', updated_at = now() "
                "WHERE id = ANY(%s) AND status = 'running'",
                (finished,),
            )
    return moved_on


# A value of one row that PostgreSQL refuses (a NUL in a model's summary, a number outside a
# CHECK): permanent, and about that row only. OperationalError (the server went away) is not
# here: the task retries the whole batch.
ROW_ERRORS: tuple[type[psycopg.Error], ...] = (psycopg.DataError, psycopg.IntegrityError)


def _refusal(exc: psycopg.Error) -> str:
    return f"PostgreSQL refused the result: {type(exc).__name__}: {exc}"[:2000]


def finish_batch_isolated(
    conn: Connection[Any],
    *,
    stored: Sequence[StoredResult],
    discarded: Sequence[DiscardedResult],
    dead: Sequence[DeadResult],
    retries: Sequence[RetryResult],
    done_job_ids: Sequence[int],
) -> tuple[list[uuid.UUID], list[DeadResult]]:
    """``finish_batch``, and when PostgreSQL refuses a value of the batch, each result alone:
    the refused ones are dead-lettered with the reason and the rest finish, so one bad row
    never leaves its siblings ``pending`` with their jobs ``running``. Returns what
    ``finish_batch`` returns and the results refused."""
    try:
        moved_on = finish_batch(
            conn,
            stored=stored,
            discarded=discarded,
            dead=dead,
            retries=retries,
            done_job_ids=done_job_ids,
        )
        return moved_on, []
    except ROW_ERRORS:
        pass  # the transaction rolled back: nothing of the batch was applied
    moved_on = []
    refused: list[DeadResult] = []
    for kept in stored:
        try:
            moved_on += finish_batch(
                conn, stored=[kept], discarded=(), dead=(), retries=(), done_job_ids=()
            )
        except ROW_ERRORS as exc:
            refused.append(DeadResult(kept.job_id, kept.memory_id, kept.tenant_id, _refusal(exc)))
    for dropped in discarded:
        try:
            finish_batch(conn, stored=(), discarded=[dropped], dead=(), retries=(), done_job_ids=())
        except ROW_ERRORS as exc:
            refused.append(
                DeadResult(dropped.job_id, dropped.memory_id, dropped.tenant_id, _refusal(exc))
            )
    finish_batch(
        conn,
        stored=(),
        discarded=(),
        dead=[*dead, *refused],
        retries=retries,
        done_job_ids=done_job_ids,
    )
    return moved_on, refused


# -- read side used by the CLI, the demo and the tests -------------------------------------


def funnel(conn: Connection[Any], tenant_id: str | None = None) -> dict[str, int]:
    """How many writes stopped at each tier, and where the rest are now."""
    where = "WHERE tenant_id = %s" if tenant_id else ""
    params: tuple[Any, ...] = (tenant_id,) if tenant_id else ()
    counts: dict[str, int] = {}
    for tier, verdict, n in conn.execute(
        f"SELECT tier, verdict, count(*) FROM write_decisions {where} GROUP BY 1, 2", params
    ).fetchall():
        counts[f"tier{tier}_{verdict}"] = int(n)
    for status, n in conn.execute(
        f"SELECT status, count(*) FROM memories {where} GROUP BY 1", params
    ).fetchall():
        counts[f"memories_{status}"] = int(n)
    job_where = (
        "WHERE memory_id IN (SELECT id FROM memories WHERE tenant_id = %s)" if tenant_id else ""
    )
    for status, n in conn.execute(
        f"SELECT status, count(*) FROM jobs {job_where} GROUP BY 1", params
    ).fetchall():
        counts[f"jobs_{status}"] = int(n)
    return counts


def last_stored_at(conn: Connection[Any]) -> datetime | None:
    row = conn.execute("SELECT max(updated_at) FROM memories WHERE status = 'stored'").fetchone()
    return row[0] if row else None
