"""Owning what is stored: ``correct``, ``undo_correction``, ``forget``, ``history``, the
listings, ``export`` and ``import``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, model_validator

from pipelines.errors import InvalidInput
from pipelines.own.listing import LIMIT_MAX, MemoryListing, check_memory_listing
from pipelines.own.versions import (
    ACTOR_MAX_CHARS,
    REASON_MAX_CHARS,
    ForgetCall,
    check_forget_call,
    check_reason,
)
from pipelines.records import MemoryType, check_enum
from pipelines.requests.base import Args, bounded_int, flag, instant, memory_uuid, optional_uuid
from pipelines.requests.write import Content, OptionalId, RequiredId

MemoryId = Annotated[
    uuid.UUID, BeforeValidator(memory_uuid), Field(description="A memory id (a UUID).")
]


def _reason(value: object, info: ValidationInfo) -> str:
    return check_reason("reason", value)


def _actor(value: object, info: ValidationInfo) -> str:
    return check_reason("actor", value, max_chars=ACTOR_MAX_CHARS)


def _optional_type(value: object, info: ValidationInfo) -> MemoryType | None:
    return None if value is None else check_enum("type", value, MemoryType)


def _optional_metadata(value: object, info: ValidationInfo) -> dict[str, Any] | None:
    if value is None:
        return None
    from pipelines.requests.base import limits_of
    from pipelines.write.request import check_write_metadata

    return check_write_metadata(value, limits_of(info).metadata_max_bytes)


Reason = Annotated[
    str,
    BeforeValidator(_reason),
    Field(min_length=1, max_length=REASON_MAX_CHARS, description="Why; kept in the history."),
]
Actor = Annotated[str, BeforeValidator(_actor), Field(min_length=1, max_length=ACTOR_MAX_CHARS)]


class CorrectArgs(Args):
    """Replace what a memory says with a new version."""

    memory_id: MemoryId
    new_content: Content = Field(description="What the memory says now.")
    tenant_id: RequiredId
    reason: Reason
    actor: Actor = "client"
    type: Annotated[MemoryType | None, BeforeValidator(_optional_type)] = None
    metadata: Annotated[dict[str, Any] | None, BeforeValidator(_optional_metadata)] = None


class UndoArgs(Args):
    """Undo an automatic supersession of ``memory_id``."""

    memory_id: MemoryId
    tenant_id: RequiredId
    reason: Reason
    actor: Actor = "client"


class ForgetArgs(Args):
    """Erase exactly one target: a memory, a task, a session or the whole tenant."""

    tenant_id: RequiredId
    reason: Reason
    actor: Actor = "client"
    memory_id: Annotated[uuid.UUID | None, BeforeValidator(optional_uuid)] = None
    task_id: OptionalId = None
    session_id: OptionalId = None
    whole_tenant: Annotated[bool, BeforeValidator(flag)] = False

    @model_validator(mode="after")
    def _one_target(self) -> ForgetArgs:
        given = [
            name
            for name in ("memory_id", "task_id", "session_id")
            if getattr(self, name) is not None
        ] + (["whole_tenant"] if self.whole_tenant else [])
        if len(given) != 1:
            raise InvalidInput(
                "target",
                f"give exactly one of memory_id, task_id, session_id, whole_tenant=True; got "
                f"{', '.join(given) or 'none'}",
                "one target",
            )
        return self

    def call(self) -> ForgetCall:
        # The values are checked; this only picks the one target (and refuses two).
        return check_forget_call(
            tenant_id=self.tenant_id,
            reason=self.reason,
            actor=self.actor,
            memory_id=self.memory_id,
            task_id=self.task_id,
            session_id=self.session_id,
            whole_tenant=self.whole_tenant,
        )


class HistoryArgs(Args):
    """Every version of a memory and what happened to each."""

    memory_id: MemoryId
    tenant_id: RequiredId


class ListArgs(Args):
    """A page of a tenant's memories, newest first."""

    tenant_id: RequiredId
    task_id: OptionalId = None
    type: Annotated[MemoryType | None, BeforeValidator(_optional_type)] = None
    level: int | str | None = Field(None, description="0-4, or L0-L4.")
    status: str | None = Field(None, description="A memory status, or any.")
    since: Annotated[datetime | None, BeforeValidator(instant)] = None
    cursor: str | None = None
    limit: Annotated[int, BeforeValidator(bounded_int(1, LIMIT_MAX))] = Field(
        50, ge=1, le=LIMIT_MAX
    )

    def listing(self) -> MemoryListing:
        return check_memory_listing(
            self.tenant_id,
            task_id=self.task_id,
            type=self.type,
            level=self.level,
            status=self.status,
            since=self.since,
            cursor=self.cursor,
            limit=self.limit,
        )


class ExportArgs(Args):
    """A tenant's whole store as ``memharness.export/1`` JSON Lines."""

    tenant_id: RequiredId
