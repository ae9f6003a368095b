"""The retrieval pipeline, stage by stage and end to end, with in-memory fakes of the ports."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipelines.errors import MalformedLLMOutput
from pipelines.read.config import RetrievalConfig
from pipelines.read.focus import FocusDirective, InfoKind, directive_from_kinds
from pipelines.read.recall import (
    Candidate,
    MemoryVersion,
    MemoryView,
    Recallers,
    RecallHit,
    RecallList,
    RecallScope,
    best_sparse_scores,
    dedupe,
    fetch_candidates,
    fetch_chunk,
    fuse,
)
from pipelines.read.rerank import (
    RerankItem,
    adaptive_depth,
    keyword_coverage,
    llm_rerank,
    local_rerank,
    offline_rerank,
    prioritize,
    query_dates,
    session_support,
)
from pipelines.read.retrieve import retrieve
from pipelines.read.rewrite import offline_rewrite
from pipelines.read.sparse import BM25Index
from pipelines.records import Level, MemoryType, TaskPhase
from pipelines.text.analyzer import analyze

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
SCOPE = RecallScope(tenant_id="acme", task_id="task-1", now=NOW)
FACTS = directive_from_kinds([InfoKind.FACTS], [])


def view(key: str, content: str, **extra: object) -> MemoryView:
    fields: dict[str, object] = {"id": key, "content": content, "timestamp": NOW}
    fields.update(extra)
    return MemoryView.model_validate(fields)


def jaccard(a: str, b: str) -> float:
    x, y = set(analyze(a)), set(analyze(b))
    return len(x & y) / len(x | y) if x | y else 0.0


class Recorder:
    def __init__(self) -> None:
        self.scopes: list[RecallScope] = []


class FakeDense(Recorder):
    """Similarity is word overlap: enough to rank, with no model."""

    def __init__(self, memories: Sequence[MemoryView]) -> None:
        super().__init__()
        self.memories = list(memories)
        self.similarity_calls: list[list[str]] = []

    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        self.scopes.append(scope)
        hits = [RecallHit(id=m.id, score=jaccard(text, m.content)) for m in self.memories]
        hits = [h for h in hits if h.score > 0]
        return sorted(hits, key=lambda h: (-h.score, h.id))[:limit]

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        self.scopes.append(scope)
        self.similarity_calls.append(list(ids))
        return {m.id: jaccard(text, m.content) for m in self.memories if m.id in ids}


class FakeSparse(Recorder):
    def __init__(self, memories: Sequence[MemoryView]) -> None:
        super().__init__()
        self.index = BM25Index()
        self.index.add_many((m.id, m.content) for m in memories)

    def search_sparse(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        self.scopes.append(scope)
        return [RecallHit(id=k, score=s) for k, s in self.index.search(text, limit)]

    def related_terms(self, text: str, scope: RecallScope, limit: int) -> list[str]:
        self.scopes.append(scope)
        return [term for term, _ in self.index.expansion_terms(text, max_terms=limit)]


class FakeTemporal(Recorder):
    def __init__(self, memories: Sequence[MemoryView]) -> None:
        super().__init__()
        self.memories = list(memories)
        self.since: list[datetime] = []

    def search_recent(
        self, text: str, scope: RecallScope, since: datetime, limit: int
    ) -> list[RecallHit]:
        self.scopes.append(scope)
        self.since.append(since)
        recent = [m for m in self.memories if m.timestamp >= since]
        recent.sort(key=lambda m: (-jaccard(text, m.content), m.id))
        return [RecallHit(id=m.id, score=jaccard(text, m.content)) for m in recent[:limit]]


class FakeStore(Recorder):
    def __init__(self, memories: Sequence[MemoryView]) -> None:
        super().__init__()
        self.memories = {m.id: m for m in memories}

    def fetch(self, ids: Sequence[str], scope: RecallScope) -> list[MemoryView]:
        self.scopes.append(scope)
        return [self.memories[i] for i in ids if i in self.memories]


DAY = timedelta(days=1)
MEMORIES = [
    view("m1", "Caroline: I adopted a puppy named Oscar last week", timestamp=NOW - 3 * DAY),
    view("m2", "Melanie: the kids loved the camping trip at the lake", timestamp=NOW - 40 * DAY),
    view("m3", "Caroline: my puppy Oscar chewed the couch", timestamp=NOW - DAY),
    view("m4", "Melanie: I started a pottery class on 12 May 2024", timestamp=NOW - 20 * DAY),
    view("m5", "Caroline: work is busy and the weather is nice", timestamp=NOW - 30 * DAY),
    view(
        "m6",
        "We decided to keep amounts in integer cents (amount_cents)",
        type=MemoryType.DECISION,
        importance=0.9,
        timestamp=NOW - 60 * DAY,
    ),
]


def ports(memories: Sequence[MemoryView] = MEMORIES) -> Recallers:
    return Recallers(
        dense=FakeDense(memories),
        sparse=FakeSparse(memories),
        temporal=FakeTemporal(memories),
        store=FakeStore(memories),
    )


# -- fusion -------------------------------------------------------------------------------


def test_fuse_is_weighted_reciprocal_rank() -> None:
    lists = [
        RecallList(source="dense", variant="literal", hits=(RecallHit(id="a", score=0.9),
                                                            RecallHit(id="b", score=0.5))),
        RecallList(source="sparse", variant="intent", hits=(RecallHit(id="b", score=7.0),)),
    ]  # fmt: skip
    fused = fuse(lists, {"dense": 1.0, "sparse": 2.0}, {"literal": 1.0, "intent": 0.5}, k=10)
    scores = {key: score for key, score, _, _ in fused}
    assert scores["a"] == pytest.approx(1.0 / 11)
    assert scores["b"] == pytest.approx(1.0 / 12 + 2.0 * 0.5 / 11)
    assert [key for key, *_ in fused] == ["b", "a"]
    dense = {key: d for key, _, d, _ in fused}
    assert dense == {"a": 0.9, "b": 0.5}  # the dense score travels with the candidate


def test_fuse_counts_a_repeated_hit_once_per_list() -> None:
    hits = (
        RecallHit(id="a", score=1.0),
        RecallHit(id="a", score=1.0),
        RecallHit(id="b", score=0.5),
    )
    fused = fuse([RecallList(source="sparse", variant="literal", hits=hits)], {"sparse": 1.0})
    scores = {key: score for key, score, _, _ in fused}
    assert scores["b"] == pytest.approx(1.0 / 62)  # b is second, not third


def test_dedupe_drops_vanished_ids_and_repeated_contents() -> None:
    views = {
        "a": view("a", "Deploy at 5pm."),
        "b": view("b", "deploy at 5PM"),
        "c": view("c", "Something else"),
    }
    fused = [
        ("a", 3.0, None, ()),
        ("gone", 2.5, None, ()),
        ("b", 2.0, None, ()),
        ("c", 1.0, None, ()),
    ]
    assert [c.memory.id for c in dedupe(fused, views)] == ["a", "c"]
    assert [c.memory.id for c in dedupe(fused, views, limit=1)] == ["a"]


def test_candidates_are_read_a_chunk_at_a_time_with_the_same_result() -> None:
    # given 30 fused ids where a few vanished from the store and a few repeat a content
    memories = [view(f"m{n:02d}", f"note number {n // 2 if n % 5 == 0 else n}") for n in range(30)]
    store = FakeStore([m for m in memories if m.id not in {"m01", "m02", "m03", "m04", "m06"}])
    fused = [(m.id, 1.0 - n / 100, None, ()) for n, m in enumerate(memories)]
    scope = RecallScope(tenant_id="t", now=NOW)
    everything = dedupe(fused, {v.id: v for v in store.fetch([k for k, *_ in fused], scope)})

    # when the first 4 candidates are wanted, then all of them
    head = fetch_candidates(fused, scope, store, 4)
    store.scopes.clear()
    every = fetch_candidates(fused, scope, store, 100)

    # then they are the fused order's first ones, read a chunk of a few more than the limit
    assert [c.memory.id for c in head] == [c.memory.id for c in everything[:4]]
    assert every == everything
    assert len(store.scopes) == 1  # 30 ids fit one chunk of 120
    store.scopes.clear()
    assert fetch_chunk(4) == 12
    assert fetch_candidates(fused, scope, store, 4) == head
    assert len(store.scopes) == 1  # the first 12 ids hold 4 distinct live memories
    # and when the first chunk holds too few live memories, the next one is read
    sparse = FakeStore([m for n, m in enumerate(memories) if n in {5, 11} or n >= 14])
    sparse_all = dedupe(fused, {v.id: v for v in sparse.fetch([k for k, *_ in fused], scope)})
    assert fetch_candidates(fused, scope, sparse, 4) == sparse_all[:4]
    assert len(sparse.scopes) == 3  # the reference read, then two chunks
    assert fetch_candidates([], scope, store, 4) == []


# -- local rerank -------------------------------------------------------------------------


def test_keyword_coverage_weighs_rare_terms_more() -> None:
    docs = [{"caroline", "puppy"}, {"caroline", "work"}, {"caroline", "weather"}]
    coverage = keyword_coverage(["caroline", "puppy"], docs)
    assert coverage[0] == pytest.approx(1.0)
    assert 0 < coverage[1] < 0.5  # the common term is worth less than the rare one
    assert keyword_coverage([], docs) == [0.0, 0.0, 0.0]


def test_local_rerank_prefers_the_memory_about_the_named_entity() -> None:
    variants = offline_rewrite("What pet does Caroline have?")
    tied = [
        Candidate(memory=view("x", "Melanie: we have a pet rabbit"), fused=0.02, dense=0.5),
        Candidate(memory=view("y", "Caroline: we have a pet rabbit"), fused=0.02, dense=0.5),
    ]
    ranked = local_rerank(tied, variants)
    assert [c.memory.id for c in ranked] == ["y", "x"]
    assert all(0.0 <= c.local <= 1.0 for c in ranked)


def test_local_rerank_weighs_the_keyword_score_that_fusion_drops() -> None:
    # given two candidates tied on every feature but the keyword score's magnitude
    variants = offline_rewrite("adoption agencies")
    tied = [
        Candidate(
            memory=view("a", "Caroline: adoption agencies"), fused=0.02, dense=0.5, sparse=1.0
        ),
        Candidate(
            memory=view("b", "Caroline: adoption agencies"), fused=0.02, dense=0.5, sparse=9.0
        ),
    ]
    # then the one the keyword search scored higher comes first, from its own score or
    # from the scores by id that retrieve passes
    assert [c.memory.id for c in local_rerank(tied, variants)] == ["b", "a"]
    by_id = local_rerank(tied, variants, sparse_scores={"a": 5.0})
    assert [(c.memory.id, c.sparse) for c in by_id] == [("a", 5.0), ("b", None)]


def test_best_sparse_scores_compare_the_literal_and_intent_lists_only() -> None:
    lists = [
        RecallList("sparse", "literal", (RecallHit("a", 2.0), RecallHit("b", 1.0))),
        RecallList("sparse", "intent", (RecallHit("b", 3.0),)),
        RecallList("sparse", "associative", (RecallHit("a", 50.0), RecallHit("c", 40.0))),
        RecallList("dense", "literal", (RecallHit("c", 0.9),)),
    ]
    assert best_sparse_scores(lists) == {"a": 2.0, "b": 3.0}


def test_session_support_lifts_a_memory_its_session_backs_up() -> None:
    # given a lone strong candidate, and a slightly weaker one whose session recalled more
    scores = [0.80, 0.78, 0.7, 0.7]
    sessions = ["s1", "s2", "s2", "s2"]
    lone, backed, *_ = session_support(scores, sessions, 1 / 3, 3)
    # then the backed-up one passes the lone one: (2/3)·0.78 + (1/3)·mean(0.78, 0.7, 0.7)
    assert backed == pytest.approx(2 / 3 * 0.78 + (0.78 + 1.4) / 9)
    assert lone == pytest.approx(2 / 3 * 0.80 + 0.80 / 9)
    assert backed > lone


def test_session_support_keeps_the_order_inside_one_session_and_without_sessions() -> None:
    scores = [0.9, 0.5, 0.2]
    for sessions in (["s", "s", "s"], [None, None, None]):
        supported = session_support(scores, sessions, 1 / 3, 3)
        assert sorted(supported, reverse=True) == supported and len(set(supported)) == 3
    assert session_support(scores, ["a", "b", "c"], 0.0, 3) == scores


def test_local_rerank_applies_session_support() -> None:
    # given two candidates tied on every feature; one's session recalled a third candidate
    variants = offline_rewrite("adoption agencies")
    pool = [
        Candidate(
            memory=view("a", "Caroline: adoption agencies", session_id="s1"), fused=0.02, dense=0.5
        ),
        Candidate(
            memory=view("b", "Caroline: adoption agencies", session_id="s2"), fused=0.02, dense=0.5
        ),
        Candidate(memory=view("c", "Melanie: pottery", session_id="s2"), fused=0.01, dense=0.4),
    ]
    # then its session's backing breaks the tie
    assert [c.memory.id for c in local_rerank(pool, variants)][:2] == ["b", "a"]
    off = local_rerank(pool, variants, config=RetrievalConfig(session_support=0.0))
    assert [c.memory.id for c in off][:2] == ["a", "b"]


def test_a_date_in_the_question_lifts_what_was_stored_then() -> None:
    # given the same text stored on two days, and questions naming the first day
    first = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    tied = [
        Candidate(
            memory=view(
                "later", "Caroline: went to the support group", timestamp=first + timedelta(days=30)
            ),
            fused=0.02,
            dense=0.5,
        ),
        Candidate(
            memory=view("then", "Caroline: went to the support group", timestamp=first),
            fused=0.02,
            dense=0.5,
        ),
    ]
    for question in ("What did Caroline do on 8 May 2023?", "Caroline 2023年5月8日做了什么？"):
        dates = query_dates(question, NOW)
        assert dates is not None and dates.start == first.date()
        ranked = local_rerank(tied, offline_rewrite(question), dates)
        assert [c.memory.id for c in ranked] == ["then", "later"], question
    # and a question without a date leaves the tie to the ids
    assert query_dates("What did Caroline do?", NOW) is None
    assert [c.memory.id for c in local_rerank(tied, offline_rewrite("What did Caroline do?"))] == [
        "later",
        "then",
    ]


# -- adaptive depth -----------------------------------------------------------------------


def test_depth_is_small_when_the_head_stands_out() -> None:
    scores = [1.0] * 5 + [0.1] * 45
    assert adaptive_depth(scores) == 10


def test_depth_is_large_when_scores_are_flat() -> None:
    assert adaptive_depth([0.5] * 50) == 30
    assert adaptive_depth([0.5 + 0.001 * (i % 2) for i in range(50)]) == 30


def test_depth_is_default_in_between_and_never_beyond_the_candidates() -> None:
    linear = [50.0 - i for i in range(50)]  # top 10 hold 36% of the mass
    assert adaptive_depth(linear) == 20
    assert adaptive_depth([1.0, 0.5, 0.2]) == 3
    assert adaptive_depth([]) == 0


# -- the second stage ---------------------------------------------------------------------


def test_offline_rerank_serves_the_focus() -> None:
    variants = offline_rewrite("When did Melanie start pottery?")
    dated = Candidate(memory=view("d", "Melanie: I started pottery on 12 May 2024"), local=0.5)
    undated = Candidate(memory=view("u", "Melanie: I started pottery, so fun"), local=0.5)
    temporal = directive_from_kinds([InfoKind.TEMPORAL], [])
    scores = offline_rerank([dated, undated], variants, temporal, now=NOW)
    assert scores[0] > scores[1]
    facts = offline_rerank([dated, undated], variants, FACTS, now=NOW)
    assert facts[0] == pytest.approx(facts[1])  # no temporal focus, no date bonus


class FakeReranker:
    def __init__(self, answers: list[list[float] | Exception]) -> None:
        self.answers = answers
        self.calls = 0
        self.seen: list[tuple[TaskPhase | None, FocusDirective]] = []

    @property
    def name(self) -> str:
        return "fake-llm"

    def rerank(
        self,
        query: str,
        items: Sequence[RerankItem],
        *,
        phase: TaskPhase | None,
        focus: FocusDirective,
    ) -> list[float]:
        self.seen.append((phase, focus))
        answer = self.answers[self.calls]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def _head() -> list[Candidate]:
    return [
        Candidate(memory=view("a", "alpha"), local=0.9),
        Candidate(memory=view("b", "beta"), local=0.5),
        Candidate(memory=view("c", "gamma"), local=0.1),
    ]


def test_llm_scores_are_blended_with_local_and_see_phase_and_focus() -> None:
    llm = FakeReranker([[0.0, 0.2, 1.0]])
    ranked, source = llm_rerank(
        _head(), "q", offline_rewrite("q"), FACTS, phase=TaskPhase.REVIEW, reranker=llm, now=NOW
    )
    assert source == "fake-llm"
    # local scaled to [1, 0.5, 0]: a = 0.5, b = 0.35, c = 0.5; ties by id
    assert [c.memory.id for c in ranked] == ["a", "c", "b"]
    assert llm.seen == [(TaskPhase.REVIEW, FACTS)]


@pytest.mark.parametrize(
    "answers",
    [
        [MalformedLLMOutput("x"), MalformedLLMOutput("y")],
        [[0.5], [0.1, 0.2]],  # wrong lengths
        [[float("nan"), 0.1, 0.2], [0.1, 0.2, float("inf")]],
    ],
)
def test_a_bad_llm_answer_is_retried_once_then_rules_rank(
    answers: list[list[float] | Exception],
) -> None:
    llm = FakeReranker(answers)
    ranked, source = llm_rerank(
        _head(), "q", offline_rewrite("q"), FACTS, phase=None, reranker=llm, now=NOW
    )
    assert llm.calls == 2
    assert source == "offline-fallback"
    assert [c.memory.id for c in ranked] == ["a", "b", "c"]


# -- priority -----------------------------------------------------------------------------


def test_priority_breaks_relevance_ties_by_importance_type_and_recency() -> None:
    old_decision = view(
        "d", "x", type=MemoryType.DECISION, importance=0.9, timestamp=NOW - timedelta(days=30)
    )
    fresh_note = view("n", "y", type=MemoryType.OBSERVATION, importance=0.4, timestamp=NOW)
    tied = [Candidate(memory=old_decision, rerank=0.5), Candidate(memory=fresh_note, rerank=0.5)]
    # planning barely cares about freshness: the decision's importance wins
    planning = prioritize(tied, 2, FACTS, TaskPhase.PLANNING, NOW)
    assert planning[0].memory.id == "d"
    # debugging cares about freshness: the fresh note wins
    debugging = prioritize(tied, 2, FACTS, TaskPhase.DEBUGGING, NOW)
    assert debugging[0].memory.id == "n"


def test_priority_keeps_unreranked_tail_below_the_head() -> None:
    ranked = [
        Candidate(memory=view("h1", "a"), rerank=0.9),
        Candidate(memory=view("h2", "b"), rerank=0.5),
        Candidate(memory=view("t1", "c"), rerank=0.7),  # scored by the local stage only
    ]
    out = {c.memory.id: c for c in prioritize(ranked, 2, FACTS, None, NOW)}
    assert out["t1"].relevance <= out["h2"].relevance


def test_retention_counts_through_the_decay_model_weight() -> None:
    fading = view("f", "a", retention=0.1)
    kept = view("k", "b", retention=1.0)
    tied = [Candidate(memory=fading, rerank=0.5), Candidate(memory=kept, rerank=0.5)]
    on = prioritize(tied, 2, FACTS, None, NOW, RetrievalConfig(retention_weight=0.2))
    assert on[0].memory.id == "k"
    assert on[0].priority - on[1].priority == pytest.approx(0.2 * 0.9)


# -- end to end ---------------------------------------------------------------------------


def test_retrieve_ranks_the_answer_first_and_scopes_every_port() -> None:
    bound = ports()
    result = retrieve("What is the name of Caroline's puppy?", SCOPE, bound, FACTS)
    assert result.candidates[0].memory.id in {"m1", "m3"}
    assert {c.memory.id for c in result.candidates[:2]} == {"m1", "m3"}
    for port in (bound.dense, bound.sparse, bound.temporal, bound.store):
        assert isinstance(port, Recorder)
        assert port.scopes and all(s == SCOPE for s in port.scopes)
    assert isinstance(bound.temporal, FakeTemporal)
    assert bound.temporal.since == [NOW - timedelta(days=7)]
    assert result.recalled["temporal"] == 2  # m1 and m3 are the last week's memories
    assert result.reranker == "offline"
    priorities = [c.priority for c in result.candidates]
    assert priorities == sorted(priorities, reverse=True)


def test_parallel_recall_gives_the_same_answer() -> None:
    query = "When did Melanie start her pottery class?"
    sequential = retrieve(query, SCOPE, ports(), FACTS)
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = retrieve(query, SCOPE, ports(), FACTS, executor=pool)
    assert [c.memory.id for c in parallel.candidates] == [
        c.memory.id for c in sequential.candidates
    ]


def test_sparse_only_candidates_get_a_dense_similarity() -> None:
    bound = ports()
    assert isinstance(bound.dense, FakeDense)
    bound.dense.memories = bound.dense.memories[:1]  # dense recall sees only m1
    retrieve("Oscar chewed the couch", SCOPE, bound, FACTS)
    assert bound.dense.similarity_calls and "m3" in bound.dense.similarity_calls[0]


def test_identifier_focus_finds_the_config_key() -> None:
    focus = directive_from_kinds([InfoKind.IDENTIFIERS, InfoKind.DECISIONS], ["amount_cents"])
    result = retrieve("where did we put amount_cents?", SCOPE, ports(), focus)
    assert result.candidates[0].memory.id == "m6"


def test_result_limit_and_empty_recall() -> None:
    limited = retrieve("Caroline", SCOPE, ports(), FACTS, config=RetrievalConfig(result_limit=2))
    assert len(limited.candidates) == 2
    # nothing matches: temporal recall still brings the last week's memories...
    recent = retrieve("zzz qqq", SCOPE, ports(), FACTS)
    assert {c.memory.id for c in recent.candidates} == {"m1", "m3"}
    # ...and without it there is nothing at all
    bound = ports()
    bare = Recallers(dense=bound.dense, sparse=bound.sparse, temporal=None, store=bound.store)
    nothing = retrieve("zzz qqq", SCOPE, bare, FACTS)
    assert nothing.candidates == () and nothing.depth == 0


def test_memory_versions_are_carried_to_assembly() -> None:
    summary = MemoryVersion(level=Level.L1, content="Caroline has a puppy, Oscar.")
    memories = [view("p", "Caroline: long story about Oscar the puppy", versions=(summary,))]
    result = retrieve("Caroline puppy", SCOPE, ports(memories), FACTS)
    assert result.candidates[0].memory.versions == (summary,)


def test_the_literal_keyword_recall_starts_before_the_rewrite_on_the_executor() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from pipelines.read.recall import start_recall

    bound = ports()
    scope = RecallScope(tenant_id="t", task_id="k", now=NOW)
    assert isinstance(bound.temporal, FakeTemporal)

    # without an executor nothing starts
    start_recall("puppy Oscar", scope, bound)
    assert bound.sparse.scopes == [] and bound.temporal.scopes == []  # type: ignore[attr-defined]

    # with one, the literal's keyword recall runs there, in the request's scope; the
    # temporal one waits for the variants' searches
    with ThreadPoolExecutor(2) as executor:
        start_recall("puppy Oscar", scope, bound, executor=executor)
    assert bound.sparse.scopes == [scope]  # type: ignore[attr-defined]
    assert bound.temporal.scopes == []


def test_recallers_that_queue_their_searches_get_them_sent_first_not_pooled() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from pipelines.read.recall import start_recall

    events: list[str] = []

    class QueuingSparse(FakeSparse):
        def queue_sparse(self, text: str, scope: RecallScope, limit: int) -> None:
            events.append(f"queue sparse {text}")

        def search_sparse(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
            events.append(f"read sparse {text}")
            return super().search_sparse(text, scope, limit)

    class QueuingTemporal(FakeTemporal):
        def queue_recent(self, text: str, scope: RecallScope, since: datetime, limit: int) -> None:
            events.append(f"queue recent {text}")

    class DenseLogged(FakeDense):
        def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
            events.append("dense")
            return super().search_dense(text, scope, limit)

    class NoPool(ThreadPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a queued search was handed to the pool")

    bound = Recallers(
        dense=DenseLogged(MEMORIES),
        sparse=QueuingSparse(MEMORIES),
        temporal=QueuingTemporal(MEMORIES),
        store=FakeStore(MEMORIES),
    )
    query = "What is the name of Caroline's puppy?"

    # when the literal recalls start, then the whole pipeline runs, with a pool at hand
    with NoPool(2) as pool:
        start_recall(query, SCOPE, bound, executor=pool)
        assert events == [f"queue sparse {query}"]
        result = retrieve(query, SCOPE, bound, FACTS, executor=pool)

    # then every keyword search was sent before the first dense search and read after it
    first_dense = events.index("dense")
    queued = [i for i, e in enumerate(events) if e.startswith("queue sparse")]
    reads = [i for i, e in enumerate(events) if e.startswith("read sparse")]
    assert len(queued) == 1 + len(result.variants.items())  # literal early, then each variant
    assert max(queued) < first_dense < min(reads)
    assert events.index(f"queue recent {query}") < first_dense
    # and the answer is the one of a store that cannot queue
    assert [c.memory.id for c in result.candidates] == [
        c.memory.id for c in retrieve(query, SCOPE, ports(), FACTS).candidates
    ]


def test_with_a_recall_pool_rows_are_read_once_after_fusion_in_scope() -> None:
    from concurrent.futures import ThreadPoolExecutor

    class ReadsRecorded(FakeStore):
        def __init__(self, memories: Sequence[MemoryView]) -> None:
            super().__init__(memories)
            self.reads: list[list[str]] = []

        def fetch(self, ids: Sequence[str], scope: RecallScope) -> list[MemoryView]:
            self.reads.append(list(ids))
            return super().fetch(ids, scope)

    store = ReadsRecorded(MEMORIES)
    bound = Recallers(
        dense=FakeDense(MEMORIES), sparse=FakeSparse(MEMORIES), temporal=None, store=store
    )
    query = "What is the name of Caroline's puppy?"

    # when the pipeline runs with a recall pool
    with ThreadPoolExecutor(2) as pool:
        result = retrieve(query, SCOPE, bound, FACTS, executor=pool)

    # then the rows were read once, after fusion and in the request's scope
    # (reading the first recalls' rows early read about twice the rows for no gain:
    # docs/decisions.md), and the answer is the one without a pool
    assert len(store.reads) == 1
    assert set(store.scopes) == {SCOPE}
    assert {c.memory.id for c in result.candidates} <= set(store.reads[0])
    sequential = retrieve(query, SCOPE, ports(), FACTS)
    assert [c.memory.id for c in result.candidates] == [c.memory.id for c in sequential.candidates]
