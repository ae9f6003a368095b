"""The durable write path through real worker processes."""

from __future__ import annotations

import pytest

from workers.adapters import build_vector_index

pytestmark = pytest.mark.integration

SCOPE = {"tenant_id": "acme", "task_id": "billing-rewrite", "session_id": "s-1"}


def count_points(settings, tenant_id: str | None = None) -> int:  # type: ignore[no-untyped-def]
    """Open the local store after the owner stopped (local mode allows one process)."""
    index = build_vector_index(settings)
    try:
        return index.count(f"{settings.collection_prefix}_episodic", tenant_id)
    finally:
        index.close()


def test_records_are_stored_by_a_worker_with_their_decisions(client, workers, db, settings):
    # given a write worker that owns the store
    owner = workers("write")

    # when the agent records a decision, a status change, small talk and an acknowledgement
    receipts = [
        client.record(
            "We decided to keep the outbox in PostgreSQL because it commits with the memory.",
            **SCOPE,
        ),
        client.record(
            "Status: the auth module is delayed to 2027-01-15, blocked on SEC-12.", **SCOPE
        ),
        client.record("hi", **SCOPE),
        client.record("ok", **SCOPE),
    ]

    # then the acknowledgement stops at tier 1 and the others settle through the worker
    assert [r.status for r in receipts] == ["accepted", "accepted", "accepted", "dropped"]
    counts = client.wait_until_settled([r.memory_id for r in receipts[:3]], timeout_s=30)
    assert counts == {"stored": 2, "discarded": 1}
    decision = client.get(receipts[0].memory_id, tenant_id="acme")
    assert decision is not None
    assert decision.type == "decision"
    assert decision.embedding_version == "hashing-v2/64"
    assert decision.summary
    tiers = db.execute(
        "SELECT tier, verdict, count(*) FROM write_decisions GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    assert (1, "drop", 1) in tiers
    assert sum(n for tier, _, n in tiers if tier == 2) == 3
    stats = client.stats("acme")
    assert stats["tier1_drop"] == 1
    assert stats["memories_stored"] == 2

    # and recall through the store's owner finds the decision first
    hits = client.recall("outbox kept in PostgreSQL", tenant_id="acme", limit=3)
    assert hits[0]["id"] == str(receipts[0].memory_id)
    owner.stop()
    assert count_points(settings, "acme") == 2


def test_one_idempotency_key_gives_one_row_and_one_point(client, workers, db, settings):
    # given the same write sent twice with one key (a client retry after a lost response)
    owner = workers("write")
    first = client.record(
        "Deploy target is eu-west-1, cluster prod-7.", idempotency_key="req-1", **SCOPE
    )
    second = client.record(
        "Deploy target is eu-west-1, cluster prod-7.", idempotency_key="req-1", **SCOPE
    )

    # then both calls return one id and only the first wrote
    assert first.memory_id == second.memory_id
    assert (first.status, second.status) == ("accepted", "duplicate")
    client.wait_until_settled([first.memory_id])
    assert db.execute("SELECT count(*) FROM memories").fetchone()[0] == 1
    assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
    owner.stop()
    assert count_points(settings) == 1


def test_a_reused_key_with_other_content_is_refused(client, db):
    client.record("first content", idempotency_key="req-9", **SCOPE)
    with pytest.raises(ValueError, match=r"idempotency_key.*already used"):
        client.record("second content", idempotency_key="req-9", **SCOPE)
    assert db.execute("SELECT content FROM memories").fetchall() == [("first content",)]
