"""Consolidation (``consolidate`` queue): per tenant, the episodes of the window become
semantic knowledge (merges extend, contradictions add conditional or flagged rows).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from pipelines.cognition.consolidate import consolidate
from workers.clients import Clients
from workers.cognition.runs import StepOutcome, run_id_for, run_step
from workers.cognition.sql import (
    apply_knowledge,
    consolidation_inputs,
    tenants_after,
)
from workers.db.runs import Run
from workers.publish import publish_quietly
from workers.queues import TaskName

# Consolidation reads at most this many episodes per tenant and run (~2 s offline).
CONSOLIDATE_MAX_ROWS = 2000


def consolidate_all(ctx: Clients, now: datetime) -> int:
    """Fan out one consolidation run per tenant (the nightly job)."""
    published = 0
    after: str | None = None
    while True:
        with ctx.pool.connection() as conn:
            tenants = tenants_after(conn, after, 500)
        for tenant_id in tenants:
            publish_quietly(
                TaskName.CONSOLIDATE_TENANT,
                tenant_id=tenant_id,
                run_id=str(run_id_for("consolidate", tenant_id, now)),
                now=now.isoformat(),
            )
            published += 1
        if len(tenants) < 500:
            return published
        after = tenants[-1]


def consolidate_tenant(
    ctx: Clients, tenant_id: str, run_id: uuid.UUID, clock: datetime
) -> StepOutcome:
    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        since = run.clock - timedelta(days=ctx.settings.consolidate_window_days)
        with ctx.pool.connection() as conn:
            memories, existing, _ = consolidation_inputs(
                conn, tenant_id, since, CONSOLIDATE_MAX_ROWS
            )
        memories = [m for m in memories if m.timestamp <= run.clock]
        plan = consolidate(memories, existing, ctx.embedder, run.clock, ctx.llm_for(tenant_id))
        waiting = [(w.kind.value, w.statement, w.source_ids, w.reason) for w in plan.episodic_only]
        with ctx.pool.connection() as conn:
            counts = apply_knowledge(conn, tenant_id, plan.changes, waiting, ctx.embedder.version)
        stats: dict[str, Any] = {
            "memories_seen": plan.memories_seen,
            "candidates": plan.candidates,
            "episodic_only": len(plan.episodic_only),
            "extracted_by": plan.extracted_by,
        }
        for action, n in counts.items():
            stats[f"semantic_{action}"] = n
        return None, True, stats

    return run_step(ctx, "consolidate", run_id, clock, tenant_id, body)
