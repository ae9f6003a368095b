"""Tasks of operations: the golden-query run (``quality``) and the index count the store's
owner answers (``recall``: in embedded mode only it may open the store).

Importing this module (the worker does, with every task module) also connects the signals
that give a worker its metrics endpoint (``workers.health.endpoint``).
"""

from __future__ import annotations

from typing import Any

import workers.health.endpoint  # noqa: F401  (the worker's /metrics: connects its signals)
from workers.clients import get_clients
from workers.health.golden import count_points, run_golden_queries
from workers.queues import TaskName
from workers.tasking import memharness_task


@memharness_task(TaskName.GOLDEN_QUERIES, ignore_result=False)
def golden_queries_task(tenant_id: str | None = None) -> dict[str, Any]:
    """Every tenant's golden queries (or one tenant's) through the owner's recall; one
    ``golden_runs`` row per tenant. A replay is another measurement, harmless."""
    return run_golden_queries(get_clients(), tenant_id)


# No retries: the caller waits on the answer and asks again on the next run.
@memharness_task(TaskName.INDEX_COUNTS, ignore_result=False, retry_on=())
def index_counts_task() -> dict[str, int]:
    """Points per collection kind in this process's index (the store's owner)."""
    return count_points(get_clients())
