"""A token bucket per API key (and one per client address for requests without a live key),
kept in Redis so that every server process shares it, spent from local leases.

A process does not ask Redis for every request: it takes a lease of up to
``api_rate_limit_lease`` tokens from the key's bucket in one ``EVALSHA`` (about 0.15 ms here,
DESIGN.md's Redis figure), spends them locally, and asks again when they run out or when the
lease is ``api_rate_limit_lease_s`` old. Every token spent was first taken from the shared
bucket, so the limit holds across processes exactly as before; what a lease costs is that
tokens a process holds are not available to the others until it spends them or gives them
back. That is bounded twice: a lease is never larger than the rate refills in
``lease_s`` (a slow key still asks per request), and the tokens left of an expired lease go
back to the bucket with the next request's renewal.

The script refills the bucket for the time since its last call, takes up to the asked number
of whole tokens, and when there is none says how long until there is one. The bucket expires
once it would be full again, so idle keys cost no memory.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BUCKET_KEY = "memharness:api:bucket:{}"
# Requests without a live key, by client address: a flood of made-up keys is refused before
# it costs a key lookup per request.
ADDRESS_BUCKET_KEY = "memharness:api:anon:{}"
# Keys a process holds leases for; past it the leases are dropped (their tokens stay spent:
# the bucket refills them within burst / rate seconds).
LEASES_MAX_ENTRIES = 10_000

# KEYS[1] bucket; ARGV: rate per second, burst, now in ms, tokens wanted, tokens given back.
# Returns {granted, wait_ms}: wait_ms > 0 only when nothing was granted.
TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local back = tonumber(ARGV[5])
local state = redis.call('HMGET', KEYS[1], 't', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = tokens + (now - at) * rate / 1000.0
  at = now
end
tokens = math.min(burst, tokens + back)
local granted = math.min(want, math.floor(tokens))
local wait = 0
if granted >= 1 then
  tokens = tokens - granted
else
  granted = 0
  wait = math.ceil((1 - tokens) * 1000.0 / rate)
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'at', tostring(at))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000.0 / rate) + 1000)
return {granted, wait}
"""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after_s: int  # whole seconds for the Retry-After header; 0 when allowed


@dataclass
class Lease:
    tokens: int
    until: float  # monotonic seconds


class RateLimiter:
    """``await limiter.take(key_id)`` on a redis.asyncio client; ``bucket`` names the keys'
    (or the addresses') buckets. ``lease`` tokens at most per round trip to Redis, held for
    at most ``lease_s``; ``lease=1`` asks Redis for every request."""

    def __init__(
        self,
        redis: Any,
        *,
        rate_per_s: float,
        burst: int,
        bucket: str = BUCKET_KEY,
        lease: int = 1,
        lease_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._bucket = bucket
        self._script = redis.register_script(TOKEN_BUCKET)
        self.lease_s = lease_s
        # never more than the bucket refills while a lease lives, nor more than the burst: a
        # slow key keeps one round trip per request and loses nothing to another process
        self.lease = max(1, min(lease, burst, math.floor(rate_per_s * lease_s)))
        self._clock = clock
        self._leases: dict[str, Lease] = {}
        self._renewing: dict[str, asyncio.Lock] = {}

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0

    @property
    def limit(self) -> str:
        return f"{self.rate_per_s:g} requests/s, burst {self.burst}"

    async def take(self, key_id: str, *, now_ms: int | None = None) -> Verdict:
        if not self.enabled:
            return Verdict(True, 0)
        if self.lease == 1:
            return await self._renew(key_id, now_ms)
        if self._spend(key_id):
            return Verdict(True, 0)
        lock = self._renewing.get(key_id)
        if lock is None:
            lock = self._renewing[key_id] = asyncio.Lock()
        async with lock:
            # another request of this key may have renewed the lease while this one waited
            if self._spend(key_id):
                return Verdict(True, 0)
            return await self._renew(key_id, now_ms)

    def _spend(self, key_id: str) -> bool:
        lease = self._leases.get(key_id)
        if lease is None or lease.tokens < 1 or lease.until <= self._clock():
            return False
        lease.tokens -= 1
        return True

    async def _renew(self, key_id: str, now_ms: int | None) -> Verdict:
        old = self._leases.pop(key_id, None)
        back = old.tokens if old is not None else 0
        when = now_ms if now_ms is not None else int(time.time() * 1000)
        try:
            granted, wait_ms = await self._script(
                keys=[self._bucket.format(key_id)],
                args=[self.rate_per_s, self.burst, when, self.lease, back],
            )
        except BaseException:
            if old is not None:  # not given back after all: still this process's to spend
                self._leases[key_id] = old
            raise
        granted = int(granted)
        if granted < 1:
            return Verdict(False, max(1, math.ceil(int(wait_ms) / 1000)))
        if granted > 1:
            if len(self._leases) >= LEASES_MAX_ENTRIES:
                self._leases.clear()
                self._renewing = {k: v for k, v in self._renewing.items() if v.locked()}
            self._leases[key_id] = Lease(granted - 1, self._clock() + self.lease_s)
        return Verdict(True, 0)
