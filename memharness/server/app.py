"""``create_app(settings)``: the FastAPI application of ``memharness serve``.

One ``Runtime`` per server process, filled in the lifespan: the clients are built once (as
a worker builds its clients once), never at import time. Every error leaves as the JSON of
``memharness.server.errors``; nothing about a request's key is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aredis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import AsyncConnectionPool
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import Scope

from config import Settings, get_settings
from memharness.server.access import ApiError
from memharness.server.auth import KeyResolver, stop_toucher
from memharness.server.docs import add_docs
from memharness.server.errors import (
    UNAVAILABLE,
    body,
    conflict_body,
    first_error,
    invalid_body,
    not_found_body,
    unavailable_body,
    unavailable_cause,
    unavailable_headers,
)
from memharness.server.gate import BodyTooLarge, Gate, too_large_body
from memharness.server.ratelimit import ADDRESS_BUCKET_KEY, RateLimiter
from memharness.server.routes import memories, own, reads, system, tasks
from memharness.server.runtime import Runtime
from memharness.server.ui.routes import mount_ui
from pipelines.errors import Conflict, InvalidInput, NotFound, UnknownCursor

log = logging.getLogger(__name__)

DESCRIPTION = """Memory and task state for agents, over HTTP. Every `/v1/` call needs an API
key (`Authorization: Bearer mh_...`, made with `memharness keys create`); the key names the
tenant, so no body needs one; a key in the URL (`?api_key=`) is refused. Every error is
`{"error", "field", "message", "limit"}`; a query parameter a route does not declare, a body
that is not strict JSON (invalid UTF-8, too deep, NaN, a key twice) is a 422 naming it;
PostgreSQL or Redis unreachable is a 503 with `Retry-After`."""


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    from memharness.aio import AsyncMemoryClient
    from memharness.client import MemoryClient
    from memharness.server.logs import redact_access_log
    from memharness.server.metrics_port import start_metrics_endpoint
    from memharness.server.ready import OwnerProbe

    redact_access_log()
    runtime: Runtime = app.state.runtime
    settings = runtime.settings
    runtime.key_pool = AsyncConnectionPool(
        settings.database_url,
        min_size=1,
        max_size=2,
        timeout=settings.db_pool_timeout_s,
        kwargs={"autocommit": True, "application_name": "memharness-api-keys"},
        open=False,
    )
    await runtime.key_pool.open(wait=True, timeout=15.0)
    runtime.redis = aredis.Redis.from_url(
        settings.redis_url, socket_timeout=2, socket_connect_timeout=2
    )
    runtime.resolver = KeyResolver(runtime.key_pool, cache_s=settings.api_key_cache_s)
    runtime.limiter = RateLimiter(
        runtime.redis, rate_per_s=settings.api_rate_limit_per_s, burst=settings.api_rate_limit_burst
    )
    runtime.address_limiter = RateLimiter(
        runtime.redis,
        rate_per_s=settings.api_unauthenticated_rate_per_s,
        burst=settings.api_unauthenticated_burst,
        bucket=ADDRESS_BUCKET_KEY,
    )
    runtime.owner_probe = OwnerProbe(settings)
    runtime.client = MemoryClient(settings)
    runtime.aclient = await AsyncMemoryClient(settings).open()
    runtime.toucher = asyncio.create_task(runtime.resolver.touch_forever())
    runtime.metrics_endpoint = start_metrics_endpoint(settings)
    try:
        yield
    finally:
        if runtime.metrics_endpoint is not None:
            runtime.metrics_endpoint.stop()
        await stop_toucher(runtime.toucher, runtime.resolver)
        await runtime.aclient.close()
        runtime.client.close()
        await runtime.redis.aclose()
        await runtime.key_pool.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    runtime = Runtime(settings or get_settings())
    app = FastAPI(
        title="memory-harness",
        description=DESCRIPTION,
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    add_docs(app)
    app.state.runtime = runtime
    for module in (memories, own, reads, tasks, system):
        app.include_router(module.router)
    add_error_handlers(app)
    mount_ui(app)
    app.add_middleware(Gate, runtime=runtime)
    return app


def app_from_env() -> FastAPI:
    """The factory ``uvicorn --factory`` calls in each worker process of ``serve --workers``."""
    return create_app(get_settings())


# The methods a 405's Allow can name: those a route of this API declares.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(app: FastAPI, scope: Scope) -> str:
    """Every method some route of the request's path takes: Starlette's 405 names only those
    of the first route whose path matched (``GET`` and ``POST`` of one path are two
    routes)."""
    allowed = [
        method
        for method in METHODS
        if any(route.matches({**scope, "method": method})[0] is Match.FULL
               for route in app.router.routes)
    ]  # fmt: skip
    return ", ".join(allowed)


def add_error_handlers(app: FastAPI) -> None:
    def reply(status: int, payload: dict[str, object]) -> JSONResponse:
        return JSONResponse(payload, status_code=status)

    @app.exception_handler(InvalidInput)
    async def _invalid(_: Request, exc: InvalidInput) -> JSONResponse:
        return reply(422, invalid_body(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return reply(422, invalid_body(first_error(list(exc.errors()))))

    @app.exception_handler(UnknownCursor)
    async def _unknown_cursor(_: Request, exc: UnknownCursor) -> JSONResponse:
        # FastAPI picks the most specific handler: this one, not InvalidInput's 422
        return reply(404, body("not_found", exc.field, exc.message))

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return reply(404, not_found_body(exc))

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return reply(409, conflict_body(exc))

    @app.exception_handler(ApiError)
    async def _refused(_: Request, exc: ApiError) -> JSONResponse:
        return reply(exc.status, exc.payload)

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_: Request, exc: BodyTooLarge) -> JSONResponse:
        return reply(413, too_large_body(exc.limit))

    @app.exception_handler(RecursionError)
    async def _too_deep(_: Request, exc: RecursionError) -> JSONResponse:
        # A JSON body nested past the parser's own limit never reaches a check of ours.
        return reply(422, body("invalid_input", "body", "nests too deeply to be parsed"))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        # Starlette's and FastAPI's own refusals, in the one shape, their headers kept (a 405
        # says what is allowed in ``Allow``).
        headers = dict(exc.headers or {})
        if exc.status_code == 404:
            payload = body("not_found", "path", f"no route {request.url.path}")
        elif exc.status_code == 405:
            allowed = allowed_methods(app, request.scope) or headers.get("Allow", "")
            headers["Allow"] = allowed
            payload = body(
                "method_not_allowed", "method", f"{request.method} is not allowed; use {allowed}"
            )
        elif exc.status_code == 400:
            # FastAPI's "error parsing the body": the contract names the body, under 422.
            return JSONResponse(
                body("invalid_input", "body", "could not be parsed as JSON"), 422, headers
            )
        else:
            payload = body("http_error", None, str(exc.detail))
        return JSONResponse(payload, exc.status_code, headers)

    async def _unavailable(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(unavailable_body(exc), 503, unavailable_headers())

    for kind in UNAVAILABLE:
        app.add_exception_handler(kind, _unavailable)

    @app.exception_handler(RuntimeError)
    async def _wrapped(request: Request, exc: RuntimeError) -> JSONResponse:
        # Celery's result backend turns a refused Redis connection into a bare RuntimeError
        # ("Retry limit exceeded ..."): still an unreachable service, still a 503.
        cause = unavailable_cause(exc)
        if cause is None:
            raise exc
        log.warning("%s %s: a service is unreachable (%s)", request.method, request.url.path,
                    type(cause).__name__)  # fmt: skip
        return JSONResponse(unavailable_body(cause), 503, unavailable_headers())

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return reply(500, body("internal", None, "the server failed; see its log"))
