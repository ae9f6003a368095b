"""Every refusal of the API as one JSON shape: ``{"error", "field", "message", "limit"}``.

``InvalidInput`` keeps the body ``InvalidInput.to_json`` gives (the Python client's error,
field and limit included) under 422; FastAPI's own validation errors are rewritten into the
same shape, naming the field as the Python client would (``items[3].content``).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from pipelines.errors import Conflict, InvalidInput, NotFound

log = logging.getLogger(__name__)

# Pydantic's error contexts that carry the rule a value broke.
_LIMIT_KEYS = ("max_length", "min_length", "le", "lt", "ge", "gt", "limit_value", "expected")


def body(error: str, field: str | None, message: str, limit: str | None = None) -> dict[str, Any]:
    return {"error": error, "field": field, "message": message, "limit": limit}


def invalid_body(exc: InvalidInput) -> dict[str, Any]:
    return {"error": "invalid_input", **exc.to_json()}


def not_found_body(exc: NotFound) -> dict[str, Any]:
    return {"error": "not_found", "field": exc.field, "message": exc.to_json()["message"],
            "limit": None}  # fmt: skip


def conflict_body(exc: Conflict) -> dict[str, Any]:
    return body("conflict", exc.field, exc.message)


def field_of(loc: tuple[int | str, ...] | list[int | str], prefix: str = "") -> str:
    """``("body", "items", 3, "content")`` -> ``items[3].content``."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    text = prefix
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "body"


def first_error(errors: list[Any], prefix: str = "") -> InvalidInput:
    """The first of pydantic's errors as an ``InvalidInput`` naming its field and limit."""
    if not errors:
        return InvalidInput(prefix or "body", "is not valid")
    error = errors[0]
    ctx = error.get("ctx") or {}
    limit = next((str(ctx[key]) for key in _LIMIT_KEYS if key in ctx), None)
    message = str(error.get("msg", "is not valid"))
    if error.get("type") == "json_invalid":
        return InvalidInput("body", f"is not valid JSON: {ctx.get('error', message)}")
    return InvalidInput(field_of(tuple(error.get("loc", ())), prefix), message, limit)


def from_validation(exc: ValidationError, prefix: str) -> InvalidInput:
    return first_error(list(exc.errors(include_url=False)), prefix)
