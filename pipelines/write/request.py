"""What a checked write is: :class:`NewMemory` with its deterministic id (so that a retried
call gets the id of its first attempt), and the metadata rule. The request that produces it
is ``pipelines.requests.write.RecordArgs``. Pure: nothing is stored.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipelines.errors import InvalidInput
from pipelines.records import (
    ID_NAMESPACE,
    MemoryType,
    Modality,
    type_name,
)

IDEMPOTENCY_KEY_MAX_CHARS = 200
# Nesting of metadata objects and arrays. Tags, a few labelled groups and an occasional
# structured payload sit within 4-6 levels; 32 leaves room for any real shape while keeping
# every walk over it (jsonb, the JSON encoder, the workers' context text) far from Python's
# recursion limit, which a 1,000-deep value used to hit.
METADATA_MAX_DEPTH = 32


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


def check_write_metadata(value: object, max_bytes: int) -> dict[str, Any]:
    """``metadata`` as the JSON object it must be, or :class:`InvalidInput` on ``metadata``
    saying where the first bad part is (``metadata.tags[2]``) and the rule it breaks: an
    object at the top, string keys, JSON values only (finite numbers), at most
    ``METADATA_MAX_DEPTH`` levels and ``max_bytes`` of JSON. The walk is iterative and
    bounded by the depth, so no shape can exhaust the stack."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(
            "metadata", f"must be a JSON object, got {type_name(value)}", limit="JSON object"
        )
    top = dict(value)
    stack: list[tuple[str, object, int]] = [("metadata", top, 1)]
    while stack:
        path, node, depth = stack.pop()
        if isinstance(node, Mapping | list | tuple):
            if depth > METADATA_MAX_DEPTH:
                raise _bad_part(
                    path,
                    f"nests deeper than {METADATA_MAX_DEPTH} levels of objects and arrays",
                    f"{METADATA_MAX_DEPTH} levels",
                )
            if isinstance(node, Mapping):
                for key, child in node.items():
                    if not isinstance(key, str):
                        raise _bad_part(
                            path, f"has a key of type {type_name(key)}; JSON keys are strings"
                        )
                    stack.append((f"{path}.{key}", child, depth + 1))
            else:
                for index, child in enumerate(node):
                    stack.append((f"{path}[{index}]", child, depth + 1))
        elif isinstance(node, float) and not math.isfinite(node):
            raise _bad_part(path, f"is {node}, which JSON cannot hold")
        elif node is not None and not isinstance(node, str | int | float):
            raise _bad_part(path, f"is a {type_name(node)}, not a JSON value")
    try:
        encoded = json.dumps(top, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(encoded.encode("utf-8"))
    except (TypeError, ValueError) as exc:  # a mapping or list type that lies about itself
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
    return top


def _bad_part(path: str, message: str, limit: str | None = None) -> InvalidInput:
    where = "" if path == "metadata" else f"{path} "
    return InvalidInput("metadata", f"{where}{message}".strip(), limit)
