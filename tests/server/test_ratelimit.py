"""The token bucket, on the real Redis (several server processes share it)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import redis.asyncio as aredis

from memharness.server.ratelimit import RateLimiter


def run_takes(
    redis_url: str, takes: list[int], *, rate: float, burst: int
) -> list[tuple[bool, int]]:
    async def go() -> list[tuple[bool, int]]:
        client = aredis.Redis.from_url(redis_url)
        try:
            limiter = RateLimiter(client, rate_per_s=rate, burst=burst)
            out = []
            for now_ms in takes:
                verdict = await limiter.take("key-1", now_ms=now_ms)
                out.append((verdict.allowed, verdict.retry_after_s))
            return out
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_burst_is_allowed_then_refused_with_the_seconds_to_wait(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given 0.5 requests/s with a burst of 3, four calls at the same instant
    verdicts = run_takes(settings.redis_url, [1_000_000] * 4, rate=0.5, burst=3)
    # then three pass and the fourth must wait two seconds for a token
    assert verdicts == [(True, 0), (True, 0), (True, 0), (False, 2)]


def test_the_bucket_refills_at_the_rate(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    start = 5_000_000
    verdicts = run_takes(
        settings.redis_url, [start, start, start + 500, start + 1000, start + 1001], rate=1, burst=2
    )
    assert [allowed for allowed, _ in verdicts] == [True, True, False, True, False]


def test_processes_share_one_bucket_per_key(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    # two limiters (two server processes) take from the same key's bucket
    first = run_takes(settings.redis_url, [9_000_000, 9_000_000], rate=0.1, burst=3)
    second = run_takes(settings.redis_url, [9_000_000, 9_000_000], rate=0.1, burst=3)
    assert [a for a, _ in first + second] == [True, True, True, False]
    assert redis_client.pttl("memharness:api:bucket:key-1") > 0


def test_a_zero_rate_turns_the_limit_off(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    assert run_takes(settings.redis_url, [1] * 5, rate=0, burst=1) == [(True, 0)] * 5
    assert redis_client.keys("memharness:api:bucket:*") == []


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def leased(redis_url: str, steps: Any, *, rate: float, burst: int, lease: int) -> list[Any]:
    """Run ``steps(limiters, clock)`` with two limiters on two connections (two server
    processes' worth of state) sharing one clock."""

    async def go() -> list[Any]:
        clients = [aredis.Redis.from_url(redis_url) for _ in range(2)]
        clock = Clock()
        try:
            limiters = [
                RateLimiter(c, rate_per_s=rate, burst=burst, lease=lease, lease_s=0.5, clock=clock)
                for c in clients
            ]
            return list(await steps(limiters, clock))
        finally:
            for c in clients:
                await c.aclose()

    return asyncio.run(go())


def bucket_tokens(redis_client: Any) -> float:
    return float(redis_client.hget("memharness:api:bucket:key-1", "t"))


def test_a_lease_serves_its_tokens_without_asking_redis(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    async def steps(limiters, clock):  # type: ignore[no-untyped-def]
        first = [(await limiters[0].take("key-1", now_ms=1_000_000)).allowed for _ in range(10)]
        return [first, bucket_tokens(redis_client)]

    # given 1000 requests/s, a burst of 100 and leases of 10
    allowed, left = leased(settings.redis_url, steps, rate=1000, burst=100, lease=10)
    # then ten requests took one lease: the shared bucket lost ten tokens, once
    assert allowed == [True] * 10
    assert left == 90


def test_the_limit_holds_across_processes_within_one_lease(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given two server processes of one key, a burst of 25 and leases of 10, at one instant
    async def steps(limiters, clock):  # type: ignore[no-untyped-def]
        verdicts = []
        for n in range(60):
            verdicts.append((await limiters[n % 2].take("key-1", now_ms=2_000_000)).allowed)
        return verdicts

    verdicts = leased(settings.redis_url, steps, rate=100, burst=25, lease=10)
    # then together they pass exactly the burst, however the leases fall
    assert sum(verdicts) == 25


def test_real_processes_share_the_limit_through_their_leases(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    script = textwrap.dedent(
        """
        import asyncio, sys
        import redis.asyncio as aredis
        from memharness.server.ratelimit import RateLimiter

        async def go():
            client = aredis.Redis.from_url(sys.argv[1])
            limiter = RateLimiter(client, rate_per_s=100, burst=45, lease=10, lease_s=30)
            allowed = 0
            for _ in range(100):
                allowed += (await limiter.take("key-1", now_ms=3_000_000)).allowed
            await client.aclose()
            print(allowed)

        asyncio.run(go())
        """
    )
    # given three processes hammering one key at one instant (no refill), each with leases
    procs = [
        subprocess.Popen([sys.executable, "-c", script, settings.redis_url], stdout=subprocess.PIPE)
        for _ in range(3)
    ]
    counts = [int(proc.communicate(timeout=60)[0]) for proc in procs]
    # then they pass the burst between them, not a token more
    assert sum(counts) == 45, counts


def test_an_expired_lease_gives_its_tokens_back(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    async def steps(limiters, clock):  # type: ignore[no-untyped-def]
        await limiters[0].take("key-1", now_ms=4_000_000)  # leases 10, spends 1
        held = bucket_tokens(redis_client)
        clock.now += 0.6  # past lease_s: the 9 left go back with the next renewal
        await limiters[0].take("key-1", now_ms=4_000_000)
        return [held, bucket_tokens(redis_client)]

    held, after = leased(settings.redis_url, steps, rate=1000, burst=50, lease=10)
    assert held == 40
    assert after == 39  # 40 + 9 given back - 10 leased anew


def test_a_slow_key_asks_redis_for_every_request(settings, redis_client) -> None:  # type: ignore[no-untyped-def]
    # a lease never holds more than the rate refills in lease_s (1/s * 0.5 s: one token)
    limiter = RateLimiter(redis_client, rate_per_s=1, burst=20, lease=10, lease_s=0.5)
    assert limiter.lease == 1
    assert RateLimiter(redis_client, rate_per_s=100, burst=5, lease=10).lease == 5
    assert RateLimiter(redis_client, rate_per_s=100, burst=200, lease=10).lease == 10
