"""Resolving keys against the real ``api_keys`` table: live, wrong, revoked, cached."""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg_pool import AsyncConnectionPool

from memharness.server.auth import KeyResolver, presented_key
from memharness.server.keys import create_key, list_keys, revoke_key


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def resolving(database_url: str, steps: Any) -> list[Any]:
    async def go() -> list[Any]:
        pool = AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False,
                                   kwargs={"autocommit": True})  # fmt: skip
        await pool.open()
        try:
            clock = Clock()
            resolver = KeyResolver(pool, cache_s=5.0, clock=clock)
            return [await step(resolver, clock) for step in steps]
        finally:
            await pool.close()

    return asyncio.run(go())


def test_a_live_key_resolves_to_its_tenant_and_a_wrong_one_to_nothing(db, migrated) -> None:  # type: ignore[no-untyped-def]
    text, record = create_key(db, tenant_id="acme", scopes="read", agent_id="bot-1")
    wrong = text[:-2] + ("AA" if not text.endswith("AA") else "BB")

    async def good(resolver, clock):  # type: ignore[no-untyped-def]
        return await resolver.resolve(text)

    async def bad(resolver, clock):  # type: ignore[no-untyped-def]
        return await resolver.resolve(wrong)

    async def junk(resolver, clock):  # type: ignore[no-untyped-def]
        return await resolver.resolve("not-a-key")

    async def flush(resolver, clock):  # type: ignore[no-untyped-def]
        await resolver.flush_touches()

    found, refused, malformed, _ = resolving(migrated, [good, bad, junk, flush])
    assert (found.tenant_id, found.agent_id, found.id) == ("acme", "bot-1", record.id)
    assert refused is None and malformed is None
    assert list_keys(db, "acme")[0].last_used_at is not None


def test_a_revoked_key_is_refused_once_the_cache_expires(db, migrated) -> None:  # type: ignore[no-untyped-def]
    text, record = create_key(db, tenant_id="acme", scopes="write")

    async def first(resolver, clock):  # type: ignore[no-untyped-def]
        return await resolver.resolve(text)

    async def revoke_then_within(resolver, clock):  # type: ignore[no-untyped-def]
        assert revoke_key(db, record.prefix) is not None
        clock.now += 4.9
        return await resolver.resolve(text)

    async def after(resolver, clock):  # type: ignore[no-untyped-def]
        clock.now += 0.2
        return await resolver.resolve(text)

    cached, within, expired = resolving(migrated, [first, revoke_then_within, after])
    assert cached is not None and within is not None  # the documented window
    assert expired is None
    assert revoke_key(db, record.prefix) is None  # already revoked


def test_the_key_comes_from_the_bearer_or_the_api_key_header() -> None:
    assert presented_key([(b"authorization", b"Bearer mh_x_y")]) == "mh_x_y"
    assert presented_key([(b"x-api-key", b" mh_x_y ")]) == "mh_x_y"
    assert presented_key([(b"authorization", b"Basic abc")]) is None
    assert presented_key([]) is None
