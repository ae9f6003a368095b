"""``/v1/tasks/{task_id}``: checkpoints (save, list, resume, rollback) and completion.

Task ids may hold ``/`` (``pipelines.records`` allows it), so the path parameter takes the
rest of the path up to the route's fixed tail."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from memharness.server.access import ApiError, Reader, Writer, own_tenant, runtime_of
from memharness.server.errors import KEYED, body, error_responses, from_validation
from memharness.server.models import Body, CheckpointBody
from memharness.server.params import CheckpointIdPath, CheckpointLimitQuery, TaskIdPath
from memharness.server.routes.memories import json_response
from memharness.server.strict import StrictRoute
from pipelines.errors import CheckpointFormatError, InvalidInput, NotFound
from pipelines.records import check_id
from pipelines.state.models import TaskCheckpoint, TaskState

router = APIRouter(tags=["tasks"], route_class=StrictRoute)

ERRORS = error_responses(*KEYED, 404, 409)


def _task(task_id: str) -> str:
    checked = check_id("task_id", task_id)
    assert checked is not None
    return checked


def _checkpoint_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput("checkpoint_id", f"is not a UUID: {value[:40]!r}") from None


def _checkpoint_json(checkpoint: TaskCheckpoint) -> dict[str, Any]:
    """A checkpoint as JSON, its working memory included (the state's own JSON leaves it out:
    the checkpoint format stores it compressed)."""
    data = checkpoint.model_dump(mode="json")
    data["state"]["working_memory"] = checkpoint.state.working_memory.model_dump(mode="json")
    return data


def _unreadable(exc: CheckpointFormatError) -> ApiError:
    return ApiError(409, body("conflict", "checkpoint_id", f"unreadable checkpoint ({exc.kind})"))


@router.post(
    "/v1/tasks/{task_id:path}/checkpoints",
    status_code=201,
    responses=ERRORS,
    summary="Save where the task is",
)
def save_checkpoint(
    task_id: TaskIdPath,
    payload: CheckpointBody,
    request: Request,
    key: Writer,
) -> Response:
    tenant = own_tenant(key, payload.tenant_id)
    try:
        state = TaskState.model_validate(payload.state)
    except ValidationError as exc:
        raise from_validation(exc, "state") from None
    checkpoint_id = runtime_of(request).client.checkpoint(
        tenant, _task(task_id), state, phase_transition=payload.phase_transition
    )
    return json_response({"checkpoint_id": str(checkpoint_id)}, 201)


@router.get(
    "/v1/tasks/{task_id:path}/checkpoints", responses=ERRORS, summary="The task's checkpoints"
)
def list_checkpoints(
    task_id: TaskIdPath,
    request: Request,
    key: Reader,
    limit: CheckpointLimitQuery = 50,
) -> Response:
    rows = runtime_of(request).client.checkpoints.list(key.tenant_id, _task(task_id), limit=limit)
    return json_response(
        {
            "checkpoints": [
                {
                    "id": str(row.id),
                    "parent_id": str(row.parent_id) if row.parent_id else None,
                    "seq": row.seq,
                    "created_at": row.created_at.isoformat(),
                    "format_version": row.format_version,
                    "phase_transition": row.is_phase_transition,
                    "iteration": row.iteration,
                    "size_bytes": row.size_bytes,
                }
                for row in rows
            ]
        }
    )


@router.post(
    "/v1/tasks/{task_id:path}/resume", responses=ERRORS, summary="Resume from the newest checkpoint"
)
def resume(
    task_id: TaskIdPath,
    request: Request,
    key: Reader,
    payload: Body | None = None,
) -> Response:
    """The newest checkpoint whose checksum holds, calibrated for the time since; 404 when
    the task has none (in this tenant), 409 when none of its checkpoints is readable."""
    from workers.state.service import NoUsableCheckpoint

    tenant = own_tenant(key, payload.tenant_id if payload else None)
    task = _task(task_id)
    try:
        result = runtime_of(request).client.resume(tenant, task)
    except NoUsableCheckpoint:
        raise ApiError(
            409, body("conflict", "task_id", "none of the task's checkpoints is readable")
        ) from None
    if result is None:
        raise NotFound("task_id", task)
    return json_response(
        {
            "checkpoint_id": str(result.checkpoint.checkpoint_id),
            "checkpoint": _checkpoint_json(result.checkpoint),
            "resumed": _checkpoint_json(result.resumed),
            "fell_back_from": [
                {"checkpoint_id": str(f.checkpoint_id), "reason": f.reason}
                for f in result.fell_back_from
            ],
            "calibration": result.calibration.model_dump(mode="json"),
            "calibrated_by": result.calibrated_by,
            "elapsed_s": result.elapsed_s,
        }
    )


@router.post(
    "/v1/tasks/{task_id:path}/checkpoints/{checkpoint_id}/rollback",
    responses=ERRORS,
    summary="Make an earlier checkpoint the newest again",
)
def rollback(
    task_id: TaskIdPath,
    checkpoint_id: CheckpointIdPath,
    request: Request,
    key: Writer,
    payload: Body | None = None,
) -> Response:
    from workers.state.service import CheckpointNotFound

    tenant = own_tenant(key, payload.tenant_id if payload else None)
    target = _checkpoint_id(checkpoint_id)
    try:
        head = runtime_of(request).client.rollback(tenant, _task(task_id), target)
    except CheckpointNotFound:
        raise NotFound("checkpoint_id", str(target)) from None
    except CheckpointFormatError as exc:
        raise _unreadable(exc) from None
    return json_response({"checkpoint_id": str(head)})


@router.post(
    "/v1/tasks/{task_id:path}/complete",
    status_code=202,
    responses=ERRORS,
    summary="The task is finished",
)
def complete_task(
    task_id: TaskIdPath,
    request: Request,
    key: Writer,
    payload: Body | None = None,
) -> Response:
    """Its memories get an L3 task summary in the background."""
    tenant = own_tenant(key, payload.tenant_id if payload else None)
    task = _task(task_id)
    runtime_of(request).client.complete_task(tenant, task)
    return json_response({"task_id": task, "status": "queued"}, 202)
