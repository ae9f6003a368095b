"""recall()'s answer: a list of hits that says whether the index behind it was whole."""

from __future__ import annotations

import pytest

from pipelines.read.hits import RecallHits, recall_hits

HIT = {"id": "a", "score": 0.5}


def test_the_owners_answer_becomes_a_list_with_its_flag() -> None:
    hits = recall_hits({"hits": [HIT], "degraded": True})
    assert hits == [HIT] and isinstance(hits, list)
    assert hits.degraded is True


def test_an_answer_from_an_owner_without_the_flag_is_not_degraded() -> None:
    hits = recall_hits([HIT])
    assert hits == [HIT] and hits.degraded is False


def test_an_empty_degraded_answer_is_not_a_silent_one() -> None:
    hits = recall_hits({"hits": [], "degraded": True})
    assert not hits and hits.degraded


def test_anything_else_is_refused() -> None:
    with pytest.raises(RuntimeError, match="answered str"):
        recall_hits("nope")


def test_hits_default_to_whole() -> None:
    assert RecallHits().degraded is False
