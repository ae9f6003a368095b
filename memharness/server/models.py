"""The JSON bodies of the API. Fields the client's own checks cover are typed loosely
(``Any``) on purpose: ``prepare_write`` and ``check_context_call`` then refuse a bad value with
exactly the ``InvalidInput`` the Python client raises, so both say the same thing. No body
carries a tenant that matters: the key names it, and a ``tenant_id`` naming another tenant is
refused (403)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant_id: str | None = Field(
        None, description="Optional; if given it must be the API key's own tenant."
    )


class NewMemoryBody(Body):
    content: Any = Field(description="The interaction, as text (at most content_max_bytes).")
    task_id: Any = Field(description="The task this interaction belongs to.")
    session_id: Any = Field(description="The session (conversation) of the interaction.")
    type: Any = Field(
        None,
        description="decision, action, observation, feedback, status_change or preference; "
        "omitted: the workers decide.",
    )
    user_id: Any = None
    agent_id: Any = Field(None, description="Defaults to the agent the key is bound to.")
    timestamp: datetime | None = Field(None, description="ISO 8601 with a zone; default now.")
    modality: Any = Field("text", description="text or code.")
    metadata: Any = Field(None, description="A JSON object (size and depth limited).")


class BatchItem(NewMemoryBody):
    idempotency_key: Any = Field(None, description="Unique within the tenant, like the header.")


class BatchBody(Body):
    items: list[BatchItem] = Field(description="The memories; all are checked before any is.")


class RecallBody(Body):
    query: Any = Field(description="What to look for.")
    task_id: Any = Field(None, description="Only this task's memories.")
    limit: int = Field(5, description="At most this many hits (1-100).")


class ContextBody(Body):
    task_id: Any
    query: Any
    budget_tokens: Any = Field(description="The token budget of the whole context.")
    phase: Any = None
    focus: Any = None
    session_id: Any = None
    system: Any = ""
    task_context: Any = None
    variables: Any = None
    scratch: Any = None


class AffectedBody(Body):
    query: Any
    max_hops: int = Field(3, description="1-10 hops along causal links.")


class CheckpointBody(Body):
    state: dict[str, Any] = Field(description="A TaskState as JSON (working_memory included).")
    phase_transition: bool = Field(False, description="Kept by retention however old.")


class ReceiptOut(BaseModel):
    memory_id: str
    status: str
    reason: str


class ReceiptsOut(BaseModel):
    receipts: list[ReceiptOut] = Field(description="One per item, in the items' order.")


class ErrorOut(BaseModel):
    error: str
    field: str | None
    message: str
    limit: str | None = None


class CorrectBody(Body):
    content: Any = Field(description="What the memory says now (at most content_max_bytes).")
    reason: Any = Field(description="Why it changed; kept in the memory's history.")
    type: Any = Field(None, description="The new version's type; omitted: the old one's.")
    metadata: Any = Field(None, description="The new version's metadata; omitted: the old.")


class UndoBody(Body):
    reason: Any = Field(description="Why the supersession was wrong; kept in the history.")


class ForgetBody(Body):
    reason: Any = Field(description="Why; the audit log keeps it (never the content).")
    memory_id: Any = Field(None, description="One memory, every version of it.")
    task_id: Any = Field(None, description="Every memory of a task.")
    session_id: Any = Field(None, description="Every memory of a session.")
    whole_tenant: bool = Field(
        False, description="Every memory of the key's tenant (needs the admin scope)."
    )


class KnowledgeBody(Body):
    kind: Any = Field(None, description="preference, pattern, mistake, convention, owner, stack.")
    query: Any = Field(None, description="Keep the items saying some of it, most first.")
    limit: Any = Field(50, description="At most this many items (1-500).")


class ExplainBody(Body):
    context: dict[str, Any] = Field(description="An assembled context, as /v1/context gave it.")


class GoldenQueriesBody(Body):
    queries: list[Any] = Field(
        description='Each {"query": ..., "expected_id": ...}: a question and the memory it '
        "must find in the top K. Replaces the tenant's earlier ones."
    )
