"""Records of the memory system that every path shares: memories, their types, levels
and statuses, the phase of a task, and the input checks every request makes.

A check that fails raises :class:`pipelines.errors.InvalidInput`, which names the field and
the limit; nothing here talks to a store, so a bad input is refused before anything is
written.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from enum import IntEnum, StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from pipelines.errors import InvalidInput

# The namespace of every deterministic id of the project (memory ids, decision ids). Fixed
# forever: changing it would make a replayed write produce a second memory.
ID_NAMESPACE = uuid.UUID("6f1c1e4e-6a8b-5b43-9d0e-8b7f3f0c2a11")

# Tenant, task, session, user and agent ids: printable, no spaces, short enough to index.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$"
_ID_RE = re.compile(ID_PATTERN)
ID_MAX_CHARS = 128


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
    # Replaced by a newer version (``corrected_by``): kept for history, never recalled.
    CORRECTED = "corrected"
    # Erased on request: a tombstone with its id, scope, time and reason, and no content.
    FORGOTTEN = "forgotten"


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


# The instants every store can hold and give back: PostgreSQL's timestamptz reaches from
# 4713 BC to 294276 AD, but a value must also load into a Python datetime (years 1-9999 in
# UTC, which is how the column keeps it), or every read of its row fails.
INSTANT_RANGE = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"


def check_instant(field: str, value: datetime) -> datetime:
    """``value`` if it is timezone-aware and has a UTC equivalent a datetime can hold:
    ``9999-12-31T23:59:59-12:00`` is year 10000 in UTC, which PostgreSQL would store and no
    read could load."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(field, "must be timezone-aware (naive datetimes are ambiguous)")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(
            field, f"is outside {INSTANT_RANGE} once converted to UTC", INSTANT_RANGE
        ) from None
    return value


def _utc_representable(value: datetime) -> datetime:
    try:
        return check_instant("value", value)
    except InvalidInput as exc:
        raise ValueError(exc.message) from None


# A field of a record that comes from outside (an import line): what ``check_instant`` allows.
Instant = Annotated[AwareDatetime, AfterValidator(_utc_representable)]


def check_timestamp(value: object) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if not isinstance(value, datetime):
        raise InvalidInput("timestamp", f"must be a datetime, got {type(value).__name__}")
    return check_instant("timestamp", value)


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
    # Versions: a correction's row ``supersedes`` the one it replaced, which is ``corrected_by``
    # it; ``change_reason`` says why (a correction's or an erasure's reason).
    version: int = Field(1, ge=1)
    supersedes: uuid.UUID | None = None
    corrected_by: uuid.UUID | None = None
    change_reason: str | None = None
    forgotten_at: datetime | None = None

    @field_validator("timestamp", "last_accessed_at", "forgotten_at")
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


def content_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def type_name(value: object) -> str:
    return builtins.type(value).__name__


class TaskPhase(StrEnum):
    PLANNING = "planning"
    EXECUTION = "execution"
    DEBUGGING = "debugging"
    REVIEW = "review"
    REFLECTION = "reflection"
