from __future__ import annotations

import uuid

import pytest

from pipelines.errors import InvalidInput
from pipelines.health.golden import (
    check_golden_set,
    draw_golden_queries,
    judge,
    summarise,
)

MEMORIES = [
    (str(uuid.UUID(int=i + 1)), text)
    for i, text in enumerate(
        [
            "We decided to keep money as integer cents in amount_cents because floats lost a cent",
            "Status: ATL-7 payment webhooks are now in review, waiting on Priya",
            "I ran scripts/migrate_ledger.py against staging and 40k rows moved in 14 minutes",
            "ok",
            "The public API must answer within 200 ms at p99 for the mobile clients",
        ]
    )
]


def test_drawn_queries_are_the_memories_own_words_and_expect_them() -> None:
    drawn = draw_golden_queries(MEMORIES, 10)
    by_id = dict(MEMORIES)
    assert {g.source for g in drawn} == {"drawn"}
    # "ok" has too few terms to make a question of
    assert len(drawn) == 4
    for golden in drawn:
        assert golden.query in by_id[golden.expected_id]
        assert 4 <= len(golden.query.split()) <= 8


def test_drawing_is_deterministic_and_capped() -> None:
    assert draw_golden_queries(MEMORIES, 2) == draw_golden_queries(MEMORIES, 2)
    assert len(draw_golden_queries(MEMORIES, 2)) == 2


def test_two_memories_with_the_same_phrase_give_one_query() -> None:
    text = "alpha beta gamma delta"
    twins = [(str(uuid.UUID(int=1)), text), (str(uuid.UUID(int=2)), text)]
    assert len(draw_golden_queries(twins, 5)) == 1


def test_a_user_set_is_checked_item_by_item() -> None:
    good = str(uuid.uuid4())
    queries = check_golden_set(
        "acme", [{"query": " where  is it ", "expected_id": good}, ("q", good)]
    )
    assert [q.query for q in queries] == ["where is it", "q"]
    assert queries[0].id == check_golden_set("acme", [("where is it", good)])[0].id
    with pytest.raises(InvalidInput) as bad:
        check_golden_set("acme", [("fine", good), ("fine", "not-a-uuid")])
    assert bad.value.field == "queries[1].expected_id"
    with pytest.raises(InvalidInput) as long:
        check_golden_set("acme", [("x" * 1001, good)])
    assert long.value.limit == "1000 characters"
    with pytest.raises(InvalidInput) as tenant:
        check_golden_set("", [])
    assert tenant.value.field == "tenant_id"


def test_a_run_summary_counts_hits_in_the_top_k() -> None:
    outcomes = [
        judge("a", ["x", "a"], 0.01),
        judge("b", ["b"], 0.03),
        judge("c", ["x", "y"], 0.02),
    ]
    summary = summarise(outcomes)
    assert (summary.queries, summary.hits) == (3, 2)
    assert summary.hit_ratio == pytest.approx(2 / 3)
    assert summary.mrr == pytest.approx((1 / 2 + 1) / 3)
    assert summary.p95_s == 0.03
    assert summarise([]).hit_ratio is None
