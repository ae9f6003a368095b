"""Tasks of background cognition: thin wrappers over the sweeps of this folder.

Sweeps take ``run_id`` and ``now`` (ISO 8601): beat sends neither (a new run at the wall
clock); a test or an operator can replay a run or drive a simulated clock. A step that did
its share requeues itself with the same run; the cursor lives in ``cognition_runs``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from workers.clients import get_clients
from workers.cognition.compress import complete_task, compress_step, schedule_compression
from workers.cognition.consolidate import consolidate_all, consolidate_tenant
from workers.cognition.decay import decay_step
from workers.cognition.embed import drain_embeddings
from workers.cognition.link import link_memories, link_unlinked
from workers.cognition.quality import quality_step
from workers.cognition.relay import relay_cognition
from workers.cognition.runs import parse_clock, run_id_for
from workers.metrics import observe_sweep
from workers.publish import publish
from workers.queues import TaskName
from workers.tasking import final_attempt, memharness_task


def _run(kind: str, run_id: str | None, now: str | None) -> tuple[uuid.UUID, str]:
    clock = parse_clock(now)
    return (uuid.UUID(run_id) if run_id else run_id_for(kind, None, clock)), clock.isoformat()


@memharness_task(TaskName.COMPRESS_SWEEP)
def compress_sweep_task(run_id: str | None = None, now: str | None = None) -> dict[str, Any]:
    rid, clock = _run("compress", run_id, now)
    outcome = compress_step(get_clients(), rid, parse_clock(clock))
    if outcome.requeue:
        publish(TaskName.COMPRESS_SWEEP, run_id=str(rid), now=clock)
    return outcome.as_dict()


@memharness_task(TaskName.COMPLETE_TASK)
def complete_task_task(tenant_id: str, task_id: str, now: str | None = None) -> dict[str, Any]:
    """The task is finished: summarise it at L3 (publish from ``MemoryClient``)."""
    return complete_task(get_clients(), tenant_id, task_id, parse_clock(now))


@memharness_task(TaskName.QUALITY_SWEEP)
def quality_sweep_task(run_id: str | None = None, now: str | None = None) -> dict[str, Any]:
    rid, clock = _run("quality", run_id, now)
    outcome = quality_step(get_clients(), rid, parse_clock(clock))
    if outcome.requeue:
        publish(TaskName.QUALITY_SWEEP, run_id=str(rid), now=clock)
    return outcome.as_dict()


@memharness_task(TaskName.DECAY_SWEEP)
def decay_sweep_task(run_id: str | None = None, now: str | None = None) -> dict[str, Any]:
    rid, clock = _run("decay", run_id, now)
    outcome = decay_step(get_clients(), rid, parse_clock(clock))
    if outcome.requeue:
        publish(TaskName.DECAY_SWEEP, run_id=str(rid), now=clock)
    return outcome.as_dict()


@memharness_task(TaskName.SCHEDULE_COMPRESSION)
def schedule_compression_task(now: str | None = None) -> dict[str, Any]:
    return schedule_compression(get_clients(), parse_clock(now))


@memharness_task(TaskName.RELAY_COGNITION)
def relay_cognition_task() -> dict[str, Any]:
    return relay_cognition(get_clients())


@memharness_task(TaskName.CONSOLIDATE_NIGHTLY)
def consolidate_nightly_task(now: str | None = None) -> int:
    return consolidate_all(get_clients(), parse_clock(now))


@memharness_task(TaskName.CONSOLIDATE_TENANT)
def consolidate_tenant_task(
    tenant_id: str, run_id: str | None = None, now: str | None = None
) -> dict[str, Any]:
    clock = parse_clock(now)
    rid = uuid.UUID(run_id) if run_id else run_id_for("consolidate", tenant_id, clock)
    return consolidate_tenant(get_clients(), tenant_id, rid, clock).as_dict()


@memharness_task(TaskName.DRAIN_EMBEDDINGS)
def drain_embeddings_task() -> dict[str, Any]:
    report = drain_embeddings(get_clients())
    if report["more"]:
        publish(TaskName.DRAIN_EMBEDDINGS)
    return report


@memharness_task(TaskName.LINK_MEMORIES)
def link_memories_task(memory_ids: list[str] | None = None) -> dict[str, Any]:
    """Link the given memories, or (None) the oldest unlinked ones, requeueing while a full
    batch was linked; each message is one short batch, so writes interleave."""
    clients = get_clients()
    if memory_ids is not None:
        deadline = time.monotonic() + clients.settings.sweep_deadline_s
        return link_memories(
            clients,
            [uuid.UUID(i) for i in memory_ids],
            deadline=deadline,
            transient_fallback=final_attempt(),
        )
    started = time.monotonic()
    stats = link_unlinked(clients, transient_fallback=final_attempt())
    observe_sweep("link", time.monotonic() - started)
    if stats["more"]:
        publish(TaskName.LINK_MEMORIES, memory_ids=None)
    return stats
