"""Probe tasks of the ``maintenance`` queue: a liveness ping and a no-op baseline."""

from __future__ import annotations

from typing import Any

from workers.clients import get_clients
from workers.queues import TaskName
from workers.tasking import memharness_task

PING_KEY = "memharness:ping:{marker}"


@memharness_task(TaskName.PING)
def ping_task(marker: str) -> str:
    """Liveness probe: sets a short-lived Redis key the caller can read back."""
    get_clients().redis.set(PING_KEY.format(marker=marker), "pong", ex=300)
    return "pong"


@memharness_task(TaskName.NOOP)
def noop_task(*args: Any) -> None:
    """Does nothing: the baseline of the write-path benchmark's task throughput."""
