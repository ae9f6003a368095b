"""The context request: what ``MemoryClient.context`` was asked, checked where the call is
made. ``InvalidInput`` names the field and the limit.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from pipelines.errors import InvalidInput
from pipelines.read.budget import (
    DEFAULT_LAYOUT,
    PartitionLayout,
    check_context_budget,
)
from pipelines.read.focus import (
    InfoKind,
    check_focus,
    check_phase,
)
from pipelines.read.tokens import (
    TokenCounter,
)
from pipelines.records import TaskPhase, check_id, check_text

# A query is a question for one step, not a document: 16 KiB of UTF-8 and 4,000 tokens.
QUERY_MAX_BYTES = 16_384
QUERY_MAX_TOKENS = 4_000


class ContextRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_id: str
    query: str
    budget_tokens: int
    phase: TaskPhase | None = None
    focus: str | tuple[InfoKind, ...] | None = None


def check_context_request(
    task_id: object,
    query: object,
    budget_tokens: object,
    phase: object = None,
    focus: object = None,
    *,
    counter: TokenCounter,
    layout: PartitionLayout = DEFAULT_LAYOUT,
) -> ContextRequest:
    """Validate ``MemoryClient.context``'s arguments; InvalidInput names the field and limit."""
    task = check_id("task_id", task_id)
    assert task is not None
    text = check_text("query", query, QUERY_MAX_BYTES)
    tokens = counter.count(text)
    if tokens > QUERY_MAX_TOKENS:
        raise InvalidInput(
            "query",
            f"is {tokens} tokens; a query is at most {QUERY_MAX_TOKENS} tokens",
            limit=f"{QUERY_MAX_TOKENS} tokens",
        )
    # Below the layout's own total the partitions scale down to the budget (fit_layout).
    budget = check_context_budget(budget_tokens, layout)
    return ContextRequest(
        task_id=task,
        query=" ".join(text.split()),
        budget_tokens=budget,
        phase=check_phase(phase),
        focus=check_focus(focus),
    )
