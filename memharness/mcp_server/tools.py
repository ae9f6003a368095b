"""What each MCP tool does, on one :class:`~memharness.MemoryClient` bound to one tenant.

Plain methods with plain arguments that answer pydantic models: the MCP layer (``server``)
gives them their schemas and turns their typed errors into tool errors. Every argument is
checked by the client's own rules, so a bad one raises :class:`InvalidInput` naming the field
and the limit, the same error the Python client and the HTTP API give.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, JsonValue, ValidationError

from pipelines.errors import Conflict, InvalidInput
from pipelines.own.versions import ACTOR_MAX_CHARS
from pipelines.records import MemoryType, TaskPhase, check_id
from pipelines.requests.base import field_path, limit_of
from pipelines.state.models import TaskState

if TYPE_CHECKING:
    from memharness.client import MemoryClient

# The metadata key that keeps an agent's own importance estimate (the write workers score
# every memory themselves; this is the agent's view, kept beside it).
IMPORTANCE_KEY = "importance"


@dataclass(frozen=True)
class Binding:
    """Whom the server acts for: every tool reads and writes this tenant only; ``agent_id``
    is stamped on what it records; ``session_id`` is the session of a remember that names
    none."""

    tenant_id: str
    agent_id: str | None
    session_id: str

    @classmethod
    def of(
        cls, tenant_id: str, agent_id: str | None, session_id: str | None, started_at: datetime
    ) -> Binding:
        """Checked ids; no session: one per server run, ``mcp-<start time UTC>``."""
        tenant = check_id("tenant_id", tenant_id)
        agent = check_id("agent_id", agent_id or None, required=False)
        session = check_id("session_id", session_id or f"mcp-{started_at:%Y%m%dT%H%M%SZ}")
        assert tenant is not None and session is not None
        return cls(tenant, agent, session)


# -- answers ---------------------------------------------------------------------------------


class Receipt(BaseModel):
    memory_id: str
    status: Literal["accepted", "duplicate", "dropped"]
    reason: str


class Hit(BaseModel):
    id: str
    score: float
    task_id: str
    session_id: str
    timestamp: str
    type: str | None
    content: str
    importance: float | None


class RecallAnswer(BaseModel):
    hits: list[Hit]
    # The vector index is known to miss stored memories: the hits hold keyword matches too.
    degraded: bool = False


class PartitionSummary(BaseModel):
    name: str
    budget_tokens: int
    used_tokens: int
    items: int
    compressed: int
    evicted: int


class ContextAnswer(BaseModel):
    task_id: str
    budget_tokens: int
    total_tokens: int
    tokenizer: str
    text: str
    partitions: list[PartitionSummary]
    focus: list[str]
    memory_ids: list[str]
    degraded: bool = False


class CheckpointSaved(BaseModel):
    checkpoint_id: str
    task_id: str


class ResumeAnswer(BaseModel):
    found: bool
    message: str
    task_id: str
    checkpoint_id: str | None = None
    created_at: str | None = None
    elapsed_s: float | None = None
    state: dict[str, JsonValue] | None = None
    needs_verification: bool = False
    verification_reason: str | None = None
    skipped_corrupted: list[str] = Field(default_factory=list)


class ForgetAnswer(BaseModel):
    request_id: str
    target: str
    target_id: str
    memories: int
    status: str
    already: bool


# -- the tools ------------------------------------------------------------------------------


class MemoryTools:
    """The tools' bodies. Blocking calls: the MCP server runs each on a worker thread."""

    def __init__(
        self, memory: MemoryClient, binding: Binding, *, recall_timeout_s: float = 10.0
    ) -> None:
        self.memory = memory
        self.binding = binding
        self.recall_timeout_s = recall_timeout_s

    def remember(
        self,
        content: str,
        task_id: str,
        session_id: str | None = None,
        type: MemoryType | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
    ) -> Receipt:
        """Record one interaction; returns after COMMIT, the workers do the rest."""
        if importance is not None:
            metadata = _with_importance(metadata, importance)
        receipt = self.memory.record(
            content,
            tenant_id=self.binding.tenant_id,
            task_id=task_id,
            session_id=session_id or self.binding.session_id,
            type=type,
            agent_id=self.binding.agent_id,
            metadata=metadata,
        )
        return Receipt(
            memory_id=str(receipt.memory_id), status=receipt.status, reason=receipt.reason
        )

    def recall(self, query: str, task_id: str | None = None, limit: int = 5) -> RecallAnswer:
        from pipelines.requests.read import RecallArgs

        args = RecallArgs.parse(
            {
                "query": query,
                "tenant_id": self.binding.tenant_id,
                "task_id": task_id,
                "limit": limit,
            },
            self.memory.write_limits,
        )
        hits = self.memory.run_recall(args, timeout_s=self.recall_timeout_s)
        return RecallAnswer(
            hits=[Hit.model_validate(hit) for hit in hits],
            degraded=getattr(hits, "degraded", False),
        )

    def get_context(
        self,
        task_id: str,
        query: str,
        budget_tokens: int,
        phase: TaskPhase | str | None = None,
        focus: str | Sequence[str] | None = None,
    ) -> ContextAnswer:
        from pipelines.read.budget import Partition

        context = self.memory.context(
            task_id, query, budget_tokens, phase, focus, tenant_id=self.binding.tenant_id
        )
        partitions = [
            PartitionSummary(
                name=p.name.value,
                budget_tokens=p.budget_tokens,
                used_tokens=p.used_tokens,
                items=len(p.items),
                compressed=len(p.compressed_ids),
                evicted=len(p.evicted_ids),
            )
            for p in context.partitions
        ]
        retrieved = next(
            (p for p in context.partitions if p.name is Partition.RETRIEVED_MEMORY), None
        )
        return ContextAnswer(
            task_id=context.task_id,
            budget_tokens=context.budget_tokens,
            total_tokens=context.total_tokens,
            tokenizer=context.tokenizer,
            text=context.text,
            partitions=partitions,
            focus=[ranked.kind.value for ranked in context.focus.kinds],
            memory_ids=[item.id for item in retrieved.items] if retrieved else [],
            degraded=context.degraded,
        )

    def checkpoint(
        self,
        task_id: str,
        state: TaskState | Mapping[str, Any],
        phase_transition: bool = False,
    ) -> CheckpointSaved:
        task_state = parse_state(state)
        checkpoint_id = self.memory.checkpoint(
            self.binding.tenant_id, task_id, task_state, phase_transition=phase_transition
        )
        return CheckpointSaved(checkpoint_id=str(checkpoint_id), task_id=task_id)

    def resume(self, task_id: str) -> ResumeAnswer:
        from workers.state.service import NoUsableCheckpoint

        check_id("task_id", task_id)
        try:
            result = self.memory.resume(self.binding.tenant_id, task_id)
        except NoUsableCheckpoint as exc:
            raise Conflict(
                "task_id", f"every saved checkpoint of this task fails its checks ({exc})"
            ) from None
        if result is None:
            return ResumeAnswer(
                found=False,
                message=f"no checkpoint saved for task {task_id!r}: start it from the beginning",
                task_id=task_id,
            )
        state = result.state.model_dump(mode="json")
        # Kept out of the structural dump by the model; the agent needs it back to continue,
        # and passing this object to checkpoint as it is saves it again.
        state["working_memory"] = result.working_memory.model_dump(mode="json")
        checkpoint = result.checkpoint
        skipped = [str(fallback.checkpoint_id) for fallback in result.fell_back_from]
        message = f"resumed from checkpoint {checkpoint.checkpoint_id}"
        if skipped:
            message += f" after skipping {len(skipped)} corrupted newer checkpoint(s)"
        if result.calibration.needs_verification:
            message += "; verify the pending actions first (verification nodes were inserted)"
        return ResumeAnswer(
            found=True,
            message=message,
            task_id=task_id,
            checkpoint_id=str(checkpoint.checkpoint_id),
            created_at=checkpoint.created_at.isoformat(),
            elapsed_s=round(result.elapsed_s, 3),
            state=state,
            needs_verification=result.calibration.needs_verification,
            verification_reason=result.calibration.reason,
            skipped_corrupted=skipped,
        )

    def forget(self, memory_id: str, reason: str) -> ForgetAnswer:
        """Erase one memory; returns once its rows are tombstones, the workers do the rest."""
        receipt = self.memory.forget(
            tenant_id=self.binding.tenant_id,
            reason=reason,
            memory_id=memory_id,
            actor=self.actor,
        )
        return ForgetAnswer(
            request_id=str(receipt.request_id),
            target=str(receipt.target),
            target_id=receipt.target_id,
            memories=receipt.memories,
            status=receipt.status,
            already=receipt.already,
        )

    @property
    def actor(self) -> str:
        """Who the audit log names for this server's erasures."""
        agent = self.binding.agent_id
        return f"mcp:{agent}"[:ACTOR_MAX_CHARS] if agent else "mcp"


def parse_state(state: object) -> TaskState:
    """A ``TaskState`` from itself or its JSON object; InvalidInput names the first bad field
    (``state.tree[2].parent_id``)."""
    if isinstance(state, TaskState):
        return state
    if not isinstance(state, Mapping):
        raise InvalidInput("state", f"must be a TaskState JSON object, got {type(state).__name__}")
    try:
        return TaskState.model_validate(dict(state))
    except ValidationError as exc:
        raise invalid_from_validation(exc, prefix="state") from None


def invalid_from_validation(exc: ValidationError, *, prefix: str = "") -> InvalidInput:
    """The first error of a pydantic validation as :class:`InvalidInput`: its location is the
    field (``state.tree[0].id``), its message the message, a bound of the rule the limit."""
    # A default computed from other fields is not computed when they fail: not an error of
    # its own, only an echo of theirs.
    errors = [
        error
        for error in exc.errors(include_url=False)
        if error["type"] != "default_factory_not_called"
    ] or exc.errors(include_url=False)
    first = errors[0]
    # the Python client's and the HTTP API's way: items[3].content
    field = field_path(tuple(first["loc"]), prefix) or "arguments"
    kind = first["type"]
    if kind == "missing":
        message = "is required"
    elif kind == "extra_forbidden":
        message = "is not a known field"
    else:
        message = str(first["msg"]).removeprefix("Value error, ")
    more = len(errors) - 1
    if more:
        message += f" (and {more} more error{'s' if more > 1 else ''})"
    return InvalidInput(field, message, limit_of(first.get("ctx")))


def _with_importance(metadata: Mapping[str, Any] | None, importance: object) -> Any:
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise InvalidInput("importance", f"must be a number, got {type(importance).__name__}")
    if not math.isfinite(importance) or not 0.0 <= importance <= 1.0:
        raise InvalidInput(
            "importance", f"must be between 0 and 1, got {importance}", limit="0.0-1.0"
        )
    if metadata is None:
        return {IMPORTANCE_KEY: float(importance)}
    if not isinstance(metadata, Mapping):
        return metadata  # the client's check names metadata and says what it must be
    return {**metadata, IMPORTANCE_KEY: float(importance)}
