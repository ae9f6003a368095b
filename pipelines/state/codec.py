"""The sealed binary format of a task checkpoint, and its loader.

Every integer big-endian::

    offset  size  field
    0       4     format version (uint32)
    4       64    SHA-256 of everything after the header, lowercase hex (ASCII)
    68      8     length of the structural JSON in bytes (uint64)
    76      n     structural JSON, UTF-8: the checkpoint without its working memory
    76 + n  rest  the working-memory snapshot: JSON, zlib-compressed

The loader checks the header, the declared length and the checksum before it parses
anything, then bounds the decompressed snapshot, so a truncated, corrupted or hostile frame
is a :class:`~pipelines.errors.CheckpointFormatError` naming what is wrong and the limit, never
a crash, a hang or a half-built checkpoint. Older versions are upgraded by
``pipelines.state.migrations``, not refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
import uuid
import zlib
from datetime import datetime
from typing import Any

from pydantic import (
    ValidationError,
)

from pipelines.errors import CheckpointFormatError
from pipelines.state.migrations import FORMAT_VERSION, OLDEST_READABLE_VERSION, upgrade_layout
from pipelines.state.models import TaskCheckpoint, TaskState, WorkingMemory, checkpoint_id_for

HEADER = struct.Struct(">I64sQ")
HEADER_BYTES = HEADER.size  # 76

# A real checkpoint is tens to hundreds of KB; 64 MiB is far above any sane task state and
# still small enough that honouring a declared length cannot exhaust a worker's memory.
MAX_STRUCTURAL_BYTES = 64 * 1024 * 1024
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024

# Level 1 compresses prose-like working memory about 2.5x at ~0.1 ms per 30 KB on these
# machines; level 6 gains ~10 % more and costs 3-4x the time on the save path.
SNAPSHOT_ZLIB_LEVEL = 1


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
