"""Tasks of data ownership: the owner settles corrections and erasures."""

from __future__ import annotations

from typing import Any

from workers.clients import get_clients
from workers.own.settle import settle_ownership
from workers.publish import publish
from workers.queues import TaskName
from workers.tasking import memharness_task


@memharness_task(TaskName.SETTLE_OWNERSHIP)
def settle_ownership_task() -> dict[str, Any]:
    """Forget requests and corrections, one batch; requeues itself while more are due."""
    stats = settle_ownership(get_clients())
    if stats["more"]:
        publish(TaskName.SETTLE_OWNERSHIP)
    return stats
