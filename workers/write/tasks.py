"""Tasks of the write path: the outbox drain and its relay."""

from __future__ import annotations

import logging
from typing import Any

from workers.clients import get_clients
from workers.db.jobs import WRITE_JOB, count_due_jobs
from workers.publish import publish
from workers.queues import TaskName
from workers.tasking import memharness_task
from workers.write.drain import drain_writes
from workers.write.wake import RETRY_FLAG

log = logging.getLogger(__name__)


@memharness_task(TaskName.DRAIN_WRITES)
def drain_writes_task(trigger_id: str | None = None) -> dict[str, Any]:
    """Finish one batch of due write jobs; requeue itself while more are due.

    ``trigger_id`` names the write that published this drain (for logs and Flower only): the
    drain takes every due job, in the order they became due.
    """
    clients = get_clients()
    report = drain_writes(clients)
    if report.more:
        publish(TaskName.DRAIN_WRITES, trigger_id=trigger_id)
    elif report.next_retry_s is not None:
        # Jobs were handed back with a backoff: come back when the first is due. One delayed
        # drain at a time; the relay remains the safety net if this message is lost.
        delay_s = report.next_retry_s
        if clients.redis.set(RETRY_FLAG, "1", nx=True, px=max(1, int(delay_s * 1000))):
            publish(TaskName.DRAIN_WRITES, countdown=delay_s, trigger_id=None)
    return report.as_dict()


def relay_outbox(grace_s: float) -> int:
    """Publish a drain when write jobs have been due for longer than ``grace_s``.

    A due job that old means its message was lost (a broker restart) or its worker died with
    the job leased; the drain reclaims both kinds. Returns the number of such jobs.
    """
    with get_clients().pool.connection() as conn:
        due = count_due_jobs(conn, kind=WRITE_JOB, grace_s=grace_s)
    if due:
        publish(TaskName.DRAIN_WRITES, trigger_id=None)
        log.info("relay: %s write jobs overdue; published a drain", due)
    return due


@memharness_task(TaskName.RELAY_OUTBOX)
def relay_outbox_task() -> int:
    # A job counts as overdue once a drain has had a fair chance at it: half the relay
    # interval, so one relay period never goes by with an overdue job and no drain.
    return relay_outbox(grace_s=get_clients().settings.relay_interval_s / 2)
