"""Listing memories and semantic knowledge, page by page: the checked filters, the keyset
cursor and the items, for UIs and audits.

A page is ordered newest first (memories by their time, then id; knowledge by creation time,
then id) and the next page starts after the last item's key, so rows written meanwhile never
shift a page the way an offset would. The cursor is opaque to callers: base64 of the last
key and a fingerprint of the tenant and filters it was issued for, so a cursor is refused
when it is replayed against another tenant or other filters rather than silently resuming
somewhere else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipelines.cognition.knowledge import KnowledgeKind
from pipelines.errors import InvalidInput, UnknownCursor
from pipelines.records import MemoryStatus, MemoryType, check_enum, check_id, check_instant

LIMIT_MAX = 500
LEVEL_PATTERN = "^[Ll]?[0-4]$"
CURSOR_MAX_CHARS = 400
# What encode_cursor writes: unpadded URL-safe base64.
CURSOR_PATTERN = f"^[A-Za-z0-9_-]{{1,{CURSOR_MAX_CHARS}}}$"
ANY_STATUS = "any"
SEMANTIC_STATUSES = ("active", "needs_confirmation", "retired")
# What a listing shows without a status filter: what the read paths can return.
MEMORY_DEFAULT_STATUSES = (MemoryStatus.STORED.value,)
SEMANTIC_DEFAULT_STATUSES = ("active", "needs_confirmation")


class MemoryItem(BaseModel):
    """One memory as a listing shows it. A forgotten memory is its tombstone: id, scope,
    times, status and reason, with content ``""`` and no summary."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    agent_id: str | None
    task_id: str
    session_id: str
    ts: datetime
    type: str | None
    level: int
    status: str
    status_reason: str | None
    content: str
    summary: str | None
    importance: float
    version: int
    supersedes: uuid.UUID | None
    corrected_by: uuid.UUID | None
    superseded_by: uuid.UUID | None
    parent_ids: list[uuid.UUID]
    change_reason: str | None
    forgotten_at: datetime | None
    created_at: datetime
    updated_at: datetime


class SemanticItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    agent_id: str | None
    kind: str | None
    content: str
    confidence: float
    conditions: str | None
    scope: str
    status: str
    source_ids: list[uuid.UUID]
    conflicts_with: uuid.UUID | None
    reason: str | None
    created_at: datetime
    updated_at: datetime


class MemoryPage(BaseModel):
    items: list[MemoryItem]
    next_cursor: str | None


class SemanticPage(BaseModel):
    items: list[SemanticItem]
    next_cursor: str | None


@dataclass(frozen=True)
class Position:
    """The key of the last item of a page: the next page starts strictly after it."""

    at: datetime
    id: uuid.UUID


@dataclass(frozen=True)
class MemoryListing:
    tenant_id: str
    task_id: str | None
    type: str | None
    level: int | None
    statuses: tuple[str, ...] | None  # None: every status, tombstones included
    since: datetime | None
    after: Position | None
    limit: int

    def fingerprint(self) -> str:
        return _fingerprint(
            "memories",
            self.tenant_id,
            self.task_id,
            self.type,
            self.level,
            self.statuses,
            self.since.isoformat() if self.since else None,
        )


@dataclass(frozen=True)
class SemanticListing:
    tenant_id: str
    kind: str | None
    statuses: tuple[str, ...] | None
    after: Position | None
    limit: int

    def fingerprint(self) -> str:
        return _fingerprint("semantic", self.tenant_id, self.kind, self.statuses)


def _fingerprint(*parts: object) -> str:
    text = json.dumps(parts, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInput(
            "limit", f"must be an integer, got {type(limit).__name__}", str(LIMIT_MAX)
        )
    if not 1 <= limit <= LIMIT_MAX:
        raise InvalidInput("limit", f"must be between 1 and {LIMIT_MAX}, got {limit}", "500")
    return limit


def check_level(level: object) -> int | None:
    if level is None:
        return None
    # ASCII only, as the OpenAPI says (LEVEL_PATTERN): str.isdigit() also takes "³", which
    # int() then refuses.
    if isinstance(level, str) and re.fullmatch(LEVEL_PATTERN, level):
        level = int(level[-1])
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 4:
        raise InvalidInput("level", f"must be a level from 0 to 4 (L0-L4), got {level!r}", "0-4")
    return level


def check_since(since: object) -> datetime | None:
    if since is None:
        return None
    if isinstance(since, str):
        try:
            since = datetime.fromisoformat(since)
        except ValueError:
            raise InvalidInput(
                "since", f"is not an ISO 8601 time: {str(since)[:40]!r}", "ISO 8601 with offset"
            ) from None
    if not isinstance(since, datetime):
        raise InvalidInput("since", f"must be a datetime, got {type(since).__name__}")
    if since.utcoffset() is None:
        raise InvalidInput(
            "since", "must be timezone-aware (naive times are ambiguous)", "ISO 8601 with offset"
        )
    return check_instant("since", since)


def _statuses(status: object, allowed: tuple[str, ...], default: tuple[str, ...]) -> Any:
    if status is None:
        return default
    if status == ANY_STATUS:
        return None
    if isinstance(status, str) and status in allowed:
        return (status,)
    raise InvalidInput(
        "status",
        f"unknown value {status!r}; expected one of: {', '.join(allowed)}, {ANY_STATUS}",
    )


def check_memory_listing(
    tenant_id: object,
    *,
    task_id: object = None,
    type: object = None,
    level: object = None,
    status: object = None,
    since: object = None,
    cursor: object = None,
    limit: object = 50,
) -> MemoryListing:
    """The listing's filters, checked; InvalidInput names the field and its limit."""
    tenant = check_id("tenant_id", tenant_id)
    assert tenant is not None
    listing = MemoryListing(
        tenant_id=tenant,
        task_id=check_id("task_id", task_id, required=False),
        type=None if type is None else check_enum("type", type, MemoryType).value,
        level=check_level(level),
        statuses=_statuses(status, tuple(s.value for s in MemoryStatus), MEMORY_DEFAULT_STATUSES),
        since=check_since(since),
        after=None,
        limit=check_limit(limit),
    )
    if cursor is None:
        return listing
    return replace(listing, after=decode_cursor(cursor, listing.fingerprint()))


def check_semantic_listing(
    tenant_id: object,
    *,
    kind: object = None,
    status: object = None,
    cursor: object = None,
    limit: object = 50,
) -> SemanticListing:
    tenant = check_id("tenant_id", tenant_id)
    assert tenant is not None
    listing = SemanticListing(
        tenant_id=tenant,
        kind=None if kind is None else check_enum("kind", kind, KnowledgeKind).value,
        statuses=_statuses(status, SEMANTIC_STATUSES, SEMANTIC_DEFAULT_STATUSES),
        after=None,
        limit=check_limit(limit),
    )
    if cursor is None:
        return listing
    return replace(listing, after=decode_cursor(cursor, listing.fingerprint()))


def encode_cursor(position: Position, fingerprint: str) -> str:
    raw = json.dumps([fingerprint, position.at.isoformat(), str(position.id)])
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: object, fingerprint: str) -> Position:
    if not isinstance(cursor, str) or not re.fullmatch(CURSOR_PATTERN, cursor):
        raise InvalidInput(
            "cursor",
            "is not a cursor this listing returned (URL-safe base64)",
            f"{CURSOR_MAX_CHARS} chars",
        )
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        mark, at, key = json.loads(raw)
        position = Position(at=datetime.fromisoformat(at), id=uuid.UUID(key))
    except (binascii.Error, ValueError, TypeError):
        raise UnknownCursor("cursor", "is malformed: not a cursor this listing returned") from None
    if mark != fingerprint:
        raise UnknownCursor(
            "cursor",
            "was issued for another tenant, listing or filters; start again without a cursor",
        )
    return position


def page_of(
    items: list[Any], limit: int, fingerprint: str, key: str
) -> tuple[list[Any], str | None]:
    """The first ``limit`` of ``items`` (a query asks for one more) and the next cursor."""
    if len(items) <= limit:
        return items, None
    page = items[:limit]
    last = page[-1]
    return page, encode_cursor(Position(at=getattr(last, key), id=last.id), fingerprint)
