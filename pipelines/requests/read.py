"""The read requests: ``recall``, ``context``, ``affected_by`` and ``knowledge``. A checked
context request becomes the :class:`ContextCall` that crosses the ``recall`` queue as JSON
and is decoded there without checking again."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, ValidationInfo, WithJsonSchema

from pipelines.cognition.knowledge import KnowledgeKind
from pipelines.errors import InvalidInput
from pipelines.read.budget import MAX_BUDGET_TOKENS, check_context_budget
from pipelines.read.focus import InfoKind, check_focus, check_phase
from pipelines.read.request import QUERY_MAX_BYTES, QUERY_MAX_TOKENS, ContextRequest
from pipelines.records import TaskPhase, check_enum, check_text, type_name
from pipelines.requests.base import Args, bounded_int, limits_of
from pipelines.requests.write import OptionalId, RequiredId

# What the caller may hand over besides the query. Items are also capped in bytes by
# content_max_bytes; the partitions' budgets then decide what fits.
MAX_SOURCE_ITEMS = 500
RECALL_MAX_HITS = 100
MAX_HOPS = 10
KNOWLEDGE_LIST_MAX = 500


def _query(value: object, info: ValidationInfo) -> str:
    return check_text("query", value, QUERY_MAX_BYTES)


def _optional_query(value: object, info: ValidationInfo) -> str | None:
    return None if value is None else _query(value, info)


Query = Annotated[
    str,
    BeforeValidator(_query),
    Field(min_length=1, description=f"What to look for (at most {QUERY_MAX_BYTES} bytes)."),
]


class RecallArgs(Args):
    """Dense recall inside a tenant (``MemoryClient.recall``, ``POST /v1/recall``)."""

    query: Query
    tenant_id: RequiredId
    task_id: OptionalId = Field(None, description="Only this task's memories.")
    limit: Annotated[int, BeforeValidator(bounded_int(1, RECALL_MAX_HITS))] = Field(
        5, ge=1, le=RECALL_MAX_HITS, description="At most this many hits."
    )


class AffectedByArgs(Args):
    """What the memories a query is about reach along causal links."""

    query: Query
    tenant_id: RequiredId
    max_hops: Annotated[int, BeforeValidator(bounded_int(1, MAX_HOPS))] = Field(
        3, ge=1, le=MAX_HOPS, description="Hops along causal links."
    )


def _kind(value: object, info: ValidationInfo) -> KnowledgeKind | None:
    return None if value is None else check_enum("kind", value, KnowledgeKind)


class KnowledgeArgs(Args):
    """The tenant's semantic knowledge, optionally one kind or the items saying a query."""

    tenant_id: RequiredId
    kind: Annotated[KnowledgeKind | None, BeforeValidator(_kind)] = Field(
        None, description="preference, pattern, mistake, convention, owner, stack."
    )
    query: Annotated[str | None, BeforeValidator(_optional_query)] = None
    limit: Annotated[int, BeforeValidator(bounded_int(1, KNOWLEDGE_LIST_MAX))] = Field(
        50, ge=1, le=KNOWLEDGE_LIST_MAX
    )


# -- context ------------------------------------------------------------------------------------


def _context_query(value: object, info: ValidationInfo) -> str:
    text = check_text("query", value, QUERY_MAX_BYTES)
    counter = limits_of(info).counter
    if counter is not None:
        tokens = counter.count(text)
        if tokens > QUERY_MAX_TOKENS:
            raise InvalidInput(
                "query",
                f"is {tokens} tokens; a query is at most {QUERY_MAX_TOKENS} tokens",
                limit=f"{QUERY_MAX_TOKENS} tokens",
            )
    return " ".join(text.split())


def _budget(value: object, info: ValidationInfo) -> int:
    layout = limits_of(info).layout
    if layout is None:
        from pipelines.read.budget import DEFAULT_LAYOUT

        layout = DEFAULT_LAYOUT
    # Below the layout's own total the partitions scale down to the budget (fit_layout).
    return check_context_budget(value, layout)


def _phase(value: object, info: ValidationInfo) -> TaskPhase | None:
    return check_phase(value)


def _focus(value: object, info: ValidationInfo) -> str | tuple[InfoKind, ...] | None:
    return check_focus(value)


def _system(value: object, info: ValidationInfo) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput("system", f"must be text, got {type_name(value)}")
    return value


def _texts(value: object, info: ValidationInfo) -> tuple[str, ...]:
    name = str(info.field_name)
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput(name, f"must be a list of texts, got {type_name(value)}")
    if len(value) > MAX_SOURCE_ITEMS:
        raise InvalidInput(
            name, f"has {len(value)} items; at most {MAX_SOURCE_ITEMS}", f"{MAX_SOURCE_ITEMS}"
        )
    max_bytes = limits_of(info).content_max_bytes
    return tuple(check_text(f"{name}[{i}]", item, max_bytes) for i, item in enumerate(value))


def _variables(value: object, info: ValidationInfo) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidInput("variables", f"must be a mapping, got {type_name(value)}")
    if len(value) > MAX_SOURCE_ITEMS:
        raise InvalidInput(
            "variables",
            f"has {len(value)} entries; at most {MAX_SOURCE_ITEMS}",
            f"{MAX_SOURCE_ITEMS}",
        )
    max_bytes = limits_of(info).content_max_bytes
    out = []
    for key, raw in value.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidInput("variables", f"keys must be non-empty strings, got {key!r}")
        try:
            text = (
                raw
                if isinstance(raw, str)
                else json.dumps(raw, ensure_ascii=False, allow_nan=False)
            )
        except (TypeError, ValueError):
            raise InvalidInput(
                f"variables.{key}", f"is not JSON serialisable ({type_name(raw)})"
            ) from None
        if len(text.encode("utf-8", "replace")) > max_bytes:
            raise InvalidInput(f"variables.{key}", f"exceeds {max_bytes} bytes", f"{max_bytes}")
        out.append((key, text))
    return tuple(out)


_TEXTS_SCHEMA = {"type": "array", "items": {"type": "string"}, "maxItems": MAX_SOURCE_ITEMS}
Texts = Annotated[tuple[str, ...], BeforeValidator(_texts), WithJsonSchema(_TEXTS_SCHEMA)]


class ContextArgs(Args):
    """``MemoryClient.context``: the context of the next step within ``budget_tokens``."""

    tenant_id: RequiredId
    task_id: RequiredId
    query: Annotated[str, BeforeValidator(_context_query)] = Field(
        min_length=1,
        description=f"The step or question (at most {QUERY_MAX_BYTES} bytes, "
        f"{QUERY_MAX_TOKENS} tokens).",
    )
    budget_tokens: Annotated[int, BeforeValidator(_budget)] = Field(
        le=MAX_BUDGET_TOKENS, description="The token budget of the whole context."
    )
    phase: Annotated[TaskPhase | None, BeforeValidator(_phase)] = None
    focus: Annotated[
        str | tuple[InfoKind, ...] | None,
        BeforeValidator(_focus),
    ] = Field(None, description="A text hint, or the kinds most needed first.")
    session_id: OptionalId = Field(None, description="Default: the task's latest session.")
    system: Annotated[str, BeforeValidator(_system)] = ""
    task_context: Texts = ()
    variables: Annotated[
        tuple[tuple[str, str], ...],
        BeforeValidator(_variables),
        WithJsonSchema(
            {
                "type": "object",
                "maxProperties": MAX_SOURCE_ITEMS,
                "additionalProperties": {
                    "type": ["string", "number", "integer", "boolean", "array", "object", "null"]
                },
            }
        ),
    ] = ()
    scratch: Texts = ()

    def call(self) -> ContextCall:
        return ContextCall(
            tenant_id=self.tenant_id,
            session_id=self.session_id,
            request=ContextRequest(
                task_id=self.task_id,
                query=self.query,
                budget_tokens=self.budget_tokens,
                phase=self.phase,
                focus=self.focus,
            ),
            system=self.system,
            task_context=self.task_context,
            variables=self.variables,
            scratch=self.scratch,
        )


_WIRE_FIELDS = frozenset(ContextArgs.model_fields)


def _wire_text(data: Mapping[str, Any], name: str) -> str:
    value = data[name]
    if not isinstance(value, str):
        raise InvalidInput(name, f"must be text, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class ContextCall:
    """A validated ``context`` call: the request plus what the caller holds."""

    tenant_id: str
    session_id: str | None
    request: ContextRequest
    system: str
    task_context: tuple[str, ...]
    variables: tuple[tuple[str, str], ...]
    scratch: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The task's kwargs: scalars and lists only (the wire format is JSON)."""
        request = self.request
        focus: str | list[str] | None
        if request.focus is None or isinstance(request.focus, str):
            focus = request.focus
        else:
            focus = [kind.value for kind in request.focus]
        return {
            "tenant_id": self.tenant_id,
            "task_id": request.task_id,
            "query": request.query,
            "budget_tokens": request.budget_tokens,
            "phase": request.phase.value if request.phase else None,
            "focus": focus,
            "session_id": self.session_id,
            "system": self.system,
            "task_context": list(self.task_context),
            "variables": dict(self.variables),
            "scratch": list(self.scratch),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContextCall:
        """The call ``to_json`` wrote, decoded without checking its rules again: they were
        checked where the call was made. A message of the wrong shape (another sender, an
        older client) is refused with the field it got wrong."""
        unknown = set(data) - _WIRE_FIELDS
        if unknown:
            raise InvalidInput("arguments", f"unknown field(s): {', '.join(sorted(unknown))}")
        try:
            request = ContextRequest.model_validate(
                {
                    "task_id": data["task_id"],
                    "query": data["query"],
                    "budget_tokens": data["budget_tokens"],
                    "phase": data.get("phase"),
                    "focus": data.get("focus"),
                },
                strict=False,
            )
            return cls(
                tenant_id=_wire_text(data, "tenant_id"),
                session_id=data.get("session_id"),
                request=request,
                system=data.get("system") or "",
                task_context=tuple(data.get("task_context") or ()),
                variables=tuple((str(k), str(v)) for k, v in (data.get("variables") or {}).items()),
                scratch=tuple(data.get("scratch") or ()),
            )
        except KeyError as exc:
            raise InvalidInput(str(exc.args[0]), "is required") from None
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"]) or "arguments"
            raise InvalidInput(field, str(error["msg"])) from None
