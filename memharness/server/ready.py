"""``/readyz``: can this server process serve a request now? PostgreSQL (keys, writes),
Redis (rate limits, the broker) and the store's owner (recall and context) must answer.

Readiness is about reachability only. The quality verdict (golden hit rate, compression's
fact recall, index drift) stays with ``memharness health``, ``/metrics`` and the alerts: a
fresh install has no golden run and no sampled fact recall yet, and is ready all the same,
and a load balancer that took a server out of rotation for a low hit rate would turn a
quality problem into an outage.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery.result import AsyncResult

    from config import Settings

# A probe answers well within a load balancer's usual 5 s probe timeout.
READY_TIMEOUT_S = 2.0
# How long an unanswered owner probe is waited on again instead of sending another: while the
# owner is down, one server process queues at most one probe message a minute, which the
# owner answers (cheaply: it counts its points) when it comes back.
PROBE_REUSE_S = 60.0
OK = "ok"


class OwnerProbe:
    """Whether the store's owner answers: in embedded mode a ``memory.recall.index_counts``
    round trip through the ``recall`` queue (the path every recall and context takes); with
    a Qdrant server, the server's own ``/readyz``."""

    def __init__(self, settings: Settings, timeout_s: float = READY_TIMEOUT_S) -> None:
        self.settings = settings
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pending: tuple[AsyncResult[Any], float] | None = None

    def check(self) -> str:
        """``"ok"`` or why not (blocking: run it in a thread)."""
        if not self.settings.store_is_embedded:
            return self._check_server()
        with self._lock:
            return self._check_owner()

    def _check_owner(self) -> str:
        from celery.exceptions import TimeoutError as NoAnswer

        from workers.app import get_app
        from workers.publish import publish
        from workers.queues import TaskName

        now = time.monotonic()
        if self._pending is None or now - self._pending[1] > PROBE_REUSE_S:
            self._pending = (publish(TaskName.INDEX_COUNTS, app=get_app(self.settings)), now)
        result = self._pending[0]
        try:
            result.get(timeout=self._timeout_s, disable_sync_subtasks=False)
        except NoAnswer:
            return f"no answer on the recall queue within {self._timeout_s:g} s"
        except Exception as exc:
            self._pending = None
            return f"{type(exc).__name__}: {exc}"[:200]
        self._pending = None
        return OK

    def _check_server(self) -> str:
        import httpx

        key = self.settings.qdrant_api_key
        headers = {"api-key": key.get_secret_value()} if key is not None else {}
        try:
            answer = httpx.get(
                f"{self.settings.qdrant_url.rstrip('/')}/readyz",
                headers=headers,
                timeout=self._timeout_s,
            )
        except httpx.HTTPError as exc:
            return f"Qdrant unreachable: {type(exc).__name__}"
        return OK if answer.status_code == 200 else f"Qdrant answered {answer.status_code}"


async def _postgres(pool: Any) -> str:
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
    except Exception as exc:
        return type(exc).__name__
    return OK


async def _redis(redis: Any) -> str:
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await redis.ping()
    except Exception as exc:
        return type(exc).__name__
    return OK


async def readiness(pool: Any, redis_client: Any, probe: OwnerProbe) -> dict[str, str]:
    """Each dependency's state, ``"ok"`` or why not: ``pool`` an async psycopg pool,
    ``redis_client`` a redis.asyncio client. The owner is asked through the broker, so with
    Redis down it is not asked at all (the answer could only be a timeout)."""
    postgres, redis = await asyncio.gather(_postgres(pool), _redis(redis_client))
    if redis == OK or not probe.settings.store_is_embedded:
        owner = await asyncio.to_thread(probe.check)
    else:
        owner = "not asked: the broker (Redis) is unreachable"
    return {"postgres": postgres, "redis": redis, "store_owner": owner}
