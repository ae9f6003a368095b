"""An embedding model change through a real store owner: the owner restarts with another
embedder, the first write notices, the run re-embeds every memory in short steps that
requeue themselves through the broker, and the alias ends on a verified new generation."""

from __future__ import annotations

import time

import pytest

from workers.adapters import build_vector_index

pytestmark = pytest.mark.integration

WORDS = ["ledger", "postgres", "invoice", "billing", "outbox", "migration"]


def _items(n: int, session: str) -> list[dict[str, str]]:
    return [
        {
            "content": f"We decided to rework the {WORDS[i % 6]} {WORDS[(i + 2) % 6]} part, "
            f"ticket ACME-{session}-{i}.",
            "tenant_id": "acme",
            "task_id": "main",
            "session_id": session,
        }
        for i in range(n)
    ]


def test_a_model_change_re_embeds_in_the_owner(client, workers, db, settings):  # type: ignore[no-untyped-def]
    # given memories stored by an owner with the 64-d embedder
    owner = workers("owner", ("write", "embed", "recall"))
    first = client.record_many(_items(40, "s1"))
    client.wait_until_settled([r.memory_id for r in first], timeout_s=60)
    owner.stop(timeout_s=10)

    # when the owner restarts with a 96-d embedder and short steps, and a write comes in
    owner = workers(
        "owner-96",
        ("write", "embed", "recall"),
        env={
            "MEMHARNESS_EMBED_DIM": "96",
            "MEMHARNESS_INDEX_BATCH_SIZE": "10",
            "MEMHARNESS_SWEEP_DEADLINE_S": "0.01",
        },
    )
    late = client.record_many(_items(5, "s2"))
    client.wait_until_settled([r.memory_id for r in late], timeout_s=60)

    # then the write started a run that the owner drives to the end through its queue
    deadline = time.monotonic() + 90
    run = None
    while time.monotonic() < deadline:
        run = db.execute(
            "SELECT finished_at IS NOT NULL, stats FROM cognition_runs WHERE kind = 'reembed'"
        ).fetchone()
        if run is not None and run[0]:
            break
        time.sleep(0.2)
    assert run is not None and run[0], run
    stats = run[1]
    assert stats["from_version"] == "hashing-v2/64"
    assert stats["to_version"] == "hashing-v2/96"
    assert stats["batches"] >= 4  # 40+ rows in batches of 10, one step each
    assert stats["verified_points"] == 45
    # and recall answers from the new generation
    assert client.recall("ledger invoice", tenant_id="acme")

    # and every memory carries the new version, in the only generation left
    versions = db.execute(
        "SELECT embedding_version, count(*) FROM memories WHERE status = 'stored' GROUP BY 1"
    ).fetchall()
    assert versions == [("hashing-v2/96", 45)]
    alias = f"{settings.collection_prefix}_episodic"
    owner.stop(timeout_s=10)  # the store has one owner: open it only once it has gone
    index = build_vector_index(settings)
    try:
        assert index.collections() == [f"{alias}__g2"]
        assert index.resolve(alias) == f"{alias}__g2"
        assert index.embedding_version(alias) == "hashing-v2/96"
        assert index.count(alias) == 45
    finally:
        index.close()
