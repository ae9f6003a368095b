"""Semantic knowledge on the read path, in both languages: the store's match patterns, the
share of a query a row says, its rank among the episodes, and its lines in the context."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from pipelines.read.assemble import (
    AssembledContext,
    ContextSources,
    build_context,
    knowledge_prefix,
    memory_items,
)
from pipelines.read.budget import DEFAULT_LAYOUT, Partition, fit_layout
from pipelines.read.focus import InfoKind, directive_from_kinds
from pipelines.read.recall import (
    KNOWLEDGE_RECALL_LIMIT,
    Candidate,
    KnowledgeView,
    MemoryView,
    Recallers,
    RecallHit,
    RecallScope,
    knowledge_needles,
    knowledge_terms,
)
from pipelines.read.request import check_context_request
from pipelines.read.retrieve import (
    KnowledgeCandidate,
    knowledge_coverage,
    rank_knowledge,
    retrieve,
)
from pipelines.records import MemoryType, TaskPhase
from tests.pipelines.read.test_retrieve import (
    FakeDense,
    FakeSparse,
    FakeStore,
    FakeTemporal,
    view,
)
from workers.adapters.tokenizer import load_token_counter

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
SCOPE = RecallScope(tenant_id="acme", task_id="task-1", now=NOW)
FACTS = directive_from_kinds([InfoKind.FACTS], [])
DEEPSEEK = load_token_counter()
DAY = timedelta(days=1)


def knowledge(key: str, content: str, **extra: object) -> KnowledgeView:
    fields: dict[str, object] = {
        "id": key,
        "kind": "preference",
        "content": content,
        "confidence": 0.9,
        "updated_at": NOW - DAY,
    }
    fields.update(extra)
    return KnowledgeView.model_validate(fields)


PREFERENCE_ZH = knowledge("k-zh-pref", "周报请用简洁的要点式，先写结论再写细节")
STACK_ZH = knowledge(
    "k-zh-stack",
    "本项目统一使用 TypeScript + Node.js + PostgreSQL",
    kind="convention",
    confidence=0.8,
)
PREFERENCE_EN = knowledge("k-en-pref", "Weekly reports should be concise bullet points")
STACK_EN = knowledge(
    "k-en-stack",
    "The project's stack is TypeScript + Node.js + PostgreSQL",
    kind="convention",
    confidence=0.8,
)

EPISODES_ZH = [
    view("z1", "王经理：周报请用简洁的要点式，先写结论再写细节。", timestamp=NOW - 3 * DAY),
    view("z2", "支付模块负责人是张工，因为他做过支付网关的对接。", type=MemoryType.DECISION),
    view("z3", "状态：工单 PAY-12 已完成。", timestamp=NOW - 2 * DAY),
    view("z4", "压测了下单接口：p95 延迟从 180 毫秒降到 95 毫秒。", timestamp=NOW - DAY),
]
EPISODES_EN = [
    view("e1", "Priya: the weekly report goes out on Friday", timestamp=NOW - 3 * DAY),
    view("e2", "We decided Zhang owns the payment module", type=MemoryType.DECISION),
    view("e3", "Status: ticket PAY-12 is done", timestamp=NOW - 2 * DAY),
    view("e4", "Load test: p95 latency went from 180 ms to 95 ms", timestamp=NOW - DAY),
]


class FakeKnowledge:
    """The tenant's knowledge holding a needle, the most confident first, as the worker's
    SQL finds it; records what it was asked and when."""

    def __init__(self, rows: Sequence[KnowledgeView], events: list[str] | None = None) -> None:
        self.rows = list(rows)
        self.events = events if events is not None else []
        self.asked: list[tuple[str, RecallScope, int]] = []

    def _matches(self, text: str) -> list[KnowledgeView]:
        needles = knowledge_needles(text)
        hits = [row for row in self.rows if any(n in row.match_text().casefold() for n in needles)]
        return sorted(hits, key=lambda row: -row.confidence)

    def queue_knowledge(self, text: str, scope: RecallScope, limit: int) -> None:
        self.events.append("queue knowledge")

    def search_knowledge(self, text: str, scope: RecallScope, limit: int) -> list[KnowledgeView]:
        self.events.append("read knowledge")
        self.asked.append((text, scope, limit))
        return self._matches(text)[:limit]


class QueuingSparse(FakeSparse):
    def __init__(self, memories: Sequence[MemoryView], events: list[str]) -> None:
        super().__init__(memories)
        self.events = events

    def queue_sparse(self, text: str, scope: RecallScope, limit: int) -> None:
        self.events.append("queue sparse")

    def search_sparse(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        self.events.append("read sparse")
        return super().search_sparse(text, scope, limit)


def recallers(
    memories: Sequence[MemoryView],
    rows: Sequence[KnowledgeView] | None,
    events: list[str] | None = None,
) -> Recallers:
    log = events if events is not None else []
    return Recallers(
        dense=FakeDense(memories),
        sparse=QueuingSparse(memories, log),
        temporal=FakeTemporal(memories),
        store=FakeStore(memories),
        knowledge=None if rows is None else FakeKnowledge(rows, log),
    )


# -- what the store looks for -------------------------------------------------------------


def test_an_english_query_looks_for_its_terms_and_their_other_forms() -> None:
    # the analyzer's terms, a long one without its last letter so that its forms match too
    assert knowledge_terms("What format should the weekly report use?") == (
        "format", "week", "report", "use",
    )  # fmt: skip
    assert knowledge_needles("What format should the weekly report use?") == [
        "forma", "week", "repor", "use",
    ]  # fmt: skip
    assert knowledge_needles("rename snake_case columns") == [
        "renam", "snake_cas", "snak", "case", "colum",
    ]  # fmt: skip


def test_a_chinese_query_looks_for_its_words_bigrams_never_a_lone_character() -> None:
    # the bigrams across a function word (报应, 该用) or of one (什么) are not looked for
    assert knowledge_terms("周报应该用什么格式？") == ("周报", "格式")
    assert knowledge_needles("写周报的时候，项目的技术栈怎么介绍？") == [
        "写周", "周报", "项目", "技术", "术栈", "介绍",
    ]  # fmt: skip
    # a query of one character has nothing else to look for; a query of no word, nothing
    assert knowledge_needles("用") == ["用"]
    assert knowledge_needles("?") == []
    # and a mixed query keeps both kinds of term
    assert knowledge_needles("周报里写 PostgreSQL 版本") == [
        "周报", "报里", "里写", "postgresq", "版本",
    ]  # fmt: skip


# -- the share of the query a row says ----------------------------------------------------


def test_a_chinese_row_is_weighed_by_the_terms_it_shares_not_by_boundary_bigrams() -> None:
    # given a query whose bigrams across word boundaries (报应, 用什, 么格) no text holds
    coverage = knowledge_coverage("周报应该用什么格式？", [PREFERENCE_ZH, STACK_ZH])
    # then the preference says all that any text says of it, the stack nothing
    assert coverage == [pytest.approx(1.0), 0.0]
    # and among episodes that share 周报 too, the preference still says the most
    with_episodes = knowledge_coverage(
        "周报应该用什么格式？", [PREFERENCE_ZH], [e.content for e in EPISODES_ZH]
    )
    assert with_episodes[0] == pytest.approx(1.0)


def test_an_english_row_says_the_share_of_the_query_it_holds() -> None:
    rows = [PREFERENCE_EN, STACK_EN]
    coverage = knowledge_coverage(
        "What format should the weekly report use?", rows, [e.content for e in EPISODES_EN]
    )
    # "week" and "report" of four terms, where "format" and "use" are in no text
    assert coverage[0] == pytest.approx(1.0)
    assert coverage[1] == 0.0
    stack = knowledge_coverage(
        "Which stack runs the payment module?", rows, [EPISODES_EN[1].content]
    )
    assert stack[1] > 0.0 and stack[0] == 0.0


def test_conditions_are_matched_with_the_statement() -> None:
    conditional = knowledge(
        "k-cond", "Answer in detail", conditions="for architecture questions", kind="preference"
    )
    assert knowledge_coverage("an architecture question", [conditional]) == [pytest.approx(1.0)]


# -- the rank among the episodes ----------------------------------------------------------


def test_knowledge_is_ranked_on_the_episodes_priority() -> None:
    # given two rows saying all of the query, one more confident, and one saying none of it
    sure = knowledge("a-sure", "Weekly reports as concise bullet points", confidence=0.95)
    unsure = knowledge("b-unsure", "Weekly reports in concise bullet points", confidence=0.4)
    unrelated = knowledge("c-none", "Deploys never on Friday", kind="mistake")
    episodes = [Candidate(memory=e, priority=0.5) for e in EPISODES_EN]
    # when they are ranked for a question about reports
    ranked = rank_knowledge(
        [unsure, unrelated, sure], "How should weekly reports look?", episodes, FACTS, None, NOW
    )
    # then the row that says nothing goes, and confidence orders rows saying the same
    assert [c.knowledge.id for c in ranked] == ["a-sure", "b-unsure"]
    assert ranked[0].relevance == ranked[1].relevance == pytest.approx(1.0)
    # priority = α·relevance + β·recency + γ·confidence + δ (whole retention)
    recency = 2.718281828 ** (-24 / 48)
    expected = FACTS.alpha() * 1.0 + 0.05 * recency + 0.08 * 0.95 + 0.05
    assert ranked[0].priority == pytest.approx(expected, rel=1e-6)
    # and at most ``limit`` rows are kept
    assert len(rank_knowledge([sure, unsure], "weekly reports", (), FACTS, None, NOW, limit=1)) == 1


def test_the_phase_weighs_a_fresh_confirmation_as_it_weighs_a_fresh_episode() -> None:
    old = knowledge("old", "Weekly reports as bullet points", updated_at=NOW - 30 * DAY)
    fresh = knowledge("new", "Weekly reports as bullet lists", updated_at=NOW - DAY)
    ranked = rank_knowledge([old, fresh], "weekly reports", (), FACTS, TaskPhase.DEBUGGING, NOW)
    assert [c.knowledge.id for c in ranked] == ["new", "old"]


def test_retrieve_recalls_the_knowledge_for_the_literal_query_in_both_languages() -> None:
    for query, episodes, rows, expected in (
        ("周报应该用什么格式？", EPISODES_ZH, [PREFERENCE_ZH, STACK_ZH], "k-zh-pref"),
        ("What format should the weekly report use?", EPISODES_EN, [PREFERENCE_EN, STACK_EN],
         "k-en-pref"),
    ):  # fmt: skip
        # given the tenant's episodes and knowledge
        bound = recallers(episodes, rows)
        # when a question the preference answers is retrieved
        result = retrieve(query, SCOPE, bound, FACTS)
        # then the preference is recalled, for the query as asked, in the tenant's scope
        assert [c.knowledge.id for c in result.knowledge] == [expected]
        assert result.recalled["knowledge"] >= 1
        assert isinstance(bound.knowledge, FakeKnowledge)
        assert bound.knowledge.asked == [(query, SCOPE, KNOWLEDGE_RECALL_LIMIT)]


def test_without_knowledge_the_episodes_are_retrieved_exactly_as_before() -> None:
    query = "What format should the weekly report use?"
    without = retrieve(query, SCOPE, recallers(EPISODES_EN, None), FACTS)
    empty = retrieve(query, SCOPE, recallers(EPISODES_EN, []), FACTS)
    assert without.knowledge == empty.knowledge == ()
    assert without.candidates == empty.candidates
    assert "knowledge" not in without.recalled and empty.recalled["knowledge"] == 0


def test_the_knowledge_search_goes_after_the_episodes_searches_and_is_read_once() -> None:
    # given recallers that can send searches ahead on their connection
    events: list[str] = []
    bound = recallers(EPISODES_ZH, [PREFERENCE_ZH], events)
    request = check_context_request(
        "task-1", "周报应该用什么格式？", 12_000, None, None, counter=DEEPSEEK,
        layout=fit_layout(DEFAULT_LAYOUT, 12_000),
    )  # fmt: skip
    # when the context is built with the offline rules
    build_context(request, ContextSources(), scope=SCOPE, recallers=bound, counter=DEEPSEEK)
    # then the knowledge search was sent once, behind every keyword search and before any
    # answer was read, so it delays none; and its answer was read once, after theirs
    sent = events.index("queue knowledge")
    assert events.count("queue knowledge") == 1
    assert "queue sparse" not in events[sent:] and "read sparse" not in events[:sent]
    assert events.count("read knowledge") == 1
    assert "read sparse" not in events[events.index("read knowledge") :]


# -- the lines in the context -------------------------------------------------------------


def context_for(
    query: str, episodes: Sequence[MemoryView], rows: Sequence[KnowledgeView], budget: int
) -> AssembledContext:
    request = check_context_request(
        "task-1", query, budget, "planning", None, counter=DEEPSEEK,
        layout=fit_layout(DEFAULT_LAYOUT, budget),
    )  # fmt: skip
    return build_context(
        request,
        ContextSources(system="You are the project agent."),
        scope=SCOPE,
        recallers=recallers(episodes, rows),
        counter=DEEPSEEK,
    )


def test_chinese_knowledge_reaches_a_12k_context_marked_as_knowledge() -> None:
    # given the tenant's preference and stack as semantic rows
    rows = [PREFERENCE_ZH, STACK_ZH]
    # when a Chinese question about the weekly report and the stack gets a 12k context
    context = context_for("周报里怎么介绍项目的技术栈和数据库？", EPISODES_ZH, rows, 12_000)
    # then both are in the retrieved memory, each line saying it is knowledge, how sure
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    assert "[knowledge: preference, confidence 0.90] 周报请用简洁的要点式" in retrieved.text
    assert (
        "[knowledge: convention, confidence 0.80] 本项目统一使用 TypeScript + Node.js + PostgreSQL"
        in retrieved.text
    )
    marked = {item.id: item.knowledge for item in retrieved.items if item.knowledge is not None}
    assert set(marked) == {"knowledge:k-zh-pref", "knowledge:k-zh-stack"}
    assert marked["knowledge:k-zh-pref"].confidence == 0.9
    assert marked["knowledge:k-zh-stack"].kind == "convention"
    # and the episodes are there too, unmarked, all within the 12k budget
    assert any(item.knowledge is None for item in retrieved.items)
    assert context.total_tokens == DEEPSEEK.count(context.text) <= 12_000
    assert context.retrieval is not None
    assert {c.knowledge.id for c in context.retrieval.knowledge} == set(
        key.removeprefix("knowledge:") for key in marked
    )


def test_english_knowledge_reaches_a_12k_context_marked_as_knowledge() -> None:
    rows = [PREFERENCE_EN, STACK_EN]
    context = context_for(
        "Which stack and format for the weekly report?", EPISODES_EN, rows, 12_000
    )
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    assert (
        "[knowledge: preference, confidence 0.90] Weekly reports should be concise bullet points"
        in retrieved.text
    )
    assert "[knowledge: convention, confidence 0.80] The project's stack is" in retrieved.text
    assert {item.id for item in retrieved.items if item.knowledge is not None} == {
        "knowledge:k-en-pref",
        "knowledge:k-en-stack",
    }


def test_a_conditional_or_unconfirmed_row_says_so_in_its_line() -> None:
    conditional = knowledge(
        "k-cond", "回答要详细", conditions="架构问题", status="needs_confirmation"
    )
    context = context_for("架构问题怎么回答？", EPISODES_ZH, [conditional], 4_000)
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    assert (
        "[knowledge: preference, confidence 0.90, unconfirmed, when: 架构问题] 回答要详细"
        in retrieved.text
    )
    [mark] = [item.knowledge for item in retrieved.items if item.knowledge is not None]
    assert mark.conditions == "架构问题" and mark.status == "needs_confirmation"


def test_the_marks_survive_the_json_the_answer_travels_as() -> None:
    context = context_for("周报应该用什么格式？", EPISODES_ZH, [PREFERENCE_ZH], 12_000)
    again = AssembledContext.model_validate(context.model_dump(mode="json"))
    assert again == context
    marked = [i for i in again.partition(Partition.RETRIEVED_MEMORY).items if i.knowledge]
    assert [item.id for item in marked] == ["knowledge:k-zh-pref"]


def test_knowledge_is_merged_into_the_episodes_by_priority() -> None:
    # given episodes in priority order and knowledge between and level with them
    episodes = [
        Candidate(memory=view("e-high", "first"), priority=0.9),
        Candidate(memory=view("e-low", "second"), priority=0.5),
    ]
    known = [
        KnowledgeCandidate(knowledge=knowledge("mid", "between"), relevance=0.5, priority=0.7),
        KnowledgeCandidate(knowledge=knowledge("tie", "level"), relevance=0.5, priority=0.5),
    ]
    # when they become the partition's items
    items = memory_items(episodes, known)
    # then each list keeps its order, and a tie goes to the episode
    assert [item.id for item in items] == ["e-high", "knowledge:mid", "e-low", "knowledge:tie"]
    assert [item.id for item in memory_items(episodes)] == ["e-high", "e-low"]


def test_the_prefix_of_a_knowledge_line() -> None:
    mark = memory_items([], [
        KnowledgeCandidate(
            knowledge=knowledge("k", "x", kind=None, confidence=0.5, conditions="when  reviewing"),
            relevance=1.0,
            priority=1.0,
        )
    ])[0].knowledge  # fmt: skip
    assert mark is not None
    assert knowledge_prefix(mark) == "[knowledge: fact, confidence 0.50, when: when reviewing] "
