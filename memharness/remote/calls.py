"""Every method of the remote clients as a :class:`Call`: the one HTTP request it sends and
how the answer reads back into the types ``MemoryClient`` returns.

This module does no I/O. The sync and async clients are thin drivers that send a call's
request and hand the response to :func:`settle`, so the mapping of arguments, answers and
refusals has one owner for both (httpx and redis-py split their clients the same way).
Checking is the server's: it runs the same request models and checks as the local client
(``prepare_write``, ``check_context_call`` ...), so a bad field comes back as a 422 naming
it and becomes the same :class:`InvalidInput`. Only what JSON cannot carry is refused here,
before anything is sent (undecodable bytes, a value that is not JSON).
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from memharness.remote.errors import AuthError, error_from
from pipelines.errors import CheckpointFormatError, InvalidInput
from pipelines.records import MemoryType, Modality, check_id
from workers.write.plan import WriteReceipt

if TYPE_CHECKING:
    import httpx

    from pipelines.own.history import MemoryHistory, TraceItem
    from pipelines.own.listing import MemoryPage, SemanticPage
    from pipelines.read.assemble import AssembledContext
    from pipelines.read.recall import KnowledgeView
    from pipelines.records import EpisodicMemory
    from pipelines.state.models import TaskState
    from workers.own.correct import CorrectionReceipt, UndoReceipt
    from workers.own.forget import ForgetReceipt
    from workers.read.affected import Traversal
    from workers.state.service import ResumeResult

T = TypeVar("T")
Json = dict[str, Any]

# Recall and context wait for the store's owner on the server (its own timeout answers
# 504); the HTTP read waits this much longer, so the server's answer arrives first.
SERVER_ANSWER_MARGIN_S = 5.0


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how its answer reads. ``answers`` are statuses that are results,
    not errors (``get`` of an unknown id is None); ``refusals`` are statuses with an
    exception of the method's own (a rollback's 404 is ``CheckpointNotFound``)."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: bytes | None = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    answers: Mapping[int, Callable[[Json], T]] = field(default_factory=dict)
    refusals: Mapping[int, Callable[[Json], Exception]] = field(default_factory=dict)
    timeout_s: float | None = None
    # A read's route takes the key's tenant and no body: the tenant the caller named is
    # checked against the key's by the driver before sending (a body's is the server's).
    tenant: str | None = None


def _jsonable(value: object) -> object:
    """``json.dumps``' ``default``: the Python values the local client accepts."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode(payload: Mapping[str, Any], field_name: str = "body") -> bytes:
    """The request body as strict JSON (the server refuses NaN, as PostgreSQL would)."""
    try:
        return json.dumps(
            payload, default=_jsonable, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field_name, f"is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput(field_name, "nests deeper than JSON can follow") from None


def text_of(field_name: str, value: object) -> object:
    """UTF-8 bytes as text (JSON carries no bytes); anything else goes as it is, for the
    server to check. The message is ``check_text``'s."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                field_name, f"is not valid UTF-8 (bad byte at offset {exc.start})"
            ) from None
    return value


def segment(value: object) -> str:
    """One path segment: an id with ``/`` or ``?`` in it stays one segment."""
    return quote(str(value), safe="")


def task_path(task_id: object) -> str:
    """A task id in a path (``/`` allowed: the task routes take the rest of the path),
    checked here because an empty or malformed one would name another route."""
    checked = check_id("task_id", task_id)
    return quote(str(checked), safe="/")


def other_tenant() -> AuthError:
    """What the server answers a body naming another tenant than the key's."""
    return AuthError(403, "tenant_id", "a key acts for its own tenant only")


def _model(cls: type[BaseModel]) -> Callable[[Any], Any]:
    return cls.model_validate


def _receipt(data: Json) -> WriteReceipt:
    return WriteReceipt(uuid.UUID(data["memory_id"]), data["status"], data["reason"])


def _none(_: object) -> None:
    return None


def settle(call: Call[T], status: int, payload: Any, headers: Mapping[str, str]) -> T:
    """The call's result for an answer of ``status`` with the decoded JSON ``payload``, or
    the exception the local client would raise."""
    if 200 <= status < 300:
        return call.parse(payload)
    error = payload if isinstance(payload, dict) else {"message": str(payload)[:200]}
    if status in call.answers:
        return call.answers[status](error)
    if status in call.refusals:
        raise call.refusals[status](error)
    raise error_from(status, error, headers)


def payload_of(response: httpx.Response) -> Any:
    """The JSON of an answer; a proxy's HTML error page reads as its text."""
    try:
        return response.json()
    except ValueError:
        return {"error": "http_error", "message": response.text[:200]}


# -- the write path ---------------------------------------------------------------------------


def record(
    content: str | bytes,
    *,
    tenant_id: str,
    task_id: str,
    session_id: str,
    type: MemoryType | str | None = None,
    user_id: str | None = None,
    agent_id: str | None = None,
    timestamp: datetime | None = None,
    modality: Modality | str = Modality.TEXT,
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Call[WriteReceipt]:
    fields = {
        "content": text_of("content", content),
        "tenant_id": tenant_id,
        "task_id": task_id,
        "session_id": session_id,
        "type": type,
        "user_id": user_id,
        "agent_id": agent_id,
        "timestamp": timestamp,
        "modality": modality,
    }
    if metadata is not None:
        fields["metadata"] = json.loads(encode({"m": metadata}, "metadata"))["m"]
    headers: dict[str, str] = {}
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key.isascii():
            raise InvalidInput("idempotency_key", "must be ASCII text (it travels as a header)")
        headers["Idempotency-Key"] = idempotency_key
    return Call("POST", "/v1/memories", _receipt, encode(fields), headers=headers)


def record_many(items: Iterable[Mapping[str, Any]]) -> Call[list[WriteReceipt]]:
    batch: list[Json] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidInput(
                f"items[{index}]",
                f"must be an object of record()'s fields, got {type(item).__name__}",
            )
        fields = dict(item)
        if "content" in fields:
            fields["content"] = text_of(f"items[{index}].content", fields["content"])
        batch.append(fields)

    def parse(data: Json) -> list[WriteReceipt]:
        return [_receipt(receipt) for receipt in data["receipts"]]

    return Call("POST", "/v1/memories:batch", parse, encode({"items": batch}))


# -- links and task lifecycle -------------------------------------------------------------------


def affected_by(query: str, *, tenant_id: str, max_hops: int = 3) -> Call[Traversal]:
    from workers.read.affected import Traversal

    body = encode({"query": text_of("query", query), "tenant_id": tenant_id, "max_hops": max_hops})
    return Call("POST", "/v1/affected-by", _model(Traversal), body)


def complete_task(tenant_id: str, task_id: str) -> Call[None]:
    path = f"/v1/tasks/{task_path(task_id)}/complete"
    return Call("POST", path, _none, encode({"tenant_id": tenant_id}))


def set_golden_queries(tenant_id: str, queries: Sequence[object]) -> Call[int]:
    items = [list(q) if isinstance(q, tuple) else q for q in queries]
    body = encode({"tenant_id": tenant_id, "queries": items}, "queries")

    def parse(data: Json) -> int:
        return int(data["count"])

    return Call("PUT", "/v1/golden-queries", parse, body)


# -- task checkpoints -------------------------------------------------------------------------


def checkpoint(
    tenant_id: str, task_id: str, state: TaskState, *, phase_transition: bool = False
) -> Call[uuid.UUID]:
    data = state.model_dump(mode="json")
    # The state's own JSON leaves working memory out (the format stores it compressed).
    data["working_memory"] = state.working_memory.model_dump(mode="json")
    body = encode({"tenant_id": tenant_id, "state": data, "phase_transition": phase_transition})
    return Call("POST", f"/v1/tasks/{task_path(task_id)}/checkpoints", _checkpoint_id, body)


def _checkpoint_id(data: Json) -> uuid.UUID:
    return uuid.UUID(data["checkpoint_id"])


def resume(tenant_id: str, task_id: str) -> Call[ResumeResult | None]:
    from workers.state.service import NoUsableCheckpoint

    path = f"/v1/tasks/{task_path(task_id)}/resume"

    def unusable(_: Json) -> Exception:
        return NoUsableCheckpoint(tenant_id, task_id, ())

    return Call(
        "POST",
        path,
        _resume_result,
        encode({"tenant_id": tenant_id}),
        answers={404: _none},
        refusals={409: unusable},
    )


def _resume_result(data: Json) -> ResumeResult:
    from pipelines.state.calibration import ResumeCalibration
    from pipelines.state.models import TaskCheckpoint
    from workers.state.service import Fallback, ResumeResult

    return ResumeResult(
        # JSON mode: the checkpoint models are strict about types only in Python mode.
        checkpoint=TaskCheckpoint.model_validate_json(json.dumps(data["checkpoint"])),
        resumed=TaskCheckpoint.model_validate_json(json.dumps(data["resumed"])),
        fell_back_from=tuple(
            Fallback(uuid.UUID(f["checkpoint_id"]), f["reason"]) for f in data["fell_back_from"]
        ),
        calibration=ResumeCalibration.model_validate(data["calibration"]),
        calibrated_by=data["calibrated_by"],
        elapsed_s=float(data["elapsed_s"]),
    )


def rollback(tenant_id: str, task_id: str, checkpoint_id: uuid.UUID | str) -> Call[uuid.UUID]:
    from workers.state.service import CheckpointNotFound

    path = f"/v1/tasks/{task_path(task_id)}/checkpoints/{segment(checkpoint_id)}/rollback"

    def missing(_: Json) -> Exception:
        return CheckpointNotFound(f"no checkpoint {checkpoint_id} for task {task_id}")

    def unreadable(error: Json) -> Exception:
        return CheckpointFormatError("unreadable", str(error.get("message", "")))

    return Call(
        "POST",
        path,
        _checkpoint_id,
        encode({"tenant_id": tenant_id}),
        refusals={404: missing, 409: unreadable},
    )


# -- reads ------------------------------------------------------------------------------------


def get(memory_id: uuid.UUID | str, *, tenant_id: str) -> Call[EpisodicMemory | None]:
    from pipelines.records import EpisodicMemory

    path = f"/v1/memories/{segment(memory_id)}"
    return Call("GET", path, _model(EpisodicMemory), answers={404: _none}, tenant=tenant_id)


def recall(
    query: str, *, tenant_id: str, task_id: str | None, limit: int, timeout_s: float
) -> Call[list[dict[str, Any]]]:
    body = encode(
        {"query": text_of("query", query), "tenant_id": tenant_id, "task_id": task_id,
         "limit": limit}
    )  # fmt: skip

    def parse(data: Json) -> list[dict[str, Any]]:
        hits: list[dict[str, Any]] = data["hits"]
        return hits

    return Call("POST", "/v1/recall", parse, body, timeout_s=timeout_s + SERVER_ANSWER_MARGIN_S)


def knowledge(
    *, tenant_id: str, kind: str | None, query: str | None, limit: int
) -> Call[list[KnowledgeView]]:
    from pipelines.read.recall import KnowledgeView

    body = encode(
        {"tenant_id": tenant_id, "kind": kind, "query": text_of("query", query), "limit": limit}
    )

    def parse(data: Json) -> list[KnowledgeView]:
        return [KnowledgeView.model_validate(item) for item in data["items"]]

    return Call("POST", "/v1/knowledge", parse, body)


def context(
    task_id: str,
    query: str,
    budget_tokens: int,
    phase: str | None,
    focus: str | Sequence[str] | None,
    *,
    tenant_id: str,
    session_id: str | None,
    system: str,
    task_context: Sequence[str] | None,
    variables: Mapping[str, Any] | None,
    scratch: Sequence[str] | None,
    timeout_s: float | None,
) -> Call[AssembledContext]:
    from pipelines.read.assemble import AssembledContext

    body = encode(
        {
            "tenant_id": tenant_id,
            "task_id": task_id,
            "query": text_of("query", query),
            "budget_tokens": budget_tokens,
            "phase": phase,
            "focus": list(focus) if isinstance(focus, tuple) else focus,
            "session_id": session_id,
            "system": system,
            "task_context": None if task_context is None else list(task_context),
            "variables": variables,
            "scratch": None if scratch is None else list(scratch),
        }
    )
    wait = None if timeout_s is None else timeout_s + SERVER_ANSWER_MARGIN_S
    return Call("POST", "/v1/context", _model(AssembledContext), body, timeout_s=wait)


def explain(assembled: AssembledContext, *, tenant_id: str) -> Call[list[TraceItem]]:
    from pipelines.own.history import TraceItem

    body = encode({"tenant_id": tenant_id, "context": assembled.model_dump(mode="json")})

    def parse(data: Json) -> list[TraceItem]:
        return [TraceItem.model_validate(item) for item in data["items"]]

    return Call("POST", "/v1/explain", parse, body)


def stats(tenant_id: str | None) -> Call[dict[str, int]]:
    """The key's tenant's funnel (``MemoryClient.stats()`` without a tenant sums every
    tenant's; a key sees its own only)."""

    def parse(data: Json) -> dict[str, int]:
        return {k: int(v) for k, v in data.items() if k != "tenant_id"}

    return Call("GET", "/v1/stats", parse, tenant=tenant_id)


def whoami() -> Call[Json]:
    def parse(data: Json) -> Json:
        return data

    return Call("GET", "/v1/whoami", parse)


# -- ownership ----------------------------------------------------------------------------------


def correct(
    memory_id: uuid.UUID | str,
    new_content: str,
    *,
    tenant_id: str,
    reason: str,
    type: MemoryType | str | None,
    metadata: Mapping[str, Any] | None,
) -> Call[CorrectionReceipt]:
    from workers.own.correct import CorrectionReceipt

    body = encode(
        {
            "tenant_id": tenant_id,
            "content": text_of("content", new_content),
            "reason": reason,
            "type": type,
            "metadata": metadata,
        }
    )
    path = f"/v1/memories/{segment(memory_id)}/correct"
    return Call("POST", path, _model(CorrectionReceipt), body)


def undo_correction(
    memory_id: uuid.UUID | str, *, tenant_id: str, reason: str
) -> Call[UndoReceipt]:
    from workers.own.correct import UndoReceipt

    body = encode({"tenant_id": tenant_id, "reason": reason})
    path = f"/v1/memories/{segment(memory_id)}/undo-correction"
    return Call("POST", path, _model(UndoReceipt), body)


def forget(
    *,
    tenant_id: str,
    reason: str,
    memory_id: uuid.UUID | str | None,
    task_id: str | None,
    session_id: str | None,
    whole_tenant: bool,
) -> Call[ForgetReceipt]:
    from workers.own.forget import ForgetReceipt

    body = encode(
        {
            "tenant_id": tenant_id,
            "reason": reason,
            "memory_id": memory_id,
            "task_id": task_id,
            "session_id": session_id,
            "whole_tenant": whole_tenant,
        }
    )
    return Call("POST", "/v1/forget", _model(ForgetReceipt), body)


def forget_status(request_id: uuid.UUID | str, *, tenant_id: str) -> Call[ForgetReceipt]:
    from workers.own.forget import ForgetReceipt

    path = f"/v1/forget/{segment(request_id)}"
    return Call("GET", path, _model(ForgetReceipt), tenant=tenant_id)


def history(memory_id: uuid.UUID | str, *, tenant_id: str) -> Call[MemoryHistory]:
    from pipelines.own.history import MemoryHistory

    path = f"/v1/memories/{segment(memory_id)}/history"
    return Call("GET", path, _model(MemoryHistory), tenant=tenant_id)


def _query(filters: Mapping[str, Any]) -> dict[str, str]:
    """Listing filters as query parameters (an unknown one is the server's 422)."""
    params: dict[str, str] = {}
    for name, value in filters.items():
        if value is None:
            continue
        try:
            plain = _jsonable(value)
        except TypeError:
            plain = value
        params[name] = str(plain)
    return params


def list_memories(tenant_id: str, filters: Mapping[str, Any]) -> Call[MemoryPage]:
    from pipelines.own.listing import MemoryPage

    params = _query(filters)
    return Call("GET", "/v1/memories", _model(MemoryPage), params=params, tenant=tenant_id)


def list_semantic(tenant_id: str, filters: Mapping[str, Any]) -> Call[SemanticPage]:
    from pipelines.own.listing import SemanticPage

    params = _query(filters)
    return Call("GET", "/v1/semantic", _model(SemanticPage), params=params, tenant=tenant_id)


def export(tenant_id: str) -> Call[None]:
    """The streamed export's request (the drivers read its lines as they come)."""
    return Call("GET", "/v1/export", _none, tenant=tenant_id)
