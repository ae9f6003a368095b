"""The configured partition layout, and ``check_context_call``: ``ContextArgs``
(``pipelines.requests.read``) for callers that hold loose arguments. The checked call and the
JSON it crosses the queue as are ``ContextCall``'s.
"""

from __future__ import annotations

from config import Settings
from pipelines.read.budget import Partition, PartitionLayout, layout_from_budgets
from pipelines.read.tokens import TokenCounter
from pipelines.requests.base import Limits
from pipelines.requests.read import MAX_SOURCE_ITEMS, ContextArgs, ContextCall

__all__ = ["MAX_SOURCE_ITEMS", "ContextCall", "check_context_call", "layout_of"]


def layout_of(settings: Settings) -> PartitionLayout:
    return layout_from_budgets(
        {
            Partition.SYSTEM.value: settings.context_system_tokens,
            Partition.TASK_CONTEXT.value: settings.context_task_tokens,
            Partition.RETRIEVED_MEMORY.value: settings.context_retrieved_tokens,
            Partition.RECENT_INTERACTIONS.value: settings.context_recent_tokens,
            Partition.WORKING_VARIABLES.value: settings.context_variables_tokens,
            Partition.SCRATCH.value: settings.context_scratch_tokens,
        }
    )


def check_context_call(
    *,
    tenant_id: object,
    task_id: object,
    query: object,
    budget_tokens: object,
    phase: object = None,
    focus: object = None,
    session_id: object = None,
    system: object = "",
    task_context: object = None,
    variables: object = None,
    scratch: object = None,
    counter: TokenCounter,
    layout: PartitionLayout,
    content_max_bytes: int,
) -> ContextCall:
    """Every argument of ``MemoryClient.context``, as ``ContextArgs`` checks them once;
    InvalidInput names the field and limit. ``layout`` is the configured one: a budget below
    its total is checked against it scaled (``fit_layout``), down to its floor."""
    limits = Limits(content_max_bytes=content_max_bytes, layout=layout, counter=counter)
    return ContextArgs.parse(
        {
            "tenant_id": tenant_id,
            "task_id": task_id,
            "query": query,
            "budget_tokens": budget_tokens,
            "phase": phase,
            "focus": focus,
            "session_id": session_id,
            "system": system,
            "task_context": task_context,
            "variables": variables,
            "scratch": scratch,
        },
        limits,
    ).call()
