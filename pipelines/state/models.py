"""Task checkpoints, the records: where an agent is in its task.

Memory says what happened; a checkpoint says where the agent is: the task tree, the current
node, the variables, the last tool calls, the pending actions, the token usage and the
working memory. The binary format is ``pipelines.state.codec``; older layouts are lifted by
``pipelines.state.migrations``; when to save is ``pipelines.state.policy``; how to resume is
``pipelines.state.calibration``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    field_validator,
    model_validator,
)

from pipelines.records import ID_NAMESPACE

ID_MAX_CHARS = 128
# The most checkpoints one listing returns: far above any keep_last a deployment sets.
CHECKPOINT_LIST_MAX = 10_000
# Checkpoint records refuse fields they do not know: a layout this code cannot read fails
# loudly (and a migration lifts it) instead of losing what it held. Non-finite numbers are
# refused too: JSON has none, so an infinite ``duration_ms`` (or a NaN in a tool's result)
# used to be saved as null, and the state resumed was not the state saved.
STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class NodeStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    BLOCKED = "blocked"


class NodeKind(StrEnum):
    STEP = "step"
    # Inserted by a resume's calibration: check the outside world before a pending action.
    VERIFICATION = "verification"


class TaskNode(BaseModel):
    """One node of the task tree. The tree is a list in execution order (pre-order), each
    node naming its parent, which must come earlier in the list. A blocked node says why;
    only a blocked node has a ``blocked_reason`` (checked by ``TaskState``, once per tree:
    a per-node validator costs a third of the restore time of a 100-node tree)."""

    model_config = STRICT

    id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    title: str
    status: NodeStatus = NodeStatus.PENDING
    parent_id: str | None = Field(None, min_length=1, max_length=ID_MAX_CHARS)
    kind: NodeKind = NodeKind.STEP
    blocked_reason: str | None = None
    note: str | None = None


class ToolCall(BaseModel):
    model_config = STRICT

    call_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    tool: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    result: JsonValue = None
    error: str | None = None
    started_at: datetime | None = None
    duration_ms: float | None = Field(None, ge=0)

    @field_validator("started_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _as_utc(value)


class ActionEffect(StrEnum):
    # Stays inside the agent's own process or sandbox: repeating it is harmless.
    LOCAL = "local"
    # Observes the outside world: its answer may be stale after a long interruption.
    EXTERNAL_READ = "external_read"
    # Changes the outside world (sends, deploys, pays): it may already have happened.
    EXTERNAL_WRITE = "external_write"


class PendingAction(BaseModel):
    """An action the agent decided on but had not finished when the checkpoint was taken."""

    model_config = STRICT

    action_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    node_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    tool: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    effect: ActionEffect = ActionEffect.LOCAL
    estimated_tokens: int = Field(0, ge=0)


class TokenUsage(BaseModel):
    model_config = STRICT

    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    budget_tokens: int | None = Field(None, ge=1)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class WorkingItem(BaseModel):
    """One entry of the agent's context window as it was at the checkpoint."""

    model_config = STRICT

    role: str = Field(min_length=1)
    content: str
    memory_id: uuid.UUID | None = None
    tokens: int = Field(0, ge=0)


class WorkingMemory(BaseModel):
    model_config = STRICT

    items: tuple[WorkingItem, ...] = ()
    budget_tokens: int | None = Field(None, ge=1)


def _done_ids(data: dict[str, Any]) -> tuple[str, ...]:
    return tuple(node.id for node in data.get("tree", ()) if node.status is NodeStatus.DONE)


def _blocked_ids(data: dict[str, Any]) -> tuple[str, ...]:
    return tuple(node.id for node in data.get("tree", ()) if node.status is NodeStatus.BLOCKED)


class TaskState(BaseModel):
    """What the agent is doing: everything a resume needs, without identity or time.

    ``completed_node_ids`` and ``blocked_node_ids`` are derived from the tree when omitted
    and checked against it when given, so a stored checkpoint cannot contradict itself.
    ``working_memory`` is kept out of the structural JSON: the format stores it compressed.
    """

    model_config = STRICT

    phase: str | None = None
    tree: tuple[TaskNode, ...] = ()
    current_node_id: str | None = None
    completed_node_ids: tuple[str, ...] = Field(default_factory=_done_ids)
    blocked_node_ids: tuple[str, ...] = Field(default_factory=_blocked_ids)
    variables: dict[str, JsonValue] = Field(default_factory=dict)
    last_tool_calls: tuple[ToolCall, ...] = ()
    pending_actions: tuple[PendingAction, ...] = ()
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    iteration: int = Field(0, ge=0)
    working_memory: WorkingMemory = Field(default_factory=WorkingMemory, exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> TaskState:
        # One pass over the tree: this runs on every restore.
        seen: set[str] = set()
        done: list[str] = []
        blocked: list[str] = []
        for index, node in enumerate(self.tree):
            if node.id in seen:
                raise ValueError(f"tree.{index}: node id {node.id!r} appears twice")
            if node.parent_id is not None and node.parent_id not in seen:
                raise ValueError(
                    f"tree.{index}: parent {node.parent_id!r} of {node.id!r} does not come "
                    "before it (the tree is a pre-order list)"
                )
            if node.status is NodeStatus.BLOCKED:
                if not (node.blocked_reason or "").strip():
                    raise ValueError(
                        f"tree.{index}: node {node.id!r} is blocked but does not say why"
                    )
                blocked.append(node.id)
            elif node.blocked_reason is not None:
                raise ValueError(
                    f"tree.{index}: node {node.id!r} has a blocked_reason but is "
                    f"{node.status.value}"
                )
            elif node.status is NodeStatus.DONE:
                done.append(node.id)
            seen.add(node.id)
        if self.current_node_id is not None and self.current_node_id not in seen:
            raise ValueError(f"current_node_id {self.current_node_id!r} is not in the tree")
        if self.completed_node_ids != tuple(done):
            raise ValueError("completed_node_ids disagree with the done nodes of the tree")
        if self.blocked_node_ids != tuple(blocked):
            raise ValueError("blocked_node_ids disagree with the blocked nodes of the tree")
        actions: set[str] = set()
        for index, action in enumerate(self.pending_actions):
            if action.action_id in actions:
                raise ValueError(f"pending_actions.{index}: id {action.action_id!r} repeats")
            if action.node_id not in seen:
                raise ValueError(
                    f"pending_actions.{index}: node {action.node_id!r} is not in the tree"
                )
            actions.add(action.action_id)
        return self

    def node(self, node_id: str) -> TaskNode:
        for node in self.tree:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def with_changes(self, **changes: Any) -> TaskState:
        """A validated copy; the derived id lists follow the new tree."""
        fields = {name: getattr(self, name) for name in TaskState.model_fields}
        fields.pop("completed_node_ids")
        fields.pop("blocked_node_ids")
        fields.update(changes)
        return TaskState(**fields)

    def with_node_status(
        self, node_id: str, status: NodeStatus, *, blocked_reason: str | None = None
    ) -> TaskState:
        self.node(node_id)  # a KeyError names an unknown node before anything changes
        tree = tuple(
            TaskNode(**{**dict(node), "status": status, "blocked_reason": blocked_reason})
            if node.id == node_id
            else node
            for node in self.tree
        )
        return self.with_changes(tree=tree)


class TaskCheckpoint(BaseModel):
    """A sealed ``TaskState`` with its identity: who, which task, when, and its parent."""

    model_config = STRICT

    checkpoint_id: uuid.UUID
    tenant_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    task_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    created_at: datetime
    parent_id: uuid.UUID | None = None
    state: TaskState

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return _as_utc(value)


def _as_utc(value: datetime) -> datetime:
    # One representation of an instant, so a decoded checkpoint equals the saved one.
    if value.utcoffset() is None:
        raise ValueError("must be timezone-aware")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01 in a zone east of UTC has no UTC equivalent
        raise ValueError("is outside the range of UTC datetimes") from None


def checkpoint_id_for(
    tenant_id: str, task_id: str, parent_id: uuid.UUID | None, content_digest: str
) -> uuid.UUID:
    """The id of saving ``content_digest`` on top of ``parent_id``: a retried save of the
    same state gets the id of its first attempt instead of a second row."""
    parent = str(parent_id) if parent_id else "-"
    return uuid.uuid5(
        ID_NAMESPACE, f"checkpoint\x1f{tenant_id}\x1f{task_id}\x1f{parent}\x1f{content_digest}"
    )
