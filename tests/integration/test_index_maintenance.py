"""Index maintenance through a real store owner: a rebuild published to the owner's queue
while an agent keeps recalling and writing; the index ends equal to PostgreSQL."""

from __future__ import annotations

import random
import time

import pytest

from workers.adapters import build_vector_index
from workers.app import app

pytestmark = pytest.mark.integration

TENANTS = {
    "acme": "ledger postgres invoice billing outbox migration",
    "globex": "kubernetes helm ingress autoscaler canary rollout",
    "initech": "tps report cover sheet printer stapler",
}


def _items(tenant: str, words: str, n: int, session: str) -> list[dict[str, str]]:
    rng = random.Random(f"{tenant}{session}")
    vocab = words.split()
    return [
        {
            "content": f"We decided to rework the {' '.join(rng.sample(vocab, 2))} part, "
            f"ticket {tenant.upper()}-{session}-{i}.",
            "tenant_id": tenant,
            "task_id": "main",
            "session_id": session,
        }
        for i in range(n)
    ]


def test_a_rebuild_in_the_owner_while_an_agent_recalls_and_writes(client, workers, db, settings):  # type: ignore[no-untyped-def]
    # given an owner worker and three tenants' memories stored through it
    owner = workers("owner", ("write", "embed", "recall"))
    receipts = client.record_many(
        [item for tenant, words in TENANTS.items() for item in _items(tenant, words, 30, "s1")]
    )
    client.wait_until_settled([r.memory_id for r in receipts], timeout_s=60)
    owner_of = {str(row[0]): row[1] for row in db.execute("SELECT id, tenant_id FROM memories")}

    # when a rebuild is published to the owner's queue while the agent recalls and writes
    rebuild = app.send_task(
        "memory.embed.rebuild_index", kwargs={"kind": "episodic"}, queue="embed"
    )
    late = client.record_many(_items("acme", TENANTS["acme"], 10, "s2"))
    answers = 0
    rng = random.Random(3)
    deadline = time.monotonic() + 60
    while not rebuild.ready() and time.monotonic() < deadline:
        tenant = rng.choice(list(TENANTS))
        hits = client.recall(" ".join(rng.sample(TENANTS[tenant].split(), 2)), tenant_id=tenant)
        # then every answer is non-empty and holds only the asking tenant's memories
        assert hits, tenant
        for hit in hits:
            if hit["id"] not in owner_of:  # a late write: look its owner up
                row = db.execute("SELECT tenant_id FROM memories WHERE id = %s", (hit["id"],))
                owner_of[hit["id"]] = row.fetchone()[0]
            assert owner_of[hit["id"]] == tenant
        answers += 1
    report = rebuild.get(timeout=60)
    for _ in range(5):  # and recall keeps answering after the switch
        assert client.recall("ledger invoice", tenant_id="acme")
        answers += 1
    client.wait_until_settled([r.memory_id for r in late], timeout_s=60)

    # and the new generation was verified against PostgreSQL and took the alias
    alias = f"{settings.collection_prefix}_episodic"
    assert (report["old"], report["new"]) == (f"{alias}__g1", f"{alias}__g2")
    assert report["verified_points"] >= 90
    assert answers >= 5

    # and a reconciliation after the late writes finds the index complete
    reconciled = app.send_task(
        "memory.embed.reconcile_index", kwargs={"kinds": ["episodic"]}, queue="embed"
    ).get(timeout=60)
    assert reconciled["episodic"]["missing"] == 0
    assert reconciled["episodic"]["orphans"] == 0

    owner.stop(timeout_s=10)  # the store has one owner: open it only once it has gone
    stored = db.execute("SELECT count(*) FROM memories WHERE status = 'stored'").fetchone()[0]
    index = build_vector_index(settings)
    try:
        assert index.resolve(alias) == f"{alias}__g2"
        assert index.count(alias) == stored == 100
        assert index.collections() == [f"{alias}__g2"]
    finally:
        index.close()
