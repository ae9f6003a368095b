"""The token bucket, on the real Redis (several server processes share it)."""

from __future__ import annotations

import asyncio

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
