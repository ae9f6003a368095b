"""``/v1/memories``: record one (on the event loop, through ``AsyncMemoryClient``), record a
batch, get one by id."""

from __future__ import annotations

import json
import uuid
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from memharness.server.access import Reader, Writer, key_of, own_agent, own_tenant, runtime_of
from memharness.server.errors import KEYED, error_responses, from_validation
from memharness.server.keys import Scope
from memharness.server.models import BatchBody, NewMemoryBody, ReceiptOut, ReceiptsOut
from memharness.server.params import MemoryIdPath
from memharness.server.strict import StrictRoute
from pipelines.errors import InvalidInput, NotFound
from pipelines.write.request import check_write_metadata
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


# The hot path parses its body with pydantic-core straight from the bytes and checks the
# key's scope inline: FastAPI's body and dependency machinery cost more than the INSERT.
_RECORD_DOCS: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": NewMemoryBody.model_json_schema()}},
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
    try:
        payload = NewMemoryBody.model_validate_json(await request.body())
    except ValidationError as exc:
        raise from_validation(exc, "") from None
    runtime = runtime_of(request)
    receipt = await runtime.aclient.record(
        payload.content,
        tenant_id=own_tenant(key, payload.tenant_id),
        task_id=payload.task_id,
        session_id=payload.session_id,
        type=payload.type,
        user_id=payload.user_id,
        agent_id=own_agent(key, payload.agent_id),
        timestamp=payload.timestamp,
        modality=payload.modality,
        metadata=check_write_metadata(payload.metadata, runtime.settings.metadata_max_bytes),
        idempotency_key=request.headers.get("idempotency-key"),
    )
    return json_response(receipt_json(receipt), 202)


@router.post(
    "/v1/memories:batch",
    status_code=202,
    responses={202: {"model": ReceiptsOut}, **ERRORS},
    summary="Record several interactions",
)
def record_batch(payload: BatchBody, request: Request, key: Writer) -> Response:
    """Every item is checked before any is written: one bad item (``items[3].content``)
    writes nothing. Receipts come back in the items' order."""
    runtime = runtime_of(request)
    tenant = own_tenant(key, payload.tenant_id)
    limit = runtime.settings.api_batch_max_items
    if not 1 <= len(payload.items) <= limit:
        raise InvalidInput(
            "items", f"must hold 1-{limit} memories, got {len(payload.items)}", f"{limit} items"
        )
    items = []
    for index, item in enumerate(payload.items):
        fields = item.model_dump(exclude={"tenant_id"})
        own_tenant(key, item.tenant_id)
        fields["agent_id"] = own_agent(key, item.agent_id)
        try:
            fields["metadata"] = check_write_metadata(
                item.metadata, runtime.settings.metadata_max_bytes
            )
        except InvalidInput as exc:
            raise exc.within(f"items[{index}]") from None
        items.append({**fields, "tenant_id": tenant})
    receipts = runtime.client.record_many(items)
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
