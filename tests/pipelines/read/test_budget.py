"""Budget arithmetic: allocation, eviction score, and properties of the whole assembly.

The properties of the design: no partition exceeds its budget and the whole never exceeds
the total, checked with a fake word counter (fast, many examples) and with the real
DeepSeek tokenizer (whose merges across joins are what the final recount guards against).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.errors import InvalidInput
from pipelines.read.assemble import (
    ContextItem,
    ContextSources,
    WorkingVariable,
    assemble_context,
    fit_partition,
)
from pipelines.read.budget import (
    DEFAULT_LAYOUT,
    MAX_BUDGET_TOKENS,
    MIN_CONTEXT_TOKENS,
    PARTITION_MIN_TOKENS,
    Partition,
    PartitionLayout,
    PartitionSpec,
    allocate_budgets,
    check_budget,
    check_context_budget,
    context_floor_tokens,
    density_of,
    eviction_score,
    fit_layout,
    layout_from_budgets,
)
from pipelines.read.focus import InfoKind, directive_from_kinds
from pipelines.read.recall import Candidate, KnowledgeView, MemoryVersion, MemoryView
from pipelines.read.request import ContextRequest
from pipelines.read.retrieve import KnowledgeCandidate, RetrievalResult
from pipelines.read.rewrite import offline_rewrite
from pipelines.read.window import Turn
from pipelines.records import Level, MemoryType
from pipelines.text.identifiers import holds_identifiers
from workers.adapters.tokenizer import load_token_counter

NOW = datetime(2024, 6, 1, tzinfo=UTC)
DEEPSEEK = load_token_counter()


class WordCounter:
    @property
    def name(self) -> str:
        return "words"

    def count(self, text: str) -> int:
        return len(text.split())


WORDS = WordCounter()

# -- allocation ---------------------------------------------------------------------------


def test_defaults_are_the_designs() -> None:
    budgets = allocate_budgets(DEFAULT_LAYOUT, 128_000)
    assert budgets == {
        Partition.SYSTEM: 4_000,
        Partition.TASK_CONTEXT: 8_000,
        Partition.RETRIEVED_MEMORY: 32_000,
        Partition.RECENT_INTERACTIONS: 64_000,
        Partition.WORKING_VARIABLES: 12_000,
        Partition.SCRATCH: 8_000,
    }
    assert DEFAULT_LAYOUT.fixed_tokens == 24_000


@st.composite
def layouts(draw: st.DrawFn) -> PartitionLayout:
    sizes = draw(st.lists(st.integers(1, 60_000), min_size=6, max_size=6))
    fixed = draw(st.lists(st.booleans(), min_size=6, max_size=6))
    if all(fixed):
        fixed[draw(st.integers(0, 5))] = False
    order = draw(st.permutations(list(Partition)))
    return PartitionLayout(
        specs=tuple(
            PartitionSpec(name=name, budget_tokens=size, fixed=is_fixed)
            for name, size, is_fixed in zip(order, sizes, fixed, strict=True)
        )
    )


shift_values = st.floats(min_value=0.0, max_value=100.0, allow_nan=False) | st.sampled_from(
    [math.inf, math.nan, -1.0]
)


@given(
    layout=layouts(),
    extra=st.integers(0, 500_000),
    shifts=st.dictionaries(st.sampled_from(list(Partition)), shift_values),
)
def test_allocation_adds_up_exactly(
    layout: PartitionLayout, extra: int, shifts: dict[Partition, float]
) -> None:
    elastic = [spec for spec in layout.specs if not spec.fixed]
    total = min(MAX_BUDGET_TOKENS, layout.fixed_tokens + len(elastic) + extra)
    budgets = allocate_budgets(layout, total, shifts)
    assert sum(budgets.values()) == total
    for spec in layout.specs:
        if spec.fixed:
            assert budgets[spec.name] == spec.budget_tokens
        else:
            assert budgets[spec.name] >= 1
    assert list(budgets) == [spec.name for spec in layout.specs]


def test_shifts_are_clamped() -> None:
    wild = allocate_budgets(DEFAULT_LAYOUT, 200_000, {Partition.SCRATCH: 1e9})
    capped = allocate_budgets(DEFAULT_LAYOUT, 200_000, {Partition.SCRATCH: 2.0})
    assert wild == capped


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (24_002, "fixed partitions alone take 24000 tokens"),
        (0, "fixed partitions"),
        (-5, "fixed partitions"),
        (MAX_BUDGET_TOKENS + 1, "largest context"),
        (True, "must be an integer"),
        (64_000.0, "must be an integer"),
        ("64000", "must be an integer"),
        (None, "must be an integer"),
    ],
)
def test_bad_budgets_name_the_field_and_limit(value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as err:
        check_budget(value, DEFAULT_LAYOUT)
    assert err.value.field == "budget_tokens"
    if isinstance(value, int) and not isinstance(value, bool):
        assert err.value.limit is not None


def test_budget_at_the_minimum_is_accepted() -> None:
    assert check_budget(24_003, DEFAULT_LAYOUT) == 24_003
    budgets = allocate_budgets(DEFAULT_LAYOUT, 24_003)
    assert budgets[Partition.SCRATCH] == budgets[Partition.RECENT_INTERACTIONS] == 1


def test_layout_from_configuration() -> None:
    layout = layout_from_budgets({"retrieved_memory": 48_000}, {"scratch": True})
    assert layout.spec(Partition.RETRIEVED_MEMORY).budget_tokens == 48_000
    assert layout.spec(Partition.SCRATCH).fixed
    with pytest.raises(InvalidInput, match="unknown partition"):
        layout_from_budgets({"memories": 1})
    with pytest.raises(InvalidInput) as err:
        layout_from_budgets({"scratch": 0})
    assert err.value.field == "partitions.scratch"
    with pytest.raises(InvalidInput, match="elastic"):
        layout_from_budgets(
            {}, {"retrieved_memory": True, "recent_interactions": True, "scratch": True}
        )


def test_layout_must_name_every_partition_once() -> None:
    with pytest.raises(ValueError, match="every partition"):
        PartitionLayout(specs=DEFAULT_LAYOUT.specs[:-1])


# -- eviction score -----------------------------------------------------------------------


def test_eviction_score_is_the_issues_formula() -> None:
    score = eviction_score(relevance=0.5, density=1.0, age_hours=48.0, has_identifiers=True)
    assert score == pytest.approx(0.35 * 0.5 + 0.30 * 1.0 + 0.20 * math.exp(-1) + 0.15)
    assert eviction_score(
        relevance=2.0, density=-1.0, age_hours=-5, has_identifiers=False
    ) == pytest.approx(0.35 + 0.0 + 0.20)  # clamped inputs


def test_density_orders_decision_over_observation_over_acknowledgement() -> None:
    decision = density_of("We decided to use Postgres.", MemoryType.DECISION)
    observation = density_of("The build took four minutes.", MemoryType.OBSERVATION)
    acknowledgement = density_of("ok thanks!", None)
    assert decision > observation > acknowledgement == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("edit config/app.yaml", True),
        ("the port is 8080", True),
        ("ask Priya about it", True),
        ("set max_retries to five", True),
        ("use the --dry-run flag", True),
        ("the timeout lives in db.pool.timeout_s", True),
        ("sounds good to me", False),
        ("we should think about it more", False),
    ],
)
def test_identifiers(text: str, expected: bool) -> None:
    assert holds_identifiers(text) is expected


# -- properties of the fill ---------------------------------------------------------------

word = st.sampled_from(
    ["we", "decided", "port", "8080", "ok", "Priya", "config/app.yaml", "fails", "状态", "the"]
)
text = st.lists(word, min_size=1, max_size=40).map(" ".join)


@st.composite
def items(draw: st.DrawFn) -> list[ContextItem]:
    count = draw(st.integers(0, 25))
    out = []
    for i in range(count):
        body = draw(text)
        versions = draw(st.lists(text, max_size=2))
        out.append(
            ContextItem(
                id=f"i{i}",
                text=body,
                prefix=draw(st.sampled_from(["", "[2024-06-01] "])),
                timestamp=NOW - timedelta(hours=draw(st.integers(0, 500))),
                type=draw(st.sampled_from([None, *MemoryType])),
                relevance=draw(st.none() | st.floats(0, 1)),
                versions=tuple(sorted(versions, key=len, reverse=True)),
                must_keep=draw(st.booleans()),
            )
        )
    return out


@given(entries=items(), budget=st.integers(0, 400))
@settings(max_examples=300)
def test_a_partition_never_exceeds_its_budget(entries: list[ContextItem], budget: int) -> None:
    content = fit_partition(Partition.SCRATCH, entries, budget, WORDS, now=NOW)
    assert content.used_tokens <= budget
    assert WORDS.count(content.text) == content.used_tokens
    placed = [item.id for item in content.items]
    assert sorted(placed + list(content.evicted_ids)) == sorted(e.id for e in entries)
    assert placed == [e.id for e in entries if e.id in placed]  # order kept


@given(entries=items(), budget=st.integers(0, 300))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_partition_never_exceeds_its_budget_in_real_tokens(
    entries: list[ContextItem], budget: int
) -> None:
    content = fit_partition(Partition.RETRIEVED_MEMORY, entries, budget, DEEPSEEK, now=NOW)
    assert content.used_tokens <= budget
    assert DEEPSEEK.count(content.text) == content.used_tokens


@st.composite
def sources(draw: st.DrawFn) -> tuple[ContextSources, RetrievalResult]:
    turns = tuple(
        Turn(id=f"t{i}", speaker="user", content=draw(text), timestamp=NOW)
        for i in range(draw(st.integers(0, 30)))
    )
    memories = []
    for i in range(draw(st.integers(0, 30))):
        versions = tuple(
            MemoryVersion(level=Level(level + 1), content=draw(text))
            for level in range(draw(st.integers(0, 2)))
        )
        memories.append(
            Candidate(
                memory=MemoryView(id=f"m{i}", content=draw(text), timestamp=NOW, versions=versions),
                relevance=draw(st.floats(0, 1)),
            )
        )
    retrieval = RetrievalResult(
        candidates=tuple(memories),
        variants=offline_rewrite("q"),
        focus=directive_from_kinds([InfoKind.FACTS], []),
        depth=0,
        reranker="none",
        recalled={},
    )
    return (
        ContextSources(
            system=draw(text),
            task_context=tuple(draw(items())),
            turns=turns,
            variables=tuple(
                WorkingVariable(key=f"k{i}", value=draw(text))
                for i in range(draw(st.integers(0, 8)))
            ),
            scratch=tuple(draw(items())),
        ),
        retrieval,
    )


def small_layout() -> PartitionLayout:
    return layout_from_budgets(
        {
            "system": 60,
            "task_context": 80,
            "retrieved_memory": 200,
            "recent_interactions": 300,
            "working_variables": 60,
            "scratch": 50,
        }
    )


@given(data=sources(), extra=st.integers(3, 1_200), kinds=st.permutations(list(InfoKind)))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_whole_never_exceeds_the_total(
    data: tuple[ContextSources, RetrievalResult], extra: int, kinds: list[InfoKind]
) -> None:
    # given small partitions so that everything overflows somewhere
    layout = small_layout()
    total = layout.fixed_tokens + extra
    source, retrieval = data
    focus = directive_from_kinds(kinds[:3], ["port", "Priya"])
    request = ContextRequest(task_id="t", query="q", budget_tokens=total)
    # when the context is assembled with the real tokenizer
    try:
        context = assemble_context(
            request,
            source,
            counter=DEEPSEEK,
            focus=focus,
            now=NOW,
            retrieval=retrieval,
            layout=layout,
        )
    except InvalidInput as exc:  # only a system prompt over its fixed budget is refused
        assert exc.field == "system"
        assert DEEPSEEK.count(f"## System\n{source.system}\n") > 60
        return
    # then every partition is within its budget and the whole within the total
    budgets = allocate_budgets(layout, total, focus.partition_shifts())
    for partition in context.partitions:
        assert partition.used_tokens <= budgets[partition.name]
        assert partition.budget_tokens == budgets[partition.name]
    assert context.total_tokens == DEEPSEEK.count(context.text) <= total


# -- budgets below the layout's total ------------------------------------------------------


def test_small_budgets_shrink_every_partition_in_proportion() -> None:
    # given the default layout (128k in all) and the budgets of a 12k, 16k and 32k model
    for budget, scale in ((12_000, 12 / 128), (16_000, 16 / 128), (32_000, 32 / 128)):
        # when the budget is laid out
        budgets = allocate_budgets(fit_layout(DEFAULT_LAYOUT, budget), budget)
        # then every partition, fixed ones too, is its default size times budget / 128k
        assert sum(budgets.values()) == budget
        for spec in DEFAULT_LAYOUT.specs:
            assert budgets[spec.name] == pytest.approx(spec.budget_tokens * scale, abs=1)
        assert fit_layout(DEFAULT_LAYOUT, budget).spec(Partition.SYSTEM).fixed


def test_at_the_floor_every_partition_keeps_its_minimum() -> None:
    # given the smallest context served
    assert context_floor_tokens(DEFAULT_LAYOUT) == MIN_CONTEXT_TOKENS == 4_000
    # when it is laid out, with the focus shrinking the retrieved memory as far as it can
    shifts = {Partition.RETRIEVED_MEMORY: 0.5, Partition.SCRATCH: 0.5}
    budgets = allocate_budgets(fit_layout(DEFAULT_LAYOUT, 4_000), 4_000, shifts)
    # then the partitions whose share is under their minimum get the minimum, the others
    # share the rest in proportion
    assert budgets[Partition.SYSTEM] == PARTITION_MIN_TOKENS[Partition.SYSTEM] == 256
    assert budgets[Partition.TASK_CONTEXT] == PARTITION_MIN_TOKENS[Partition.TASK_CONTEXT]
    assert sum(budgets.values()) == 4_000
    for name, minimum in PARTITION_MIN_TOKENS.items():
        assert budgets[name] >= minimum, name
    assert budgets[Partition.RECENT_INTERACTIONS] > budgets[Partition.RETRIEVED_MEMORY]


@pytest.mark.parametrize("value", [3_999, 1_000, 0, -5])
def test_below_the_floor_the_error_names_the_budget_and_the_floor(value: int) -> None:
    with pytest.raises(InvalidInput, match="smallest context is 4000 tokens") as err:
        check_context_budget(value, DEFAULT_LAYOUT)
    assert err.value.field == "budget_tokens"
    assert err.value.limit == ">= 4000 tokens"
    with pytest.raises(InvalidInput, match="must be an integer"):
        check_context_budget(12_000.0, DEFAULT_LAYOUT)
    with pytest.raises(InvalidInput, match="largest context"):
        check_context_budget(MAX_BUDGET_TOKENS + 1, DEFAULT_LAYOUT)


def test_the_default_total_and_larger_budgets_keep_the_configured_layout() -> None:
    # given budgets from the default total up
    for budget in (128_000, 200_000, MAX_BUDGET_TOKENS):
        # then the layout is the configured one itself, laid out exactly as before
        assert fit_layout(DEFAULT_LAYOUT, budget) is DEFAULT_LAYOUT
    # and one token below the total, no partition moves by more than a rounding token
    below = allocate_budgets(fit_layout(DEFAULT_LAYOUT, 127_999), 127_999)
    for spec in DEFAULT_LAYOUT.specs:
        assert spec.budget_tokens - 1 <= below[spec.name] <= spec.budget_tokens


def test_a_layout_configured_below_the_floor_is_served_from_its_own_total() -> None:
    # given a layout whose partitions add up to 750 tokens
    layout = layout_from_budgets(
        {"system": 60, "task_context": 80, "retrieved_memory": 200,
         "recent_interactions": 300, "working_variables": 60, "scratch": 50}
    )  # fmt: skip
    # then its own total is its floor, and below it the error names that floor
    assert context_floor_tokens(layout) == 750
    assert check_context_budget(750, layout) == 750
    with pytest.raises(InvalidInput) as err:
        check_context_budget(749, layout)
    assert err.value.limit == ">= 750 tokens"


@given(
    layout=layouts(),
    budget=st.integers(MIN_CONTEXT_TOKENS, 400_000),
    shifts=st.dictionaries(st.sampled_from(list(Partition)), shift_values),
)
@settings(max_examples=300)
def test_any_budget_from_the_floor_up_is_laid_out_within_itself(
    layout: PartitionLayout, budget: int, shifts: dict[Partition, float]
) -> None:
    # given any configured layout and a budget from the floor up
    fitted = fit_layout(layout, budget)
    # when it is allocated, with any focus
    budgets = allocate_budgets(fitted, budget, shifts)
    # then the partitions add up to the budget exactly, each at least its minimum
    assert sum(budgets.values()) == budget
    assert list(budgets) == [spec.name for spec in layout.specs]
    total = layout.default_total_tokens
    for spec in layout.specs:
        if budget >= total:
            assert fitted is layout
            continue
        assert budgets[spec.name] >= min(PARTITION_MIN_TOKENS[spec.name], spec.budget_tokens)
        if spec.fixed:
            # a fixed partition is scaled with the budget, never moved by the focus
            assert budgets[spec.name] == allocate_budgets(fitted, budget)[spec.name]
            assert budgets[spec.name] <= max(
                spec.budget_tokens * budget / total + 1, PARTITION_MIN_TOKENS[spec.name]
            )


@given(smaller=st.integers(MIN_CONTEXT_TOKENS, 127_998), more=st.integers(1, 60_000))
def test_a_larger_budget_never_takes_a_partition_more_than_a_rounding_token(
    smaller: int, more: int
) -> None:
    larger = min(smaller + more, 127_999)
    low = allocate_budgets(fit_layout(DEFAULT_LAYOUT, smaller), smaller)
    high = allocate_budgets(fit_layout(DEFAULT_LAYOUT, larger), larger)
    for name in Partition:
        assert high[name] >= low[name] - 1  # largest remainders may trade a token


@st.composite
def crowded_sources(draw: st.DrawFn) -> tuple[ContextSources, RetrievalResult]:
    """Sources that overflow a small context everywhere: tens of long memories, turns,
    variables and notes, some of them in Chinese, and knowledge among the memories."""
    # a drawn text repeated: long lines from little entropy
    long_text = st.tuples(text, st.integers(2, 12)).map(lambda pair: " ".join([pair[0]] * pair[1]))
    memories = [
        Candidate(
            memory=MemoryView(
                id=f"m{i}",
                content=draw(long_text),
                timestamp=NOW - timedelta(hours=i),
                versions=(MemoryVersion(level=Level.L1, content=draw(text)),),
            ),
            relevance=draw(st.floats(0, 1)),
            priority=1.0 - i / 100,
        )
        for i in range(draw(st.integers(10, 40)))
    ]
    knowledge = [
        KnowledgeCandidate(
            knowledge=KnowledgeView(
                id=f"k{i}",
                kind=draw(st.sampled_from(["preference", "convention", None])),
                content=draw(st.sampled_from(["周报请用简洁的要点式", draw(long_text)])),
                confidence=draw(st.floats(0, 1)),
                conditions=draw(st.none() | text),
                updated_at=NOW,
            ),
            relevance=draw(st.floats(0, 1)),
            priority=draw(st.floats(0, 1.2)),
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    retrieval = RetrievalResult(
        candidates=tuple(memories),
        variants=offline_rewrite("q"),
        focus=directive_from_kinds([InfoKind.FACTS], []),
        depth=0,
        reranker="none",
        recalled={},
        knowledge=tuple(sorted(knowledge, key=lambda k: -k.priority)),
    )
    return (
        ContextSources(
            system="You are the billing agent. 回答请简洁。",
            task_context=(
                ContextItem(id="goal", text=draw(long_text), must_keep=True),
                *draw(items()),
            ),
            turns=tuple(
                Turn(id=f"t{i}", speaker="user", content=draw(long_text), timestamp=NOW)
                for i in range(draw(st.integers(5, 40)))
            ),
            variables=tuple(
                WorkingVariable(key=f"k{i}", value=draw(long_text))
                for i in range(draw(st.integers(0, 30)))
            ),
            scratch=tuple(draw(items())),
        ),
        retrieval,
    )


@given(
    data=crowded_sources(),
    budget=st.integers(MIN_CONTEXT_TOKENS, 20_000),
    kinds=st.permutations(list(InfoKind)),
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_small_context_keeps_every_partition_and_the_whole_within_budget(
    data: tuple[ContextSources, RetrievalResult], budget: int, kinds: list[InfoKind]
) -> None:
    # given crowded sources and a budget from the floor to 20k
    source, retrieval = data
    focus = directive_from_kinds(kinds[:3], [])
    request = ContextRequest(task_id="t", query="q", budget_tokens=budget)
    # when they are assembled on the layout scaled to the budget, with the real tokenizer
    layout = fit_layout(DEFAULT_LAYOUT, budget)
    context = assemble_context(
        request, source, counter=DEEPSEEK, focus=focus, now=NOW, retrieval=retrieval,
        layout=layout,
    )  # fmt: skip
    # then no partition exceeds its budget and the whole never exceeds the request's
    budgets = allocate_budgets(layout, budget, focus.partition_shifts())
    assert sum(budgets.values()) == budget
    for partition in context.partitions:
        assert partition.budget_tokens == budgets[partition.name]
        assert partition.used_tokens <= partition.budget_tokens, partition.name
    assert context.total_tokens == DEEPSEEK.count(context.text) <= budget
    # and the system prompt and the turn being answered are there
    assert "You are the billing agent." in context.partition(Partition.SYSTEM).text
    recent = context.partition(Partition.RECENT_INTERACTIONS)
    assert recent.items[-1].id == source.turns[-1].id
