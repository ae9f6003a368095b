"""Decay (``maintenance`` queue): tenants idle for ``tenant_idle_s`` get their retentions
stored and their faded, unimportant, redundant rows evicted (logged, unindexed, row kept).

Redundant means a kept summary covers the row (it points at the summary through
``superseded_by``, and the summary is still ``stored``) or the row carries no fact
(:func:`pipelines.write.facts.carries_fact`). A faded fact that nothing covers stays: it is
the compression sweep's to summarise, and the next sweep may evict it once it is covered.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

from pipelines.cognition.decay import DecayAction, decide_decay, eviction_record
from pipelines.cognition.levels import DEFAULT_LEVELS, target_level
from pipelines.write.facts import carries_fact
from workers.activity import tenant_is_idle
from workers.clients import Clients
from workers.cognition.decay_sql import apply_decay, kept_summaries, stored_rows_after
from workers.cognition.runs import StepOutcome, add_stat, run_step
from workers.cognition.sql import tenants_after
from workers.db.rows import row_to_memory
from workers.db.runs import Run


def decay_tenant_batch(
    ctx: Clients, tenant_id: str, after: uuid.UUID | None, now: datetime, run_id: uuid.UUID
) -> tuple[uuid.UUID | None, bool, dict[str, Any]]:
    """One batch of a tenant's stored rows: (last id, tenant finished, stats)."""
    limit = ctx.settings.sweep_batch_size
    with ctx.pool.connection() as conn:
        rows = stored_rows_after(conn, tenant_id, after, limit)
        summaries = kept_summaries(conn, [r["superseded_by"] for r in rows if r["superseded_by"]])
    evictions = []
    covers: dict[uuid.UUID, uuid.UUID | None] = {}
    retentions: list[tuple[uuid.UUID, float]] = []
    stats: dict[str, Any] = {}
    for row in rows:
        memory = row_to_memory(row)
        if memory.timestamp > now:
            continue
        age_s = (now - memory.timestamp).total_seconds()
        ceiling = target_level(age_s, memory.access_count, DEFAULT_LEVELS)
        cover = row["superseded_by"]
        covered = cover is not None and summaries.get(cover, -1) > memory.level
        decision = decide_decay(
            memory,
            now,
            level_ceiling=ceiling,
            covered=covered,
            carries_fact=carries_fact(memory.content),
        )
        add_stat(stats, f"decided_{decision.action.value}")
        if decision.action is DecayAction.EVICT:
            evictions.append(eviction_record(memory, decision, now))
            covers[memory.id] = cover if covered else None
        else:
            retentions.append((memory.id, round(decision.retention, 4)))
    with ctx.pool.connection() as conn:
        evicted, skipped = apply_decay(
            conn, evictions=evictions, covers=covers, retentions=retentions, run_id=run_id
        )
    add_stat(stats, "evicted", evicted)
    if skipped:
        add_stat(stats, "locked_skipped", skipped)
    add_stat(stats, "rows", len(rows))
    last = rows[-1]["id"] if rows else after
    return last, len(rows) < limit, stats


def decay_step(ctx: Clients, run_id: uuid.UUID, clock: datetime) -> StepOutcome:
    """Tenants in key order; the cursor is ``tenant<US>last id`` (empty id: tenant done)."""

    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        stats: dict[str, Any] = {}
        cursor = run.cursor
        while time.monotonic() < deadline:
            tenant, _, last = (cursor or "").partition("\x1f")
            if not last:
                with ctx.pool.connection() as conn:
                    following = tenants_after(conn, tenant or None, 1)
                if not following:
                    return cursor, True, stats
                tenant = following[0]
                if not tenant_is_idle(ctx.redis, tenant, run.clock, ctx.settings.tenant_idle_s):
                    add_stat(stats, "tenants_active_skipped")
                    cursor = f"{tenant}\x1f"
                    continue
                add_stat(stats, "tenants_swept")
                after_id = None
            else:
                after_id = uuid.UUID(last)
            last_id, finished, batch = decay_tenant_batch(
                ctx, tenant, after_id, run.clock, run.run_id
            )
            for key, n in batch.items():
                add_stat(stats, key, n)
            cursor = f"{tenant}\x1f" if finished or last_id is None else f"{tenant}\x1f{last_id}"
        return cursor, False, stats

    return run_step(ctx, "decay", run_id, clock, None, body)
