"""The JSON bodies of the API. Each body takes its JSON schema from its operation's request
model (``pipelines.requests``: ``typed_as``), so the OpenAPI gives every value a type; the
value itself is checked once, where it is parsed into that ``*Args`` (by the route or the
client), so a bad one is the ``InvalidInput`` the Python client raises. No body
carries a tenant that matters: the key names it, and a ``tenant_id`` naming another tenant is
refused (403)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipelines.requests.base import Args
from pipelines.requests.own import CorrectArgs, ForgetArgs, UndoArgs
from pipelines.requests.read import AffectedByArgs, ContextArgs, KnowledgeArgs, RecallArgs
from pipelines.requests.tasks import GoldenArgs
from pipelines.requests.write import RecordArgs


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``#/$defs/...`` reference replaced by its definition, so that a
    request model's field schema stands alone in the OpenAPI document."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return walk({**defs[ref.removeprefix("#/$defs/")], **rest})
            return {key: walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return dict(walk(schema))


def typed_as(args: type[Args], **renamed: str) -> ConfigDict:
    """A body's config: unknown fields refused, and each field's schema the request model's
    (``renamed``: body name -> request name), keeping the body's description and default."""

    def extra(schema: dict[str, Any]) -> None:
        source = inline_refs(args.model_json_schema())["properties"]
        for name, prop in schema.get("properties", {}).items():
            typed = source.get(renamed.get(name, name))
            if typed is None or name == "tenant_id":  # optional here: the key names it
                continue
            keep = {k: prop[k] for k in ("description", "default") if k in prop}
            prop.clear()
            prop.update({k: v for k, v in typed.items() if k != "title"}, **keep)

    return ConfigDict(extra="forbid", json_schema_extra=extra)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant_id: str | None = Field(
        None, description="Optional; if given it must be the API key's own tenant."
    )


class NewMemoryBody(Body):
    model_config = typed_as(RecordArgs)

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
    model_config = typed_as(RecordArgs)

    idempotency_key: Any = Field(None, description="Unique within the tenant, like the header.")


class BatchBody(Body):
    items: list[BatchItem] = Field(description="The memories; all are checked before any is.")


class RecallBody(Body):
    model_config = typed_as(RecallArgs)

    query: Any = Field(description="What to look for.")
    task_id: Any = Field(None, description="Only this task's memories.")
    limit: int = Field(5, description="At most this many hits (1-100).")


class ContextBody(Body):
    model_config = typed_as(ContextArgs)

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
    model_config = typed_as(AffectedByArgs)

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
    model_config = typed_as(CorrectArgs, content="new_content")

    content: Any = Field(description="What the memory says now (at most content_max_bytes).")
    reason: Any = Field(description="Why it changed; kept in the memory's history.")
    type: Any = Field(None, description="The new version's type; omitted: the old one's.")
    metadata: Any = Field(None, description="The new version's metadata; omitted: the old.")


class UndoBody(Body):
    model_config = typed_as(UndoArgs)

    reason: Any = Field(description="Why the supersession was wrong; kept in the history.")


class ForgetBody(Body):
    model_config = typed_as(ForgetArgs)

    reason: Any = Field(description="Why; the audit log keeps it (never the content).")
    memory_id: Any = Field(None, description="One memory, every version of it.")
    task_id: Any = Field(None, description="Every memory of a task.")
    session_id: Any = Field(None, description="Every memory of a session.")
    whole_tenant: bool = Field(
        False, description="Every memory of the key's tenant (needs the admin scope)."
    )


class KnowledgeBody(Body):
    model_config = typed_as(KnowledgeArgs)

    kind: Any = Field(None, description="preference, pattern, mistake, convention, owner, stack.")
    query: Any = Field(None, description="Keep the items saying some of it, most first.")
    limit: Any = Field(50, description="At most this many items (1-500).")


class ExplainBody(Body):
    context: dict[str, Any] = Field(description="An assembled context, as /v1/context gave it.")


class GoldenQueriesBody(Body):
    model_config = typed_as(GoldenArgs)

    queries: list[Any] = Field(
        description='Each {"query": ..., "expected_id": ...}: a question and the memory it '
        "must find in the top K. Replaces the tenant's earlier ones."
    )
