"""Liveness, readiness (``memharness.server.ready``), metrics, the tenant's write funnel, the
key's own identity and the tenant's golden queries."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from memharness.server.access import Reader, Writer, own_tenant, runtime_of
from memharness.server.errors import KEYED, error_responses
from memharness.server.models import GoldenQueriesBody
from memharness.server.ready import OK, readiness
from memharness.server.routes.memories import json_response
from memharness.server.strict import StrictRoute

router = APIRouter(tags=["system"], route_class=StrictRoute)


# /readyz's answer, ready or not: the status and one verdict per dependency.
_READINESS = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"type": "string", "enum": ["ready", "unready"]}},
    "additionalProperties": {"type": "string"},
}


@router.get("/healthz", summary="The process is up", responses=error_responses(422))
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    summary="This process can serve: PostgreSQL, Redis and the store's owner answer",
    responses={
        200: {"content": {"application/json": {"schema": _READINESS}}},
        503: {
            "description": "A dependency does not answer; the body names it.",
            "content": {"application/json": {"schema": _READINESS}},
        },
        **error_responses(422),
    },
)
async def readyz(request: Request) -> Response:
    """Reachability only: the quality verdict is ``memharness health``'s (and the alerts')."""
    runtime = runtime_of(request)
    checks = await readiness(runtime.key_pool, runtime.redis, runtime.owner_probe)
    ready = all(value == OK for value in checks.values())
    return json_response(
        {"status": "ready" if ready else "unready", **checks}, 200 if ready else 503
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics of this server process",
    responses={
        200: {
            "description": "Prometheus' text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **error_responses(401, 422, 429, 503),
    },
    response_class=Response,
    # The install's metrics token (api_metrics_key), not a tenant's key.
    openapi_extra={"security": [{"HTTPBearer": []}]},
)
def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from workers.health.endpoint import registry_for

    settings = runtime_of(request).settings
    registry, collector = registry_for(settings, multiproc_dir=None, ping_workers=False)
    try:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    finally:
        collector.close()


ERRORS = error_responses(*KEYED)


@router.get(
    "/v1/stats",
    responses=ERRORS,
    summary="The key's tenant's write funnel and job states",
)
def stats(request: Request, key: Reader) -> Response:
    return json_response(
        {"tenant_id": key.tenant_id, **runtime_of(request).client.stats(key.tenant_id)}
    )


@router.get("/v1/whoami", responses=ERRORS, summary="The tenant, agent and scopes of the key")
def whoami(key: Reader) -> Response:
    """What a remote client needs to know of its own key: the tenant every call acts for
    (a client checks a ``tenant_id`` argument against it before a read names none)."""
    return json_response(
        {
            "tenant_id": key.tenant_id,
            "agent_id": key.agent_id,
            "scopes": sorted(scope.value for scope in key.scopes),
        }
    )


@router.put(
    "/v1/golden-queries",
    responses=ERRORS,
    summary="Set the tenant's golden queries (retrieval health)",
)
def set_golden_queries(payload: GoldenQueriesBody, request: Request, key: Writer) -> Response:
    """Replaces the ones set before; until a tenant sets some, they are drawn from its
    memories."""
    count = runtime_of(request).client.set_golden_queries(
        own_tenant(key, payload.tenant_id), payload.queries
    )
    return json_response({"count": count})
