"""Assembly: request checks, partition fill, the working-memory window, the whole context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.errors import InvalidInput
from pipelines.read.assemble import (
    AssembledContext,
    ContextItem,
    ContextSources,
    WorkingVariable,
    assemble_context,
    build_context,
    fit_partition,
)
from pipelines.read.budget import DEFAULT_LAYOUT, Partition, layout_from_budgets
from pipelines.read.focus import FocusDirective, InfoKind, directive_from_kinds
from pipelines.read.recall import Candidate, MemoryVersion, MemoryView
from pipelines.read.request import (
    QUERY_MAX_BYTES,
    QUERY_MAX_TOKENS,
    ContextRequest,
    check_context_request,
)
from pipelines.read.retrieve import RetrievalResult
from pipelines.read.rewrite import offline_rewrite
from pipelines.read.tokens import TokenCounter
from pipelines.read.window import (
    CHUNK_MAX_TOKENS,
    SUMMARY_MAX_TOKENS,
    Turn,
    TurnSummary,
    advance_window,
    chunk_turns,
    plan_window,
    summarise_chunk,
)
from pipelines.records import Level, MemoryType, TaskPhase
from pipelines.write.summary import extractive_summary
from tests.pipelines.read.test_retrieve import MEMORIES, SCOPE, ports
from workers.adapters.tokenizer import load_token_counter

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
DEEPSEEK = load_token_counter()
FACTS = directive_from_kinds([InfoKind.FACTS], [])


class WordCounter:
    @property
    def name(self) -> str:
        return "words"

    def count(self, text: str) -> int:
        return len(text.split())


WORDS = WordCounter()


class RecordingWords(WordCounter):
    """Word counts, declared additive after a newline (no word spans one); keeps every text
    it is asked to count."""

    additive_after_newline = True

    def __init__(self) -> None:
        self.texts: list[str] = []

    def count(self, text: str) -> int:
        self.texts.append(text)
        return super().count(text)


class Exact:
    """``inner`` with its additivity hidden, so that assembly counts every rendered text as a
    whole: the slow path the fast one must agree with."""

    additive_after_newline = False

    def __init__(self, inner: TokenCounter) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    def count(self, text: str) -> int:
        return self._inner.count(text)


# -- the request --------------------------------------------------------------------------


def request(**overrides: object) -> ContextRequest:
    args: dict[str, object] = {
        "task_id": "task-1",
        "query": "What did we decide about the port?",
        "budget_tokens": 64_000,
    }
    args.update(overrides)
    return check_context_request(
        args.pop("task_id"),
        args.pop("query"),
        args.pop("budget_tokens"),
        args.pop("phase", None),
        args.pop("focus", None),
        counter=DEEPSEEK,
    )


def test_a_good_request_is_normalised() -> None:
    checked = request(query="  What   did we\ndecide? ", phase="debugging", focus=["errors"])
    assert checked.query == "What did we decide?"
    assert checked.phase is TaskPhase.DEBUGGING
    assert checked.focus == (InfoKind.ERRORS,)


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"query": ""}, "query", "empty"),
        ({"query": "   \n"}, "query", "empty"),
        ({"query": None}, "query", "must be text"),
        ({"query": 42}, "query", "must be text"),
        ({"query": ["what", "now"]}, "query", "must be text"),
        ({"query": b"\xff\xfe"}, "query", "not valid UTF-8"),
        ({"query": "a\x00b"}, "query", "NUL"),
        ({"query": "x" * (QUERY_MAX_BYTES + 1)}, "query", f"limit is {QUERY_MAX_BYTES} bytes"),
        ({"query": "熊" * 6_000}, "query", "18000 bytes of UTF-8"),
        ({"query": "a1 " * 5_000}, "query", f"at most {QUERY_MAX_TOKENS} tokens"),
        ({"task_id": ""}, "task_id", "malformed"),
        ({"task_id": None}, "task_id", "required"),
        ({"task_id": 7}, "task_id", "must be a string"),
        ({"budget_tokens": 3_000}, "budget_tokens", "smallest context is 4000 tokens"),
        ({"budget_tokens": "64k"}, "budget_tokens", "integer"),
        ({"budget_tokens": 64_000.5}, "budget_tokens", "integer"),
        ({"budget_tokens": 10**9}, "budget_tokens", "largest context"),
        ({"phase": "coding"}, "phase", "unknown value"),
        ({"focus": 3.5}, "focus", "must be None"),
        ({"focus": ["vibes"]}, "focus", "unknown kind"),
    ],
)
def test_bad_requests_name_the_field(
    overrides: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as err:
        request(**overrides)
    assert err.value.field == field


def test_size_errors_carry_the_limit() -> None:
    with pytest.raises(InvalidInput) as err:
        request(budget_tokens=1_000)
    assert err.value.limit == ">= 4000 tokens"
    with pytest.raises(InvalidInput) as err:
        request(query="a1 " * 5_000)
    assert err.value.limit == f"{QUERY_MAX_TOKENS} tokens"


# -- one partition ------------------------------------------------------------------------


def item(key: str, text: str, **extra: object) -> ContextItem:
    fields: dict[str, object] = {"id": key, "text": text, "timestamp": NOW}
    fields.update(extra)
    return ContextItem.model_validate(fields)


def test_everything_fits_untouched() -> None:
    entries = [item("a", "one two"), item("b", "three")]
    content = fit_partition(Partition.SCRATCH, entries, 100, WORDS, now=NOW)
    assert content.text == "## Scratch\none two\nthree\n"
    assert content.used_tokens == 5
    assert content.evicted_ids == content.compressed_ids == ()


def test_empty_partition_costs_nothing() -> None:
    content = fit_partition(Partition.SCRATCH, [], 0, WORDS, now=NOW)
    assert content.text == "" and content.used_tokens == 0


def test_overflow_compresses_before_it_evicts() -> None:
    # given two memories whose originals overflow but whose summaries fit
    long_a = " ".join(["alpha"] * 30)
    long_b = " ".join(["beta"] * 30)
    entries = [
        item("a", long_a, versions=("alpha summary",), relevance=0.9),
        item("b", long_b, versions=("beta summary",), relevance=0.1),
    ]
    # when the partition has room for one original and one summary
    content = fit_partition(Partition.RETRIEVED_MEMORY, entries, 35, WORDS, now=NOW)
    # then the less relevant one is the one compressed, and nothing is evicted
    assert content.compressed_ids == ("b",)
    assert content.evicted_ids == ()
    assert "beta summary" in content.text and long_a in content.text


def test_a_version_longer_than_the_original_is_not_taken() -> None:
    # given a short turn whose only version is the long session summary covering it
    summary = " ".join(["session"] * 40)
    entries = [
        item("short", "we ship on friday", versions=(summary,), relevance=0.1),
        item("other", " ".join(["other"] * 20), relevance=0.9),
    ]
    # when the partition overflows
    content = fit_partition(Partition.RETRIEVED_MEMORY, entries, 22, WORDS, now=NOW)
    # then the turn is never swapped for the longer summary: it stays or goes whole
    assert "short" not in content.compressed_ids
    assert summary not in content.text


def test_one_summary_is_shown_once_for_the_turns_it_covers() -> None:
    # given three long turns covered by one short summary
    summary = "the team moved the launch to march"
    entries = [
        item(key, " ".join([key] * 30), versions=(summary,), relevance=0.5)
        for key in ("a", "b", "c")
    ]
    # when only one original and the summary fit
    content = fit_partition(Partition.RETRIEVED_MEMORY, entries, 45, WORDS, now=NOW)
    # then the summary stands in for one turn and is not repeated for the others
    assert content.text.count(summary) == 1
    assert len(content.compressed_ids) == 1


def test_eviction_takes_the_lowest_score_first() -> None:
    # given an acknowledgement, an old observation and a fresh decision with identifiers
    entries = [
        item("ack", "ok thanks", timestamp=NOW - timedelta(hours=1)),
        item("obs", "the build took four minutes today", type=MemoryType.OBSERVATION,
             timestamp=NOW - timedelta(hours=200)),
        item("dec", "we decided to serve on port 8080", type=MemoryType.DECISION),
    ]  # fmt: skip
    # when only room for the header and one line remains
    content = fit_partition(Partition.TASK_CONTEXT, entries, 10, WORDS, now=NOW)
    # then the decision survives
    assert [placed.id for placed in content.items] == ["dec"]
    assert content.evicted_ids == ("ack", "obs")


def test_among_equals_the_earlier_item_goes_first() -> None:
    entries = [item("first", "same words"), item("second", "same words")]
    content = fit_partition(Partition.SCRATCH, entries, 4, WORDS, now=NOW)
    assert content.evicted_ids == ("first",)


def test_focus_terms_decide_between_equals() -> None:
    entries = [item("x", "redis pool size is small"), item("y", "postgres pool size is small")]
    content = fit_partition(Partition.SCRATCH, entries, 8, WORDS, now=NOW, focus_terms=["postgres"])
    assert [placed.id for placed in content.items] == ["y"]


def test_a_must_keep_item_is_cut_rather_than_dropped() -> None:
    entries = [
        item("old", "older words here"),
        item("new", " ".join(["word"] * 50), must_keep=True),
    ]
    content = fit_partition(Partition.RECENT_INTERACTIONS, entries, 12, WORDS, now=NOW)
    assert [placed.id for placed in content.items] == ["new"]
    assert content.items[0].truncated
    assert content.used_tokens <= 12


def test_an_additive_counter_adds_up_the_lines_instead_of_recounting() -> None:
    # given a counter that declares its counts additive after a newline
    counter = RecordingWords()
    entries = [item("a", "one two"), item("b", "three")]
    # when the partition is filled
    content = fit_partition(Partition.SCRATCH, entries, 100, counter, now=NOW)
    # then the header and the lines were counted, the rendered text was not, and their sum
    # is its count
    assert content.text == "## Scratch\none two\nthree\n"
    assert content.text not in counter.texts
    assert content.used_tokens == WORDS.count(content.text) == 5


def test_a_line_starting_with_whitespace_is_counted_whole() -> None:
    counter = RecordingWords()
    entries = [item("a", "one two"), item("code", "    return x")]
    content = fit_partition(Partition.SCRATCH, entries, 100, counter, now=NOW)
    assert content.text == "## Scratch\none two\n    return x\n"
    assert content.text in counter.texts
    assert content.used_tokens == 6
    # with the real tokenizer a line that starts with a newline merges with the one before
    # it, so the sum of the parts would be wrong: the whole is what is reported
    entries = [item("a", "one two"), item("gap", "\nafter a blank line")]
    content = fit_partition(Partition.SCRATCH, entries, 100, DEEPSEEK, now=NOW)
    parts = DEEPSEEK.count("## Scratch\n") + sum(
        DEEPSEEK.count(entry.text + "\n") for entry in entries
    )
    assert content.used_tokens == DEEPSEEK.count(content.text) == parts - 1


# What makes BPE merge across a join, or not: spaces, tabs and newlines at either end of a
# line, digits, CJK, accents, emoji, punctuation runs.
fragment = st.sampled_from(
    ["we", "decided", "Priya", " ", "  ", "\t", "\n", "\r\n", "\n\n", "8080", "12345",
     "config/app.yaml", ".", "!!", "：", "状态", "已完成", "é", "\u0301", "😀", "👍🏽", "\u3000"]
)  # fmt: skip
rich_text = st.lists(fragment, min_size=1, max_size=12).map("".join)


@st.composite
def rich_items(draw: st.DrawFn) -> list[ContextItem]:
    return [
        ContextItem(
            id=f"i{i}",
            text=draw(rich_text),
            prefix=draw(st.sampled_from(["", "[2024-06-01 12:00] ", "- "])),
            timestamp=NOW - timedelta(hours=draw(st.integers(0, 500))),
            relevance=draw(st.none() | st.floats(0, 1)),
            versions=tuple(draw(st.lists(rich_text, max_size=2))),
            must_keep=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 12)))
    ]


@given(entries=rich_items(), budget=st.integers(0, 200))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_adding_up_the_lines_fills_a_partition_exactly_as_recounting_does(
    entries: list[ContextItem], budget: int
) -> None:
    fast = fit_partition(Partition.RETRIEVED_MEMORY, entries, budget, DEEPSEEK, now=NOW)
    exact = fit_partition(Partition.RETRIEVED_MEMORY, entries, budget, Exact(DEEPSEEK), now=NOW)
    assert fast == exact
    assert fast.used_tokens == DEEPSEEK.count(fast.text) <= budget


# -- the working-memory window ------------------------------------------------------------


def turns(count: int, start: int = 0, words: int = 8) -> list[Turn]:
    return [
        Turn(
            id=f"t{i}",
            speaker="user" if i % 2 else "agent",
            content=f"turn {i} " + " ".join(["detail"] * words),
            timestamp=NOW - timedelta(minutes=100 - i),
        )
        for i in range(start, start + count)
    ]


def test_up_to_25_turns_stay_verbatim() -> None:
    plan = plan_window(turns(25), [], DEEPSEEK)
    assert len(plan.verbatim) == 25 and plan.to_summarise == ()


def test_past_25_turns_all_but_the_last_20_are_summarised() -> None:
    history = turns(26)
    plan = plan_window(history, [], DEEPSEEK)
    assert [t.id for t in plan.verbatim] == [t.id for t in history[6:]]
    assert [t.id for chunk in plan.to_summarise for t in chunk] == [t.id for t in history[:6]]


def test_turns_already_summarised_are_not_counted_again() -> None:
    history = turns(40)
    summary = TurnSummary(
        first_turn_id="t0", last_turn_id="t19", turn_count=20, content="s", timestamp=NOW, tokens=1
    )
    plan = plan_window(history, [summary], DEEPSEEK)
    assert plan.to_summarise == ()  # 20 turns after the summary: under the threshold
    assert plan.summaries == (summary,) and len(plan.verbatim) == 20


def test_chunks_hold_at_most_4000_tokens() -> None:
    history = turns(60, words=150)  # ~ 155 tokens each
    chunks = chunk_turns(history, DEEPSEEK)
    assert len(chunks) > 1
    for chunk in chunks:
        assert sum(DEEPSEEK.count(t.line() + "\n") for t in chunk) <= CHUNK_MAX_TOKENS
    assert [t.id for c in chunks for t in c] == [t.id for t in history]


class VerboseSummarizer:
    """Ignores the word budget the first time, like a model that rambles."""

    def __init__(self) -> None:
        self.requests: list[int] = []

    def summarize(self, content: str, max_words: int) -> str:
        self.requests.append(max_words)
        size = 2_000 if len(self.requests) == 1 else max_words
        return " ".join(["decision"] * size)


class OfflineSummarizer:
    def summarize(self, content: str, max_words: int) -> str:
        return extractive_summary(content, max_words)


def test_a_summary_never_exceeds_500_real_tokens() -> None:
    summarizer = VerboseSummarizer()
    summary = summarise_chunk(turns(30, words=120), summarizer, DEEPSEEK)
    assert summary.tokens == DEEPSEEK.count(summary.content) <= SUMMARY_MAX_TOKENS
    assert len(summarizer.requests) == 2 and summarizer.requests[1] < summarizer.requests[0]
    assert (summary.first_turn_id, summary.last_turn_id, summary.turn_count) == ("t0", "t29", 30)


def test_the_offline_summary_keeps_decisions_and_state_changes() -> None:
    chatter = turns(30, words=40)
    chatter[7] = chatter[7].model_copy(
        update={"content": "We decided to move the ledger to Postgres because of locking."}
    )
    chatter[19] = chatter[19].model_copy(update={"content": "Status: ATL-42 is now blocked."})
    summary = summarise_chunk(chatter, OfflineSummarizer(), DEEPSEEK)
    assert "decided to move the ledger to Postgres" in summary.content
    assert "ATL-42 is now blocked" in summary.content
    assert summary.tokens <= SUMMARY_MAX_TOKENS


def test_a_summarizer_that_returns_nothing_keeps_the_chunks_start() -> None:
    class Silent:
        def summarize(self, content: str, max_words: int) -> str:
            return "  "

    summary = summarise_chunk(turns(3), Silent(), DEEPSEEK)
    assert summary.content.startswith("agent: turn 0")


def test_advancing_the_window_leaves_nothing_to_summarise() -> None:
    plan = advance_window(turns(70, words=100), [], OfflineSummarizer(), DEEPSEEK)
    assert plan.to_summarise == ()
    assert len(plan.verbatim) == 20
    assert plan.summaries and all(s.tokens <= SUMMARY_MAX_TOKENS for s in plan.summaries)
    assert plan.summaries[-1].last_turn_id == "t49"
    again = plan_window(turns(75, words=100), plan.summaries, DEEPSEEK)
    assert again.to_summarise == () and len(again.verbatim) == 25


# -- the whole context --------------------------------------------------------------------


def retrieval_of(candidates: list[Candidate]) -> RetrievalResult:
    return RetrievalResult(
        candidates=tuple(candidates),
        variants=offline_rewrite("q"),
        focus=FACTS,
        depth=len(candidates),
        reranker="offline",
        recalled={},
    )


def test_a_memory_that_does_not_fit_comes_in_its_compressed_version() -> None:
    # given a retrieved-memory partition of 120 tokens and a 300-token memory with a summary
    layout = layout_from_budgets({"retrieved_memory": 120, "recent_interactions": 100})
    long_memory = MemoryView(
        id="big",
        content="We compared the ledger designs at length. " * 30,
        timestamp=NOW,
        versions=(MemoryVersion(level=Level.L1, content="Chose the double-entry ledger."),),
    )
    small = MemoryView(id="small", content="Priya owns the ledger.", timestamp=NOW)
    retrieval = retrieval_of(
        [Candidate(memory=long_memory, relevance=1.0), Candidate(memory=small, relevance=0.5)]
    )
    budget = layout.fixed_tokens + 120 + 100 + layout.spec(Partition.SCRATCH).budget_tokens
    context = assemble_context(
        ContextRequest(task_id="t", query="q", budget_tokens=budget),
        ContextSources(),
        counter=DEEPSEEK,
        focus=FACTS,
        now=NOW,
        retrieval=retrieval,
        layout=layout,
    )
    part = context.partition(Partition.RETRIEVED_MEMORY)
    assert part.compressed_ids == ("big",)
    assert "Chose the double-entry ledger." in part.text
    assert "Priya owns the ledger." in part.text
    assert part.used_tokens <= part.budget_tokens


def test_an_additive_counter_does_not_recount_the_whole() -> None:
    # given a counter that declares its counts additive after a newline
    counter = RecordingWords()
    sources = ContextSources(
        system="You are a careful agent.",
        turns=tuple(turns(3)),
        variables=(WorkingVariable(key="ledger.table", value="ledger_v2"),),
    )
    # when a context is assembled
    context = assemble_context(
        ContextRequest(task_id="t", query="q", budget_tokens=64_000),
        sources,
        counter=counter,
        focus=FACTS,
        now=NOW,
    )
    # then the whole is the sum of its partitions, and the whole text was never counted
    assert context.total_tokens == WORDS.count(context.text)
    assert context.total_tokens == sum(p.used_tokens for p in context.partitions)
    assert context.text not in counter.texts
    assert context.partition(Partition.RECENT_INTERACTIONS).text not in counter.texts


@st.composite
def rich_sources(draw: st.DrawFn) -> tuple[ContextSources, RetrievalResult]:
    memories = [
        Candidate(
            memory=MemoryView(
                id=f"m{i}",
                content=draw(rich_text),
                timestamp=NOW,
                versions=tuple(
                    MemoryVersion(level=Level(level + 1), content=draw(rich_text))
                    for level in range(draw(st.integers(0, 2)))
                ),
            ),
            relevance=draw(st.floats(0, 1)),
        )
        for i in range(draw(st.integers(0, 15)))
    ]
    sources = ContextSources(
        system=draw(st.lists(fragment, max_size=6).map("".join)),
        task_context=tuple(draw(rich_items())),
        turns=tuple(
            Turn(id=f"t{i}", speaker="user", content=draw(rich_text), timestamp=NOW)
            for i in range(draw(st.integers(0, 15)))
        ),
        variables=tuple(
            WorkingVariable(key=f"k{i}", value=draw(rich_text))
            for i in range(draw(st.integers(0, 4)))
        ),
        scratch=tuple(draw(rich_items())),
    )
    return sources, retrieval_of(memories)


@given(data=rich_sources(), extra=st.integers(3, 600))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_adding_up_the_partitions_assembles_exactly_as_recounting_does(
    data: tuple[ContextSources, RetrievalResult], extra: int
) -> None:
    # given small partitions, so that everything overflows somewhere
    layout = layout_from_budgets(
        {"system": 60, "task_context": 80, "retrieved_memory": 200,
         "recent_interactions": 300, "working_variables": 60, "scratch": 50}
    )  # fmt: skip
    sources, retrieval = data
    request = ContextRequest(task_id="t", query="q", budget_tokens=layout.fixed_tokens + extra)

    def assemble(counter: TokenCounter) -> AssembledContext:
        return assemble_context(
            request,
            sources,
            counter=counter,
            focus=FACTS,
            now=NOW,
            retrieval=retrieval,
            layout=layout,
        )

    # when the same context is assembled with the sums and with whole counts
    fast, exact = assemble(DEEPSEEK), assemble(Exact(DEEPSEEK))
    # then both are the same, and the total is the real count of the text
    assert fast == exact
    assert fast.total_tokens == DEEPSEEK.count(fast.text) <= request.budget_tokens


def test_an_oversized_system_prompt_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        assemble_context(
            ContextRequest(task_id="t", query="q", budget_tokens=64_000),
            ContextSources(system="rule " * 5_000),
            counter=DEEPSEEK,
            focus=FACTS,
            now=NOW,
        )
    assert err.value.field == "system"
    assert err.value.limit == "4000 tokens"


def test_build_context_runs_focus_retrieval_and_assembly() -> None:
    # given a session with a long history, variables and a question about a decision
    plan = advance_window(turns(40), [], OfflineSummarizer(), DEEPSEEK)
    sources = ContextSources(
        system="You are a careful agent.",
        task_context=(ContextItem(id="goal", text="Goal: migrate the ledger.", must_keep=True),),
        summaries=plan.summaries,
        turns=plan.verbatim,
        variables=(WorkingVariable(key="ledger.table", value="ledger_v2", updated_at=NOW),),
        scratch=(ContextItem(id="note", text="check amount_cents rounding"),),
    )
    checked = check_context_request(
        "task-1", "Why did we decide on amount_cents?", 40_000, "planning", None, counter=DEEPSEEK
    )
    # when the context is built
    context = build_context(checked, sources, scope=SCOPE, recallers=ports(), counter=DEEPSEEK)
    # then every partition is filled within budget, the decision is retrieved, and the text
    # is laid out in partition order
    assert context.total_tokens == DEEPSEEK.count(context.text) <= 40_000
    assert context.retrieval is not None
    assert context.retrieval.candidates[0].memory.id == "m6"
    assert "amount_cents" in context.partition(Partition.RETRIEVED_MEMORY).text
    headers = [line for line in context.text.splitlines() if line.startswith("## ")]
    assert headers == [
        "## System",
        "## Task context",
        "## Retrieved memory",
        "## Recent interactions",
        "## Working variables",
        "## Scratch",
    ]
    assert "(summary of 20 turns)" in context.text
    assert context.focus.top is InfoKind.DECISIONS
    assert context.tokenizer == "deepseek-v4"
    assert sum(p.budget_tokens for p in context.partitions) == 40_000
    assert len(MEMORIES) >= len(context.partition(Partition.RETRIEVED_MEMORY).items)


def test_a_focus_decided_by_the_caller_is_used_and_not_asked_again() -> None:
    from pipelines.read.focus import decide_focus

    class CountingFocus:
        name = "stub"

        def __init__(self) -> None:
            self.calls = 0

        def focus_directive(self, query: str, phase: Any, hint: Any) -> FocusDirective:
            self.calls += 1
            return directive_from_kinds([InfoKind.ERRORS, InfoKind.RECENT_ACTIVITY], [])

    request = check_context_request(
        "task-1", "what failed?", 40_000, "debugging", None, counter=DEEPSEEK
    )
    llm = CountingFocus()
    # given the focus the caller decided with the model (one call)
    decided = decide_focus(request.query, phase=TaskPhase.DEBUGGING, llm=llm)
    assert llm.calls == 1
    # when the context is built with it, the model at hand
    context = build_context(
        request, ContextSources(), scope=SCOPE, recallers=ports(), counter=DEEPSEEK,
        focus_llm=llm, focus=decided,
    )  # fmt: skip
    # then that focus shaped the context and the model was not asked again
    assert context.focus == decided
    assert llm.calls == 1
    # without one, build_context asks the model itself
    build_context(
        request, ContextSources(), scope=SCOPE, recallers=ports(), counter=DEEPSEEK, focus_llm=llm
    )
    assert llm.calls == 2


def test_sources_given_as_a_call_are_gathered_once_the_literal_recalls_are_sent() -> None:
    from pipelines.read.recall import Recallers, RecallScope
    from tests.pipelines.read.test_retrieve import FakeSparse

    events: list[str] = []

    class QueuingSparse(FakeSparse):
        def queue_sparse(self, text: str, scope: RecallScope, limit: int) -> None:
            events.append("queued")

    def sources() -> ContextSources:
        events.append("sources")
        return ContextSources(scratch=(ContextItem(id="note", text="check amount_cents"),))

    bound = ports()
    queuing = Recallers(
        dense=bound.dense, sparse=QueuingSparse(MEMORIES), temporal=None, store=bound.store
    )
    request = check_context_request(
        "task-1", "Why amount_cents?", 40_000, None, None, counter=DEEPSEEK
    )
    context = build_context(request, sources, scope=SCOPE, recallers=queuing, counter=DEEPSEEK)
    assert events[:2] == ["queued", "sources"] and events.count("sources") == 1
    assert "check amount_cents" in context.partition(Partition.SCRATCH).text


def test_default_layout_budgets_follow_the_focus() -> None:
    debugging = check_context_request(
        "t", "it failed again, what did we just try?", 128_000, "debugging", None, counter=DEEPSEEK
    )
    context = build_context(
        debugging, ContextSources(), scope=SCOPE, recallers=ports(), counter=DEEPSEEK
    )
    budgets = {p.name: p.budget_tokens for p in context.partitions}
    assert budgets[Partition.RECENT_INTERACTIONS] > 64_000
    assert budgets[Partition.SYSTEM] == DEFAULT_LAYOUT.spec(Partition.SYSTEM).budget_tokens
