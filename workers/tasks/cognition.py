"""Tasks of background cognition: thin wrappers over ``workers.cognition_service``.

Sweeps take ``run_id`` and ``now`` (ISO 8601): beat sends neither (a new run at the wall
clock); a test or an operator can replay a run or drive a simulated clock. A step that did
its share requeues itself with the same run; the cursor lives in ``cognition_runs``.
"""

from __future__ import annotations

import uuid
from typing import Any

from workers.cognition_service import (
    COMPLETE_TASK_TASK,
    COMPRESS_SWEEP_TASK,
    CONSOLIDATE_TENANT_TASK,
    DECAY_SWEEP_TASK,
    EMBED_DRAIN_TASK,
    LINK_TASK,
    QUALITY_SWEEP_TASK,
    complete_task,
    compress_step,
    consolidate_all,
    consolidate_tenant,
    decay_step,
    drain_embeddings,
    link_memories,
    link_unlinked,
    parse_clock,
    quality_step,
    relay_cognition,
    run_id_for,
    schedule_compression,
)
from workers.context import get_context
from workers.queues import CeleryQueue
from workers.tasking import memharness_task


def _run(kind: str, run_id: str | None, now: str | None) -> tuple[uuid.UUID, str]:
    clock = parse_clock(now)
    return (uuid.UUID(run_id) if run_id else run_id_for(kind, None, clock)), clock.isoformat()


@memharness_task(COMPRESS_SWEEP_TASK, queue=CeleryQueue.COMPRESS)
def compress_sweep_task(run_id: str | None = None, now: str | None = None) -> dict[str, Any]:
    rid, clock = _run("compress", run_id, now)
    outcome = compress_step(get_context(), rid, parse_clock(clock))
    if outcome.requeue:
        compress_sweep_task.apply_async(kwargs={"run_id": str(rid), "now": clock})
    return outcome.as_dict()


@memharness_task(COMPLETE_TASK_TASK, queue=CeleryQueue.COMPRESS)
def complete_task_task(tenant_id: str, task_id: str, now: str | None = None) -> dict[str, Any]:
    """The task is finished: summarise it at L3 (publish from ``MemoryClient``)."""
    return complete_task(get_context(), tenant_id, task_id, parse_clock(now))


@memharness_task(QUALITY_SWEEP_TASK, queue=CeleryQueue.QUALITY)
def quality_sweep_task(run_id: str | None = None, now: str | None = None) -> dict[str, Any]:
    rid, clock = _run("quality", run_id, now)
    outcome = quality_step(get_context(), rid, parse_clock(clock))
    if outcome.requeue:
        quality_sweep_task.apply_async(kwargs={"run_id": str(rid), "now": clock})
    return outcome.as_dict()


@memharness_task(DECAY_SWEEP_TASK, queue=CeleryQueue.MAINTENANCE)
def decay_sweep_task(run_id: str | None = None, now: str | None = None) -> dict[str, Any]:
    rid, clock = _run("decay", run_id, now)
    outcome = decay_step(get_context(), rid, parse_clock(clock))
    if outcome.requeue:
        decay_sweep_task.apply_async(kwargs={"run_id": str(rid), "now": clock})
    return outcome.as_dict()


@memharness_task("memory.maintenance.schedule_compression", queue=CeleryQueue.MAINTENANCE)
def schedule_compression_task(now: str | None = None) -> dict[str, Any]:
    return schedule_compression(get_context(), parse_clock(now))


@memharness_task("memory.maintenance.relay_cognition", queue=CeleryQueue.MAINTENANCE)
def relay_cognition_task() -> dict[str, Any]:
    return relay_cognition(get_context())


@memharness_task("memory.consolidate.nightly", queue=CeleryQueue.CONSOLIDATE)
def consolidate_nightly_task(now: str | None = None) -> int:
    return consolidate_all(get_context(), parse_clock(now))


@memharness_task(CONSOLIDATE_TENANT_TASK, queue=CeleryQueue.CONSOLIDATE)
def consolidate_tenant_task(
    tenant_id: str, run_id: str | None = None, now: str | None = None
) -> dict[str, Any]:
    clock = parse_clock(now)
    rid = uuid.UUID(run_id) if run_id else run_id_for("consolidate", tenant_id, clock)
    return consolidate_tenant(get_context(), tenant_id, rid, clock).as_dict()


@memharness_task(EMBED_DRAIN_TASK, queue=CeleryQueue.EMBED)
def drain_embeddings_task() -> dict[str, Any]:
    report = drain_embeddings(get_context())
    if report["more"]:
        drain_embeddings_task.apply_async()
    return report


@memharness_task(LINK_TASK, queue=CeleryQueue.EMBED)
def link_memories_task(memory_ids: list[str] | None = None) -> dict[str, Any]:
    """Link the given memories, or (None) the oldest unlinked ones, requeueing while a full
    batch was linked; each message is one short batch, so writes interleave."""
    ctx = get_context()
    if memory_ids is not None:
        return link_memories(ctx, [uuid.UUID(i) for i in memory_ids])
    stats = link_unlinked(ctx)
    if stats["more"]:
        link_memories_task.apply_async(kwargs={"memory_ids": None})
    return stats
