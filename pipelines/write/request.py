"""A write request: ``prepare_write`` checks what ``MemoryClient.record`` was given and
gives it its deterministic id, so that a retried call gets the id of its first attempt.
Pure: nothing is stored.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipelines.errors import InvalidInput
from pipelines.records import (
    ID_NAMESPACE,
    MemoryType,
    Modality,
    check_enum,
    check_id,
    check_metadata,
    check_text,
    check_timestamp,
    content_hash,
    type_name,
)

IDEMPOTENCY_KEY_MAX_CHARS = 200


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
