"""Tasks of the ``recall`` queue: searches answered by the process that owns the store."""

from __future__ import annotations

from typing import Any

from workers.context import get_context
from workers.queues import CeleryQueue
from workers.recall_service import recall
from workers.tasking import memharness_task


@memharness_task("memory.recall.search", queue=CeleryQueue.RECALL, ignore_result=False)
def search_task(
    tenant_id: str, query: str, task_id: str | None = None, limit: int = 5
) -> list[dict[str, Any]]:
    return recall(get_context(), tenant_id=tenant_id, query=query, task_id=task_id, limit=limit)
