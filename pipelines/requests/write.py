"""The write requests: ``record`` (``RecordArgs``) and ``record_many`` (``RecordManyArgs``).
A checked record becomes its :class:`NewMemory` (deterministic id, content hash, the time
now when none was given) with nothing checked again."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo

from pipelines.errors import InvalidInput
from pipelines.records import MemoryType, Modality, check_enum, check_text, content_hash
from pipelines.requests.base import (
    Args,
    Limits,
    content_text,
    instant,
    limits_of,
    optional_id,
    required_id,
)
from pipelines.write.request import (
    IDEMPOTENCY_KEY_MAX_CHARS,
    NewMemory,
    check_write_metadata,
    memory_id_for,
)


def _memory_type(value: object, info: ValidationInfo) -> MemoryType | None:
    return None if value is None else check_enum("type", value, MemoryType)


def _modality(value: object, info: ValidationInfo) -> Modality:
    return check_enum("modality", value, Modality)


def _metadata(value: object, info: ValidationInfo) -> dict[str, Any]:
    return check_write_metadata(value, limits_of(info).metadata_max_bytes)


def _idempotency_key(value: object, info: ValidationInfo) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput("idempotency_key", f"must be a string, got {type(value).__name__}")
    if not value.strip() or len(value) > IDEMPOTENCY_KEY_MAX_CHARS:
        raise InvalidInput(
            "idempotency_key",
            f"must be 1-{IDEMPOTENCY_KEY_MAX_CHARS} characters, got {len(value)}",
            limit=f"{IDEMPOTENCY_KEY_MAX_CHARS} chars",
        )
    return check_text("idempotency_key", value, IDEMPOTENCY_KEY_MAX_CHARS * 4)


RequiredId = Annotated[
    str,
    BeforeValidator(required_id),
    Field(
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$",
        description="1-128 characters of letters, digits and . _ : @ / + -",
    ),
]
OptionalId = Annotated[
    str | None,
    BeforeValidator(optional_id),
    Field(description="An id with the same rules as task_id (1-128 characters), or null."),
]
Content = Annotated[str, BeforeValidator(content_text), Field(min_length=1)]
Timestamp = Annotated[datetime | None, BeforeValidator(instant)]
Metadata = Annotated[dict[str, Any], BeforeValidator(_metadata)]


class RecordArgs(Args):
    """One interaction to record (``MemoryClient.record``, ``POST /v1/memories``)."""

    content: Content = Field(description="The interaction, as text (at most content_max_bytes).")
    tenant_id: RequiredId
    task_id: RequiredId = Field(description="The task this interaction belongs to.")
    session_id: RequiredId = Field(description="The session (conversation) of the interaction.")
    type: Annotated[MemoryType | None, BeforeValidator(_memory_type)] = Field(
        None, description="Omitted: the workers decide."
    )
    user_id: OptionalId = None
    agent_id: OptionalId = None
    timestamp: Timestamp = Field(None, description="ISO 8601 with a zone; default now.")
    modality: Annotated[Modality, BeforeValidator(_modality)] = Modality.TEXT
    metadata: Metadata = Field(
        default_factory=dict, description="A JSON object (size and depth limited)."
    )
    idempotency_key: Annotated[str | None, BeforeValidator(_idempotency_key)] = Field(
        None, description=f"Unique within the tenant; 1-{IDEMPOTENCY_KEY_MAX_CHARS} characters."
    )

    def new_memory(self) -> NewMemory:
        """The row to insert: its deterministic id, so that a retried call gets the id of its
        first attempt."""
        digest = content_hash(self.content)
        return NewMemory(
            id=memory_id_for(
                self.tenant_id, self.task_id, self.session_id, digest, self.idempotency_key
            ),
            tenant_id=self.tenant_id,
            user_id=self.user_id,
            agent_id=self.agent_id,
            task_id=self.task_id,
            session_id=self.session_id,
            timestamp=self.timestamp or datetime.now(UTC),
            type=self.type,
            content=self.content,
            content_hash=digest,
            modality=self.modality,
            metadata=self.metadata,
            idempotency_key=self.idempotency_key,
        )


def _items(value: object, info: ValidationInfo) -> object:
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise InvalidInput("items", f"must be a list of records, got {type(value).__name__}")
    items = list(value)
    bound = limits_of(info).batch_max_items
    if bound is not None and not 1 <= len(items) <= bound:
        raise InvalidInput(
            "items", f"must hold 1-{bound} memories, got {len(items)}", f"{bound} items"
        )
    for index, item in enumerate(items):
        if not isinstance(item, Mapping | RecordArgs):
            raise InvalidInput(
                f"items[{index}]",
                f"must be an object of record()'s fields, got {type(item).__name__}",
            )
    return [item if isinstance(item, dict | RecordArgs) else dict(item) for item in items]


class RecordManyArgs(Args):
    """Several interactions; every one is checked before any is written."""

    items: Annotated[list[RecordArgs], BeforeValidator(_items)] = Field(
        description="The memories; all are checked before any is."
    )

    def new_memories(self) -> list[NewMemory]:
        return [item.new_memory() for item in self.items]


def prepare_write(
    content: object,
    *,
    content_max_bytes: int = 65536,
    metadata_max_bytes: int = 8192,
    **fields: object,
) -> NewMemory:
    """Check one write and give it its deterministic id (``RecordArgs`` with these limits)."""
    limits = Limits(content_max_bytes=content_max_bytes, metadata_max_bytes=metadata_max_bytes)
    data = {"content": content, **{k: v for k, v in fields.items() if v is not None}}
    return RecordArgs.parse(data, limits).new_memory()
