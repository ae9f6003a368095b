"""The export format ``memharness.export/1``: JSON Lines, one record per line, each a kind.

A file is a ``header`` line, then the tenant's ``memory`` lines, ``link`` lines, ``semantic``
lines, ``event`` lines (``memory_events``) and ``checkpoint`` lines, in that order, and one
``end`` line whose counts say how many lines of each kind came before it: a file cut short
has no end line (or counts that disagree), so a truncated copy is refused instead of being
half imported. Lines carry no tenant: the header names it once.

What a memory line leaves out, and why: vectors (the target embeds with its own embedder),
``search_tsv`` (the target's trigger computes it) and ``content_hash`` (recomputed from the
content, as the write path computes it). A forgotten memory is a tombstone: id, scope,
times, status and reason, with content ``""`` and no summary or metadata.

Every line kind is a pydantic model that refuses unknown fields; :func:`read_export` checks
a whole stream line by line and raises :class:`InvalidInput` whose field names the line
number and the field (``line 17: memory.ts``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from pipelines.errors import InvalidInput
from pipelines.records import Instant, MemoryStatus, MemoryType, Modality, check_id

SCHEMA = "memharness.export/1"
# The order of the sections; a line of an earlier kind after a later one is refused.
KINDS = ("header", "memory", "link", "semantic", "event", "checkpoint", "end")
COUNTED = ("memory", "link", "semantic", "event", "checkpoint")


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("holds a NUL character, which PostgreSQL text cannot store")
    return value


def _scope_id(value: str) -> str:
    try:
        check_id("id", value)
    except InvalidInput as exc:
        raise ValueError(exc.message) from None
    return value


Text = Annotated[str, AfterValidator(_no_nul)]
ScopeId = Annotated[str, AfterValidator(_scope_id)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class HeaderLine(_Line):
    kind: Literal["header"] = "header"
    # ``schema`` is a BaseModel attribute: the field is named apart and written as "schema".
    schema_id: str = Field(alias="schema")
    tenant_id: str
    exported_at: Instant
    embedding_version: str | None = None

    @field_validator("schema_id")
    @classmethod
    def _known_schema(cls, value: str) -> str:
        if value != SCHEMA:
            raise ValueError(f"unsupported schema {value[:60]!r}; this version reads {SCHEMA}")
        return value

    @field_validator("tenant_id")
    @classmethod
    def _tenant(cls, value: str) -> str:
        check_id("tenant_id", value)
        return value


class MemoryLine(_Line):
    kind: Literal["memory"] = "memory"
    id: uuid.UUID
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    task_id: ScopeId
    session_id: ScopeId
    ts: Instant
    type: MemoryType | None = None
    content: Text
    summary: Text | None = None
    idempotency_key: Text | None = None
    importance: float = Field(0.5, ge=0.0, le=1.0)
    access_count: int = Field(0, ge=0)
    last_accessed_at: Instant | None = None
    related_ids: list[uuid.UUID] = Field(default_factory=list)
    decay_factor: float = Field(1.0, ge=0.0, le=1.0)
    level: int = Field(0, ge=0, le=4)
    modality: Modality = Modality.TEXT
    metadata: dict[str, Any] = Field(default_factory=dict)
    status: MemoryStatus
    status_reason: Text | None = None
    version: int = Field(1, ge=1)
    parent_ids: list[uuid.UUID] = Field(default_factory=list)
    superseded_by: uuid.UUID | None = None
    supersedes: uuid.UUID | None = None
    corrected_by: uuid.UUID | None = None
    change_reason: Text | None = None
    forgotten_at: Instant | None = None
    linked_at: Instant | None = None
    created_at: Instant
    updated_at: Instant

    @model_validator(mode="after")
    def _tombstone(self) -> MemoryLine:
        if self.status is MemoryStatus.FORGOTTEN:
            if self.content or self.summary or self.metadata:
                raise ValueError("a forgotten memory carries no content, summary or metadata")
        elif not self.content.strip():
            raise ValueError("content is empty; only a forgotten memory has no content")
        return self


class LinkLine(_Line):
    kind: Literal["link"] = "link"
    src_id: uuid.UUID
    dst_id: uuid.UUID
    link_kind: Literal["entity", "similar", "causal"]
    weight: float = 1.0
    reason: Text = ""
    created_at: Instant


class SemanticLine(_Line):
    kind: Literal["semantic"] = "semantic"
    id: uuid.UUID
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    scope: Text = "tenant"
    knowledge_kind: Text | None = None
    content: Text = Field(min_length=1)
    confidence: float = Field(ge=0.0, le=1.0)
    source_ids: list[uuid.UUID] = Field(default_factory=list)
    conditions: Text | None = None
    status: Literal["active", "needs_confirmation", "retired"]
    conflicts_with: uuid.UUID | None = None
    reason: Text | None = None
    created_at: Instant
    updated_at: Instant


class EventLine(_Line):
    kind: Literal["event"] = "event"
    subject: Literal["memory", "semantic"] = "memory"
    memory_id: uuid.UUID
    event: Literal[
        "corrected", "superseded", "summary_stale", "rederived", "retired", "forgotten", "imported"
    ]
    version: int | None = None
    related_id: uuid.UUID | None = None
    reason: Text | None = None
    actor: Text | None = None
    at: Instant
    detail: dict[str, Any] = Field(default_factory=dict)


class CheckpointLine(_Line):
    """A checkpoint's body as it is stored (the codec's own checksum is inside it), base64;
    ``body_sha256`` lets the import refuse a body damaged in transit before it is saved."""

    kind: Literal["checkpoint"] = "checkpoint"
    id: uuid.UUID
    task_id: ScopeId
    parent_id: uuid.UUID | None = None
    created_at: Instant
    format_version: int = Field(ge=1)
    is_phase_transition: bool = False
    iteration: int = Field(0, ge=0)
    body_b64: str
    body_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _checksum(self) -> CheckpointLine:
        if hashlib.sha256(self.body()).hexdigest() != self.body_sha256:
            raise ValueError("body does not match body_sha256: damaged in transit")
        return self

    def body(self) -> bytes:
        try:
            return base64.b64decode(self.body_b64, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"body_b64 is not base64: {exc}") from None

    @staticmethod
    def encode_body(body: bytes) -> dict[str, str]:
        return {
            "body_b64": base64.b64encode(body).decode("ascii"),
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }


class LineCounts(_Line):
    """Lines of each counted kind."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    memory: int = Field(0, ge=0)
    link: int = Field(0, ge=0)
    semantic: int = Field(0, ge=0)
    event: int = Field(0, ge=0)
    checkpoint: int = Field(0, ge=0)

    def add(self, kind: str, n: int = 1) -> None:
        setattr(self, kind, getattr(self, kind) + n)

    @property
    def total(self) -> int:
        return self.memory + self.link + self.semantic + self.event + self.checkpoint


# What an export wrote, per kind: the counts its end line carries.
ExportCounts = LineCounts


class EndLine(_Line):
    kind: Literal["end"] = "end"
    counts: LineCounts


ExportLine = (
    HeaderLine | MemoryLine | LinkLine | SemanticLine | EventLine | CheckpointLine | EndLine
)
_LINE: TypeAdapter[ExportLine] = TypeAdapter(Annotated[ExportLine, Field(discriminator="kind")])


def dump_line(line: ExportLine) -> str:
    """One line of the file, without its newline."""
    return line.model_dump_json(by_alias=True)


def parse_line(text: str | bytes, line_no: int) -> ExportLine:
    """One line checked against its kind's model; InvalidInput names the line and field."""
    try:
        return _LINE.validate_json(text)
    except ValidationError as exc:
        raise _line_error(exc, line_no) from None


def _line_error(exc: ValidationError, line_no: int) -> InvalidInput:
    error = exc.errors(include_url=False)[0]
    loc = [str(part) for part in error["loc"]]
    kind = error["type"]
    if kind == "json_invalid":
        return InvalidInput(f"line {line_no}", f"is not JSON: {error['msg']}")
    if kind in {"union_tag_invalid", "union_tag_not_found"} or not loc:
        return InvalidInput(
            f"line {line_no}: kind",
            f"unknown or missing kind; a line is one of: {', '.join(KINDS)}",
        )
    section, fields = loc[0], loc[1:]
    name = "schema" if fields == ["schema_id"] else ".".join(fields)
    where = f"{section}.{name}" if name else section
    message = error["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        message = f"unknown field (schema {SCHEMA} has no such field)"
    return InvalidInput(f"line {line_no}: {where}", message)


class ExportReader:
    """Checks a whole file as it streams: the header first, the sections in order, nothing
    after the end line, and end counts equal to the lines read. Iterating yields
    ``(line_no, line)`` for every line after the header (the end line included); raises
    InvalidInput at the first problem. ``header`` is set once the first line was read."""

    def __init__(self, lines: Iterable[str | bytes]) -> None:
        self._lines = lines
        self.header: HeaderLine | None = None
        self.counts = LineCounts()
        self.line_no = 0

    def __iter__(self) -> Iterator[tuple[int, ExportLine]]:
        section = 0
        ended = False
        for raw in self._lines:
            self.line_no += 1
            text = raw.rstrip(b"\r\n") if isinstance(raw, bytes) else raw.rstrip("\r\n")
            if not text.strip():
                raise InvalidInput(f"line {self.line_no}", "is empty; every line is a record")
            if ended:
                raise InvalidInput(f"line {self.line_no}", "follows the end line")
            line = parse_line(text, self.line_no)
            position = KINDS.index(line.kind)
            if self.header is None:
                if not isinstance(line, HeaderLine):
                    raise InvalidInput(
                        f"line {self.line_no}: kind",
                        f"the first line must be the header, got {line.kind!r}",
                    )
                self.header = line
                continue
            if position < section or isinstance(line, HeaderLine):
                raise InvalidInput(
                    f"line {self.line_no}: kind",
                    f"{line.kind!r} after {KINDS[section]!r}; the sections come in the order "
                    + ", ".join(KINDS),
                )
            section = position
            if isinstance(line, EndLine):
                self._check_end(line)
                ended = True
            else:
                self.counts.add(line.kind)
            yield self.line_no, line
        if self.header is None:
            raise InvalidInput("line 1", "the file is empty: no header line")
        if not ended:
            raise InvalidInput(
                f"line {self.line_no + 1}: end",
                "the file stops without its end line: it was truncated",
            )

    def _check_end(self, end: EndLine) -> None:
        for kind in COUNTED:
            said, seen = getattr(end.counts, kind), getattr(self.counts, kind)
            if said != seen:
                raise InvalidInput(
                    f"line {self.line_no}: end.counts.{kind}",
                    f"says {said} lines but the file holds {seen}: lines are missing",
                )


def line_fields(line: BaseModel, drop: Iterable[str] = ("kind",)) -> dict[str, Any]:
    """A line's fields as JSON values, for a batch sent to the database as one document."""
    data = line.model_dump(mode="json")
    for name in drop:
        data.pop(name, None)
    return data


def tombstone_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a forgotten row exports: nothing of what it said."""
    return {**row, "content": "", "summary": None, "metadata": {}}
