"""The asyncio twin of the write path, through a real worker."""

from __future__ import annotations

import asyncio

import pytest

from config import Settings
from memharness.aio import AsyncMemoryClient
from pipelines.errors import InvalidInput

pytestmark = pytest.mark.integration

SCOPE = {"tenant_id": "acme", "task_id": "billing", "session_id": "s-1"}


def test_async_record_behaves_like_the_sync_one(workers, client, db, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    workers("write")

    async def agent() -> list[object]:
        async with AsyncMemoryClient(settings) as memory:
            receipts = await asyncio.gather(
                memory.record("We decided to bill in cents because floats lose money.", **SCOPE),
                memory.record("Status: ATL-7 is now blocked on the tax review.", **SCOPE),
                memory.record("好的", **SCOPE),
            )
            replay = await memory.record(
                "We decided to bill in cents because floats lose money.", **SCOPE
            )
            with pytest.raises(InvalidInput) as bad:
                await memory.record("x" * 70_000, **SCOPE)
            keyed = await memory.record("Deploy to eu-west-1", idempotency_key="k-1", **SCOPE)
            with pytest.raises(InvalidInput, match="already used"):
                await memory.record("Deploy to us-east-1", idempotency_key="k-1", **SCOPE)
            return [*receipts, replay, bad.value.field, keyed]

    first, second, ack, replay, bad_field, keyed = asyncio.run(agent())
    assert [r.status for r in (first, second, ack)] == ["accepted", "accepted", "dropped"]  # type: ignore[attr-defined]
    assert (replay.status, replay.memory_id) == ("duplicate", first.memory_id)  # type: ignore[attr-defined]
    assert bad_field == "content"
    ids = [first.memory_id, second.memory_id, keyed.memory_id]  # type: ignore[attr-defined]
    assert client.wait_until_settled(ids) == {"stored": 3}
    assert db.execute("SELECT count(*) FROM memories").fetchone()[0] == 3
