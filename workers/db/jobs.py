"""The outbox (``jobs``): a job per piece of background work on a memory, claimed in batches
with a lease. A claim that outlives its lease (its worker died) is claimable again; the
relays publish a drain for jobs due too long (a lost message).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from psycopg import Connection

WRITE_JOB = "write"
EMBED_JOB = "embed"
UNINDEX_JOB = "unindex"


# -- claims ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimedJob:
    job_id: int
    memory_id: uuid.UUID
    attempts: int
    last_error: str | None


CLAIM_JOBS = """
UPDATE jobs SET status = 'running', attempts = attempts + 1,
                lease_until = now() + make_interval(secs => %(lease_s)s), updated_at = now()
WHERE id IN (
    SELECT id FROM jobs
    WHERE kind = %(kind)s AND status IN ('pending', 'running') AND lease_until <= now()
    ORDER BY lease_until, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, memory_id, attempts, last_error
"""


def claim_jobs(conn: Connection[Any], *, kind: str, limit: int, lease_s: float) -> list[ClaimedJob]:
    """Take up to ``limit`` due jobs: pending ones, and running ones whose worker died."""
    rows = conn.execute(CLAIM_JOBS, {"kind": kind, "limit": limit, "lease_s": lease_s}).fetchall()
    return [ClaimedJob(*row) for row in rows]


# -- relays ------------------------------------------------------------------------------------


def count_due_jobs(conn: Connection[Any], *, kind: str, grace_s: float) -> int:
    """Jobs that are due and have waited longer than ``grace_s``: their message was lost or
    their worker died, so the relay has to publish them again."""
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE kind = %s AND status IN ('pending', 'running') "
        "AND lease_until <= now() - make_interval(secs => %s)",
        (kind, grace_s),
    ).fetchone()
    return int(row[0]) if row else 0


def oldest_due_age_s(conn: Connection[Any], *, kind: str) -> float | None:
    row = conn.execute(
        "SELECT extract(epoch FROM now() - min(lease_until)) FROM jobs "
        "WHERE kind = %s AND status IN ('pending', 'running') AND lease_until <= now()",
        (kind,),
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else None
