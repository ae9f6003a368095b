"""A collection short of PostgreSQL, measured and restored in steps, against the real
PostgreSQL, Redis and the embedded engine; reads meanwhile say they are degraded and add
PostgreSQL's keyword hits."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from config import Settings
from tests.workers.index.test_maintenance import _seed
from workers.clients import Clients
from workers.index.completeness import index_degraded, measure_index, read_states
from workers.index.restore import (
    CLAIM_KEY,
    FIRST_CURSOR,
    restore_missing,
    restore_step,
    run_restore_step,
)
from workers.index.targets import EMBED_CHUNK, EPISODIC, alias_name
from workers.read.fallback import fuse_hits
from workers.read.search import search, search_answer


@pytest.fixture
def ctx(db, redis_client, qdrant_path, settings: Settings) -> Iterator[Clients]:  # type: ignore[no-untyped-def]
    context = Clients(settings)
    yield context
    context.close()


def _lose_index(ctx: Clients, settings: Settings) -> Clients:
    """Close the store, delete its directory, open it again (an owner restarted on a lost
    volume)."""
    ctx.close()
    shutil.rmtree(settings.qdrant_path)
    return Clients(settings)


def test_a_whole_collection_measures_whole(ctx, db) -> None:  # type: ignore[no-untyped-def]
    _seed(ctx, 10)
    state = measure_index(ctx, EPISODIC)
    assert (state.live, state.indexed, state.missing, state.degraded) == (40, 40, 0, False)
    assert read_states(ctx.redis, ctx.settings)[EPISODIC] == state
    assert not index_degraded(ctx, EPISODIC)


def test_a_lost_collection_is_restored_in_steps_with_a_cursor(ctx, db, settings) -> None:  # type: ignore[no-untyped-def]
    # given a store of 2.5 pages of memories whose directory was lost
    _seed(ctx, EMBED_CHUNK * 5 // 8)  # 4 tenants: 640 rows
    before = search(ctx, tenant_id="acme", query="ledger invoice", task_id=None, limit=5)
    ctx = _lose_index(ctx, settings)
    try:
        # when it is measured, then it is known short
        state = measure_index(ctx, EPISODIC)
        assert (state.live, state.indexed, state.missing) == (640, 0, 640)
        assert index_degraded(ctx, EPISODIC)

        # when steps run with no time to spare, each does one page and hands on its cursor
        ctx.settings = settings.model_copy(update={"index_restore_step_s": 1e-6})
        first = restore_step(ctx, EPISODIC, FIRST_CURSOR)
        assert (first["scanned"], first["embedded"], first["done"]) == (256, 256, False)
        assert first["missing"] == 640 - 256
        second = restore_step(ctx, EPISODIC, first["cursor"])
        assert second["cursor"] > first["cursor"]
        # a replayed step writes nothing again
        again = restore_step(ctx, EPISODIC, first["cursor"])
        assert (again["scanned"], again["embedded"]) == (256, 0)
        last = restore_step(ctx, EPISODIC, second["cursor"])

        # then the last one ends the walk and the collection is whole again
        assert (last["embedded"], last["done"], last["missing"]) == (128, True, 0)
        assert not measure_index(ctx, EPISODIC).degraded
        after = search(ctx, tenant_id="acme", query="ledger invoice", task_id=None, limit=5)
        assert after == before
    finally:
        ctx.close()


def test_reads_over_a_short_collection_say_so_and_carry_keyword_hits(ctx, db, settings) -> None:  # type: ignore[no-untyped-def]
    _seed(ctx, 20)
    ctx = _lose_index(ctx, settings)
    try:
        # given the lost collection measured short
        measure_index(ctx, EPISODIC)

        # when recall asks it
        answer = search_answer(ctx, tenant_id="acme", query="ledger invoice", task_id=None, limit=5)

        # then the answer is degraded and holds the tenant's keyword matches
        assert answer["degraded"] is True
        assert answer["hits"], "the keyword fallback found nothing"
        assert all("ledger" in h["content"] or "invoice" in h["content"] for h in answer["hits"])
        # and a query with no keyword in the store is empty, but says it is degraded
        nothing = search_answer(ctx, tenant_id="acme", query="zebra", task_id=None, limit=5)
        assert nothing == {"hits": [], "degraded": True}
        # and the golden queries, which measure the index itself, get its dense answer only
        dense = search_answer(
            ctx, tenant_id="acme", query="ledger invoice", task_id=None, limit=5, fallback=False
        )
        assert dense == {"hits": [], "degraded": True}
    finally:
        ctx.close()


def test_the_start_measurement_starts_one_restore_chain(ctx, db, settings) -> None:  # type: ignore[no-untyped-def]
    _seed(ctx, 5)
    ctx = _lose_index(ctx, settings)
    try:
        # when the owner's start measures the collections twice (a second worker, a check)
        first = restore_missing(ctx)
        second = restore_missing(ctx)

        # then the short one gets exactly one chain, the whole one none
        assert first[EPISODIC]["missing"] == 20 and first[EPISODIC]["restore_started"]
        assert not second[EPISODIC]["restore_started"]
        # but a store's owner that just started takes over a claim its predecessor left
        assert restore_missing(ctx, force=True)[EPISODIC]["restore_started"]
        assert not first["semantic"]["restore_started"]
        claim = CLAIM_KEY.format(alias=alias_name(settings, EPISODIC))
        assert ctx.redis.exists(claim)

        # and the chain's last step releases its claim (the step itself, run here)
        outcome = run_restore_step(ctx, EPISODIC, FIRST_CURSOR)
        assert outcome["done"] and outcome["missing"] == 0
        assert not ctx.redis.exists(claim)
    finally:
        ctx.close()


def test_fused_hits_keep_one_hit_per_memory_dense_first() -> None:
    a = "00000000-0000-0000-0000-00000000000a"
    b = "00000000-0000-0000-0000-00000000000b"
    c = "00000000-0000-0000-0000-00000000000c"
    dense = [{"id": a, "score": 0.9}, {"id": b, "score": 0.8}]
    keyword = [{"id": b, "score": 0.1}, {"id": c, "score": 0.05}]
    fused = fuse_hits(dense, keyword, 3)
    assert [h["id"] for h in fused] == [b, a, c]
    assert fused[0]["score"] == 0.8  # the dense hit is kept: its score is a cosine
    assert len(fuse_hits(dense, keyword, 2)) == 2
