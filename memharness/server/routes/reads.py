"""The read calls: ``recall`` (dense search), ``context`` (the budgeted context of the next
step), ``explain`` (where a context's items came from), ``knowledge`` (the tenant's semantic
knowledge) and ``affected-by`` (what causal links reach). All run the client's own call in a
thread; in embedded mode recall and context are answered by the store's owner worker."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from memharness.server.access import ApiError, Reader, own_tenant, runtime_of
from memharness.server.errors import KEYED, body, error_responses, from_validation
from memharness.server.models import (
    AffectedBody,
    ContextBody,
    ExplainBody,
    KnowledgeBody,
    RecallBody,
)
from memharness.server.routes.memories import json_response
from memharness.server.strict import StrictRoute
from pipelines.errors import InvalidInput

router = APIRouter(tags=["reads"], route_class=StrictRoute)

ERRORS = error_responses(*KEYED, 504)


def _timeout(what: str, seconds: float) -> ApiError:
    return ApiError(
        504, body("timeout", None, f"the {what} answer took over {seconds:g} s", f"{seconds:g} s")
    )


@router.post("/v1/recall", responses=ERRORS, summary="Dense recall in the key's tenant")
def recall(payload: RecallBody, request: Request, key: Reader) -> Response:
    from celery.exceptions import TimeoutError as ResultTimeout

    runtime = runtime_of(request)
    timeout_s = runtime.settings.context_timeout_s
    try:
        hits = runtime.client.recall(
            payload.query,
            tenant_id=own_tenant(key, payload.tenant_id),
            task_id=payload.task_id,
            limit=payload.limit,
            timeout_s=timeout_s,
        )
    except InvalidInput as exc:
        # recall checks its query as a memory's content; over HTTP the field is ``query``
        if exc.field == "content":
            raise InvalidInput("query", exc.message, exc.limit) from None
        raise
    except ResultTimeout:
        raise _timeout("recall", timeout_s) from None
    # degraded: the vector index is known to miss stored memories (being restored); the
    # hits then hold PostgreSQL's keyword matches besides the dense ones.
    return json_response({"hits": hits, "degraded": hits.degraded})


@router.post("/v1/context", responses=ERRORS, summary="The context of the next step")
def context(payload: ContextBody, request: Request, key: Reader) -> Response:
    """Partitions laid out within ``budget_tokens``; ``text`` is the whole context."""
    from celery.exceptions import TimeoutError as ResultTimeout

    runtime = runtime_of(request)
    timeout_s = runtime.settings.context_timeout_s
    try:
        assembled = runtime.client.context(
            payload.task_id,
            payload.query,
            payload.budget_tokens,
            payload.phase,
            payload.focus,
            tenant_id=own_tenant(key, payload.tenant_id),
            session_id=payload.session_id,
            system=payload.system,
            task_context=payload.task_context,
            variables=payload.variables,
            scratch=payload.scratch,
            timeout_s=timeout_s,
        )
    except ResultTimeout:
        raise _timeout("context", timeout_s) from None
    return json_response(assembled.model_dump(mode="json"))


@router.post("/v1/affected-by", responses=ERRORS, summary="What causal links reach")
def affected_by(payload: AffectedBody, request: Request, key: Reader) -> Response:
    traversal = runtime_of(request).client.affected_by(
        payload.query, tenant_id=own_tenant(key, payload.tenant_id), max_hops=payload.max_hops
    )
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


@router.post("/v1/knowledge", responses=ERRORS, summary="The tenant's semantic knowledge")
def knowledge(payload: KnowledgeBody, request: Request, key: Reader) -> Response:
    """What consolidation made of the episodes: kind, content, confidence, conditions,
    sources and status; ``query`` keeps the items saying some of it, the ones saying most
    first (else the most confident first)."""
    views = runtime_of(request).client.knowledge(
        tenant_id=own_tenant(key, payload.tenant_id),
        kind=payload.kind,
        query=payload.query,
        limit=payload.limit,
    )
    return json_response({"items": [view.model_dump(mode="json") for view in views]})
