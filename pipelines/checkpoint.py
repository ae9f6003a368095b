"""Task checkpoints: where an agent is in its task, sealed so that a crash costs no progress.

Memory says what happened; a checkpoint says where the agent is: the task tree, the current
node, the variables, the last tool calls, the pending actions, the token usage and the
working memory. This module is pure: the models, the binary format with its loader, the
migrator of older layouts, the policy that says when to checkpoint and the offline rules
that calibrate a resume.

Binary format (every integer big-endian)::

    offset  size  field
    0       4     format version (uint32)
    4       64    SHA-256 of everything after the header, lowercase hex (ASCII)
    68      8     length of the structural JSON in bytes (uint64)
    76      n     structural JSON, UTF-8: the checkpoint without its working memory
    76 + n  rest  the working-memory snapshot: JSON, zlib-compressed

The loader checks the header, the declared length and the checksum before it parses
anything, then bounds the decompressed snapshot, so a truncated, corrupted or hostile frame
is a :class:`CheckpointFormatError` naming what is wrong and the limit, never a crash, a hang
or a half-built checkpoint. Older versions are upgraded by :data:`MIGRATIONS`, not refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import struct
import uuid
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from pipelines.records import ID_NAMESPACE

FORMAT_VERSION = 2
OLDEST_READABLE_VERSION = 1

HEADER = struct.Struct(">I64sQ")
HEADER_BYTES = HEADER.size  # 76

# A real checkpoint is tens to hundreds of KB; 64 MiB is far above any sane task state and
# still small enough that honouring a declared length cannot exhaust a worker's memory.
MAX_STRUCTURAL_BYTES = 64 * 1024 * 1024
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024

# Level 1 compresses prose-like working memory about 2.5x at ~0.1 ms per 30 KB on these
# machines; level 6 gains ~10 % more and costs 3-4x the time on the save path.
SNAPSHOT_ZLIB_LEVEL = 1

ID_MAX_CHARS = 128


class CheckpointFormatError(ValueError):
    """Bytes that are not a readable checkpoint. ``kind`` says which check refused them."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


# -- models ------------------------------------------------------------------------------------

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class NodeStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    BLOCKED = "blocked"


class NodeKind(StrEnum):
    STEP = "step"
    # Inserted by a resume's calibration: check the outside world before a pending action.
    VERIFICATION = "verification"


class TaskNode(BaseModel):
    """One node of the task tree. The tree is a list in execution order (pre-order), each
    node naming its parent, which must come earlier in the list. A blocked node says why;
    only a blocked node has a ``blocked_reason`` (checked by ``TaskState``, once per tree:
    a per-node validator costs a third of the restore time of a 100-node tree)."""

    model_config = _FROZEN

    id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    title: str
    status: NodeStatus = NodeStatus.PENDING
    parent_id: str | None = Field(None, min_length=1, max_length=ID_MAX_CHARS)
    kind: NodeKind = NodeKind.STEP
    blocked_reason: str | None = None
    note: str | None = None


class ToolCall(BaseModel):
    model_config = _FROZEN

    call_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    tool: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    result: JsonValue = None
    error: str | None = None
    started_at: datetime | None = None
    duration_ms: float | None = Field(None, ge=0)

    @field_validator("started_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _as_utc(value)


class ActionEffect(StrEnum):
    # Stays inside the agent's own process or sandbox: repeating it is harmless.
    LOCAL = "local"
    # Observes the outside world: its answer may be stale after a long interruption.
    EXTERNAL_READ = "external_read"
    # Changes the outside world (sends, deploys, pays): it may already have happened.
    EXTERNAL_WRITE = "external_write"


class PendingAction(BaseModel):
    """An action the agent decided on but had not finished when the checkpoint was taken."""

    model_config = _FROZEN

    action_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    node_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    tool: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    effect: ActionEffect = ActionEffect.LOCAL
    estimated_tokens: int = Field(0, ge=0)


class TokenUsage(BaseModel):
    model_config = _FROZEN

    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    budget_tokens: int | None = Field(None, ge=1)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class WorkingItem(BaseModel):
    """One entry of the agent's context window as it was at the checkpoint."""

    model_config = _FROZEN

    role: str = Field(min_length=1)
    content: str
    memory_id: uuid.UUID | None = None
    tokens: int = Field(0, ge=0)


class WorkingMemory(BaseModel):
    model_config = _FROZEN

    items: tuple[WorkingItem, ...] = ()
    budget_tokens: int | None = Field(None, ge=1)


def _done_ids(data: dict[str, Any]) -> tuple[str, ...]:
    return tuple(node.id for node in data.get("tree", ()) if node.status is NodeStatus.DONE)


def _blocked_ids(data: dict[str, Any]) -> tuple[str, ...]:
    return tuple(node.id for node in data.get("tree", ()) if node.status is NodeStatus.BLOCKED)


class TaskState(BaseModel):
    """What the agent is doing: everything a resume needs, without identity or time.

    ``completed_node_ids`` and ``blocked_node_ids`` are derived from the tree when omitted
    and checked against it when given, so a stored checkpoint cannot contradict itself.
    ``working_memory`` is kept out of the structural JSON: the format stores it compressed.
    """

    model_config = _FROZEN

    phase: str | None = None
    tree: tuple[TaskNode, ...] = ()
    current_node_id: str | None = None
    completed_node_ids: tuple[str, ...] = Field(default_factory=_done_ids)
    blocked_node_ids: tuple[str, ...] = Field(default_factory=_blocked_ids)
    variables: dict[str, JsonValue] = Field(default_factory=dict)
    last_tool_calls: tuple[ToolCall, ...] = ()
    pending_actions: tuple[PendingAction, ...] = ()
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    iteration: int = Field(0, ge=0)
    working_memory: WorkingMemory = Field(default_factory=WorkingMemory, exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> TaskState:
        # One pass over the tree: this runs on every restore.
        seen: set[str] = set()
        done: list[str] = []
        blocked: list[str] = []
        for index, node in enumerate(self.tree):
            if node.id in seen:
                raise ValueError(f"tree.{index}: node id {node.id!r} appears twice")
            if node.parent_id is not None and node.parent_id not in seen:
                raise ValueError(
                    f"tree.{index}: parent {node.parent_id!r} of {node.id!r} does not come "
                    "before it (the tree is a pre-order list)"
                )
            if node.status is NodeStatus.BLOCKED:
                if not (node.blocked_reason or "").strip():
                    raise ValueError(
                        f"tree.{index}: node {node.id!r} is blocked but does not say why"
                    )
                blocked.append(node.id)
            elif node.blocked_reason is not None:
                raise ValueError(
                    f"tree.{index}: node {node.id!r} has a blocked_reason but is "
                    f"{node.status.value}"
                )
            elif node.status is NodeStatus.DONE:
                done.append(node.id)
            seen.add(node.id)
        if self.current_node_id is not None and self.current_node_id not in seen:
            raise ValueError(f"current_node_id {self.current_node_id!r} is not in the tree")
        if self.completed_node_ids != tuple(done):
            raise ValueError("completed_node_ids disagree with the done nodes of the tree")
        if self.blocked_node_ids != tuple(blocked):
            raise ValueError("blocked_node_ids disagree with the blocked nodes of the tree")
        actions: set[str] = set()
        for index, action in enumerate(self.pending_actions):
            if action.action_id in actions:
                raise ValueError(f"pending_actions.{index}: id {action.action_id!r} repeats")
            if action.node_id not in seen:
                raise ValueError(
                    f"pending_actions.{index}: node {action.node_id!r} is not in the tree"
                )
            actions.add(action.action_id)
        return self

    def node(self, node_id: str) -> TaskNode:
        for node in self.tree:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def with_changes(self, **changes: Any) -> TaskState:
        """A validated copy; the derived id lists follow the new tree."""
        fields = {name: getattr(self, name) for name in TaskState.model_fields}
        fields.pop("completed_node_ids")
        fields.pop("blocked_node_ids")
        fields.update(changes)
        return TaskState(**fields)

    def with_node_status(
        self, node_id: str, status: NodeStatus, *, blocked_reason: str | None = None
    ) -> TaskState:
        self.node(node_id)  # a KeyError names an unknown node before anything changes
        tree = tuple(
            TaskNode(**{**dict(node), "status": status, "blocked_reason": blocked_reason})
            if node.id == node_id
            else node
            for node in self.tree
        )
        return self.with_changes(tree=tree)


class TaskCheckpoint(BaseModel):
    """A sealed ``TaskState`` with its identity: who, which task, when, and its parent."""

    model_config = _FROZEN

    checkpoint_id: uuid.UUID
    tenant_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    task_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    created_at: datetime
    parent_id: uuid.UUID | None = None
    state: TaskState

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return _as_utc(value)


def _as_utc(value: datetime) -> datetime:
    # One representation of an instant, so a decoded checkpoint equals the saved one.
    if value.utcoffset() is None:
        raise ValueError("must be timezone-aware")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01 in a zone east of UTC has no UTC equivalent
        raise ValueError("is outside the range of UTC datetimes") from None


def checkpoint_id_for(
    tenant_id: str, task_id: str, parent_id: uuid.UUID | None, content_digest: str
) -> uuid.UUID:
    """The id of saving ``content_digest`` on top of ``parent_id``: a retried save of the
    same state gets the id of its first attempt instead of a second row."""
    parent = str(parent_id) if parent_id else "-"
    return uuid.uuid5(
        ID_NAMESPACE, f"checkpoint\x1f{tenant_id}\x1f{task_id}\x1f{parent}\x1f{content_digest}"
    )


# -- the binary format -------------------------------------------------------------------------


def pack_frame(version: int, structural: bytes, snapshot_compressed: bytes) -> bytes:
    """Seal already-encoded parts. Exposed so tests can build frames of any version."""
    digest = hashlib.sha256()
    digest.update(structural)
    digest.update(snapshot_compressed)
    header = HEADER.pack(version, digest.hexdigest().encode("ascii"), len(structural))
    return b"".join((header, structural, snapshot_compressed))


def _state_parts(state: TaskState) -> tuple[bytes, bytes]:
    return (
        state.model_dump_json().encode("utf-8"),
        state.working_memory.model_dump_json().encode("utf-8"),
    )


def _assemble(checkpoint: TaskCheckpoint, state_json: bytes, snapshot_json: bytes) -> bytes:
    # The state is serialised once and spliced into the envelope, because the save path
    # also hashes it to derive the checkpoint id.
    envelope = checkpoint.model_dump_json(exclude={"state"}).encode("utf-8")
    structural = b"".join((envelope[:-1], b',"state":', state_json, b"}"))
    if len(structural) > MAX_STRUCTURAL_BYTES:
        raise CheckpointFormatError(
            "too_large",
            f"structural JSON is {len(structural)} bytes; the limit is {MAX_STRUCTURAL_BYTES}",
        )
    if len(snapshot_json) > MAX_SNAPSHOT_BYTES:
        raise CheckpointFormatError(
            "too_large",
            f"working-memory snapshot is {len(snapshot_json)} bytes; "
            f"the limit is {MAX_SNAPSHOT_BYTES}",
        )
    return pack_frame(FORMAT_VERSION, structural, zlib.compress(snapshot_json, SNAPSHOT_ZLIB_LEVEL))


def encode_checkpoint(checkpoint: TaskCheckpoint) -> bytes:
    state_json, snapshot_json = _state_parts(checkpoint.state)
    return _assemble(checkpoint, state_json, snapshot_json)


def new_checkpoint(
    tenant_id: str,
    task_id: str,
    state: TaskState,
    *,
    parent_id: uuid.UUID | None,
    created_at: datetime,
) -> tuple[TaskCheckpoint, bytes]:
    """Build a checkpoint of ``state`` on top of ``parent_id`` and its sealed bytes."""
    state_json, snapshot_json = _state_parts(state)
    digest = hashlib.sha256(state_json)
    digest.update(b"\x1f")
    digest.update(snapshot_json)
    checkpoint = TaskCheckpoint(
        checkpoint_id=checkpoint_id_for(tenant_id, task_id, parent_id, digest.hexdigest()),
        tenant_id=tenant_id,
        task_id=task_id,
        created_at=created_at,
        parent_id=parent_id,
        state=state,
    )
    return checkpoint, _assemble(checkpoint, state_json, snapshot_json)


def read_header(data: bytes | bytearray | memoryview) -> tuple[int, str, int]:
    """The version, hex digest and declared structural length, checked against the limits."""
    size = len(data)
    if size < HEADER_BYTES:
        raise CheckpointFormatError(
            "truncated",
            f"checkpoint truncated: {size} bytes, but the header alone is {HEADER_BYTES} bytes",
        )
    version, raw_digest, structural_bytes = HEADER.unpack_from(data, 0)
    if not OLDEST_READABLE_VERSION <= version <= FORMAT_VERSION:
        raise CheckpointFormatError(
            "unknown_version",
            f"unknown checkpoint format version {version}; this build reads versions "
            f"{OLDEST_READABLE_VERSION} to {FORMAT_VERSION}",
        )
    try:
        digest = raw_digest.decode("ascii")
        int(digest, 16)
    except ValueError:
        digest = ""
    if len(digest) != 64 or digest != digest.lower() or not digest.isalnum():
        raise CheckpointFormatError(
            "bad_header", "the header's checksum field is not 64 lowercase hex characters"
        )
    if structural_bytes > MAX_STRUCTURAL_BYTES:
        raise CheckpointFormatError(
            "too_large",
            f"the header declares {structural_bytes} bytes of structural JSON; the limit is "
            f"{MAX_STRUCTURAL_BYTES} bytes ({MAX_STRUCTURAL_BYTES // (1024 * 1024)} MiB)",
        )
    if HEADER_BYTES + structural_bytes > size:
        raise CheckpointFormatError(
            "truncated",
            f"checkpoint truncated: the header declares {structural_bytes} bytes of "
            f"structural JSON but only {size - HEADER_BYTES} bytes follow it",
        )
    return int(version), digest, int(structural_bytes)


def verify_frame(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """Check the header and the checksum without deserialising anything.

    Returns the version and the length of the structural JSON.
    """
    version, digest, structural_bytes = read_header(data)
    actual = hashlib.sha256(memoryview(data)[HEADER_BYTES:]).hexdigest()
    if not hmac.compare_digest(actual, digest):
        raise CheckpointFormatError(
            "checksum",
            f"checksum mismatch: the header says {digest[:16]}…, the content hashes to "
            f"{actual[:16]}…; the checkpoint is corrupted",
        )
    return version, structural_bytes


def _decompress_snapshot(blob: bytes | memoryview) -> bytes:
    inflater = zlib.decompressobj()
    try:
        # max_length bounds the output, so a zlib bomb stops at the limit instead of
        # filling memory; one byte over the limit is enough to know it is too big.
        out = inflater.decompress(blob, MAX_SNAPSHOT_BYTES + 1)
    except zlib.error as exc:
        raise CheckpointFormatError(
            "bad_snapshot", f"the working-memory snapshot is not a valid zlib stream: {exc}"
        ) from None
    if len(out) > MAX_SNAPSHOT_BYTES:
        raise CheckpointFormatError(
            "too_large",
            f"the working-memory snapshot inflates past the limit of {MAX_SNAPSHOT_BYTES} bytes",
        )
    if not inflater.eof:
        raise CheckpointFormatError(
            "bad_snapshot", "the working-memory snapshot's zlib stream is truncated"
        )
    if inflater.unused_data:
        raise CheckpointFormatError(
            "bad_snapshot",
            f"{len(inflater.unused_data)} bytes of trailing data follow the snapshot",
        )
    return out


def _schema_error(what: str, exc: ValidationError) -> CheckpointFormatError:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    if first["type"] == "json_invalid":
        return CheckpointFormatError(
            "invalid_json", f"{what} is not valid JSON under a valid checksum: {first['msg']}"
        )
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return CheckpointFormatError(
        "schema", f"{what} fails the schema at {where}: {first['msg']}{more}"
    )


def decode_checkpoint(data: bytes | bytearray | memoryview) -> TaskCheckpoint:
    """Verify and load one checkpoint of any readable version.

    Raises :class:`CheckpointFormatError` for every malformed input; never returns a
    partially filled checkpoint.
    """
    version, structural_bytes = verify_frame(data)
    view = memoryview(data)
    structural = bytes(view[HEADER_BYTES : HEADER_BYTES + structural_bytes])
    snapshot = _decompress_snapshot(view[HEADER_BYTES + structural_bytes :])
    try:
        if version == FORMAT_VERSION:
            checkpoint = TaskCheckpoint.model_validate_json(structural)
            memory = WorkingMemory.model_validate_json(snapshot)
        else:
            layout = _parse_json_object(structural, f"v{version} structural JSON")
            layout, snapshot = upgrade_layout(version, layout, snapshot)
            checkpoint = TaskCheckpoint.model_validate(layout)
            memory = WorkingMemory.model_validate_json(snapshot)
    except ValidationError as exc:
        title = exc.title
        what = "working-memory snapshot" if title == "WorkingMemory" else "structural JSON"
        raise _schema_error(f"checkpoint v{version} {what}", exc) from None
    except RecursionError:
        raise CheckpointFormatError(
            "invalid_json", f"checkpoint v{version} nests JSON deeper than Python can follow"
        ) from None
    return checkpoint.model_copy(
        update={"state": checkpoint.state.model_copy(update={"working_memory": memory})}
    )


def _parse_json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        # Decoded first: json.loads would also guess UTF-16 and UTF-32 from raw bytes.
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CheckpointFormatError(
            "invalid_json", f"{what} is not valid UTF-8 (bad byte at offset {exc.start})"
        ) from None
    except json.JSONDecodeError as exc:
        raise CheckpointFormatError(
            "invalid_json", f"{what} is not valid JSON under a valid checksum: {exc}"
        ) from None
    except RecursionError:
        raise CheckpointFormatError("invalid_json", f"{what} nests too deep") from None
    if not isinstance(value, dict):
        raise CheckpointFormatError(
            "schema", f"{what} is a JSON {type(value).__name__}, not an object"
        )
    return value


# -- the version migrator ----------------------------------------------------------------------

Layout = dict[str, Any]
Migration = Callable[[Layout, bytes], tuple[Layout, bytes]]


class _V1(CheckpointFormatError):
    def __init__(self, message: str) -> None:
        super().__init__("migration", f"v1 layout: {message}")


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise _V1(f"{where}.{key} is missing")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int to isinstance, never to a checkpoint
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _V1(f"{where}.{key} is a {type(value).__name__}, expected {kinds[0].__name__}")
    return value


def _optional(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if obj.get(key) is None:
        return None
    return _field(obj, key, kind, where)


def _epoch(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _V1(f"{where} is not a finite number of seconds since the epoch")
    try:
        return datetime.fromtimestamp(value, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        raise _V1(f"{where} = {value} is outside the range of dates") from None


_V1_STATES = {"todo": "pending", "doing": "running", "done": "done", "blocked": "blocked"}


def _flatten_v1_tree(root: Any) -> list[dict[str, Any]]:
    # Iterative on purpose: a hostile frame may nest thousands of levels.
    if root is None:
        return []
    nodes: list[dict[str, Any]] = []
    stack: list[tuple[Any, str | None, str]] = [(root, None, "root")]
    while stack:
        node, parent, where = stack.pop()
        if not isinstance(node, dict):
            raise _V1(f"{where} is a {type(node).__name__}, not an object")
        state = _field(node, "state", str, where)
        if state not in _V1_STATES:
            raise _V1(f"{where}.state {state[:20]!r} is not one of {', '.join(_V1_STATES)}")
        node_id = _field(node, "id", str, where)
        why = _optional(node, "why", str, where)
        nodes.append(
            {
                "id": node_id,
                "title": _field(node, "title", str, where),
                "status": _V1_STATES[state],
                "parent_id": parent,
                # v1 kept a reason on unblocked nodes too; v2 keeps it only where it applies.
                "blocked_reason": why if state == "blocked" else None,
            }
        )
        children = _optional(node, "children", list, where) or []
        for index in range(len(children) - 1, -1, -1):
            stack.append((children[index], node_id, f"{where}.children.{index}"))
    return nodes


def migrate_v1_to_v2(layout: Layout, snapshot: bytes) -> tuple[Layout, bytes]:
    """v1 (2026-11) kept a nested tree with todo/doing states, epoch-second timestamps,
    terse names and a working memory of ``"role: text"`` lines; v2 is the flat pre-order
    tree with parent ids, ISO timestamps, ids on every tool call and action, and structured
    working-memory items."""
    where = "v1"
    tool_calls = []
    for index, call in enumerate(_field(layout, "tools", list, where)):
        at = f"{where}.tools.{index}"
        if not isinstance(call, dict):
            raise _V1(f"{at} is not an object")
        started = call.get("at")
        tool_calls.append(
            {
                "call_id": f"v1-{index}",
                "tool": _field(call, "name", str, at),
                "arguments": _optional(call, "args", dict, at) or {},
                "result": call.get("output"),
                "error": _optional(call, "error", str, at),
                "started_at": None if started is None else _epoch(started, f"{at}.at"),
            }
        )
    pending = []
    for index, action in enumerate(_field(layout, "pending", list, where)):
        at = f"{where}.pending.{index}"
        if not isinstance(action, dict):
            raise _V1(f"{at} is not an object")
        external = _field(action, "external", bool, at)
        pending.append(
            {
                "action_id": f"v1-{index}",
                "node_id": _field(action, "node", str, at),
                "tool": _field(action, "tool", str, at),
                "arguments": _optional(action, "args", dict, at) or {},
                # v1 had one flag for any outside contact; treat it as a write, so a resume
                # verifies rather than repeats something that may already have happened.
                "effect": "external_write" if external else "local",
            }
        )
    tokens = _field(layout, "tokens", dict, where)
    upgraded: Layout = {
        "checkpoint_id": _field(layout, "id", str, where),
        "tenant_id": _field(layout, "tenant", str, where),
        "task_id": _field(layout, "task", str, where),
        "created_at": _epoch(_field(layout, "saved_at", (int, float), where), "v1.saved_at"),
        "parent_id": _optional(layout, "parent", str, where),
        "state": {
            "phase": _optional(layout, "stage", str, where),
            "tree": _flatten_v1_tree(layout.get("root")),
            "current_node_id": _optional(layout, "cursor", str, where),
            "variables": _field(layout, "vars", dict, where),
            "last_tool_calls": tool_calls,
            "pending_actions": pending,
            "token_usage": {
                "prompt_tokens": _field(tokens, "in", int, "v1.tokens"),
                "completion_tokens": _field(tokens, "out", int, "v1.tokens"),
                "budget_tokens": _optional(tokens, "limit", int, "v1.tokens"),
            },
            "iteration": _field(layout, "iterations", int, where),
        },
    }
    lines = _parse_json_array(snapshot)
    items = []
    for index, line in enumerate(lines):
        if not isinstance(line, str):
            raise _V1(f"snapshot.{index} is a {type(line).__name__}, not a string")
        role, sep, text = line.partition(": ")
        if not sep or not role or " " in role:
            role, text = "note", line
        # v1 did not count tokens; four characters a token is the usual English estimate.
        items.append({"role": role, "content": text, "tokens": math.ceil(len(text) / 4)})
    return upgraded, json.dumps({"items": items}, ensure_ascii=False).encode("utf-8")


def _parse_json_array(raw: bytes) -> list[Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _V1(f"the snapshot is not valid JSON: {exc}") from None
    if not isinstance(value, list):
        raise _V1(f"the snapshot is a JSON {type(value).__name__}, not a list of lines")
    return value


# version → the migration that lifts it to version + 1
MIGRATIONS: dict[int, Migration] = {1: migrate_v1_to_v2}


def upgrade_layout(version: int, layout: Layout, snapshot: bytes) -> tuple[Layout, bytes]:
    while version < FORMAT_VERSION:
        layout, snapshot = MIGRATIONS[version](layout, snapshot)
        version += 1
    return layout, snapshot


# -- when to checkpoint ------------------------------------------------------------------------


class AgentEvent(StrEnum):
    NODE_COMPLETED = "node_completed"
    PHASE_CHANGED = "phase_changed"
    USER_PAUSED = "user_paused"
    BEFORE_ACTION = "before_action"
    ITERATION_DONE = "iteration_done"


class CheckpointTrigger(StrEnum):
    NODE_COMPLETED = "node_completed"
    PHASE_TRANSITION = "phase_transition"
    USER_PAUSE = "user_pause"
    HIGH_COST_ACTION = "high_cost_action"
    EVERY_N_ITERATIONS = "every_n_iterations"
    TOKEN_WARNING = "token_warning"


_ALWAYS: dict[AgentEvent, CheckpointTrigger] = {
    AgentEvent.NODE_COMPLETED: CheckpointTrigger.NODE_COMPLETED,
    AgentEvent.PHASE_CHANGED: CheckpointTrigger.PHASE_TRANSITION,
    AgentEvent.USER_PAUSED: CheckpointTrigger.USER_PAUSE,
}


class CheckpointDecision(BaseModel):
    model_config = _FROZEN

    triggers: tuple[CheckpointTrigger, ...] = ()

    @property
    def should_checkpoint(self) -> bool:
        return bool(self.triggers)

    @property
    def phase_transition(self) -> bool:
        return CheckpointTrigger.PHASE_TRANSITION in self.triggers

    @property
    def reason(self) -> str:
        return ", ".join(trigger.value for trigger in self.triggers) or "no trigger"


class CheckpointPolicy(BaseModel):
    """When to checkpoint. Pure: the agent reports an event and what it last saved."""

    model_config = _FROZEN

    # The most work a crash can cost between milestones. A save takes ~1.5 ms (bench) and an
    # iteration an LLM call of seconds, so lower it freely where iterations are expensive.
    every_iterations: int = Field(10, ge=1)
    # Leaves a fifth of the budget to finish or hand over after a resume.
    token_warning_fraction: float = Field(0.8, gt=0, le=1)
    # The warning line when the task has no token budget; None: no token trigger then.
    token_warning_tokens: int | None = Field(None, ge=1)
    # About a minute of model output at common decoding speeds: redoing that after a crash
    # costs far more than the save before it.
    high_cost_tokens: int = Field(4000, ge=1)

    def warning_line_tokens(self, usage: TokenUsage) -> int | None:
        if usage.budget_tokens is not None:
            return math.ceil(usage.budget_tokens * self.token_warning_fraction)
        return self.token_warning_tokens

    def decide(
        self,
        event: AgentEvent,
        *,
        iteration: int,
        token_usage: TokenUsage,
        action: PendingAction | None = None,
        last_iteration: int | None = None,
        last_total_tokens: int = 0,
    ) -> CheckpointDecision:
        """``last_*`` describe the previous checkpoint (None: there is none yet)."""
        triggers: list[CheckpointTrigger] = []
        if event in _ALWAYS:
            triggers.append(_ALWAYS[event])
        if event is AgentEvent.BEFORE_ACTION:
            if action is None:
                raise ValueError("a before_action event needs the action")
            # A write to the outside world cannot be taken back, which makes it costly to
            # get wrong after a crash whatever its token estimate.
            if (
                action.estimated_tokens >= self.high_cost_tokens
                or action.effect is ActionEffect.EXTERNAL_WRITE
            ):
                triggers.append(CheckpointTrigger.HIGH_COST_ACTION)
        since = iteration - (last_iteration if last_iteration is not None else 0)
        if since >= self.every_iterations:
            triggers.append(CheckpointTrigger.EVERY_N_ITERATIONS)
        line = self.warning_line_tokens(token_usage)
        if line is not None and token_usage.total_tokens >= line > last_total_tokens:
            triggers.append(CheckpointTrigger.TOKEN_WARNING)
        return CheckpointDecision(triggers=tuple(triggers))


# -- calibration of a resume -------------------------------------------------------------------

# After this long the outside world may have moved on: what the agent read is re-read.
STALE_AFTER_S = 3600.0


class VerificationCheck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    action_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    reason: str = Field(min_length=1, max_length=500)


class ResumeCalibration(BaseModel):
    """The verdict of a resume's calibration step (from the LLM port or the offline rules)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    needs_verification: bool
    reason: str = Field(min_length=1, max_length=1000)
    checks: tuple[VerificationCheck, ...] = ()

    @model_validator(mode="after")
    def _checks_match(self) -> ResumeCalibration:
        if self.needs_verification != bool(self.checks):
            raise ValueError("needs_verification must be true exactly when checks are given")
        ids = [check.action_id for check in self.checks]
        if len(set(ids)) != len(ids):
            raise ValueError("an action is checked twice")
        return self


def offline_calibration(
    checkpoint: TaskCheckpoint, elapsed_s: float, *, stale_after_s: float = STALE_AFTER_S
) -> ResumeCalibration:
    """The offline rules: verify every pending write to the outside world (it may have run
    between the checkpoint and the crash), and pending outside reads once the pause is long
    enough for their answers to be stale. Local actions are simply redone."""
    checks: list[VerificationCheck] = []
    stale = elapsed_s >= stale_after_s
    for action in checkpoint.state.pending_actions:
        if action.effect is ActionEffect.EXTERNAL_WRITE:
            checks.append(
                VerificationCheck(
                    action_id=action.action_id,
                    reason=f"{action.tool} changes the outside world and may have run before "
                    "the interruption; confirm whether it took effect before repeating it",
                )
            )
        elif action.effect is ActionEffect.EXTERNAL_READ and stale:
            checks.append(
                VerificationCheck(
                    action_id=action.action_id,
                    reason=f"{action.tool} reads the outside world and "
                    f"{elapsed_s / 3600:.1f} h have passed; refresh what it depends on",
                )
            )
    pause = f"{elapsed_s:.0f} s since the checkpoint"
    if not checks:
        return ResumeCalibration(
            needs_verification=False,
            reason=f"{pause}; no pending action needs checking against the outside world",
        )
    return ResumeCalibration(
        needs_verification=True,
        reason=f"{pause}; {len(checks)} pending action(s) touch the outside world",
        checks=tuple(checks),
    )


def verification_node_id(action_id: str) -> str:
    return f"verify:{action_id}"[:ID_MAX_CHARS]


def apply_calibration(checkpoint: TaskCheckpoint, verdict: ResumeCalibration) -> TaskCheckpoint:
    """Insert a verification node before the node of each checked action, once.

    Idempotent: a node already present (an earlier resume inserted it and the agent saved
    since) is not inserted again. The current node moves to the first new verification node.
    """
    state = checkpoint.state
    actions = {action.action_id: action for action in state.pending_actions}
    existing = {node.id for node in state.tree}
    before: dict[str, list[TaskNode]] = {}
    for check in verdict.checks:
        action = actions.get(check.action_id)
        if action is None:
            raise ValueError(f"calibration checks unknown pending action {check.action_id!r}")
        node_id = verification_node_id(action.action_id)
        if node_id in existing:
            continue
        existing.add(node_id)
        target = state.node(action.node_id)
        before.setdefault(target.id, []).append(
            TaskNode(
                id=node_id,
                title=f"Verify before {action.tool} ({action.action_id})",
                parent_id=target.parent_id,
                kind=NodeKind.VERIFICATION,
                note=check.reason,
            )
        )
    if not before:
        return checkpoint
    tree: list[TaskNode] = []
    first: str | None = None
    for node in state.tree:
        for inserted in before.get(node.id, ()):
            tree.append(inserted)
            first = first or inserted.id
        tree.append(node)
    # No re-validation (it would double the restore time): the new nodes have fresh ids,
    # their parent precedes the node they precede, and a pending node changes neither the
    # completed nor the blocked ids. The tests re-validate the result.
    resumed = state.model_copy(update={"tree": tuple(tree), "current_node_id": first})
    return checkpoint.model_copy(update={"state": resumed})


def describe_for_calibration(checkpoint: TaskCheckpoint, elapsed_s: float) -> dict[str, Any]:
    """What a model needs to calibrate a resume, as JSON-ready data (arguments cut short)."""
    state = checkpoint.state
    return {
        "elapsed_s": round(elapsed_s, 1),
        "phase": state.phase,
        "current_node": state.current_node_id,
        "nodes": {
            status.value: sum(n.status is status for n in state.tree) for status in NodeStatus
        },
        "pending_actions": [
            {
                "action_id": action.action_id,
                "tool": action.tool,
                "effect": action.effect.value,
                "node": state.node(action.node_id).title[:200],
                "arguments": json.dumps(action.arguments, ensure_ascii=False)[:500],
            }
            for action in state.pending_actions
        ],
        "last_tool_calls": [
            {"tool": call.tool, "error": (call.error or "")[:200]}
            for call in state.last_tool_calls[-5:]
        ],
    }
