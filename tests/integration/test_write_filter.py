"""A sample of the labeled write-filter set recorded through ``MemoryClient`` and a real write
worker (offline rules): every statement of fact is stored, every acknowledgement, chatter,
noise and exact repeat is dropped at tier 1 or discarded by the worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "cognition" / "write_filter.jsonl"
TURNS = [json.loads(line) for line in DATA.read_text("utf-8").splitlines() if line.strip()]
# Every tenth turn of each language: about thirty turns of every category.
SAMPLE = [turn for lang in ("en", "zh") for turn in [t for t in TURNS if t["lang"] == lang][::10]]


def test_a_sample_of_the_labeled_set_is_stored_or_discarded_as_labeled(client, workers, db):  # type: ignore[no-untyped-def]
    # given a write worker that owns the store, and a sample with both labels in both languages
    workers("write")
    assert {(t["lang"], t["label"]) for t in SAMPLE} == {
        ("en", "keep"), ("en", "drop"), ("zh", "keep"), ("zh", "drop"),
    }  # fmt: skip

    # when an agent records the English turns one by one and the Chinese ones in one batch,
    # and says one fact twice in the same session
    scope = {"tenant_id": "acme", "task_id": "t-filter"}
    english = [t for t in SAMPLE if t["lang"] == "en"]
    chinese = [t for t in SAMPLE if t["lang"] == "zh"]
    receipts = [client.record(t["content"], session_id="s-en", **scope) for t in english]
    receipts += client.record_many(
        [{"content": t["content"], "session_id": "s-zh", **scope} for t in chinese]
    )
    fact = next(t for t in english if t["label"] == "keep")
    repeat = client.record(fact["content"], session_id="s-en", **scope)

    accepted = [r.memory_id for r in receipts if r.status == "accepted"]
    client.wait_until_settled(accepted, timeout_s=90)

    # then every fact is stored and every other turn dropped at tier 1 or discarded
    fates = dict(db.execute("SELECT id, status FROM memories WHERE tenant_id = 'acme'"))
    outcome = {
        turn["id"]: ("dropped" if receipt.status == "dropped" else str(fates[receipt.memory_id]))
        for turn, receipt in zip(english + chinese, receipts, strict=True)
    }
    facts_lost = [t["id"] for t in SAMPLE if t["label"] == "keep" and outcome[t["id"]] != "stored"]
    chatter_kept = [
        t["id"] for t in SAMPLE if t["label"] == "drop" and outcome[t["id"]] == "stored"
    ]
    print({"sample": len(SAMPLE), "facts_lost": facts_lost, "chatter_kept": chatter_kept})
    assert facts_lost == []
    assert chatter_kept == []
    assert {outcome[t["id"]] for t in SAMPLE if t["label"] == "drop"} <= {"dropped", "discarded"}

    # and the repeat is the same memory, not a second one
    assert repeat.status == "duplicate"
    assert repeat.memory_id == receipts[english.index(fact)].memory_id

    # and every stored fact scored above the decay sweep's eviction line
    low = db.execute(
        "SELECT content, importance FROM memories WHERE tenant_id = 'acme' "
        "AND status = 'stored' AND importance < 0.5"
    ).fetchall()
    assert low == []
