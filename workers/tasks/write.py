"""Tasks of the ``write`` queue."""

from __future__ import annotations

from typing import Any

from workers.context import get_context
from workers.queues import CeleryQueue
from workers.tasking import memharness_task
from workers.write_service import DRAIN_TASK, drain_writes


@memharness_task(DRAIN_TASK, queue=CeleryQueue.WRITE)
def drain_writes_task(trigger_id: str | None = None) -> dict[str, Any]:
    """Finish one batch of due write jobs; requeue itself while more are due.

    ``trigger_id`` names the write that published this drain (for logs and Flower only): the
    drain takes every due job, in the order they became due.
    """
    report = drain_writes(get_context())
    if report.more:
        drain_writes_task.apply_async(kwargs={"trigger_id": trigger_id})
    return report.as_dict()
