"""Task state and the task's lifecycle: ``checkpoint``, ``resume``, ``rollback``,
``complete_task``; and a tenant's golden queries."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, ValidationInfo

from pipelines.errors import InvalidInput
from pipelines.health.golden import (
    MAX_GOLDEN_PER_TENANT,
    QUERY_MAX_CHARS,
    GoldenQuery,
    check_golden_set,
)
from pipelines.records import type_name
from pipelines.requests.base import Args, flag, invalid_from_validation, memory_uuid
from pipelines.requests.write import RequiredId
from pipelines.state.models import TaskState


def _state(value: object, info: ValidationInfo) -> TaskState:
    if isinstance(value, TaskState):
        return value
    if not isinstance(value, dict):
        raise InvalidInput("state", f"must be a TaskState JSON object, got {type_name(value)}")
    try:
        return TaskState.model_validate(value)
    except ValidationError as exc:
        raise invalid_from_validation(exc, prefix="state") from None


class CheckpointArgs(Args):
    """Save where the agent is in a task."""

    tenant_id: RequiredId
    task_id: RequiredId
    state: Annotated[TaskState, BeforeValidator(_state)] = Field(
        description="A TaskState as JSON (working_memory included)."
    )
    phase_transition: Annotated[bool, BeforeValidator(flag)] = Field(
        False, description="Kept by retention however old."
    )


class TaskArgs(Args):
    """One task of a tenant: ``resume`` and ``complete_task``."""

    tenant_id: RequiredId
    task_id: RequiredId


ResumeArgs = TaskArgs
CompleteArgs = TaskArgs


class RollbackArgs(Args):
    """Make an earlier checkpoint the newest again."""

    tenant_id: RequiredId
    task_id: RequiredId
    checkpoint_id: Annotated[uuid.UUID, BeforeValidator(memory_uuid)]


class GoldenItem(Args):
    query: str = Field(min_length=1, max_length=QUERY_MAX_CHARS)
    expected_id: str = Field(description="The memory id it must find (a UUID).")


def _queries(value: object, info: ValidationInfo) -> Any:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInput("queries", f"must be a list, got {type_name(value)}")
    return list(value)


class GoldenArgs(Args):
    """A tenant's golden queries: each a question and the memory it must find."""

    tenant_id: RequiredId
    queries: Annotated[list[Any], BeforeValidator(_queries)] = Field(
        json_schema_extra={
            "items": GoldenItem.model_json_schema(),
            "maxItems": MAX_GOLDEN_PER_TENANT,
        }
    )

    def golden(self) -> list[GoldenQuery]:
        return check_golden_set(self.tenant_id, self.queries)
