"""Every refusal of the API as one JSON shape: ``{"error", "field", "message", "limit"}``.

``InvalidInput`` keeps the body ``InvalidInput.to_json`` gives (the Python client's error,
field and limit included) under 422; FastAPI's own validation errors are rewritten into the
same shape, naming the field as the Python client would (``items[3].content``).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import redis
from kombu.exceptions import OperationalError as BrokerUnavailable
from pydantic import ValidationError

from memharness.server.models import ErrorOut
from pipelines.errors import Conflict, InvalidInput, NotFound

log = logging.getLogger(__name__)

# Pydantic's error contexts that carry the rule a value broke.
_LIMIT_KEYS = ("max_length", "min_length", "le", "lt", "ge", "gt", "limit_value", "expected")


# A backing service the request needs did not answer: PostgreSQL (psycopg's OperationalError,
# the pools' PoolTimeout among them), Redis as cache or rate limiter, Redis as the broker.
UNAVAILABLE: tuple[type[Exception], ...] = (
    psycopg.OperationalError,
    redis.ConnectionError,
    redis.TimeoutError,
    BrokerUnavailable,
)
# A restarted PostgreSQL or Redis answers within seconds, and every pool reconnects on its
# next call: a client that waits this long asks a server that can answer again.
RETRY_AFTER_S = 5


# What each refusal means, as every route's OpenAPI says it (one shape: ``ErrorOut``).
STATUS_MEANING: dict[int, str] = {
    401: "No live API key in a header (a key in the URL is refused too).",
    403: "The key lacks the scope, the tenant or the agent this call needs.",
    404: "No such resource in the key's tenant (another tenant's is the same answer).",
    409: "The resource is in a state that refuses this (forgotten, already corrected, ...).",
    413: "The request body is over api_max_body_bytes.",
    422: "A field breaks its rule (the body names it and the limit); also an undeclared "
    "query parameter and a body that is not strict JSON.",
    429: "Over the key's or the client address's rate: retry after Retry-After seconds.",
    503: "PostgreSQL or Redis is unreachable: retry after Retry-After seconds.",
    504: "The store's owner did not answer within context_timeout_s.",
}
# What the door of ``/v1/`` (``memharness.server.gate``) and every keyed route can answer.
KEYED = (401, 403, 413, 422, 429, 503)
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the refusals a route can answer, each in the one error
    shape; 429 and 503 declare their ``Retry-After``."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status in sorted(set(statuses)):
        response: dict[str, Any] = {"model": ErrorOut, "description": STATUS_MEANING[status]}
        if status in (429, 503):
            response["headers"] = _RETRY_AFTER
        responses[status] = response
    return responses


def body(error: str, field: str | None, message: str, limit: str | None = None) -> dict[str, Any]:
    return {"error": error, "field": field, "message": message, "limit": limit}


def unavailable_body(exc: BaseException) -> dict[str, Any]:
    """503's body: which service did not answer, never what the request carried."""
    service = "PostgreSQL" if isinstance(exc, psycopg.Error) else "Redis"
    return body(
        "unavailable",
        None,
        f"{service} is unreachable ({type(exc).__name__}); retry after {RETRY_AFTER_S} s",
    )


def unavailable_cause(exc: BaseException) -> BaseException | None:
    """The unreachable service behind ``exc``, if any: Celery's result backend, for one, wraps
    a refused Redis connection in a bare ``RuntimeError`` ("Retry limit exceeded")."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, UNAVAILABLE):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def unavailable_headers() -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_S)}


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
