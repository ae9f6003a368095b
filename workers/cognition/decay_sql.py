"""The decay sweep's SQL: a tenant's stored rows in id order, the summaries still kept, and
the sweep's one transaction (evictions, their log lines and unindex jobs, retentions)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pipelines.cognition.decay import EvictionRecord
from workers.db.jobs import UNINDEX_JOB
from workers.db.rows import MEMORY_COLUMNS


def stored_rows_after(
    conn: Connection[Any], tenant_id: str, after: uuid.UUID | None, limit: int
) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = %s AND status = 'stored' "
            "AND id > %s ORDER BY id LIMIT %s",
            (tenant_id, after or uuid.UUID(int=0), limit),
        )
        return list(cur.fetchall())


def kept_summaries(conn: Connection[Any], ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Of ``ids``, the summaries still kept (``stored``, level ≥ 1), with their levels."""
    if not ids:
        return {}
    rows = conn.execute(
        "SELECT id, level FROM memories WHERE id = ANY(%s) AND status = 'stored' AND level >= 1",
        (sorted(set(ids)),),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def apply_decay(
    conn: Connection[Any],
    *,
    evictions: Sequence[EvictionRecord],
    covers: Mapping[uuid.UUID, uuid.UUID | None],
    retentions: Sequence[tuple[uuid.UUID, float]],
    run_id: uuid.UUID | None,
) -> tuple[int, int]:
    """Evict (logged, unindexed, row kept as ``evicted``) and store retentions; one
    transaction. ``covers`` names, per eviction, the summary that made it redundant (None:
    the row carries no fact). Returns (rows evicted, rows skipped because another
    transaction held them).

    The sweep never waits for a lock, so it cannot take part in a deadlock: its rows are
    locked in id order with SKIP LOCKED, and each covering summary with FOR SHARE SKIP LOCKED,
    so a correction retiring that summary right now (settle_ownership) either finishes first,
    and the row is not evicted, or waits for this transaction and then finds the eviction and
    restores the row. What was skipped is the next sweep's."""
    ids = sorted({r.memory_id for r in evictions} | {m for m, _ in retentions})
    if not ids:
        return 0, 0
    evicted = 0
    with conn.transaction():
        locked = {
            r[0]
            for r in conn.execute(
                "SELECT id FROM memories WHERE id = ANY(%s) AND status = 'stored' "
                "ORDER BY id FOR UPDATE SKIP LOCKED",
                (ids,),
            ).fetchall()
        }
        wanted = sorted({c for c in covers.values() if c is not None})
        held: set[uuid.UUID] = set()
        if wanted:
            held = {
                r[0]
                for r in conn.execute(
                    "SELECT id FROM memories WHERE id = ANY(%s) AND status = 'stored' "
                    "ORDER BY id FOR SHARE SKIP LOCKED",
                    (wanted,),
                ).fetchall()
            }
        for record in evictions:
            cover = covers.get(record.memory_id)
            if record.memory_id not in locked or (cover is not None and cover not in held):
                continue
            changed = conn.execute(
                "UPDATE memories SET status = 'evicted', status_reason = %s, updated_at = now() "
                "WHERE id = %s AND status = 'stored' "
                "AND (%s::uuid IS NULL OR superseded_by = %s::uuid)",
                (record.reason[:2000], record.memory_id, cover, cover),
            ).rowcount
            if not changed:
                continue
            evicted += 1
            conn.execute(
                "INSERT INTO evictions (memory_id, tenant_id, run_id, evicted_at, record) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (memory_id) DO UPDATE "
                "SET run_id = EXCLUDED.run_id, evicted_at = EXCLUDED.evicted_at, "
                "record = EXCLUDED.record",
                (
                    record.memory_id,
                    record.tenant_id,
                    run_id,
                    record.evicted_at,
                    Jsonb(json.loads(record.model_dump_json())),
                ),
            )
            conn.execute(
                "INSERT INTO jobs (kind, memory_id) VALUES (%s, %s) ON CONFLICT (kind, memory_id) "
                "DO UPDATE SET status = 'pending', attempts = 0, lease_until = now(), "
                "updated_at = now() WHERE jobs.status IN ('done', 'dead')",
                (UNINDEX_JOB, record.memory_id),
            )
        mine = [(r, memory_id, r) for memory_id, r in retentions if memory_id in locked]
        if mine:
            # Only a real change is written: a second sweep at the same clock writes nothing.
            conn.cursor().executemany(
                "UPDATE memories SET decay_factor = %s WHERE id = %s AND status = 'stored' "
                "AND abs(decay_factor - %s) > 0.0005",
                mine,
            )
    return evicted, len(ids) - len(locked)
