"""What the API's refusals become in a remote client: the exceptions ``MemoryClient`` raises.

The server sends every refusal as ``{"error", "field", "message", "limit"}``
(``memharness.server.errors``), so the mapping reads typed fields, never a message to split:
422 and 413 are :class:`InvalidInput` with the same field and limit the local client names,
404 :class:`NotFound`, 409 :class:`Conflict`. What only a remote call can meet has classes of
its own: a refused key (401, 403) is :class:`AuthError`, a server that cannot reach
PostgreSQL or Redis (503), or that is not reachable itself, is :class:`Unavailable` with the
``Retry-After`` it asked for, a rate limit (429) :class:`RateLimited`. An answer that took
too long (504, or no answer within the client's timeout) is the builtin ``TimeoutError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pipelines.errors import Conflict, InvalidInput, NotFound, UnknownCursor

__all__ = [
    "AuthError",
    "RateLimited",
    "RemoteError",
    "Unavailable",
    "error_from",
]


class RemoteError(RuntimeError):
    """An answer of the server no other class covers (a 500: its log says why)."""

    def __init__(self, status: int, error: str, field: str | None, message: str) -> None:
        self.status = status
        self.error = error
        self.field = field
        self.message = message
        super().__init__(f"HTTP {status} {error}: {message}")


class AuthError(PermissionError):
    """The key was refused: missing, wrong or revoked (401), or it may not do this (403: a
    scope it lacks, another tenant's ``tenant_id``, another agent's ``agent_id``). ``field``
    names what was refused (``authorization``, ``scope``, ``tenant_id``, ``agent_id``)."""

    def __init__(self, status: int, field: str | None, message: str) -> None:
        self.status = status
        self.field = field
        self.message = message
        super().__init__(f"HTTP {status} {field}: {message}")


class Unavailable(ConnectionError):
    """The server is unreachable, or it cannot reach PostgreSQL or Redis. Nothing was
    stored by a refused write; ``retry_after_s`` is how long the server asked to wait (None
    when it did not answer at all)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        self.message = message
        self.retry_after_s = retry_after_s
        super().__init__(message)


class RateLimited(Unavailable):
    """The key sent more calls than its rate allows (429); retry after ``retry_after_s``."""


# NotFound's message is "no <thing> '<value>' in this tenant" (pipelines.errors).
_NOT_FOUND_VALUE = re.compile(r"^no \S+ '(?P<value>.*)' in this tenant$", re.DOTALL)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def error_from(status: int, payload: Mapping[str, Any], headers: Mapping[str, str]) -> Exception:
    """The exception a refusal of ``status`` with the API's error ``payload`` stands for."""
    error = str(payload.get("error") or "http_error")
    raw_field = payload.get("field")
    field = raw_field if isinstance(raw_field, str) else None
    message = str(payload.get("message") or f"HTTP {status}")
    raw_limit = payload.get("limit")
    limit = raw_limit if isinstance(raw_limit, str) else None
    if status in (413, 422):
        return InvalidInput(field or "body", message, limit)
    if status == 404 and field == "cursor":
        return UnknownCursor(field, message)  # what MemoryClient raises: an InvalidInput
    if status == 404:
        found = _NOT_FOUND_VALUE.match(message)
        value = found.group("value") if found else message
        return NotFound(field or "path", value)
    if status == 409:
        return Conflict(field or "body", message)
    if status in (401, 403):
        return AuthError(status, field, message)
    if status == 429:
        return RateLimited(message, _retry_after(headers))
    if status in (502, 503):
        return Unavailable(message, _retry_after(headers))
    if status == 504:
        return TimeoutError(message)
    return RemoteError(status, error, field, message)
