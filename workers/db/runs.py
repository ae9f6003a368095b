"""Runs: the cursor of a sweep and its figures (``cognition_runs``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.types.json import Jsonb


@dataclass(frozen=True)
class Run:
    run_id: uuid.UUID
    kind: str
    tenant_id: str | None
    clock: datetime
    cursor: str | None
    stats: dict[str, Any]
    finished: bool


def start_run(
    conn: Connection[Any], run_id: uuid.UUID, kind: str, tenant_id: str | None, clock: datetime
) -> Run:
    """The run's row, created on first sight; a replayed start finds the existing one."""
    conn.execute(
        "INSERT INTO cognition_runs (run_id, kind, tenant_id, clock) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (run_id) DO NOTHING",
        (run_id, kind, tenant_id, clock),
    )
    run = get_run(conn, run_id)
    assert run is not None
    return run


def get_run(conn: Connection[Any], run_id: uuid.UUID) -> Run | None:
    row = conn.execute(
        "SELECT run_id, kind, tenant_id, clock, cursor, stats, finished_at IS NOT NULL "
        "FROM cognition_runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    return Run(*row) if row else None


def merge_stats(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Counters add up across the steps of a run; other figures take the latest value."""
    merged = dict(old)
    for key, value in new.items():
        before = merged.get(key)
        both_numbers = isinstance(value, int | float) and isinstance(before, int | float)
        if both_numbers and not key.endswith("_mean") and not isinstance(value, bool):
            merged[key] = before + value
        else:
            merged[key] = value
    return merged


def advance_run(
    conn: Connection[Any],
    run: Run,
    *,
    cursor: str | None,
    stats: Mapping[str, Any],
    finished: bool,
) -> bool:
    """Move the cursor on, only from where this step started: a replayed step changes
    nothing and learns (False) that it must not requeue."""
    merged = merge_stats(run.stats, stats)
    result = conn.execute(
        "UPDATE cognition_runs SET cursor = %s, stats = %s, "
        "finished_at = CASE WHEN %s THEN now() ELSE NULL END "
        "WHERE run_id = %s AND cursor IS NOT DISTINCT FROM %s AND finished_at IS NULL",
        (cursor, Jsonb(merged), finished, run.run_id, run.cursor),
    )
    return result.rowcount == 1
