"""A token bucket per API key (and one per client address for requests without a live key),
kept in Redis so that every server process shares it.

One ``EVALSHA`` per request (about 0.15 ms here, DESIGN.md's Redis figure): the script refills
the bucket for the time since its last call, takes one token if there is one, and otherwise
says how long until there is. The bucket expires once it would be full again, so idle keys
cost no memory.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

BUCKET_KEY = "memharness:api:bucket:{}"
# Requests without a live key, by client address: a flood of made-up keys is refused before
# it costs a key lookup per request.
ADDRESS_BUCKET_KEY = "memharness:api:anon:{}"

# KEYS[1] bucket; ARGV: rate per second, burst, now in ms. Returns {allowed, wait_ms}.
TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 't', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) * rate / 1000.0)
  at = now
end
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = math.ceil((1 - tokens) * 1000.0 / rate)
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'at', tostring(at))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000.0 / rate) + 1000)
return {allowed, wait}
"""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after_s: int  # whole seconds for the Retry-After header; 0 when allowed


class RateLimiter:
    """``await limiter.take(key_id)`` on a redis.asyncio client; ``bucket`` names the keys'
    (or the addresses') buckets."""

    def __init__(
        self, redis: Any, *, rate_per_s: float, burst: int, bucket: str = BUCKET_KEY
    ) -> None:
        self._redis = redis
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._bucket = bucket
        self._script = redis.register_script(TOKEN_BUCKET)

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0

    @property
    def limit(self) -> str:
        return f"{self.rate_per_s:g} requests/s, burst {self.burst}"

    async def take(self, key_id: str, *, now_ms: int | None = None) -> Verdict:
        if not self.enabled:
            return Verdict(True, 0)
        when = now_ms if now_ms is not None else int(time.time() * 1000)
        allowed, wait_ms = await self._script(
            keys=[self._bucket.format(key_id)], args=[self.rate_per_s, self.burst, when]
        )
        if int(allowed):
            return Verdict(True, 0)
        return Verdict(False, max(1, math.ceil(int(wait_ms) / 1000)))
