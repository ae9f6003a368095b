"""What every request model shares: strict types and no unknown field, the configurable
limits (``Limits``), the field checkers that raise the project's :class:`InvalidInput`, and
``Args.parse`` that turns any failure into one ``InvalidInput`` naming the field and the
limit.

Checkers run before pydantic's own (strict) type check, so the annotation is what the JSON
schema shows and the checker's message is what a caller reads.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, Self

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo

from pipelines.errors import InvalidInput
from pipelines.read.budget import Partition, PartitionLayout, layout_from_budgets
from pipelines.read.tokens import TokenCounter
from pipelines.records import check_id, check_instant, check_text, type_name

# PostgreSQL's integer and bigint: a number stored in such a column must fit it.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class LimitSettings(Protocol):
    """The settings ``Limits.of`` reads (``config.Settings`` has them all)."""

    @property
    def content_max_bytes(self) -> int: ...

    @property
    def metadata_max_bytes(self) -> int: ...

    @property
    def api_batch_max_items(self) -> int: ...

    @property
    def context_system_tokens(self) -> int: ...

    @property
    def context_task_tokens(self) -> int: ...

    @property
    def context_retrieved_tokens(self) -> int: ...

    @property
    def context_recent_tokens(self) -> int: ...

    @property
    def context_variables_tokens(self) -> int: ...

    @property
    def context_scratch_tokens(self) -> int: ...


@dataclass(frozen=True)
class Limits:
    """The configurable limits a request is checked against, gathered once per driver.
    ``counter`` counts a query's tokens (context); ``batch_max_items`` bounds record_many
    when the way in has a bound (the HTTP API's ``api_batch_max_items``)."""

    content_max_bytes: int = 65536
    metadata_max_bytes: int = 8192
    batch_max_items: int | None = None
    layout: PartitionLayout | None = None
    counter: TokenCounter | None = None

    @classmethod
    def of(
        cls,
        settings: LimitSettings,
        *,
        counter: TokenCounter | None = None,
        bounded_batches: bool = False,
    ) -> Limits:
        return cls(
            content_max_bytes=settings.content_max_bytes,
            metadata_max_bytes=settings.metadata_max_bytes,
            batch_max_items=settings.api_batch_max_items if bounded_batches else None,
            layout=layout_from_budgets(
                {
                    Partition.SYSTEM.value: settings.context_system_tokens,
                    Partition.TASK_CONTEXT.value: settings.context_task_tokens,
                    Partition.RETRIEVED_MEMORY.value: settings.context_retrieved_tokens,
                    Partition.RECENT_INTERACTIONS.value: settings.context_recent_tokens,
                    Partition.WORKING_VARIABLES.value: settings.context_variables_tokens,
                    Partition.SCRATCH.value: settings.context_scratch_tokens,
                }
            ),
            counter=counter,
        )


DEFAULT_LIMITS = Limits()


def limits_of(info: ValidationInfo) -> Limits:
    context = info.context
    if isinstance(context, Mapping):
        limits = context.get("limits")
        if isinstance(limits, Limits):
            return limits
    return DEFAULT_LIMITS


class Args(BaseModel):
    """A request model: strict (``"5"`` is not 5), frozen, unknown fields refused."""

    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, arbitrary_types_allowed=True
    )

    @classmethod
    def parse(cls, data: object, limits: Limits = DEFAULT_LIMITS) -> Self:
        """The checked request, or :class:`InvalidInput` naming the first bad field."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise InvalidInput("body", f"must be a JSON object, got {type_name(data)}")
        try:
            return cls.model_validate(dict(data), context={"limits": limits})
        except ValidationError as exc:
            raise invalid_from_validation(exc) from None

    @classmethod
    def parse_json(cls, raw: bytes | str, limits: Limits = DEFAULT_LIMITS) -> Self:
        """``parse`` straight from a JSON body (pydantic-core reads the bytes)."""
        try:
            return cls.model_validate_json(raw, context={"limits": limits})
        except ValidationError as exc:
            raise invalid_from_validation(exc) from None


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """A validation error's location as callers name fields: ``items[3].content``."""
    field = prefix
    for part in loc:
        if isinstance(part, int):
            field += f"[{part}]"
        else:
            field += f".{part}" if field else str(part)
    return field


_BOUNDS = {"le": "<= {}", "lt": "< {}", "ge": ">= {}", "gt": "> {}"}


def limit_of(ctx: Mapping[str, Any] | None) -> str | None:
    """The bound a pydantic error's context says was broken, as the error's limit."""
    if not ctx:
        return None
    for key, template in _BOUNDS.items():
        if key in ctx:
            return template.format(ctx[key])
    if "max_length" in ctx:
        return f"{ctx['max_length']} long at most"
    if "min_length" in ctx:
        return f"{ctx['min_length']} long at least"
    if "expected" in ctx:
        return f"one of {ctx['expected']}"
    return None


def invalid_from_validation(exc: ValidationError, *, prefix: str = "") -> InvalidInput:
    """The first error of a validation as :class:`InvalidInput`: a checker's own error keeps
    its message and limit (inside a list item it is about ``items[3].content``); pydantic's
    errors name their location, their message and the bound they broke."""
    errors = [
        error
        for error in exc.errors(include_url=False)
        if error["type"] != "default_factory_not_called"
    ] or exc.errors(include_url=False)
    first = errors[0]
    ctx = first.get("ctx") or {}
    cause = ctx.get("error")
    loc = tuple(first["loc"])
    if isinstance(cause, InvalidInput):
        where = field_path(loc[:-1], prefix)
        return cause.within(where) if where else cause
    field = field_path(loc, prefix) or "body"
    kind = first["type"]
    if kind == "missing":
        message = "is required"
    elif kind == "extra_forbidden":
        message = "is not a known field"
    elif kind == "json_invalid":
        message = f"is not valid JSON ({ctx.get('error', 'unparsable')})"
    else:
        message = str(first["msg"]).removeprefix("Value error, ")
    more = len(errors) - 1
    if more:
        message += f" (and {more} more error{'s' if more > 1 else ''})"
    return InvalidInput(field, message, limit_of(ctx))


# -- field checkers (BeforeValidator bodies; ``info.field_name`` names the field) ---------------


def required_id(value: object, info: ValidationInfo) -> str:
    checked = check_id(str(info.field_name), value)
    assert checked is not None
    return checked


def optional_id(value: object, info: ValidationInfo) -> str | None:
    return check_id(str(info.field_name), value, required=False)


def content_text(value: object, info: ValidationInfo) -> str:
    return check_text(str(info.field_name), value, limits_of(info).content_max_bytes)


def memory_uuid(value: object, info: ValidationInfo) -> uuid.UUID:
    field = str(info.field_name)
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a UUID string, got {type_name(value)}")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput(field, f"malformed UUID {value[:40]!r}") from None


def optional_uuid(value: object, info: ValidationInfo) -> uuid.UUID | None:
    return None if value is None else memory_uuid(value, info)


def instant(value: object, info: ValidationInfo) -> datetime | None:
    """A timezone-aware datetime (or its ISO 8601 text) that PostgreSQL stores and Python
    reads back: within years 1-9999 once converted to UTC."""
    field = str(info.field_name)
    if value is None:
        return None
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(
                field, f"is not an ISO 8601 datetime: {text[:40]!r}", "ISO 8601"
            ) from None
    if not isinstance(value, datetime):
        raise InvalidInput(field, f"must be a datetime, got {type_name(value)}")
    return check_instant(field, value)


def bounded_int(low: int, high: int) -> Any:
    """A checker of an integer field within [low, high] (a bool is not an integer)."""

    def check(value: object, info: ValidationInfo) -> int:
        field = str(info.field_name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(field, f"must be an integer, got {type_name(value)}")
        if not low <= value <= high:
            raise InvalidInput(field, f"must be between {low} and {high}, got {value}", str(high))
        return value

    return check


def finite_number(low: float, high: float) -> Any:
    def check(value: object, info: ValidationInfo) -> float:
        field = str(info.field_name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(field, f"must be a number, got {type_name(value)}")
        if not math.isfinite(value) or not low <= value <= high:
            raise InvalidInput(
                field, f"must be between {low} and {high}, got {value}", f"{low}-{high}"
            )
        return float(value)

    return check


def flag(value: object, info: ValidationInfo) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(str(info.field_name), f"must be true or false, got {type_name(value)}")
    return value
