"""The attention focus: offline rules, its effects on budgets and fusion, its inputs."""

from __future__ import annotations

import pytest

from pipelines.errors import InvalidInput, MalformedLLMOutput
from pipelines.read.budget import DEFAULT_LAYOUT, Partition, allocate_budgets
from pipelines.read.focus import (
    FOCUS_HINT_MAX_CHARS,
    FocusDirective,
    InfoKind,
    RankedKind,
    check_focus,
    check_phase,
    decide_focus,
    directive_from_kinds,
    offline_focus,
)
from pipelines.records import TaskPhase


def test_weights_are_ranked_and_sum_to_one() -> None:
    directive = offline_focus("Why did we decide to switch to Postgres?")
    weights = [item.weight for item in directive.kinds]
    assert weights == sorted(weights, reverse=True)
    assert sum(weights) == pytest.approx(1.0)
    assert directive.top is InfoKind.DECISIONS


@pytest.mark.parametrize(
    ("query", "phase", "top"),
    [
        ("When did Caroline go to the support group?", None, InfoKind.TEMPORAL),
        ("The deploy failed with a timeout error, what broke?", None, InfoKind.ERRORS),
        ("What did we just try in the last step?", None, InfoKind.RECENT_ACTIVITY),
        ("Which config file holds the port?", None, InfoKind.IDENTIFIERS),
        ("What's her favourite food? She loves spicy dishes", None, InfoKind.PREFERENCES),
        ("Tell me about the ledger", TaskPhase.DEBUGGING, InfoKind.ERRORS),
        ("Tell me about the ledger", TaskPhase.PLANNING, InfoKind.DECISIONS),
        ("Tell me about the ledger", None, InfoKind.FACTS),
    ],
)
def test_offline_rules_pick_the_kind_a_step_needs(
    query: str, phase: TaskPhase | None, top: InfoKind
) -> None:
    assert offline_focus(query, phase).top is top


def test_hint_counts_more_than_the_query() -> None:
    directive = offline_focus("Tell me about the ledger", hint="recent errors")
    assert directive.weight(InfoKind.ERRORS) > 0
    assert directive.terms == ("ledger", "recent", "errors")


def test_focus_shifts_partition_budgets_toward_what_it_needs() -> None:
    # given a debugging focus and a planning focus at the same total
    recent = offline_focus("what did we just do? it failed again", TaskPhase.DEBUGGING)
    memory = offline_focus("why did we decide this approach?", TaskPhase.PLANNING)
    # when budgets are allocated
    a = allocate_budgets(DEFAULT_LAYOUT, 128_000, recent.partition_shifts())
    b = allocate_budgets(DEFAULT_LAYOUT, 128_000, memory.partition_shifts())
    # then the recent window grows for debugging, retrieved memory for planning
    assert a[Partition.RECENT_INTERACTIONS] > b[Partition.RECENT_INTERACTIONS]
    assert b[Partition.RETRIEVED_MEMORY] > a[Partition.RETRIEVED_MEMORY]
    assert a[Partition.SYSTEM] == b[Partition.SYSTEM] == 4_000  # fixed partitions don't move
    for shift in [*recent.partition_shifts().values(), *memory.partition_shifts().values()]:
        assert 0.75 <= shift <= 1.5


def test_focus_shifts_fusion_weights() -> None:
    ident = directive_from_kinds([InfoKind.IDENTIFIERS], []).fusion_weights()
    recent = directive_from_kinds([InfoKind.RECENT_ACTIVITY], []).fusion_weights()
    facts = directive_from_kinds([InfoKind.FACTS], []).fusion_weights()
    assert ident.sparse > facts.sparse
    assert recent.temporal > facts.temporal
    assert facts.dense > ident.dense


def test_alpha_is_lower_for_whats_new_than_for_lookups() -> None:
    lookup = directive_from_kinds([InfoKind.FACTS], [])
    news = directive_from_kinds([InfoKind.RECENT_ACTIVITY], [])
    assert news.alpha() < lookup.alpha()


def test_directive_refuses_weights_that_do_not_sum_to_one() -> None:
    with pytest.raises(ValueError, match="sum to 1"):
        FocusDirective(kinds=(RankedKind(kind=InfoKind.FACTS, weight=0.5),))


def test_caller_kinds_win_over_rules_and_llm() -> None:
    llm = FakeFocusLLM([])
    directive = decide_focus(
        "why did it fail", focus=(InfoKind.PREFERENCES, InfoKind.STATE), llm=llm
    )
    assert [item.kind for item in directive.kinds] == [InfoKind.PREFERENCES, InfoKind.STATE]
    assert directive.source == "caller"
    assert llm.calls == 0


class FakeFocusLLM:
    def __init__(self, answers: list[FocusDirective | Exception]) -> None:
        self.answers = answers
        self.calls = 0

    @property
    def name(self) -> str:
        return "fake-llm"

    def focus_directive(
        self, query: str, phase: TaskPhase | None, hint: str | None
    ) -> FocusDirective:
        answer = self.answers[self.calls]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_llm_directive_is_used_with_terms_filled_in() -> None:
    answer = FocusDirective(kinds=(RankedKind(kind=InfoKind.STATE, weight=1.0),), source="llm")
    directive = decide_focus("where is ATL-42 now?", llm=FakeFocusLLM([answer]))
    assert directive.top is InfoKind.STATE
    assert "ATL-42" in directive.terms


def test_malformed_llm_focus_falls_back_to_rules_after_one_retry() -> None:
    llm = FakeFocusLLM([MalformedLLMOutput("x"), MalformedLLMOutput("y")])
    directive = decide_focus("When did we ship?", llm=llm)
    assert llm.calls == 2
    assert directive.source == "offline-fallback"
    assert directive.top is InfoKind.TEMPORAL


def test_phase_validation_names_the_field() -> None:
    assert check_phase(None) is None
    assert check_phase("Debugging") is TaskPhase.DEBUGGING
    with pytest.raises(InvalidInput) as err:
        check_phase("coding")
    assert err.value.field == "phase"
    with pytest.raises(InvalidInput):
        check_phase(3)


def test_focus_validation() -> None:
    assert check_focus(None) is None
    assert check_focus("   ") is None
    assert check_focus("errors please") == "errors please"
    assert check_focus(["errors", "state", "errors"]) == (InfoKind.ERRORS, InfoKind.STATE)
    with pytest.raises(InvalidInput, match="unknown kind") as err:
        check_focus(["errors", "vibes"])
    assert err.value.field == "focus"
    with pytest.raises(InvalidInput, match="empty list"):
        check_focus([])
    with pytest.raises(InvalidInput, match="must be None"):
        check_focus(42)
    with pytest.raises(InvalidInput) as err:
        check_focus("x" * (FOCUS_HINT_MAX_CHARS + 1))
    assert err.value.limit == f"{FOCUS_HINT_MAX_CHARS} chars"


# Chinese: the same rules, cue words with no spaces around them.


def test_chinese_weights_are_ranked_and_sum_to_one() -> None:
    directive = offline_focus("为什么决定换成 Postgres？")
    weights = [item.weight for item in directive.kinds]
    assert weights == sorted(weights, reverse=True)
    assert sum(weights) == pytest.approx(1.0)
    assert directive.top is InfoKind.DECISIONS


@pytest.mark.parametrize(
    ("query", "phase", "top"),
    [
        ("选择这个方案的原因是什么？", None, InfoKind.DECISIONS),
        ("部署失败了，报错是什么？", None, InfoKind.ERRORS),
        ("这到底是怎么回事？", None, InfoKind.ERRORS),
        ("王经理喜欢什么样的周报格式？", None, InfoKind.PREFERENCES),
        ("认证模块的进度怎么样？", None, InfoKind.STATE),
        ("配置文件的路径在哪里？", None, InfoKind.IDENTIFIERS),
        ("认证模块什么时候上线？", None, InfoKind.TEMPORAL),
        ("2027年3月1日之前", None, InfoKind.TEMPORAL),
        ("我们刚才做了什么？", None, InfoKind.RECENT_ACTIVITY),
        ("如何搭建测试环境？", None, InfoKind.PROCEDURES),
        ("介绍一下账单", TaskPhase.DEBUGGING, InfoKind.ERRORS),
        ("介绍一下账单", TaskPhase.PLANNING, InfoKind.DECISIONS),
        ("介绍一下账单", None, InfoKind.FACTS),
    ],
)
def test_chinese_rules_pick_the_kind_a_step_needs(
    query: str, phase: TaskPhase | None, top: InfoKind
) -> None:
    assert offline_focus(query, phase).top is top


def test_how_is_it_going_asks_for_state_not_a_procedure() -> None:
    # 怎么 asks how to do something; 怎么样 how things stand
    assert offline_focus("怎么部署？").top is InfoKind.PROCEDURES
    going = offline_focus("认证模块现在怎么样？")
    assert going.top is InfoKind.STATE
    assert going.weight(InfoKind.PROCEDURES) == 0


def test_english_cues_touching_chinese_still_count() -> None:
    # an English word or an identifier right next to a Han character is still a word
    assert offline_focus("deploy失败了").weight(InfoKind.ERRORS) > 0
    assert offline_focus("deploy失败了").weight(InfoKind.PROCEDURES) > 0
    assert offline_focus("PAY-12已完成了吗").weight(InfoKind.IDENTIFIERS) > 0


def test_chinese_hint_counts_more_than_the_query() -> None:
    directive = offline_focus("介绍一下支付", hint="最近的报错")
    assert directive.weight(InfoKind.ERRORS) > directive.weight(InfoKind.FACTS)
    assert directive.terms == ("介绍", "支付", "最近", "报错")


def test_chinese_focus_shifts_partition_budgets_toward_what_it_needs() -> None:
    # given a debugging focus and a planning focus in Chinese at the same total
    recent = offline_focus("刚才做了什么？又失败了", TaskPhase.DEBUGGING)
    memory = offline_focus("为什么决定采用这个方案？", TaskPhase.PLANNING)
    # when budgets are allocated
    a = allocate_budgets(DEFAULT_LAYOUT, 128_000, recent.partition_shifts())
    b = allocate_budgets(DEFAULT_LAYOUT, 128_000, memory.partition_shifts())
    # then the recent window grows for debugging, retrieved memory for planning
    assert a[Partition.RECENT_INTERACTIONS] > b[Partition.RECENT_INTERACTIONS]
    assert b[Partition.RETRIEVED_MEMORY] > a[Partition.RETRIEVED_MEMORY]


def test_chinese_terms_fill_an_llm_directive() -> None:
    answer = FocusDirective(kinds=(RankedKind(kind=InfoKind.STATE, weight=1.0),), source="llm")
    directive = decide_focus("PAY-42 现在到哪一步了？", llm=FakeFocusLLM([answer]))
    assert directive.terms[0] == "PAY-42"


def test_malformed_llm_focus_falls_back_to_chinese_rules() -> None:
    llm = FakeFocusLLM([MalformedLLMOutput("x"), MalformedLLMOutput("y")])
    directive = decide_focus("什么时候上线的？", llm=llm)
    assert directive.source == "offline-fallback"
    assert directive.top is InfoKind.TEMPORAL
