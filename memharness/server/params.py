"""Path and query parameters as the OpenAPI declares them: the rule each is checked by
(``pipelines.records.check_id``, a UUID, ``pipelines.own.listing``), written into the schema so
that a client (and schemathesis) knows which values are valid. The checks themselves stay
where they are, in one place: these annotations only document them (``json_schema_extra``),
so FastAPI adds no second, differently worded check."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from pipelines.cognition.knowledge import KnowledgeKind
from pipelines.own.listing import (
    ANY_STATUS,
    CURSOR_PATTERN,
    LEVEL_PATTERN,
    LIMIT_MAX,
    SEMANTIC_STATUSES,
)
from pipelines.records import ID_MAX_CHARS, ID_PATTERN, MemoryStatus, MemoryType
from pipelines.state.models import CHECKPOINT_LIST_MAX

_UUID = {"format": "uuid"}
_ID = {"pattern": ID_PATTERN, "maxLength": ID_MAX_CHARS}

MemoryIdPath = Annotated[str, Path(description="A memory's id (UUID).", json_schema_extra=_UUID)]
RequestIdPath = Annotated[
    str, Path(description="The erasure's request_id (UUID).", json_schema_extra=_UUID)
]
CheckpointIdPath = Annotated[
    str, Path(description="A checkpoint's id (UUID).", json_schema_extra=_UUID)
]
TaskIdPath = Annotated[
    str,
    Path(
        description="1-128 letters, digits and . _ : @ / + -, starting with a letter or digit.",
        json_schema_extra=_ID,
    ),
]


def _enum(values: list[str]) -> dict[str, object]:
    return {"enum": values}


_MEMORY_STATUSES = [status.value for status in MemoryStatus] + [ANY_STATUS]
_SEMANTIC_STATUSES = [*SEMANTIC_STATUSES, ANY_STATUS]
_PAGE = {"minimum": 1, "maximum": LIMIT_MAX}

TaskIdQuery = Annotated[str | None, Query(description="Only this task.", json_schema_extra=_ID)]
TypeQuery = Annotated[
    str | None, Query(description="Only this type.", json_schema_extra=_enum(list(MemoryType)))
]
LevelQuery = Annotated[
    str | None,
    Query(
        description="Only this level: 0-4 or L0-L4.", json_schema_extra={"pattern": LEVEL_PATTERN}
    ),
]
MemoryStatusQuery = Annotated[
    str | None,
    Query(
        description=f"stored (default), another status, or {ANY_STATUS}",
        json_schema_extra=_enum(_MEMORY_STATUSES),
    ),
]
SinceQuery = Annotated[
    str | None,
    Query(
        description="ISO 8601 with an offset; only memories from then.",
        json_schema_extra={"format": "date-time"},
    ),
]
CursorQuery = Annotated[
    str | None,
    Query(
        description="next_cursor of the previous page (404: no page of this listing gave it).",
        json_schema_extra={"pattern": CURSOR_PATTERN},
    ),
]
PageLimitQuery = Annotated[int, Query(description="At most this many.", json_schema_extra=_PAGE)]
KindQuery = Annotated[
    str | None,
    Query(description="Only this kind.", json_schema_extra=_enum(list(KnowledgeKind))),
]
SemanticStatusQuery = Annotated[
    str | None,
    Query(
        description=f"active and needs_confirmation (default), one of them, or {ANY_STATUS}",
        json_schema_extra=_enum(_SEMANTIC_STATUSES),
    ),
]
CheckpointLimitQuery = Annotated[
    int,
    Query(
        description=f"Newest first, at most this many (1-{CHECKPOINT_LIST_MAX}).",
        json_schema_extra={"minimum": 1, "maximum": CHECKPOINT_LIST_MAX},
    ),
]
