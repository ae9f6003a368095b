"""The door of ``/v1/``: a pure ASGI middleware (no per-request task or body copy) that
refuses, before any body is read or parsed, a request carrying a key in its URL (401: a URL
is written to access logs, proxies and browser histories, so keys go in headers only),
without a live key (401), over its key's rate (429 with Retry-After) or declaring a body over
``api_max_body_bytes`` (413). A chunked body is counted as it is read and refused the same
way once it passes the limit. PostgreSQL (the keys) or Redis (the rate) unreachable is a 503
with Retry-After. The key's row goes into the request's state for the routes' scope checks.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from memharness.server.auth import presented_key
from memharness.server.errors import UNAVAILABLE, body, unavailable_body, unavailable_headers

if TYPE_CHECKING:
    from memharness.server.runtime import Runtime

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROTECTED = "/v1/"
# Query parameters that would carry a key: refused on every route, and blanked in the log.
SECRET_PARAMS = frozenset({"api_key", "apikey", "api-key", "key", "access_token", "token"})


def secret_param(query_string: bytes) -> str | None:
    """The first query parameter of ``query_string`` that names a credential, if any."""
    for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        if name.lower() in SECRET_PARAMS:
            return name
    return None


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"request body over {limit} bytes")


def too_large_body(limit: int) -> dict[str, Any]:
    return body("too_large", "body", f"the request body is over {limit} bytes", f"{limit} bytes")


async def respond(
    send: Send, status: int, payload: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    data = json.dumps(payload, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class Gate:
    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED):
            await self.app(scope, receive, send)
            return
        runtime = self.runtime
        named = secret_param(scope.get("query_string", b""))
        if named is not None:
            await respond(
                send,
                401,
                body(
                    "unauthorized",
                    named[:60],
                    "an API key is never accepted in the URL (it would be logged): send it in a "
                    "header (Authorization: Bearer mh_... or X-API-Key), and revoke this one",
                ),
                [(b"www-authenticate", b'Bearer realm="memharness"')],
            )
            return
        text = presented_key(scope["headers"])
        try:
            record = await runtime.resolver.resolve(text) if text else None
        except UNAVAILABLE as exc:
            await _unavailable(send, exc)
            return
        if record is None:
            await respond(
                send,
                401,
                body(
                    "unauthorized",
                    "authorization",
                    "a live API key is required: Authorization: Bearer mh_... or X-API-Key",
                ),
                [(b"www-authenticate", b'Bearer realm="memharness"')],
            )
            return
        try:
            verdict = await runtime.limiter.take(str(record.id))
        except UNAVAILABLE as exc:
            await _unavailable(send, exc)
            return
        if not verdict.allowed:
            await respond(
                send,
                429,
                body(
                    "rate_limited",
                    "api_key",
                    f"this key is over its rate; retry after {verdict.retry_after_s} s",
                    runtime.limiter.limit,
                ),
                [(b"retry-after", str(verdict.retry_after_s).encode())],
            )
            return
        limit = runtime.settings.api_max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = limit + 1
                if declared > limit:
                    await respond(send, 413, too_large_body(limit))
                    return
        scope.setdefault("state", {})["key"] = record
        await _with_counted_body(self.app, scope, receive, send, limit)


async def _unavailable(send: Send, exc: BaseException) -> None:
    headers = [(k.lower().encode(), v.encode()) for k, v in unavailable_headers().items()]
    await respond(send, 503, unavailable_body(exc), headers)


async def _with_counted_body(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, limit: int
) -> None:
    """Run ``app`` reading a body of undeclared length through a counter. Past ``limit`` the
    read raises; whatever the app answers then (FastAPI turns a failed read into a 400) is
    replaced by the 413."""
    seen = 0
    over = False
    answered = False

    async def counted() -> Message:
        nonlocal seen, over
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                over = True
                raise BodyTooLarge(limit)
        return message

    async def guarded(message: Message) -> None:
        nonlocal answered
        if over:
            if message["type"] == "http.response.start" and not answered:
                answered = True
                await respond(send, 413, too_large_body(limit))
            return
        answered = answered or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, counted, guarded)
    except BodyTooLarge:
        if not answered:
            await respond(send, 413, too_large_body(limit))
