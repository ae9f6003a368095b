"""SQL of task checkpoints: the save with its retention, and the reads of a resume.

A save is one statement, hence one transaction on an autocommit connection: the insert and
the pruning of the task's old checkpoints commit together or not at all. Reads ask for binary
results, which halves the time of fetching a 50 KB body (no hex text to decode).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection

# The data-modifying CTEs share one snapshot: ``keep`` and ``pruned`` see the rows as they
# were before this insert, so the new row is never pruned and it counts as the Nth kept.
# The new checkpoint's parent is kept too: it is where a resume falls back to when the new
# one is corrupted, and after a rollback it is old enough to be outside the last N.
# Saving an id that exists already (a retried save, or a re-save after a resume fell back
# from it) rewrites its body and makes it the newest again: ``EXCLUDED.seq`` is the task's
# next number, which the table's BEFORE INSERT trigger drew from the task's own counter
# (migration 0014), so ``seq`` counts this task's saves and says nothing of anyone else's.
SAVE = """
WITH keep AS (
    SELECT id FROM checkpoints
    WHERE tenant_id = %(tenant_id)s AND task_id = %(task_id)s
    ORDER BY seq DESC
    LIMIT %(keep_others)s
), saved AS (
    INSERT INTO checkpoints (id, tenant_id, task_id, parent_id, created_at, format_version,
                             is_phase_transition, iteration, size_bytes, body)
    VALUES (%(id)s, %(tenant_id)s, %(task_id)s, %(parent_id)s, %(created_at)s,
            %(format_version)s, %(is_phase_transition)s, %(iteration)s, %(size_bytes)s,
            %(body)s)
    ON CONFLICT (id) DO UPDATE SET
        seq = EXCLUDED.seq,
        created_at = EXCLUDED.created_at,
        format_version = EXCLUDED.format_version,
        is_phase_transition = checkpoints.is_phase_transition OR EXCLUDED.is_phase_transition,
        iteration = EXCLUDED.iteration,
        size_bytes = EXCLUDED.size_bytes,
        body = EXCLUDED.body
    WHERE checkpoints.tenant_id = EXCLUDED.tenant_id AND checkpoints.task_id = EXCLUDED.task_id
    RETURNING 1
), pruned AS (
    DELETE FROM checkpoints
    WHERE tenant_id = %(tenant_id)s AND task_id = %(task_id)s
      AND NOT is_phase_transition
      AND id <> %(id)s
      AND id IS DISTINCT FROM %(parent_id)s
      AND id NOT IN (SELECT id FROM keep)
    RETURNING 1
)
SELECT (SELECT count(*) FROM saved), (SELECT count(*) FROM pruned)
"""

_COLUMNS = (
    "id, parent_id, seq, created_at, format_version, is_phase_transition, iteration, size_bytes"
)
_SCOPE = "tenant_id = %s AND task_id = %s"

NEWEST = f"SELECT {_COLUMNS}, body FROM checkpoints WHERE {_SCOPE} ORDER BY seq DESC LIMIT 1"
BY_ID = f"SELECT {_COLUMNS}, body FROM checkpoints WHERE {_SCOPE} AND id = %s"
NEWEST_BEFORE = (
    f"SELECT {_COLUMNS}, body FROM checkpoints WHERE {_SCOPE} AND seq < %s "
    "ORDER BY seq DESC LIMIT 1"
)
HEAD_ID = f"SELECT id FROM checkpoints WHERE {_SCOPE} ORDER BY seq DESC LIMIT 1"
LIST = f"SELECT {_COLUMNS} FROM checkpoints WHERE {_SCOPE} ORDER BY seq DESC LIMIT %s"
LIST_WITH_BODY = (
    f"SELECT {_COLUMNS}, body FROM checkpoints WHERE {_SCOPE} ORDER BY seq DESC LIMIT %s"
)


@dataclass(frozen=True)
class StoredCheckpoint:
    """One row. ``body`` is None when the query did not ask for it (a listing)."""

    id: uuid.UUID
    parent_id: uuid.UUID | None
    seq: int
    created_at: datetime
    format_version: int
    is_phase_transition: bool
    iteration: int
    size_bytes: int
    body: bytes | None = None


def _row(row: tuple[Any, ...] | None) -> StoredCheckpoint | None:
    if row is None:
        return None
    return StoredCheckpoint(*row)


def save_checkpoint(
    conn: Connection[Any],
    *,
    checkpoint_id: uuid.UUID,
    tenant_id: str,
    task_id: str,
    parent_id: uuid.UUID | None,
    created_at: datetime,
    format_version: int,
    is_phase_transition: bool,
    iteration: int,
    body: bytes,
    keep_last: int,
) -> int:
    """Insert (or rewrite) one checkpoint and prune the task's history; returns how many
    old checkpoints were pruned."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got {keep_last}")
    row = conn.execute(
        SAVE,
        {
            "id": checkpoint_id,
            "tenant_id": tenant_id,
            "task_id": task_id,
            "parent_id": parent_id,
            "created_at": created_at,
            "format_version": format_version,
            "is_phase_transition": is_phase_transition,
            "iteration": iteration,
            "size_bytes": len(body),
            "body": body,
            "keep_others": keep_last - 1,
        },
    ).fetchone()
    if row is None or row[0] != 1:
        raise RuntimeError(f"checkpoint {checkpoint_id} exists under another task")
    return int(row[1])


def fetch_newest(conn: Connection[Any], tenant_id: str, task_id: str) -> StoredCheckpoint | None:
    return _row(conn.execute(NEWEST, (tenant_id, task_id), binary=True).fetchone())


def fetch_by_id(
    conn: Connection[Any], tenant_id: str, task_id: str, checkpoint_id: uuid.UUID
) -> StoredCheckpoint | None:
    return _row(conn.execute(BY_ID, (tenant_id, task_id, checkpoint_id), binary=True).fetchone())


def fetch_newest_before(
    conn: Connection[Any], tenant_id: str, task_id: str, seq: int
) -> StoredCheckpoint | None:
    return _row(conn.execute(NEWEST_BEFORE, (tenant_id, task_id, seq), binary=True).fetchone())


def fetch_head_id(conn: Connection[Any], tenant_id: str, task_id: str) -> uuid.UUID | None:
    row = conn.execute(HEAD_ID, (tenant_id, task_id)).fetchone()
    return None if row is None else uuid.UUID(str(row[0]))


def list_checkpoints(
    conn: Connection[Any], tenant_id: str, task_id: str, *, limit: int, with_body: bool = False
) -> list[StoredCheckpoint]:
    query = LIST_WITH_BODY if with_body else LIST
    rows = conn.execute(query, (tenant_id, task_id, limit), binary=True).fetchall()
    return [StoredCheckpoint(*row) for row in rows]
