"""The read path's vector side: what is embedded as a question, what as a stored text, and
which named vector each search reads."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from pipelines.index.context_vector import fusion_weights, query_context_text
from pipelines.index.vectors import CODE_VECTOR, CONTENT_VECTOR
from pipelines.read.recall import RecallScope
from pipelines.records import TaskPhase
from workers.adapters.embed_code import IdentifierEmbedder
from workers.adapters.embed_e5 import E5Embedder
from workers.adapters.embed_hashing import HashingEmbedder
from workers.read.vectors import VectorRecall

SCOPE = RecallScope(tenant_id="acme", task_id="billing", now=datetime(2026, 12, 4, tzinfo=UTC))


class RecordingIndex:
    """A vector port that records each search (its vector too) and answers with no hits."""

    def __init__(self) -> None:
        self.searches: list[dict[str, Any]] = []

    def search(self, collection: str, vector: Any, **kwargs: Any) -> list[Any]:
        self.searches.append({"collection": collection, "vector": list(vector), **kwargs})
        return []

    def search_many(self, collection: str, vectors: Any, **kwargs: Any) -> list[list[Any]]:
        return [self.search(collection, vector, **kwargs) for vector in vectors]


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder(threads=1)


def test_with_e5_a_question_is_a_query_and_the_steps_context_a_passage(e5: E5Embedder) -> None:
    # given the read path's dense recall over e5, fusing the step's context
    index = RecordingIndex()
    context = query_context_text(TaskPhase.REVIEW, ["decisions"])
    recall = VectorRecall(
        index,  # type: ignore[arg-type]
        e5,
        "memharness_episodic",
        threading.Lock(),
        fusion=(context, fusion_weights(TaskPhase.REVIEW)),
    )

    # when two variants of a question are searched
    recall.search_dense_many(["谁负责支付模块？", "payment module owner"], SCOPE, 50)

    # then each was embedded as a query (e5's "query: ") and the context string as the stored
    # context strings are (a passage)
    asked = e5.embed_query(["谁负责支付模块？", "payment module owner"])
    assert len(index.searches) == 2
    for search, vector in zip(index.searches, asked, strict=True):
        assert search["vector"] == pytest.approx(vector, abs=1e-6)
    assert index.searches[0]["fusion"].context == pytest.approx(e5.embed([context])[0], abs=1e-6)
    assert asked[0] != pytest.approx(e5.embed(["谁负责支付模块？"])[0], abs=1e-3)
    # and the cosine of known memories is asked with the query form too
    recall.similarity("谁负责支付模块？", ["00000000-0000-0000-0000-000000000001"], SCOPE)
    assert index.searches[-1]["vector"] == pytest.approx(asked[0], abs=1e-6)


def test_the_code_side_searches_the_code_vector_with_the_question_read_as_code() -> None:
    index = RecordingIndex()
    embedder = HashingEmbedder(64)
    code = IdentifierEmbedder(embedder)
    recall = VectorRecall(
        index,  # type: ignore[arg-type]
        embedder,
        "memharness_episodic",
        threading.Lock(),
        code_embedder=code,
    )

    recall.search_dense("Where is fetchUserById?", SCOPE, 50)
    recall.search_code("Where is fetchUserById?", SCOPE, 50)

    content, by_code = index.searches
    assert content.get("using", CONTENT_VECTOR) == CONTENT_VECTOR
    assert by_code["using"] == CODE_VECTOR
    assert by_code["vector"] == code.embed_query(["Where is fetchUserById?"])[0]
    assert (by_code["tenant_id"], by_code["task_id"], by_code["limit"]) == ("acme", "billing", 50)


def test_without_a_code_embedder_the_code_side_answers_nothing() -> None:
    index = RecordingIndex()
    recall = VectorRecall(index, HashingEmbedder(64), "memharness_episodic", threading.Lock())  # type: ignore[arg-type]
    assert recall.search_code("Where is fetchUserById?", SCOPE, 50) == []
    assert index.searches == []
