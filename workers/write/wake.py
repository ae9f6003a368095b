"""Waking the write drain: a Redis flag coalesces publishes, so a burst of writes publishes
a few drains rather than one per write. The outbox, not the message, guarantees delivery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.publish import publish
from workers.queues import TaskName

if TYPE_CHECKING:
    from celery import Celery

DRAIN_FLAG = "memharness:write:drain-queued"
# How long the "a drain is queued" flag may outlive a lost message: after this a new write
# publishes again even if the flag's drain never ran. Ten seconds bounds the extra delay of
# a lost message without letting a backlog publish one drain per write.
DRAIN_FLAG_TTL_S = 10
RETRY_FLAG = "memharness:write:retry-drain-scheduled"


def queue_drain_flag(pipe: Any, trigger_id: str) -> None:
    """Queue ``SET NX`` of the drain flag on a Redis pipeline (sync or asyncio); its reply
    says whether this writer must publish the drain (True) or one is queued already."""
    pipe.set(DRAIN_FLAG, trigger_id, nx=True, ex=DRAIN_FLAG_TTL_S)


def send_drain(app: Celery | None, trigger_id: str | None) -> None:
    """Publish a drain. Called after COMMIT by whoever set the flag; a failure loses
    nothing (the job is in the outbox and the relay publishes it again)."""
    publish(TaskName.DRAIN_WRITES, app=app, trigger_id=trigger_id)
