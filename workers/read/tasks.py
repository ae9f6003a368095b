"""Tasks of the read path. ``memory.recall.*`` run in the process that owns the vector store
(embedded mode: the write worker, which consumes ``recall``); the access bump they publish
runs on ``maintenance``, because it needs PostgreSQL only.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from workers.clients import get_clients
from workers.queues import TaskName
from workers.read.context import context_answer
from workers.read.search import search_answer
from workers.read.slot import after_reply
from workers.read.touch import publish_touch, touch_memories
from workers.tasking import memharness_task


# A read's caller waits for its answer only: a STARTED state stored before it would cost the
# owner a Redis round trip and wake the caller once for nothing.
@memharness_task(TaskName.RECALL_SEARCH, ignore_result=False, track_started=False)
def search_task(
    tenant_id: str,
    query: str,
    task_id: str | None = None,
    limit: int = 5,
    fallback: bool = True,
) -> dict[str, Any]:
    """``{"hits": [...], "degraded": bool}`` (``workers.read.search.search_answer``)."""
    return search_answer(
        get_clients(),
        tenant_id=tenant_id,
        query=query,
        task_id=task_id,
        limit=limit,
        fallback=fallback,
    )


# No retries: an agent waits on this answer, and a retry with backoff would outlast its
# timeout. A transient failure fails the call at once; the agent may ask again.
@memharness_task(TaskName.RECALL_CONTEXT, ignore_result=False, retry_on=(), track_started=False)
def context_task(**kwargs: Any) -> dict[str, Any]:
    """The assembled context of one step (``MemoryClient.context``), as JSON. The access bump
    it publishes waits until the answer is on its way (``after_reply``)."""

    def touch_later(tenant_id: str, memory_ids: list[str], accessed_at: datetime) -> None:
        after_reply(lambda: publish_touch(tenant_id, memory_ids, accessed_at))

    picked = time.time()
    answer = context_answer(get_clients(), kwargs, touch_later)
    # Wall-clock stamps for the caller's stage trace (workers.read.ask.last_trace).
    answer["trace"] = {"picked": picked, "answered": time.time()}
    return answer


@memharness_task(TaskName.TOUCH_MEMORIES)
def touch_memories_task(tenant_id: str, memory_ids: list[str], accessed_at: str) -> int:
    """Count one access of each memory a context delivered (idempotent for a replay)."""
    return touch_memories(
        get_clients().pool, tenant_id, memory_ids, datetime.fromisoformat(accessed_at)
    )
