"""The data-ownership calls: correct a memory, forget (one memory, a task, a session, the
whole tenant) and follow the erasure, a memory's history, the listings, and the streaming
export. Each runs the Python client's own call, so the checks and errors are the same."""

from __future__ import annotations

from collections.abc import Generator, Iterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from memharness.server.access import (
    Reader,
    Writer,
    forbidden,
    own_memory,
    own_tenant,
    runtime_of,
    whole_memories_only,
)
from memharness.server.errors import KEYED, error_responses
from memharness.server.keys import Scope
from memharness.server.models import CorrectBody, ForgetBody, UndoBody
from memharness.server.params import (
    CursorQuery,
    KindQuery,
    LevelQuery,
    MemoryIdPath,
    MemoryStatusQuery,
    PageLimitQuery,
    RequestIdPath,
    SemanticStatusQuery,
    SinceQuery,
    TaskIdQuery,
    TypeQuery,
)
from memharness.server.routes.memories import json_response
from memharness.server.strict import StrictRoute

router = APIRouter(tags=["ownership"], route_class=StrictRoute)

ERRORS = error_responses(*KEYED, 404, 409)
# Nothing to conflict with; a listing's 404 is a cursor none of its pages gave out.
LIST_ERRORS = error_responses(*KEYED, 404)


@router.post(
    "/v1/memories/{memory_id}/correct",
    responses=ERRORS,
    summary="Replace what a memory says with a new version",
)
def correct_memory(
    memory_id: MemoryIdPath, payload: CorrectBody, request: Request, key: Writer
) -> Response:
    """The old version is superseded (kept in its history, never recalled again); the
    workers then re-derive what was built on it. 409 when the memory was forgotten or was
    already corrected (correct the current version, ``current_id`` of its history)."""
    tenant = own_tenant(key, payload.tenant_id)
    client = runtime_of(request).client
    own_memory(client, key, memory_id)
    receipt = client.correct(
        memory_id,
        payload.content,
        tenant_id=tenant,
        reason=payload.reason,
        actor=f"api:{key.prefix}",
        type=payload.type,
        metadata=payload.metadata,
    )
    return json_response(receipt.model_dump(mode="json"))


@router.post(
    "/v1/memories/{memory_id}/undo-correction",
    responses=ERRORS,
    summary="Undo an automatic supersession: the memory is recalled again",
)
def undo_correction(
    memory_id: MemoryIdPath, payload: UndoBody, request: Request, key: Writer
) -> Response:
    """``memory_id`` is the memory the background superseded; it is live again beside the
    one that superseded it. 409 when it is not superseded, or a person corrected it."""
    tenant = own_tenant(key, payload.tenant_id)
    client = runtime_of(request).client
    own_memory(client, key, memory_id)
    receipt = client.undo_correction(
        memory_id,
        tenant_id=tenant,
        reason=payload.reason,
        actor=f"api:{key.prefix}",
    )
    return json_response(receipt.model_dump(mode="json"))


@router.get(
    "/v1/memories/{memory_id}/history",
    responses=ERRORS,
    summary="Every version of a memory and what happened to it",
)
def memory_history(memory_id: MemoryIdPath, request: Request, key: Reader) -> Response:
    client = runtime_of(request).client
    own_memory(client, key, memory_id)
    history = client.history(memory_id, tenant_id=key.tenant_id)
    return json_response(history.model_dump(mode="json"))


@router.post(
    "/v1/forget",
    status_code=202,
    responses=ERRORS,
    summary="Erase a memory, a task, a session or the whole tenant",
)
def forget(payload: ForgetBody, request: Request, key: Writer) -> Response:
    """Returns once the rows are tombstones (no PostgreSQL read returns the text); the
    workers then reach every other copy and verify it: follow ``GET /v1/forget/{request_id}``
    until ``done``. Forgetting again returns the first receipt with ``already: true``."""
    tenant = own_tenant(key, payload.tenant_id)
    if payload.whole_tenant and not key.allows(Scope.ADMIN):
        raise forbidden("scope", "forgetting the whole tenant needs the admin scope")
    client = runtime_of(request).client
    whole_memories_only(key, payload.memory_id)
    own_memory(client, key, payload.memory_id)
    receipt = client.forget(
        tenant_id=tenant,
        reason=payload.reason,
        memory_id=payload.memory_id,
        task_id=payload.task_id,
        session_id=payload.session_id,
        whole_tenant=payload.whole_tenant,
        actor=f"api:{key.prefix}",
    )
    return json_response(receipt.model_dump(mode="json"), 202)


@router.get(
    "/v1/forget/{request_id}",
    responses=ERRORS,
    summary="Where an erasure stands: pending, running, done (verified) or dead",
)
def forget_status(request_id: RequestIdPath, request: Request, key: Reader) -> Response:
    receipt = runtime_of(request).client.forget_status(request_id, tenant_id=key.tenant_id)
    return json_response(receipt.model_dump(mode="json"))


@router.get("/v1/memories", responses=LIST_ERRORS, summary="A page of the tenant's memories")
def list_memories(
    request: Request,
    key: Reader,
    task_id: TaskIdQuery = None,
    type: TypeQuery = None,
    level: LevelQuery = None,
    status: MemoryStatusQuery = None,
    since: SinceQuery = None,
    cursor: CursorQuery = None,
    limit: PageLimitQuery = 50,
) -> Response:
    """Newest first; ``next_cursor`` is null on the last page. A forgotten memory lists as a
    tombstone (id, scope, times, no content)."""
    page = runtime_of(request).client.list_memories(
        key.tenant_id,
        task_id=task_id,
        type=type,
        level=level,
        status=status,
        since=since,
        cursor=cursor,
        limit=limit,
    )
    return json_response(page.model_dump(mode="json"))


@router.get("/v1/semantic", responses=LIST_ERRORS, summary="A page of the tenant's knowledge")
def list_semantic(
    request: Request,
    key: Reader,
    kind: KindQuery = None,
    status: SemanticStatusQuery = None,
    cursor: CursorQuery = None,
    limit: PageLimitQuery = 50,
) -> Response:
    page = runtime_of(request).client.list_semantic(
        key.tenant_id, kind=kind, status=status, cursor=cursor, limit=limit
    )
    return json_response(page.model_dump(mode="json"))


def _encoded(chunks: Generator[str, None, None]) -> Iterator[bytes]:
    try:
        for chunk in chunks:
            yield chunk.encode()
    finally:
        chunks.close()


@router.get(
    "/v1/export",
    responses={200: {"content": {"application/x-ndjson": {}}}, **error_responses(*KEYED)},
    summary="The tenant as versioned JSON Lines (the format of `memharness export`)",
)
def export(request: Request, key: Reader) -> StreamingResponse:
    """Streams one consistent snapshot: a header line, memories with their versions, links,
    knowledge, events, checkpoints, and an end line with the counts. A stream without its
    end line was cut off: retry it. ``memharness import`` reads it back."""
    # A sync iterator: Starlette runs it in its thread pool and closes it (ending the
    # snapshot's transaction) when the reader goes away.
    chunks = runtime_of(request).client.export_chunks(key.tenant_id)
    filename = f"memharness-{key.tenant_id}.jsonl"
    return StreamingResponse(
        _encoded(chunks),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
