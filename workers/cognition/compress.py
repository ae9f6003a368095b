"""Compression (``compress`` queue): per (tenant, task), live L0 rows whose level policy or
forgetting curve says so become L1 summaries, checked L1 rows older than a week become L2.
Each summary is a new row with parent pointers, inserted with its parents' ``superseded_by``
and its embedding job in one transaction. ``complete_task`` makes the L3 summary of a
finished task from whatever is still live in it, once; ``schedule_compression`` is the
capacity check that starts sweeps.

The sweep owns every level's retries: a rolled-back L1 or L2 summary frees its parents, which
the next sweep compresses again at the next version; a rolled-back L3 is made again by the
sweep over the same parents, at the next version (half the ratio, annotate-only once a parent
resists), until one is kept.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from typing import Any

from pipelines.cognition.compress import (
    CompressionResult,
    compress_group,
    compressor_id,
    plan_groups,
)
from pipelines.cognition.decay import DecayAction, decide_decay
from pipelines.cognition.health import CompressionHealth, plan_compression, split_resistant
from pipelines.cognition.levels import DEFAULT_LEVELS, target_level
from pipelines.records import Level
from workers.clients import Clients
from workers.cognition.runs import StepOutcome, add_stat, run_id_for, run_step
from workers.cognition.sql import (
    ConcurrentChange,
    insert_summary,
    live_episodic_count,
    live_rows,
    load_health,
    row_to_source,
    scopes_after,
    task_summary_to_retry,
)
from workers.db.rows import fetch_rows, row_to_memory
from workers.db.runs import Run
from workers.publish import publish_quietly
from workers.queues import TaskName

log = logging.getLogger(__name__)


COMPRESS_GATE_KEY = "memharness:compress:next-sweep"
# Past the capacity watermark the compression sweep runs this many times as often.
WATERMARK_SPEEDUP = 4


# One compression step reads at most this many oldest rows per level of a task (~1 s of
# offline compression); the rest waits for the next step or sweep.
SCOPE_MAX_ROWS = 2000


def _eligible(row: dict[str, Any], level: Level, now: datetime) -> bool:
    """The level policy (age slowed by reads) or the forgetting curve asks for ``level``."""
    memory = row_to_memory(row)
    age_s = (now - memory.timestamp).total_seconds()
    ceiling = target_level(age_s, memory.access_count, DEFAULT_LEVELS)
    if ceiling >= level:
        return True
    decision = decide_decay(memory, now, level_ceiling=ceiling)
    return (
        decision.action in (DecayAction.PROMOTE, DecayAction.COMPRESS)
        and decision.target_level == level
    )


def compress_scope(ctx: Clients, tenant_id: str, task_id: str, now: datetime) -> dict[str, Any]:
    """Promote what is due in one task: a rolled-back task summary again, then L0 → L1, then
    checked L1 → L2. The task summary goes first: its parents are the task's live rows, which
    the lower levels would otherwise take."""
    stats = retry_task_summary(ctx, tenant_id, task_id, now)
    for level, source_level in ((Level.L1, Level.L0), (Level.L2, Level.L1)):
        with ctx.pool.connection() as conn:
            rows = live_rows(
                conn,
                tenant_id,
                task_id,
                source_level,
                checked_only=level > Level.L1,
                limit=SCOPE_MAX_ROWS,
            )
            rows = [r for r in rows if r["ts"] <= now and _eligible(r, level, now)]
            if not rows:
                continue
            health = load_health(conn, [r["id"] for r in rows])
        by_id = {r["id"]: r for r in rows}
        for group in plan_groups([row_to_source(r) for r in rows], level, DEFAULT_LEVELS):
            compressor = compressor_id(ctx.llm)
            normal, resistant = split_resistant(group, health, compressor)
            for part in (normal, resistant):
                if not part:
                    continue
                plan = plan_compression(part, health, compressor)
                annotate_only = plan.annotate_only
                result = compress_group(
                    part,
                    level,
                    ctx.llm_for(tenant_id),
                    version=plan.version,
                    annotate_only=annotate_only,
                    policy=DEFAULT_LEVELS,
                    attempt=plan.attempt,
                )
                try:
                    with ctx.pool.connection() as conn:
                        created = insert_summary(conn, result.draft, [by_id[s.id] for s in part])
                except ConcurrentChange as exc:
                    log.info("compression skipped: %s", exc)
                    add_stat(stats, "conflicts")
                    continue
                if created:
                    add_stat(stats, f"l{int(level)}_created")
                    add_stat(stats, "source_words", result.draft.source_words)
                    add_stat(stats, "summary_words", result.draft.summary_words)
                    if annotate_only:
                        add_stat(stats, "annotate_only")
                else:
                    add_stat(stats, "already_done")
    return stats


def _scope_cursor(cursor: str | None) -> tuple[str, str] | None:
    if not cursor:
        return None
    tenant, _, task = cursor.partition("\x1f")
    return tenant, task


def compress_step(ctx: Clients, run_id: uuid.UUID, clock: datetime) -> StepOutcome:
    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        stats: dict[str, Any] = {}
        after = _scope_cursor(run.cursor)
        limit = ctx.settings.sweep_batch_size
        with ctx.pool.connection() as conn:
            scopes = scopes_after(conn, after, limit, max_level=int(Level.L2))
        cursor = run.cursor
        for tenant_id, task_id in scopes:
            if time.monotonic() > deadline:
                return cursor, False, stats
            for key, n in compress_scope(ctx, tenant_id, task_id, run.clock).items():
                add_stat(stats, key, n)
            add_stat(stats, "scopes")
            cursor = f"{tenant_id}\x1f{task_id}"
        return cursor, len(scopes) < limit, stats

    outcome = run_step(ctx, "compress", run_id, clock, None, body)
    created = sum(v for k, v in outcome.stats.items() if k.endswith("_created"))
    if created:
        # Check the new summaries now rather than at the next quality tick; embed them.
        quality_run = uuid.uuid5(run_id, f"quality\x1f{outcome.cursor}")
        publish_quietly(
            TaskName.QUALITY_SWEEP,
            run_id=str(quality_run),
            now=clock.isoformat(),
        )
        publish_quietly(TaskName.DRAIN_EMBEDDINGS)
    return outcome


def _task_summary(
    ctx: Clients,
    tenant_id: str,
    rows: list[dict[str, Any]],
    health: dict[uuid.UUID, CompressionHealth],
) -> CompressionResult:
    """The L3 summary of ``rows``: one version past its parents' worst failure count,
    annotate-only when a parent resists this compressor (as every level's retry)."""
    sources = [row_to_source(r) for r in rows]
    plan = plan_compression(sources, health, compressor_id(ctx.llm))
    return compress_group(
        sources,
        Level.L3,
        ctx.llm_for(tenant_id),
        version=plan.version,
        annotate_only=plan.annotate_only,
        policy=DEFAULT_LEVELS,
        attempt=plan.attempt,
    )


def retry_task_summary(ctx: Clients, tenant_id: str, task_id: str, now: datetime) -> dict[str, Any]:
    """A task summary the quality check rolled back, made again over its parents that are
    still live. The failures its rollback counted make this the next version; a replay finds
    the new summary stored (or its parents covered) and does nothing."""
    stats: dict[str, Any] = {}
    with ctx.pool.connection() as conn:
        failed = task_summary_to_retry(conn, tenant_id, task_id)
        if failed is None:
            return stats
        parents = fetch_rows(conn, failed["parent_ids"])
        rows = [
            parents[p]
            for p in failed["parent_ids"]
            if p in parents
            and parents[p]["status"] == "stored"
            and parents[p]["superseded_by"] is None
            and parents[p]["ts"] <= now
        ]
        if not rows:
            return stats
        health = load_health(conn, [r["id"] for r in rows])
    result = _task_summary(ctx, tenant_id, rows, health)
    try:
        with ctx.pool.connection() as conn:
            created = insert_summary(conn, result.draft, rows)
    except ConcurrentChange as exc:
        log.info("task summary retry skipped: %s", exc)
        add_stat(stats, "conflicts")
        return stats
    if created:
        log.info(
            "task summary of %s/%s made again as v%s (%s rolled back)",
            tenant_id,
            task_id,
            result.draft.version,
            failed["id"],
        )
        add_stat(stats, "l3_created")
        add_stat(stats, "source_words", result.draft.source_words)
        add_stat(stats, "summary_words", result.draft.summary_words)
        if result.draft.annotate_only:
            add_stat(stats, "annotate_only")
    else:
        add_stat(stats, "already_done")
    return stats


def complete_task(ctx: Clients, tenant_id: str, task_id: str, now: datetime) -> dict[str, Any]:
    """L3 at task completion: one summary of everything still live in the task (raw rows,
    and summaries that passed their check), inserted like any summary and checked after.
    One shot: a rollback of it is retried by the compression sweep."""
    with ctx.pool.connection() as conn:
        rows = [
            row
            for level in (Level.L0, Level.L1, Level.L2)
            for row in live_rows(conn, tenant_id, task_id, level, checked_only=level > Level.L0)
            if row["ts"] <= now
        ]
        health = load_health(conn, [r["id"] for r in rows])
    if not rows:
        return {"created": False, "sources": 0}
    result = _task_summary(ctx, tenant_id, rows, health)
    with ctx.pool.connection() as conn:
        created = insert_summary(conn, result.draft, rows)
    if created:
        publish_quietly(
            TaskName.QUALITY_SWEEP,
            run_id=str(uuid.uuid5(result.draft.id, "quality")),
            now=now.isoformat(),
        )
        publish_quietly(TaskName.DRAIN_EMBEDDINGS)
    return {
        "created": created,
        "summary_id": str(result.draft.id),
        "version": result.draft.version,
        "sources": len(rows),
    }


def schedule_compression(ctx: Clients, now: datetime) -> dict[str, Any]:
    """The capacity check: start a compression sweep when its period has passed, a shorter
    period past the watermark. A Redis gate with that period's TTL makes it once per period."""
    settings = ctx.settings
    with ctx.pool.connection() as conn:
        live = live_episodic_count(conn)
    fill = live / settings.episodic_capacity
    period_s = settings.compress_interval_s
    if fill >= settings.capacity_watermark:
        period_s /= WATERMARK_SPEEDUP
    started = bool(
        ctx.redis.set(COMPRESS_GATE_KEY, now.isoformat(), nx=True, px=int(period_s * 1000))
    )
    if started:
        publish_quietly(
            TaskName.COMPRESS_SWEEP,
            run_id=str(run_id_for("compress", None, now)),
            now=now.isoformat(),
        )
    return {"live": live, "fill": round(fill, 4), "period_s": period_s, "started": started}
