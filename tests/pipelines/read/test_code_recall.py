"""The dual encoder by modality in the retrieval pipeline: a question in code's terms searches
code memories' code vectors first, fused with the text path; other questions do not."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pipelines.read.focus import InfoKind, directive_from_kinds
from pipelines.read.recall import (
    CodeRecaller,
    MemoryView,
    Recallers,
    RecallHit,
    RecallList,
    RecallScope,
    fuse,
)
from pipelines.read.retrieve import retrieve
from pipelines.read.sparse import BM25Index
from pipelines.text.code import code_terms

NOW = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
SCOPE = RecallScope(tenant_id="shop", task_id="dev", now=NOW)
FACTS = directive_from_kinds([InfoKind.FACTS], [])

MEMORIES = [
    MemoryView(
        id="code-fetch",
        content="export async function fetchUserById(userId: string) { return http.get(url) }",
        timestamp=NOW,
    ),
    MemoryView(
        id="code-cache",
        content="func NewRedisCache(addr string) *RedisCache { return &RedisCache{} }",
        timestamp=NOW,
    ),
    MemoryView(id="t1", content="The user profile page loads slowly on mobile.", timestamp=NOW),
    MemoryView(id="t2", content="Alice fetched the new designs for the user page.", timestamp=NOW),
    MemoryView(id="t3", content="We fetch data by id from the cache first.", timestamp=NOW),
]
CODE_IDS = {"code-fetch", "code-cache"}


def _overlap(a: Sequence[str], b: Sequence[str]) -> float:
    x, y = set(a), set(b)
    return len(x & y) / len(x | y) if x | y else 0.0


class Dense:
    """Content similarity is overlap of whitespace words (an embedder that reads
    ``fetchUserById`` as one word); the code side reads code as ``code_terms``."""

    def __init__(self) -> None:
        self.code_calls: list[str] = []

    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        words = text.lower().split()
        hits = [RecallHit(m.id, _overlap(words, m.content.lower().split())) for m in MEMORIES]
        return sorted((h for h in hits if h.score > 0), key=lambda h: (-h.score, h.id))[:limit]

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        words = text.lower().split()
        return {m.id: _overlap(words, m.content.lower().split()) for m in MEMORIES if m.id in ids}

    def search_code(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        self.code_calls.append(text)
        terms = code_terms(text)
        hits = [
            RecallHit(m.id, _overlap(terms, code_terms(m.content)))
            for m in MEMORIES
            if m.id in CODE_IDS
        ]
        return sorted((h for h in hits if h.score > 0), key=lambda h: (-h.score, h.id))[:limit]


class Store:
    def __init__(self) -> None:
        self.index = BM25Index()
        self.index.add_many((m.id, m.content) for m in MEMORIES)

    def search_sparse(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return [RecallHit(k, s) for k, s in self.index.search(text, limit)]

    def related_terms(self, text: str, scope: RecallScope, limit: int) -> list[str]:
        return []

    def fetch(self, ids: Sequence[str], scope: RecallScope) -> list[MemoryView]:
        by_id = {m.id: m for m in MEMORIES}
        return [by_id[i] for i in ids if i in by_id]


def _recallers(dense: Dense) -> Recallers:
    store = Store()
    return Recallers(dense=dense, sparse=store, temporal=None, store=store)


def test_a_question_in_code_terms_searches_the_code_vectors_and_fuses_them() -> None:
    # given a dense recaller with a code side
    dense = Dense()
    assert isinstance(dense, CodeRecaller)

    # when a question naming an identifier is retrieved
    result = retrieve("Which URL does fetchUserById call?", SCOPE, _recallers(dense), FACTS)

    # then the code side was asked once, with the question as asked
    assert dense.code_calls == ["Which URL does fetchUserById call?"]
    assert result.recalled["code"] == 1  # the other snippet shares no word with it
    # and the snippet it names leads, found through its code vector
    first = result.candidates[0]
    assert first.memory.id == "code-fetch"
    assert "code:literal" in first.sources


def test_a_question_in_plain_words_leaves_the_code_side_alone() -> None:
    dense = Dense()
    result = retrieve("Why is the user page slow?", SCOPE, _recallers(dense), FACTS)
    assert dense.code_calls == []
    assert "code" not in result.recalled
    assert all("code:literal" not in c.sources for c in result.candidates)


def test_the_code_list_weighs_above_a_dense_list_and_its_cosine_counts_as_dense() -> None:
    # given the same memory first in the code list and second in the literal dense list
    lists = [
        RecallList("code", "literal", (RecallHit("a", 0.9),)),
        RecallList("dense", "literal", (RecallHit("b", 0.6), RecallHit("a", 0.4))),
    ]

    # when fused with the retrieval's weights (code: 1.5 x dense)
    fused = {
        key: (score, dense) for key, score, dense, _ in fuse(lists, {"dense": 1.0, "code": 1.5})
    }

    # then it leads, and its dense score is its best cosine through either encoder
    assert fused["a"][0] > fused["b"][0]
    assert fused["a"][1] == 0.9
    assert fused["b"][1] == 0.6
