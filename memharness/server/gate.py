"""The door of ``/v1/``: a pure ASGI middleware (no per-request task or body copy) that
refuses, before any body is read or parsed, a request carrying a key in its URL (401: a URL
is written to access logs, proxies and browser histories, so keys go in headers only),
without a live key (401; past ``api_unauthenticated_rate_per_s`` from one client address,
429 with Retry-After), over its key's rate (429 with Retry-After) or declaring a body over
``api_max_body_bytes`` (413). A chunked body is counted as it is read and refused the same
way once it passes the limit. PostgreSQL (the keys) or Redis (the rate) unreachable is a 503
with Retry-After. The key's row goes into the request's state for the routes' scope checks.

``/metrics`` has a door of its own: on the API's port it needs ``api_metrics_key`` (an
install-wide token, not a tenant's key: the scrape shows every tenant's series), with the
same per-address limit on failures; with ``api_metrics_port`` set it is served on that port
only, and the API's port has no such route.

The client address is the TCP peer (``memharness serve`` reads no X-Forwarded-For): behind a
reverse proxy every request comes from the proxy's address, so limit there as well.
"""

from __future__ import annotations

import hmac
import json
import math
import time
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
METRICS = "/metrics"
METRICS_METHODS = frozenset({"GET"})
# Addresses a process remembers as over their limit; past it the memory starts over.
BLOCKED_MAX_ENTRIES = 10_000
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


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


UNAUTHORIZED_HEADERS = [(b"www-authenticate", b'Bearer realm="memharness"')]


class Gate:
    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime
        # address -> monotonic time its bucket holds a token again: while it is over its
        # limit, a key this process has not cached is refused without a lookup.
        self._blocked: dict[str, float] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == METRICS:
            await self._metrics_door(scope, receive, send)
            return
        if not scope["path"].startswith(PROTECTED):
            await self.app(scope, receive, send)
            return
        runtime = self.runtime
        address = client_address(scope)
        named = secret_param(scope.get("query_string", b""))
        if named is not None:
            if await self._over_address_limit(send, address):
                return
            await respond(
                send,
                401,
                body(
                    "unauthorized",
                    named[:60],
                    "an API key is never accepted in the URL (it would be logged): send it in a "
                    "header (Authorization: Bearer mh_... or X-API-Key), and revoke this one",
                ),
                UNAUTHORIZED_HEADERS,
            )
            return
        text = presented_key(scope["headers"])
        if await self._still_blocked(send, address, text):
            return
        try:
            record = await runtime.resolver.resolve(text) if text else None
        except UNAVAILABLE as exc:
            await _unavailable(send, exc)
            return
        if record is None:
            if await self._over_address_limit(send, address):
                return
            await respond(
                send,
                401,
                body(
                    "unauthorized",
                    "authorization",
                    "a live API key is required: Authorization: Bearer mh_... or X-API-Key",
                ),
                UNAUTHORIZED_HEADERS,
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

    async def _metrics_door(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = self.runtime.settings
        if settings.api_metrics_port:
            await respond(send, 404, body("not_found", "path", f"no route {METRICS}"))
            return
        if scope["method"] not in METRICS_METHODS:
            # what the route takes, before any token: a wrong method is wrong for everyone
            await respond(
                send,
                405,
                body("method_not_allowed", "method", f"{scope['method']} is not allowed; use GET"),
                [(b"allow", b"GET")],
            )
            return
        text = presented_key(scope["headers"])
        expected = settings.api_metrics_key
        if (
            expected is not None
            and text is not None
            and hmac.compare_digest(text.encode(), expected.get_secret_value().encode())
        ):
            await self.app(scope, receive, send)
            return
        address = client_address(scope)
        if await self._still_blocked(send, address, None):
            return
        if await self._over_address_limit(send, address):
            return
        await respond(
            send,
            401,
            body(
                "unauthorized",
                "authorization",
                "/metrics needs the install's metrics token (MEMHARNESS_API_METRICS_KEY) as "
                "Authorization: Bearer ..., or is served on MEMHARNESS_API_METRICS_PORT",
            ),
            UNAUTHORIZED_HEADERS,
        )

    async def _still_blocked(self, send: Send, address: str, text: str | None) -> bool:
        """Refuse, without a key lookup, an address over its limit presenting a key this
        process does not know to be live (a known good key still passes)."""
        until = self._blocked.get(address)
        if until is None:
            return False
        wait_s = until - time.monotonic()
        if wait_s <= 0:
            del self._blocked[address]
            return False
        if self.runtime.resolver.knows(text):
            return False
        await _address_limited(send, math.ceil(wait_s), self.runtime.address_limiter.limit)
        return True

    async def _over_address_limit(self, send: Send, address: str) -> bool:
        """Take a token of ``address``'s bucket for a request without a live key; when there
        is none, answer 429 (or 503 when Redis is unreachable) and say so."""
        limiter = self.runtime.address_limiter
        try:
            verdict = await limiter.take(address)
        except UNAVAILABLE as exc:
            await _unavailable(send, exc)
            return True
        if verdict.allowed:
            return False
        if len(self._blocked) >= BLOCKED_MAX_ENTRIES:
            self._blocked.clear()
        self._blocked[address] = time.monotonic() + verdict.retry_after_s
        await _address_limited(send, verdict.retry_after_s, limiter.limit)
        return True


async def _address_limited(send: Send, retry_after_s: int, limit: str) -> None:
    await respond(
        send,
        429,
        body(
            "rate_limited",
            "client",
            "too many requests without a live API key from this address; retry after "
            f"{retry_after_s} s",
            limit,
        ),
        [(b"retry-after", str(retry_after_s).encode())],
    )


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
