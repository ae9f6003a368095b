"""A ``context()`` call checked once, where it is made: every argument, with the field and the
limit named on a bad one; and the JSON it crosses the queue as.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from config import Settings
from pipelines.errors import InvalidInput
from pipelines.read.budget import (
    Partition,
    PartitionLayout,
    check_context_budget,
    fit_layout,
    layout_from_budgets,
)
from pipelines.read.request import ContextRequest, check_context_request
from pipelines.read.tokens import TokenCounter
from pipelines.records import check_id, check_text

# What the caller may hand over besides the query. Items are also capped in bytes by
# content_max_bytes; the partitions' budgets then decide what fits.
MAX_SOURCE_ITEMS = 500


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


# -- the request -------------------------------------------------------------------------------

_WIRE_FIELDS = frozenset(
    {
        "tenant_id",
        "task_id",
        "query",
        "budget_tokens",
        "phase",
        "focus",
        "session_id",
        "system",
        "task_context",
        "variables",
        "scratch",
    }
)


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


def _check_items(name: str, value: object, max_bytes: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput(name, f"must be a list of texts, got {type(value).__name__}")
    if len(value) > MAX_SOURCE_ITEMS:
        raise InvalidInput(
            name, f"has {len(value)} items; at most {MAX_SOURCE_ITEMS}", f"{MAX_SOURCE_ITEMS}"
        )
    return tuple(
        check_text(f"{name}[{index}]", item, max_bytes) for index, item in enumerate(value)
    )


def _check_variables(value: object, max_bytes: int) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidInput("variables", f"must be a mapping, got {type(value).__name__}")
    if len(value) > MAX_SOURCE_ITEMS:
        raise InvalidInput(
            "variables",
            f"has {len(value)} entries; at most {MAX_SOURCE_ITEMS}",
            f"{MAX_SOURCE_ITEMS}",
        )
    out = []
    for key, raw in value.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidInput("variables", f"keys must be non-empty strings, got {key!r}")
        try:
            text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        except (TypeError, ValueError):
            raise InvalidInput(
                f"variables.{key}", f"is not JSON serialisable ({type(raw).__name__})"
            ) from None
        if len(text.encode("utf-8", "replace")) > max_bytes:
            raise InvalidInput(f"variables.{key}", f"exceeds {max_bytes} bytes", f"{max_bytes}")
        out.append((key, text))
    return tuple(out)


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
    """Every argument of ``MemoryClient.context``; InvalidInput names the field and limit.

    ``layout`` is the configured one: a budget below its total is checked against it scaled
    (``fit_layout``), down to its floor (``context_floor_tokens``)."""
    tenant = check_id("tenant_id", tenant_id)
    session = check_id("session_id", session_id, required=False)
    budget = check_context_budget(budget_tokens, layout)
    fitted = fit_layout(layout, budget)
    request = check_context_request(
        task_id, query, budget, phase, focus, counter=counter, layout=fitted
    )
    if system is None:
        system = ""
    if not isinstance(system, str):
        raise InvalidInput("system", f"must be text, got {type(system).__name__}")
    assert tenant is not None
    return ContextCall(
        tenant_id=tenant,
        session_id=session,
        request=request,
        system=system,
        task_context=_check_items("task_context", task_context, content_max_bytes),
        variables=_check_variables(variables, content_max_bytes),
        scratch=_check_items("scratch", scratch, content_max_bytes),
    )
