"""Records of the memory system as pydantic models, and the input checks of the write path.

Limits raise :class:`InvalidInput`, which names the field and the limit; nothing here talks to
a store, so a bad input is refused before anything is written.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from enum import IntEnum, StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The namespace of every deterministic id of the project (memory ids, decision ids). Fixed
# forever: changing it would make a replayed write produce a second memory.
ID_NAMESPACE = uuid.UUID("6f1c1e4e-6a8b-5b43-9d0e-8b7f3f0c2a11")

# Tenant, task, session, user and agent ids: printable, no spaces, short enough to index.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$")
ID_MAX_CHARS = 128
IDEMPOTENCY_KEY_MAX_CHARS = 200


class InvalidInput(ValueError):
    """A value the caller passed breaks a rule; ``field`` names it and ``limit`` the rule."""

    def __init__(self, field: str, message: str, limit: str | None = None) -> None:
        self.field = field
        self.limit = limit
        super().__init__(f"{field}: {message}")


class MemoryType(StrEnum):
    DECISION = "decision"
    ACTION = "action"
    OBSERVATION = "observation"
    FEEDBACK = "feedback"
    STATUS_CHANGE = "status_change"
    PREFERENCE = "preference"


class Level(IntEnum):
    """L0 raw, L1 fine summary, L2 phase summary, L3 task summary, L4 semantic knowledge."""

    L0 = 0
    L1 = 1
    L2 = 2
    L3 = 3
    L4 = 4


class Modality(StrEnum):
    TEXT = "text"
    CODE = "code"


class MemoryStatus(StrEnum):
    PENDING = "pending"
    STORED = "stored"
    DISCARDED = "discarded"
    DEAD = "dead"
    # A summary rolled back by quality sampling: kept for the record, never recalled.
    RETIRED = "retired"
    # Forgotten by the decay model: the row stays (a rollback may still read it), the vector
    # point is gone.
    EVICTED = "evicted"


def check_id(field: str, value: object, *, required: bool = True) -> str | None:
    if value is None:
        if required:
            raise InvalidInput(field, "is required")
        return None
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, got {type(value).__name__}")
    if not _ID_RE.fullmatch(value):
        raise InvalidInput(
            field,
            f"malformed id {value[:40]!r}: 1-{ID_MAX_CHARS} characters of letters, digits "
            "and . _ : @ / + -, starting with a letter or digit",
            limit=f"{ID_MAX_CHARS} chars",
        )
    return value


def check_text(field: str, value: object, max_bytes: int) -> str:
    """Return ``value`` as a clean ``str``: UTF-8 decodable, no lone surrogates, not blank."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                field, f"is not valid UTF-8 (bad byte at offset {exc.start})"
            ) from None
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be text (str or UTF-8 bytes), got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            field, f"holds a lone surrogate at character {exc.start}; it is not valid Unicode"
        ) from None
    if "\x00" in value:
        raise InvalidInput(field, "holds a NUL character, which PostgreSQL text cannot store")
    if not value.strip():
        raise InvalidInput(field, "is empty or only whitespace")
    if size > max_bytes:
        raise InvalidInput(
            field,
            f"is {size} bytes of UTF-8; the limit is {max_bytes} bytes",
            limit=f"{max_bytes} bytes",
        )
    return value


def check_metadata(value: object, max_bytes: int) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput("metadata", f"must be a JSON object, got {type(value).__name__}")
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(encoded.encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput("metadata", f"is not JSON-serialisable: {exc}") from None
    except UnicodeEncodeError:
        raise InvalidInput("metadata", "holds a lone surrogate; it is not valid Unicode") from None
    if "\\u0000" in encoded:
        raise InvalidInput("metadata", "holds a NUL character, which PostgreSQL jsonb refuses")
    if size > max_bytes:
        raise InvalidInput(
            "metadata",
            f"is {size} bytes as JSON; the limit is {max_bytes} bytes",
            limit=f"{max_bytes} bytes",
        )
    return value


E = TypeVar("E", bound=StrEnum)


def check_enum(field: str, value: object, enum: type[E]) -> E:
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        try:
            return enum(value)
        except ValueError:
            pass
    allowed = ", ".join(member.value for member in enum)
    raise InvalidInput(field, f"unknown value {value!r}; expected one of: {allowed}")


def check_timestamp(value: object) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if not isinstance(value, datetime):
        raise InvalidInput("timestamp", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput("timestamp", "must be timezone-aware (naive datetimes are ambiguous)")
    return value


class Scope(BaseModel):
    """Who a memory belongs to. ``tenant_id`` is the isolation boundary of every query."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    user_id: str | None = None
    agent_id: str | None = None


class EpisodicMemory(BaseModel):
    """One interaction as the system of record keeps it."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None = None
    agent_id: str | None = None
    task_id: str
    session_id: str
    timestamp: datetime
    type: MemoryType | None = None
    content: str
    summary: str | None = None
    embedding_version: str | None = None
    importance: float = Field(0.5, ge=0.0, le=1.0)
    access_count: int = Field(0, ge=0)
    last_accessed_at: datetime | None = None
    related_memory_ids: tuple[uuid.UUID, ...] = ()
    decay_factor: float = Field(1.0, ge=0.0, le=1.0)
    level: Level = Level.L0
    modality: Modality = Modality.TEXT
    metadata: dict[str, Any] = Field(default_factory=dict)
    status: MemoryStatus = MemoryStatus.PENDING
    status_reason: str | None = None

    @field_validator("timestamp", "last_accessed_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError("must be timezone-aware")
        return value


class SemanticMemory(BaseModel):
    """Reusable knowledge consolidated from episodes."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None = None
    agent_id: str | None = None
    content: str
    confidence: float = Field(ge=0.0, le=1.0)
    source_memory_ids: tuple[uuid.UUID, ...] = ()
    scope: str = "tenant"
    conditions: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


class NewMemory(BaseModel):
    """A validated write request: what ``MemoryClient.record`` inserts."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    agent_id: str | None
    task_id: str
    session_id: str
    timestamp: datetime
    type: MemoryType | None
    content: str
    content_hash: bytes
    modality: Modality
    metadata: dict[str, Any]
    idempotency_key: str | None


def memory_id_for(
    tenant_id: str, task_id: str, session_id: str, content_hash: bytes, key: str | None
) -> uuid.UUID:
    """The deterministic id of a write: a retried call gets the id of its first attempt.

    A caller's key is unique within the tenant (like an HTTP Idempotency-Key); without one the
    content hash stands in for it within (tenant, task, session).
    """
    if key is not None:
        return uuid.uuid5(ID_NAMESPACE, f"key\x1f{tenant_id}\x1f{key}")
    return uuid.uuid5(
        ID_NAMESPACE, f"hash\x1f{tenant_id}\x1f{task_id}\x1f{session_id}\x1f{content_hash.hex()}"
    )


def prepare_write(
    content: object,
    *,
    tenant_id: object,
    task_id: object,
    session_id: object,
    type: object = None,
    user_id: object = None,
    agent_id: object = None,
    timestamp: object = None,
    modality: object = "text",
    metadata: object = None,
    idempotency_key: object = None,
    content_max_bytes: int = 65536,
    metadata_max_bytes: int = 8192,
) -> NewMemory:
    """Validate a write request and give it its deterministic id. Pure: nothing is stored."""
    tenant = check_id("tenant_id", tenant_id)
    task = check_id("task_id", task_id)
    session = check_id("session_id", session_id)
    assert tenant is not None and task is not None and session is not None
    user = check_id("user_id", user_id, required=False)
    agent = check_id("agent_id", agent_id, required=False)
    text = check_text("content", content, content_max_bytes)
    memory_type = None if type is None else check_enum("type", type, MemoryType)
    mode = check_enum("modality", modality, Modality)
    meta = check_metadata(metadata, metadata_max_bytes)
    when = check_timestamp(timestamp)
    key: str | None = None
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str):
            raise InvalidInput(
                "idempotency_key", f"must be a string, got {type_name(idempotency_key)}"
            )
        if not idempotency_key.strip() or len(idempotency_key) > IDEMPOTENCY_KEY_MAX_CHARS:
            raise InvalidInput(
                "idempotency_key",
                f"must be 1-{IDEMPOTENCY_KEY_MAX_CHARS} characters, got {len(idempotency_key)}",
                limit=f"{IDEMPOTENCY_KEY_MAX_CHARS} chars",
            )
        check_text("idempotency_key", idempotency_key, IDEMPOTENCY_KEY_MAX_CHARS * 4)
        key = idempotency_key
    digest = content_hash(text)
    return NewMemory(
        id=memory_id_for(tenant, task, session, digest, key),
        tenant_id=tenant,
        user_id=user,
        agent_id=agent,
        task_id=task,
        session_id=session,
        timestamp=when,
        type=memory_type,
        content=text,
        content_hash=digest,
        modality=mode,
        metadata=meta,
        idempotency_key=key,
    )


def content_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def type_name(value: object) -> str:
    return builtins.type(value).__name__
