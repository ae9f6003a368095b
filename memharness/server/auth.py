"""Who is asking: the API key of a request, resolved to its tenant, agent and scopes.

Each server process keeps the rows it looked up for ``api_key_cache_s`` (a revoked key is
refused everywhere after at most that long) and compares every presented secret with the
stored hash, cached or not. Unknown prefixes are cached too, so a flood of made-up keys costs
one query per prefix, not one per request. ``last_used_at`` is written in batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from memharness.server.keys import (
    SELECT_BY_PREFIX,
    TOUCH_KEYS,
    KeyRecord,
    parse_key,
    record_from_row,
    secret_matches,
)

log = logging.getLogger(__name__)

# A process remembers at most this many prefixes (a few MB); past it the cache starts over.
CACHE_MAX_ENTRIES = 10_000
# last_used_at is advisory: a write every half minute per process is plenty.
TOUCH_INTERVAL_S = 30.0


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key of ``Authorization: Bearer <key>`` or ``X-API-Key: <key>`` (raw ASGI headers)."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and value.strip():
            return value.decode("latin-1").strip()
    return None


class KeyResolver:
    """Resolve presented keys against ``api_keys`` through an async psycopg pool."""

    def __init__(
        self, pool: Any, *, cache_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._pool = pool
        self._cache_s = cache_s
        self._clock = clock
        self._cache: dict[str, tuple[KeyRecord | None, float]] = {}
        self._touched: set[uuid.UUID] = set()

    def knows(self, text: str | None) -> bool:
        """Whether ``text`` names a live key this process has cached: answered without a
        query, so a client address over its limit for bad keys can still use a good one."""
        parsed = parse_key(text) if text else None
        if parsed is None:
            return False
        hit = self._cache.get(parsed.prefix)
        return hit is not None and hit[1] > self._clock() and hit[0] is not None

    async def resolve(self, text: str) -> KeyRecord | None:
        """The live key ``text`` is, or None (malformed, unknown, wrong secret, revoked)."""
        parsed = parse_key(text)
        if parsed is None:
            return None
        now = self._clock()
        hit = self._cache.get(parsed.prefix)
        if hit is not None and hit[1] > now:
            record = hit[0]
        else:
            record = await self._fetch(parsed.prefix)
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache.clear()
            self._cache[parsed.prefix] = (record, now + self._cache_s)
        if record is None or record.revoked_at is not None:
            return None
        if not secret_matches(record, parsed.secret):
            return None
        self._touched.add(record.id)
        return record

    async def _fetch(self, prefix: str) -> KeyRecord | None:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(SELECT_BY_PREFIX, (prefix,))
            row = await cursor.fetchone()
        return None if row is None else record_from_row(row)

    async def flush_touches(self) -> None:
        if not self._touched:
            return
        ids, self._touched = sorted(self._touched), set()
        now = datetime.now(UTC)
        async with self._pool.connection() as conn:
            await conn.execute(TOUCH_KEYS, (now, now, [str(key_id) for key_id in ids]))

    async def touch_forever(self, interval_s: float = TOUCH_INTERVAL_S) -> None:
        """The background task of a server process: flush ``last_used_at`` now and then."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.flush_touches()
            except Exception as exc:  # advisory data: the next flush tries again
                log.warning("could not record keys' last use (%s)", type(exc).__name__)


async def stop_toucher(task: asyncio.Task[None], resolver: KeyResolver) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    with contextlib.suppress(Exception):
        await resolver.flush_touches()
