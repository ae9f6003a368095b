"""Tasks of the ``maintenance`` queue: the outbox relay, health pings, a no-op baseline."""

from __future__ import annotations

import logging
from typing import Any

from workers.context import get_context
from workers.db.writes import WRITE_JOB, count_due_jobs
from workers.queues import CeleryQueue
from workers.tasking import memharness_task
from workers.write_service import DRAIN_TASK

log = logging.getLogger(__name__)

PING_KEY = "memharness:ping:{marker}"


def relay_outbox(grace_s: float) -> int:
    """Publish a drain when write jobs have been due for longer than ``grace_s``.

    A due job that old means its message was lost (a broker restart) or its worker died with
    the job leased; the drain reclaims both kinds. Returns the number of such jobs.
    """
    ctx = get_context()
    with ctx.pool.connection() as conn:
        due = count_due_jobs(conn, kind=WRITE_JOB, grace_s=grace_s)
    if due:
        from workers.app import app

        app.send_task(DRAIN_TASK, kwargs={"trigger_id": None}, queue=CeleryQueue.WRITE.value)
        log.info("relay: %s write jobs overdue; published a drain", due)
    return due


@memharness_task("memory.maintenance.relay_outbox", queue=CeleryQueue.MAINTENANCE)
def relay_outbox_task() -> int:
    ctx = get_context()
    # A job counts as overdue once a drain has had a fair chance at it: half the relay
    # interval, so one relay period never goes by with an overdue job and no drain.
    return relay_outbox(grace_s=ctx.settings.relay_interval_s / 2)


@memharness_task("memory.maintenance.ping", queue=CeleryQueue.MAINTENANCE)
def ping_task(marker: str) -> str:
    """Liveness probe: sets a short-lived Redis key the caller can read back."""
    get_context().redis.set(PING_KEY.format(marker=marker), "pong", ex=300)
    return "pong"


@memharness_task("memory.maintenance.noop", queue=CeleryQueue.MAINTENANCE)
def noop_task(*args: Any) -> None:
    """Does nothing: the baseline of the write-path benchmark's task throughput."""
