"""``AsyncMemoryClient``: the write path for asyncio agents.

The same steps as ``MemoryClient.record`` (validate, tier-1 rules, one INSERT of the memory
and its outbox row, publish after COMMIT) on psycopg's async pool and redis.asyncio. Celery's
publisher is synchronous, so the rare publish (only when no drain is queued) runs in a
thread; the common path never leaves the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import redis.asyncio as aredis
from celery import Celery
from psycopg_pool import AsyncConnectionPool

from config import Settings, get_settings
from memharness.client import WriteReceipt
from pipelines.records import MemoryType, Modality, NewMemory, prepare_write
from pipelines.write_filter import tier1_filter
from workers.db.writes import (
    FIND_CONFLICT,
    INSERT_DECISION,
    INSERT_MEMORY_WITH_JOB,
    conflict_from_row,
    conflict_outcome,
    conflict_params,
    drop_params,
    memory_params,
)
from workers.working_memory import queue_push, turn_record
from workers.write_service import DRAIN_FLAG, queue_drain_flag, send_drain

log = logging.getLogger(__name__)


class AsyncMemoryClient:
    def __init__(self, settings: Settings | None = None, *, app: Celery | None = None) -> None:
        self.settings = settings or get_settings()
        self._pool = AsyncConnectionPool(
            self.settings.database_url,
            min_size=self.settings.db_pool_min,
            max_size=self.settings.db_pool_max,
            kwargs={"autocommit": True, "application_name": "memharness-async-client"},
            open=False,
        )
        self._redis = aredis.Redis.from_url(
            self.settings.redis_url, socket_timeout=2, socket_connect_timeout=2
        )
        if app is None:
            from workers.app import create_app

            app = create_app(self.settings)
        self._app = app

    async def open(self) -> AsyncMemoryClient:
        await self._pool.open(wait=True, timeout=15.0)
        return self

    async def close(self) -> None:
        await self._pool.close()
        await self._redis.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return await self.open()

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def record(
        self,
        content: str | bytes,
        *,
        tenant_id: str,
        task_id: str,
        session_id: str,
        type: MemoryType | str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        timestamp: datetime | None = None,
        modality: Modality | str = Modality.TEXT,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> WriteReceipt:
        """Record one interaction. Raises :class:`InvalidInput` naming the field and limit."""
        new = prepare_write(
            content,
            tenant_id=tenant_id,
            task_id=task_id,
            session_id=session_id,
            type=type,
            user_id=user_id,
            agent_id=agent_id,
            timestamp=timestamp,
            modality=modality,
            metadata=dict(metadata) if metadata is not None else None,
            idempotency_key=idempotency_key,
            content_max_bytes=self.settings.content_max_bytes,
            metadata_max_bytes=self.settings.metadata_max_bytes,
        )
        return await self._write(new)

    async def _write(self, new: NewMemory) -> WriteReceipt:
        verdict = tier1_filter(new.content)
        async with self._pool.connection() as conn:
            if not verdict.keep:
                await conn.execute(INSERT_DECISION, drop_params(new, verdict.reason))
                await self._after_commit(new, publish=False)
                return WriteReceipt(new.id, "dropped", verdict.reason)
            cursor = await conn.execute(INSERT_MEMORY_WITH_JOB, memory_params(new))
            if await cursor.fetchone() is None:
                found = await conn.execute(FIND_CONFLICT, conflict_params(new))
                conflict = conflict_from_row(new, await found.fetchone())
                if conflict is None:
                    raise RuntimeError(f"memory {new.id} conflicts but cannot be found")
                existing, reason, record_drop = conflict_outcome(new, conflict)
                if record_drop:
                    await conn.execute(INSERT_DECISION, drop_params(new, reason))
                return WriteReceipt(existing, "duplicate", reason)
        await self._after_commit(new, publish=True)
        return WriteReceipt(new.id, "accepted", "queued for the write workers")

    async def _after_commit(self, new: NewMemory, *, publish: bool) -> None:
        """As ``MemoryClient._after_commit``: one Redis round trip for the working-memory
        window and the drain flag; failures are logged, the relay covers the publish."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            queue_push(
                pipe,
                [turn_record(new)],
                max_turns=self.settings.working_memory_max_turns,
                ttl_s=self.settings.working_memory_ttl_s,
            )
            if publish:
                queue_drain_flag(pipe, str(new.id))
            replies = await pipe.execute()
        except aredis.RedisError as exc:
            log.warning("after-commit Redis round trip failed (%s); the relay will publish", exc)
            return
        if publish and replies[-1]:
            try:
                await asyncio.to_thread(send_drain, self._app, str(new.id))
            except Exception as exc:
                log.warning("publish after commit failed (%s); the relay will retry", exc)
                with contextlib.suppress(aredis.RedisError):
                    await self._redis.delete(DRAIN_FLAG)
