"""``MemharnessSaver``: a LangGraph checkpointer whose checkpoints are ours.

Each LangGraph checkpoint is one row of ``checkpoints``, sealed in our binary format
(``pipelines.state.codec``: SHA-256 over the body, checked before anything is parsed) and
kept by our retention (the last ``keep_last`` of a thread's namespace, and the parent of the
newest). The frame is a ``TaskCheckpoint`` whose ``TaskState`` carries LangGraph's own
checkpoint and metadata, serialised by the saver's ``serde`` (msgpack), under
``variables["langgraph"]``; ``iteration`` is the graph's step. LangGraph's extra fields live
in two companion tables of migration 0008 that cascade from ``checkpoints``: the thread,
namespace and metadata (``langgraph_checkpoints``, for ``list`` filters) and the pending
writes, each with its own SHA-256 (``langgraph_writes``).

Scope: the saver is bound to one tenant; ``thread_id`` is the task (itself when it is a
valid task id and the namespace is the root, else ``langgraph:<sha256 of thread and
namespace>``), so ``memharness checkpoints list/verify`` read a graph's checkpoints too.

A newest checkpoint whose frame fails its checks is skipped for the next older one of the
thread (logged), as ``CheckpointService.resume`` does; asking for that id returns the error.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from config import Settings, get_settings
from pipelines.errors import CheckpointFormatError, Conflict, InvalidInput, NotFound
from pipelines.records import check_id
from pipelines.state.codec import decode_checkpoint, encode_checkpoint
from pipelines.state.migrations import FORMAT_VERSION
from pipelines.state.models import TaskCheckpoint, TaskState
from workers.db import open_pool
from workers.state.sql import save_checkpoint

log = logging.getLogger(__name__)

__all__ = ["MemharnessSaver", "task_for_thread"]

# ``keep_last=None`` keeps every checkpoint: graphs with DeltaChannel state rebuild it from
# the ancestors' writes, which pruning would cut.
KEEP_ALL = 2**31 - 1
# ``keep_last`` not given: the settings' ``checkpoint_keep_last``.
FROM_SETTINGS = 0
THREAD_ID_MAX_CHARS = 1024

_SELECT = """
SELECT c.id, c.parent_id, c.body, l.thread_id, l.checkpoint_ns
FROM langgraph_checkpoints l JOIN checkpoints c ON c.id = l.id
WHERE l.tenant_id = %s"""
_WRITES = """
SELECT checkpoint_id, thread_id, checkpoint_ns, task_id, channel, type, blob, digest
FROM langgraph_writes WHERE tenant_id = %s AND checkpoint_id = ANY(%s)
ORDER BY checkpoint_id, task_path, task_id, idx"""
_UPSERT_META = """
INSERT INTO langgraph_checkpoints (id, tenant_id, thread_id, checkpoint_ns, metadata)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET metadata = EXCLUDED.metadata"""
# A regular write (idx >= 0) is kept as first stored (a replayed task writes the same); a
# special one (error, interrupt...) is replaced by the latest.
_PUT_WRITE = """
INSERT INTO langgraph_writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id,
                              idx, channel, type, blob, digest, task_path)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob,
    digest = EXCLUDED.digest, task_path = EXCLUDED.task_path
WHERE langgraph_writes.idx < 0"""
# Checkpoint ids are time-ordered (uuid6) and retention keeps the newest and its parent, so
# writes older than the oldest kept checkpoint belong to pruned ones; the writes of a newer
# checkpoint still being saved in the background are never older than that.
_DROP_PRUNED_WRITES = """
DELETE FROM langgraph_writes
WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s AND checkpoint_ns = %(ns)s
  AND checkpoint_id < (
    SELECT id FROM langgraph_checkpoints
    WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s AND checkpoint_ns = %(ns)s
    ORDER BY id LIMIT 1)"""
_DELETE_THREAD = """
WITH gone AS (
    DELETE FROM langgraph_writes WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s
)
DELETE FROM checkpoints WHERE id IN (
    SELECT id FROM langgraph_checkpoints
    WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s)"""


def task_for_thread(thread_id: str, checkpoint_ns: str = "") -> str:
    """The task id a thread's namespace is saved under."""
    if not checkpoint_ns:
        try:
            check_id("thread_id", thread_id)
            return thread_id
        except InvalidInput:
            pass
    digest = hashlib.sha256(f"{thread_id}\x1f{checkpoint_ns}".encode()).hexdigest()[:40]
    return f"langgraph:{digest}"


def _thread(config: RunnableConfig | None, *, required: bool = True) -> tuple[str | None, str]:
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        if required:
            raise InvalidInput("config.configurable.thread_id", "is required")
        return None, str(configurable.get("checkpoint_ns") or "")
    thread = str(thread_id)
    if not thread or len(thread) > THREAD_ID_MAX_CHARS or "\x00" in thread:
        raise InvalidInput(
            "config.configurable.thread_id",
            f"must be 1-{THREAD_ID_MAX_CHARS} characters without NUL",
            f"{THREAD_ID_MAX_CHARS} chars",
        )
    return thread, str(configurable.get("checkpoint_ns") or "")


def _as_uuid(field: str, value: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidInput(field, f"is not a UUID: {str(value)[:40]!r}") from None


def _json_safe(value: Any) -> Any:
    """A copy PostgreSQL's jsonb accepts: JSON types only, no NUL in strings."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def _digest(type_: str, blob: bytes) -> bytes:
    return hashlib.sha256(type_.encode() + b"\x1f" + blob).digest()


class MemharnessSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer on memory-harness's checkpoint storage, for one tenant.

    ``MemharnessSaver(tenant_id="acme")`` opens its own PostgreSQL pool from the settings
    (or uses ``pool``); ``keep_last`` bounds each thread namespace's history (default
    ``MEMHARNESS_CHECKPOINT_KEEP_LAST``; None keeps all). The async methods run the same
    code in a worker thread. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        tenant_id: str,
        keep_last: int | None = FROM_SETTINGS,
        serde: SerializerProtocol | None = None,
        pool: ConnectionPool | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.settings = settings or get_settings()
        self.tenant_id = str(check_id("tenant_id", tenant_id))
        if keep_last == FROM_SETTINGS:
            keep_last = self.settings.checkpoint_keep_last
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise InvalidInput("keep_last", f"must be a positive integer, got {keep_last!r}")
        self.keep_last = KEEP_ALL if keep_last is None else keep_last
        self._own_pool = pool is None
        self._pool = pool or open_pool(self.settings, name="memharness-langgraph-saver")

    def close(self) -> None:
        if self._own_pool:
            self._pool.close()

    def __enter__(self) -> MemharnessSaver:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread, ns = _thread(config)
        assert thread is not None
        checkpoint_id = _as_uuid("checkpoint.id", checkpoint["id"])
        parent = config["configurable"].get("checkpoint_id")
        parent_id = _as_uuid("config.configurable.checkpoint_id", parent) if parent else None
        versions = checkpoint["channel_versions"]
        # Values of channels without a version are not part of the state (LangGraph's
        # own savers drop them the same way).
        stored = {
            **checkpoint,
            "channel_values": {
                k: v for k, v in checkpoint["channel_values"].items() if k in versions
            },
        }
        meta = get_serializable_checkpoint_metadata(config, metadata)
        step = meta.get("step", 0)
        sealed = TaskCheckpoint(
            checkpoint_id=checkpoint_id,
            tenant_id=self.tenant_id,
            task_id=task_for_thread(thread, ns),
            created_at=_parse_ts(checkpoint.get("ts")),
            parent_id=parent_id,
            state=TaskState(
                iteration=max(int(step), 0) if isinstance(step, int) else 0,
                variables={
                    "langgraph": {
                        "thread_id": thread,
                        "checkpoint_ns": ns,
                        "checkpoint": self._dump(stored),
                        "metadata": self._dump(dict(meta)),
                    }
                },
            ),
        )
        body = encode_checkpoint(sealed)
        with self._pool.connection() as conn, conn.transaction():
            try:
                pruned = save_checkpoint(
                    conn,
                    checkpoint_id=checkpoint_id,
                    tenant_id=self.tenant_id,
                    task_id=sealed.task_id,
                    parent_id=parent_id,
                    created_at=sealed.created_at,
                    format_version=FORMAT_VERSION,
                    is_phase_transition=False,
                    iteration=sealed.state.iteration,
                    body=body,
                    keep_last=self.keep_last,
                )
            except RuntimeError:
                raise Conflict(
                    "checkpoint.id", f"{checkpoint_id} is saved under another thread"
                ) from None
            conn.execute(
                _UPSERT_META,
                (checkpoint_id, self.tenant_id, thread, ns, Jsonb(_json_safe(dict(meta)))),
            )
            if pruned:
                conn.execute(
                    _DROP_PRUNED_WRITES, {"tenant": self.tenant_id, "thread": thread, "ns": ns}
                )
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread, ns = _thread(config)
        raw_id = config["configurable"].get("checkpoint_id")
        if not raw_id:
            raise InvalidInput("config.configurable.checkpoint_id", "is required")
        checkpoint_id = _as_uuid("config.configurable.checkpoint_id", raw_id)
        rows = []
        for idx, (channel, value) in enumerate(writes):
            type_, blob = self.serde.dumps_typed(value)
            rows.append(
                (
                    self.tenant_id,
                    thread,
                    ns,
                    checkpoint_id,
                    str(task_id),
                    WRITES_IDX_MAP.get(channel, idx),
                    channel,
                    type_,
                    blob,
                    _digest(type_, blob),
                    task_path,
                )
            )
        if not rows:
            return
        # The checkpoint may not have committed yet (LangGraph saves it in the background):
        # the rows carry their own scope, and a read matches them to the checkpoint's.
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(_PUT_WRITE, rows)

    def delete_thread(self, thread_id: str) -> None:
        thread, _ = _thread({"configurable": {"thread_id": thread_id}})
        with self._pool.connection() as conn:
            conn.execute(_DELETE_THREAD, {"tenant": self.tenant_id, "thread": thread})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: only each namespace's newest checkpoint stays; ``delete``: none."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput("strategy", f"must be keep_latest or delete, got {strategy!r}")
        threads = [_thread({"configurable": {"thread_id": t}})[0] for t in thread_ids]
        with self._pool.connection() as conn:
            if strategy == "delete":
                for thread in threads:
                    conn.execute(_DELETE_THREAD, {"tenant": self.tenant_id, "thread": thread})
                return
            conn.execute(
                """
                DELETE FROM checkpoints WHERE id IN (
                    SELECT id FROM (
                        SELECT id, row_number() OVER (
                            PARTITION BY thread_id, checkpoint_ns ORDER BY id DESC) AS n
                        FROM langgraph_checkpoints
                        WHERE tenant_id = %s AND thread_id = ANY(%s)
                    ) ranked WHERE n > 1)
                """,
                (self.tenant_id, threads),
            )
            conn.execute(
                "DELETE FROM langgraph_writes w WHERE tenant_id = %s AND thread_id = ANY(%s) "
                "AND NOT EXISTS "
                "(SELECT 1 FROM langgraph_checkpoints l WHERE l.id = w.checkpoint_id)",
                (self.tenant_id, threads),
            )

    def rollback(self, config: RunnableConfig) -> RunnableConfig:
        """Make the checkpoint ``config`` names the thread's newest again (our rollback).

        Nothing is deleted: a copy of its state with a new id and the target as its parent
        becomes the head, so the next run continues from the target's state and the
        abandoned branch stays listable until retention prunes it. Returns the new config.
        """
        target = self.get_tuple(config)
        if target is None:
            raise NotFound("checkpoint_id", str(config["configurable"].get("checkpoint_id")))
        step = target.metadata.get("step", -1)
        copy: Checkpoint = {
            **target.checkpoint,
            "id": str(uuid6(clock_seq=step + 1 if isinstance(step, int) else 0)),
            "ts": datetime.now(UTC).isoformat(),
        }
        metadata: CheckpointMetadata = {
            **target.metadata,
            "source": "update",
            "step": step + 1 if isinstance(step, int) else 0,
            "rolled_back_to": target.checkpoint["id"],  # type: ignore[typeddict-unknown-key]
        }
        return self.put(target.config, copy, metadata, {})

    # -- reading ---------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread, ns = _thread(config)
        raw_id = config["configurable"].get("checkpoint_id")
        query = _SELECT + " AND l.thread_id = %s AND l.checkpoint_ns = %s"
        with self._pool.connection() as conn:
            if raw_id:
                row = conn.execute(
                    query + " AND l.id = %s",
                    (self.tenant_id, thread, ns, _as_uuid("checkpoint_id", raw_id)),
                    binary=True,
                ).fetchone()
                if row is None:
                    return None
                return self._tuples(conn, [row], strict=True)[0]
            before: uuid.UUID | None = None
            while True:
                # Newest first; a frame that fails its checks falls back to the next older.
                params: tuple[Any, ...] = (self.tenant_id, thread, ns)
                sql = query
                if before is not None:
                    sql += " AND l.id < %s"
                    params += (before,)
                row = conn.execute(
                    sql + " ORDER BY l.id DESC LIMIT 1", params, binary=True
                ).fetchone()
                if row is None:
                    return None
                tuples = self._tuples(conn, [row], strict=False)
                if tuples:
                    return tuples[0]
                before = row[0]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        thread, ns = _thread(config, required=False)
        configurable = (config or {}).get("configurable") or {}
        sql = _SELECT
        params: builtins.list[Any] = [self.tenant_id]
        if thread is not None:
            sql += " AND l.thread_id = %s"
            params.append(thread)
        if "checkpoint_ns" in configurable:
            sql += " AND l.checkpoint_ns = %s"
            params.append(ns)
        if configurable.get("checkpoint_id"):
            sql += " AND l.id = %s"
            params.append(_as_uuid("checkpoint_id", configurable["checkpoint_id"]))
        if filter:
            sql += " AND l.metadata @> %s"
            params.append(Jsonb(_json_safe(filter)))
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        if before_id:
            sql += " AND l.id < %s"
            params.append(_as_uuid("before.checkpoint_id", before_id))
        sql += " ORDER BY l.id DESC"
        if limit is not None:
            if limit < 0:
                raise InvalidInput("limit", f"must be 0 or more, got {limit}")
            sql += " LIMIT %s"
            params.append(limit)
        with self._pool.connection() as conn:
            rows = conn.execute(sql, params, binary=True).fetchall()
            tuples = self._tuples(conn, rows, strict=False)
        yield from tuples

    # -- async twins: the same code, in a worker thread ------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        tuples = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in tuples:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    # -- frames ----------------------------------------------------------------------------

    def _dump(self, value: Any) -> dict[str, str]:
        type_, blob = self.serde.dumps_typed(value)
        return {"type": type_, "data": base64.b64encode(blob).decode("ascii")}

    def _load(self, packed: Any) -> Any:
        if not isinstance(packed, dict):
            raise CheckpointFormatError("schema", "the LangGraph payload is not an object")
        return self.serde.loads_typed((packed["type"], base64.b64decode(packed["data"])))

    def _tuples(
        self, conn: Any, rows: Sequence[Any], *, strict: bool
    ) -> builtins.list[CheckpointTuple]:
        """Decode rows (newest first) and attach their pending writes. A row that fails its
        checks raises when ``strict`` (asked for by id), else it is logged and left out."""
        decoded: builtins.list[tuple[Any, ...]] = []
        for row_id, parent_id, body, thread, ns in rows:
            try:
                payload = self._decode(bytes(body), row_id, thread, ns)
            except CheckpointFormatError as exc:
                if strict:
                    raise
                log.warning(
                    "LangGraph checkpoint %s of thread %s is unusable: %s", row_id, thread, exc
                )
                continue
            decoded.append((row_id, parent_id, thread, ns, *payload))
        writes: dict[uuid.UUID, builtins.list[PendingWrite]] = {}
        if decoded:
            scopes = {item[0]: (item[2], item[3]) for item in decoded}
            for checkpoint_id, thread, ns, task_id, channel, type_, blob, digest in conn.execute(
                _WRITES, (self.tenant_id, list(scopes)), binary=True
            ):
                if scopes[checkpoint_id] != (thread, ns):
                    continue  # a write under another thread of the tenant naming this id
                blob = bytes(blob)
                if _digest(type_, blob) != bytes(digest):
                    raise CheckpointFormatError(
                        "checksum",
                        f"pending write {task_id}/{channel} of checkpoint {checkpoint_id} "
                        "does not match its SHA-256; it is corrupted",
                    )
                value = self.serde.loads_typed((type_, blob))
                writes.setdefault(checkpoint_id, []).append((task_id, channel, value))
        return [
            CheckpointTuple(
                config={
                    "configurable": {
                        "thread_id": thread,
                        "checkpoint_ns": ns,
                        "checkpoint_id": checkpoint["id"],
                    }
                },
                checkpoint=checkpoint,
                metadata=metadata,
                parent_config=(
                    {
                        "configurable": {
                            "thread_id": thread,
                            "checkpoint_ns": ns,
                            "checkpoint_id": str(parent_id),
                        }
                    }
                    if parent_id is not None
                    else None
                ),
                pending_writes=writes.get(row_id, []),
            )
            for row_id, parent_id, thread, ns, checkpoint, metadata in decoded
        ]

    def _decode(
        self, body: bytes, row_id: uuid.UUID, thread: str, ns: str
    ) -> tuple[Checkpoint, CheckpointMetadata]:
        sealed = decode_checkpoint(body)
        if (sealed.checkpoint_id, sealed.tenant_id, sealed.task_id) != (
            row_id,
            self.tenant_id,
            task_for_thread(thread, ns),
        ):
            raise CheckpointFormatError(
                "mismatch", f"row {row_id} holds checkpoint {sealed.checkpoint_id} of another task"
            )
        payload = sealed.state.variables.get("langgraph")
        if not isinstance(payload, dict):
            raise CheckpointFormatError("schema", f"checkpoint {row_id} has no LangGraph state")
        checkpoint: Checkpoint = self._load(payload.get("checkpoint"))
        metadata: CheckpointMetadata = self._load(payload.get("metadata"))
        return checkpoint, metadata


def _parse_ts(value: object) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
            if parsed.utcoffset() is not None:
                return parsed
        except ValueError:
            pass
    return datetime.now(UTC)
