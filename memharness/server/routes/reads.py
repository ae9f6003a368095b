"""The read calls: ``recall`` (dense search), ``context`` (the budgeted context of the next
step), ``explain`` (where a context's items came from), ``knowledge`` (the tenant's semantic
knowledge) and ``affected-by`` (what causal links reach). All run the client's own call in a
thread; in embedded mode recall and context are answered by the store's owner worker."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from memharness.server.access import ApiError, Reader, key_of, own_tenant, runtime_of
from memharness.server.errors import KEYED, body, error_responses, from_validation
from memharness.server.keys import KeyRecord, Scope
from memharness.server.models import (
    AffectedBody,
    Body,
    ContextBody,
    ExplainBody,
    KnowledgeBody,
    RecallBody,
    inline_refs,
)
from memharness.server.routes.memories import json_object, json_response
from memharness.server.strict import StrictRoute
from pipelines.requests.read import AffectedByArgs, ContextArgs, KnowledgeArgs, RecallArgs

router = APIRouter(tags=["reads"], route_class=StrictRoute)

ERRORS = error_responses(*KEYED, 504)


def _timeout(what: str, seconds: float) -> ApiError:
    return ApiError(
        504, body("timeout", None, f"the {what} answer took over {seconds:g} s", f"{seconds:g} s")
    )


def _docs(body: type[Body]) -> dict[str, Any]:
    """The route's request body in the OpenAPI: the body model's schema (typed as its request
    model); the route parses the JSON itself, into that request model, once."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_refs(body.model_json_schema())}},
        },
        "security": [{"HTTPBearer": []}],
    }


def _args_of(request: Request, key: KeyRecord) -> dict[str, Any]:
    data = json_object(request)
    data["tenant_id"] = own_tenant(key, data.get("tenant_id"))
    return data


@router.post(
    "/v1/recall",
    responses=ERRORS,
    summary="Dense recall in the key's tenant",
    openapi_extra=_docs(RecallBody),
)
async def recall(request: Request) -> Response:
    from celery.exceptions import TimeoutError as ResultTimeout

    key = key_of(request, Scope.READ)
    runtime = runtime_of(request)
    args = RecallArgs.parse(_args_of(request, key), runtime.client.write_limits)
    timeout_s = runtime.settings.context_timeout_s
    try:
        hits = await run_in_threadpool(runtime.client.run_recall, args, timeout_s=timeout_s)
    except ResultTimeout:
        raise _timeout("recall", timeout_s) from None
    # degraded: the vector index is known to miss stored memories (being restored); the
    # hits then hold PostgreSQL's keyword matches besides the dense ones.
    return json_response({"hits": hits, "degraded": hits.degraded})


@router.post(
    "/v1/context",
    responses=ERRORS,
    summary="The context of the next step",
    openapi_extra=_docs(ContextBody),
)
async def context(request: Request) -> Response:
    """Partitions laid out within ``budget_tokens``; ``text`` is the whole context."""
    from celery.exceptions import TimeoutError as ResultTimeout

    key = key_of(request, Scope.READ)
    runtime = runtime_of(request)
    data = _args_of(request, key)
    args = await run_in_threadpool(ContextArgs.parse, data, runtime.client.limits)
    timeout_s = runtime.settings.context_timeout_s
    try:
        assembled = await run_in_threadpool(runtime.client.run_context, args, timeout_s=timeout_s)
    except ResultTimeout:
        raise _timeout("context", timeout_s) from None
    return json_response(assembled.model_dump(mode="json"))


@router.post(
    "/v1/affected-by",
    responses=ERRORS,
    summary="What causal links reach",
    openapi_extra=_docs(AffectedBody),
)
async def affected_by(request: Request) -> Response:
    key = key_of(request, Scope.READ)
    client = runtime_of(request).client
    args = AffectedByArgs.parse(_args_of(request, key), client.write_limits)
    traversal = await run_in_threadpool(client.run_affected_by, args)
    return json_response(traversal.model_dump(mode="json"))


@router.post("/v1/explain", responses=ERRORS, summary="Where a context's items came from")
def explain(payload: ExplainBody, request: Request, key: Reader) -> Response:
    """Each item of an assembled context (the JSON ``/v1/context`` answered): the memory it
    came from (id, level, version) and why it was chosen (how recalled, scores, priority)."""
    from pipelines.read.assemble import AssembledContext

    try:
        assembled = AssembledContext.model_validate(payload.context)
    except ValidationError as exc:
        raise from_validation(exc, "context") from None
    items = runtime_of(request).client.explain(
        assembled, tenant_id=own_tenant(key, payload.tenant_id)
    )
    return json_response({"items": [item.model_dump(mode="json") for item in items]})


@router.post(
    "/v1/knowledge",
    responses=ERRORS,
    summary="The tenant's semantic knowledge",
    openapi_extra=_docs(KnowledgeBody),
)
async def knowledge(request: Request) -> Response:
    """What consolidation made of the episodes: kind, content, confidence, conditions,
    sources and status; ``query`` keeps the items saying some of it, the ones saying most
    first (else the most confident first)."""
    key = key_of(request, Scope.READ)
    client = runtime_of(request).client
    args = KnowledgeArgs.parse(_args_of(request, key), client.write_limits)
    views = await run_in_threadpool(client.run_knowledge, args)
    return json_response({"items": [view.model_dump(mode="json") for view in views]})
