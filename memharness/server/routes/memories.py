"""``/v1/memories``: record one (on the event loop, through ``AsyncMemoryClient``), record a
batch, get one by id."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from memharness.server.access import Reader, key_of, own_agent, own_tenant, runtime_of
from memharness.server.errors import KEYED, error_responses
from memharness.server.keys import Scope
from memharness.server.models import (
    BatchBody,
    NewMemoryBody,
    ReceiptOut,
    ReceiptsOut,
    inline_refs,
)
from memharness.server.params import MemoryIdPath
from memharness.server.strict import StrictRoute
from pipelines.errors import InvalidInput, NotFound
from pipelines.requests.write import RecordArgs, RecordManyArgs
from workers.write.plan import WriteReceipt

router = APIRouter(tags=["memories"], route_class=StrictRoute)

ERRORS = error_responses(*KEYED)


def receipt_json(receipt: WriteReceipt) -> dict[str, str]:
    return {"memory_id": str(receipt.memory_id), "status": receipt.status, "reason": receipt.reason}


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
        status_code=status,
        media_type="application/json",
    )


_UNPARSED = object()

# The hot path validates the body StrictRoute has parsed (once) and checks the key's scope
# inline: FastAPI's body and dependency machinery cost more than the INSERT.
_RECORD_DOCS: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": inline_refs(NewMemoryBody.model_json_schema())}},
    },
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "maxLength": 200},
            "description": "A retry with the same key returns the first call's memory id.",
        }
    ],
    "security": [{"HTTPBearer": []}],
}


@router.post(
    "/v1/memories",
    status_code=202,
    responses={202: {"model": ReceiptOut}, **ERRORS},
    summary="Record one interaction",
    openapi_extra=_RECORD_DOCS,
)
async def record_memory(request: Request) -> Response:
    """Returns once the memory and its job are committed (the workers do the slow part).
    ``status`` is accepted, duplicate (a retry: the same ``memory_id``) or dropped (tier-1)."""
    key = key_of(request, Scope.WRITE)
    data = json_object(request)
    if "idempotency_key" in data:  # the header carries it on this route
        raise InvalidInput("idempotency_key", "is not a known field")
    data["tenant_id"] = own_tenant(key, data.get("tenant_id"))
    data["agent_id"] = own_agent(key, data.get("agent_id"))
    data["idempotency_key"] = request.headers.get("idempotency-key")
    aclient = runtime_of(request).aclient
    receipt = await aclient.run_record(RecordArgs.parse(data, aclient.limits))
    return json_response(receipt_json(receipt), 202)


def json_object(request: Request) -> dict[str, Any]:
    """The body ``StrictRoute`` parsed, as the object a request model parses."""
    data = getattr(request.state, "json_body", None)
    if not isinstance(data, dict):
        raise InvalidInput("body", f"must be a JSON object, got {type(data).__name__}")
    return data


_BATCH_DOCS: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": inline_refs(BatchBody.model_json_schema())}},
    },
    "security": [{"HTTPBearer": []}],
}


@router.post(
    "/v1/memories:batch",
    status_code=202,
    responses={202: {"model": ReceiptsOut}, **ERRORS},
    summary="Record several interactions",
    openapi_extra=_BATCH_DOCS,
)
async def record_batch(request: Request) -> Response:
    """Every item is checked before any is written: one bad item (``items[3].content``)
    writes nothing. Receipts come back in the items' order."""
    key = key_of(request, Scope.WRITE)
    data = json_object(request)
    runtime = runtime_of(request)
    tenant = own_tenant(key, data.get("tenant_id"))
    unknown = set(data) - {"tenant_id", "items"}
    if unknown:
        raise InvalidInput(sorted(unknown)[0][:60], "is not a known field")
    items = data.get("items")
    if isinstance(items, list):
        for index, item in enumerate(items):
            if isinstance(item, dict):
                own_tenant(key, item.get("tenant_id"))
                item["tenant_id"] = tenant
                item["agent_id"] = own_agent(key, item.get("agent_id"))
            else:
                raise InvalidInput(
                    f"items[{index}]", f"must be a JSON object, got {type(item).__name__}"
                )
    limits = replace(runtime.aclient.limits, batch_max_items=runtime.settings.api_batch_max_items)
    args = RecordManyArgs.parse({"items": items}, limits)
    receipts = await run_in_threadpool(runtime.client.run_record_many, args)
    return json_response({"receipts": [receipt_json(r) for r in receipts]}, 202)


@router.get(
    "/v1/memories/{memory_id}",
    responses=error_responses(*KEYED, 404),
    summary="One memory of the key's tenant",
)
def get_memory(memory_id: MemoryIdPath, request: Request, key: Reader) -> Response:
    """404 when the id is unknown or another tenant's: the two answers are the same."""
    try:
        parsed = uuid.UUID(memory_id)
    except ValueError:
        raise InvalidInput("memory_id", f"is not a UUID: {memory_id[:40]!r}") from None
    memory = runtime_of(request).client.get(parsed, tenant_id=key.tenant_id)
    if memory is None:
        raise NotFound("memory_id", str(parsed))
    return json_response(memory.model_dump(mode="json"))
