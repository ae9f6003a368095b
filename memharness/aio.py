"""``AsyncMemoryClient``: the write path for asyncio agents.

The same plan as ``MemoryClient.record`` (``workers.write.plan``: validate, tier-1 rules, one
INSERT of the memory and its outbox row, publish after COMMIT), driven on psycopg's async
pool and redis.asyncio. Celery's
publisher is synchronous, so the rare publish (only when no drain is queued) runs in a
thread; the common path never leaves the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis.asyncio as aredis
from psycopg_pool import AsyncConnectionPool

from config import Settings, get_settings
from pipelines.records import MemoryType, Modality
from pipelines.write.request import NewMemory, prepare_write
from workers.metrics import count_records
from workers.write.plan import (
    Plan,
    WriteOutcome,
    WriteReceipt,
    must_publish,
    plan_write,
    queue_after_commit,
)
from workers.write.wake import DRAIN_FLAG, send_drain

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)


async def run_plan(conn: Any, plan: Plan) -> WriteOutcome:
    """Drive a write plan on an async psycopg connection (``memharness.client.run_plan``'s
    twin: the statements and rules are the plan's)."""
    try:
        step = next(plan)
        while True:
            cursor = await conn.execute(step.query, step.params)
            step = plan.send(await cursor.fetchone() if step.fetch else None)
    except StopIteration as done:
        outcome: WriteOutcome = done.value
        return outcome


class AsyncMemoryClient:
    """``MemoryClient.record`` for asyncio agents; use it as an async context manager."""

    def __init__(self, settings: Settings | None = None, *, app: Celery | None = None) -> None:
        self.settings = settings or get_settings()
        self._pool = AsyncConnectionPool(
            self.settings.database_url,
            min_size=self.settings.db_pool_min,
            max_size=self.settings.db_pool_max,
            timeout=self.settings.db_pool_timeout_s,
            kwargs={"autocommit": True, "application_name": "memharness-async-client"},
            open=False,
        )
        self._redis = aredis.Redis.from_url(
            self.settings.redis_url, socket_timeout=2, socket_connect_timeout=2
        )
        self._given_app = app

    @property
    def _app(self) -> Celery:
        if self._given_app is None:
            from workers.app import get_app

            self._given_app = get_app(self.settings)
        return self._given_app

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
            metadata=metadata,
            idempotency_key=idempotency_key,
            content_max_bytes=self.settings.content_max_bytes,
            metadata_max_bytes=self.settings.metadata_max_bytes,
        )
        return await self._write(new)

    async def _write(self, new: NewMemory) -> WriteReceipt:
        async with self._pool.connection() as conn:
            outcome = await run_plan(conn, plan_write(new))
        await self._after_commit(outcome.window, outcome.publish_id)
        count_records((outcome.receipt,))
        return outcome.receipt

    async def _after_commit(self, turns: Sequence[NewMemory], publish_id: Any) -> None:
        """As ``MemoryClient._after_commit``: one Redis round trip for the working-memory
        window and the drain flag; failures are logged, the relay covers the publish."""
        if not turns and publish_id is None:
            return
        try:
            pipe = self._redis.pipeline(transaction=False)
            queue_after_commit(
                pipe,
                turns,
                publish_id,
                max_turns=self.settings.working_memory_max_turns,
                ttl_s=self.settings.working_memory_ttl_s,
            )
            replies = await pipe.execute()
        except aredis.RedisError as exc:
            log.warning("after-commit Redis round trip failed (%s); the relay will publish", exc)
            return
        if must_publish(replies, publish_id):
            try:
                await asyncio.to_thread(send_drain, self._app, str(publish_id))
            except Exception as exc:
                log.warning("publish after commit failed (%s); the relay will retry", exc)
                with contextlib.suppress(aredis.RedisError):
                    await self._redis.delete(DRAIN_FLAG)
