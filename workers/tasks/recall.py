"""Tasks of the read path. ``memory.recall.*`` run in the process that owns the vector store
(embedded mode: the write worker, which consumes ``recall``); the access bump they publish
runs on ``maintenance``, because it needs PostgreSQL only.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from workers.context import WorkerContext, get_context
from workers.queues import CeleryQueue
from workers.read_service import ReadStores, context_answer, touch_memories
from workers.recall_service import recall
from workers.tasking import memharness_task
from workers.working_memory import WorkingMemoryPool

TOUCH_TASK = "memory.maintenance.touch_memories"

_stores: tuple[int, WorkerContext, ReadStores] | None = None


def read_stores() -> ReadStores:
    """This process's binding of the read path, built on first use after the fork."""
    global _stores
    ctx = get_context()
    if _stores is None or _stores[0] != os.getpid() or _stores[1] is not ctx:
        from workers.adapters.tokenizer import load_token_counter

        settings = ctx.settings
        _stores = (
            os.getpid(),
            ctx,
            ReadStores(
                settings=settings,
                pool=ctx.pool,
                vectors=ctx.vectors,
                embedder=ctx.embedder,
                llm=ctx.llm,
                counter=load_token_counter(settings.tokenizer),
                working_memory=WorkingMemoryPool(
                    ctx.redis,
                    max_turns=settings.working_memory_max_turns,
                    ttl_s=settings.working_memory_ttl_s,
                ),
                collection=ctx.episodic_collection,
            ),
        )
    return _stores[2]


def publish_touch(tenant_id: str, memory_ids: list[str], accessed_at: datetime) -> None:
    from workers.app import app

    app.send_task(
        TOUCH_TASK,
        kwargs={
            "tenant_id": tenant_id,
            "memory_ids": memory_ids,
            "accessed_at": accessed_at.isoformat(),
        },
        queue=CeleryQueue.MAINTENANCE.value,
    )


@memharness_task("memory.recall.search", queue=CeleryQueue.RECALL, ignore_result=False)
def search_task(
    tenant_id: str, query: str, task_id: str | None = None, limit: int = 5
) -> list[dict[str, Any]]:
    return recall(get_context(), tenant_id=tenant_id, query=query, task_id=task_id, limit=limit)


# No retries: an agent waits on this answer, and a retry with backoff would outlast its
# timeout. A transient failure fails the call at once; the agent may ask again.
@memharness_task(
    "memory.recall.context", queue=CeleryQueue.RECALL, ignore_result=False, retry_on=()
)
def context_task(**kwargs: Any) -> dict[str, Any]:
    """The assembled context of one step (``MemoryClient.context``), as JSON."""
    return context_answer(read_stores(), kwargs, publish_touch)


@memharness_task(TOUCH_TASK, queue=CeleryQueue.MAINTENANCE)
def touch_memories_task(tenant_id: str, memory_ids: list[str], accessed_at: str) -> int:
    """Count one access of each memory a context delivered (idempotent for a replay)."""
    return touch_memories(
        get_context().pool, tenant_id, memory_ids, datetime.fromisoformat(accessed_at)
    )
