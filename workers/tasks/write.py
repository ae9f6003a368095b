"""Tasks of the ``write`` queue."""

from __future__ import annotations

from typing import Any

from workers.context import get_context
from workers.queues import CeleryQueue
from workers.tasking import memharness_task
from workers.write_service import DRAIN_TASK, RETRY_FLAG, drain_writes


@memharness_task(DRAIN_TASK, queue=CeleryQueue.WRITE)
def drain_writes_task(trigger_id: str | None = None) -> dict[str, Any]:
    """Finish one batch of due write jobs; requeue itself while more are due.

    ``trigger_id`` names the write that published this drain (for logs and Flower only): the
    drain takes every due job, in the order they became due.
    """
    ctx = get_context()
    report = drain_writes(ctx)
    if report.more:
        drain_writes_task.apply_async(kwargs={"trigger_id": trigger_id})
    elif report.next_retry_s is not None:
        # Jobs were handed back with a backoff: come back when the first is due. One delayed
        # drain at a time; the relay remains the safety net if this message is lost.
        delay_s = report.next_retry_s
        if ctx.redis.set(RETRY_FLAG, "1", nx=True, px=max(1, int(delay_s * 1000))):
            drain_writes_task.apply_async(kwargs={"trigger_id": None}, countdown=delay_s)
    return report.as_dict()
