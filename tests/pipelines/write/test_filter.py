"""Tier 1 rules, the offline tier-2/3 heuristics, and the uncertain band that sends a write
to tier 3."""

from __future__ import annotations

import time

import pytest

from pipelines.errors import MalformedLLMOutput, TransientLLMError
from pipelines.records import MemoryType
from pipelines.text.cues import guess_type
from pipelines.write.decide import WriteJudgement, decide_write, estimate_importance, offline_judge
from pipelines.write.filter import tier1_filter


@pytest.mark.parametrize(
    "ack",
    [
        "ok",
        "OK!!",
        "ｏｋ",
        "Thanks",
        "thank you.",
        "好的",
        "好的。",
        "继续",
        "收到",
        "👍",
        "...",
        "got it",
    ],
)
def test_bare_acknowledgements_stop_at_tier_one(ack: str) -> None:
    verdict = tier1_filter(ack)
    assert not verdict.keep
    assert verdict.reason


@pytest.mark.parametrize(
    "content",
    [
        "ok, deploy to eu-west-1",
        "thanks — the fix is in billing/webhooks.py",
        "继续部署到生产环境",
        "no, use PostgreSQL",
    ],
)
def test_acknowledgements_with_content_pass(content: str) -> None:
    assert tier1_filter(content).keep


def test_types_are_guessed_from_cues() -> None:
    assert guess_type("We decided to use Redis because it is fast")[0] is MemoryType.DECISION
    assert guess_type("I prefer short answers")[0] is MemoryType.PREFERENCE
    assert guess_type("ATL-12 is now blocked")[0] is MemoryType.STATUS_CHANGE
    assert guess_type("The sky looks grey")[0] is MemoryType.OBSERVATION


def test_importance_orders_decisions_above_observations() -> None:
    decision = estimate_importance("We chose Postgres for the ledger", MemoryType.DECISION)
    observation = estimate_importance("The build was green today", MemoryType.OBSERVATION)
    assert 0 <= observation < decision <= 1


def test_offline_judge_keeps_decisions_and_drops_small_talk() -> None:
    assert offline_judge("We decided to pin Python 3.11 because of the PDF lib.", None).keep
    small_talk = offline_judge("hi there", None)
    assert not small_talk.keep
    assert small_talk.confidence > 0.7


class ScriptedLLM:
    """An in-memory fake of the LLM port: answers from a script, counts calls."""

    def __init__(self, tier2: list[object], tier3: list[object] | None = None) -> None:
        self.tier2 = list(tier2)
        self.tier3 = list(tier3 or [])
        self.calls: list[str] = []

    @property
    def name(self) -> str:
        return "scripted"

    def _next(self, queue: list[object]) -> WriteJudgement:
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, WriteJudgement)
        return item

    def judge_write(self, content: str, type_hint: MemoryType | None) -> WriteJudgement:
        self.calls.append("tier2")
        return self._next(self.tier2)

    def deep_judge_write(
        self, content: str, type_hint: MemoryType | None, first: WriteJudgement
    ) -> WriteJudgement:
        self.calls.append("tier3")
        return self._next(self.tier3)

    def summarize(self, content: str, max_words: int) -> str:
        return content


def judgement(keep: bool, confidence: float) -> WriteJudgement:
    return WriteJudgement(
        keep=keep, type=MemoryType.OBSERVATION, confidence=confidence, reason="scripted"
    )


@pytest.mark.parametrize("confidence", [0.3, 0.5, 0.7])
def test_uncertain_confidence_goes_to_tier_three(confidence: float) -> None:
    llm = ScriptedLLM([judgement(True, confidence)], [judgement(False, 0.9)])
    outcome = decide_write("the build log is long", None, llm)
    assert llm.calls == ["tier2", "tier3"]
    assert not outcome.keep
    assert [v.tier for v in outcome.verdicts] == [2, 3]


@pytest.mark.parametrize("confidence", [0.29, 0.71, 0.95])
def test_confident_answers_stop_at_tier_two(confidence: float) -> None:
    llm = ScriptedLLM([judgement(True, confidence)])
    outcome = decide_write("the build log is long", None, llm)
    assert llm.calls == ["tier2"]
    assert outcome.keep


def test_a_malformed_answer_is_retried_once_then_the_rules_decide() -> None:
    llm = ScriptedLLM([MalformedLLMOutput("invalid JSON"), MalformedLLMOutput("invalid JSON")])
    outcome = decide_write("We decided to use Redis because it is fast", None, llm)
    assert outcome.verdicts[0].source == "offline-fallback"
    assert "invalid JSON" in outcome.verdicts[0].reason
    assert outcome.keep


def test_a_transient_error_propagates_to_be_retried() -> None:
    llm = ScriptedLLM([TransientLLMError("timeout")])
    with pytest.raises(TransientLLMError):
        decide_write("anything at all here", None, llm)


def test_the_callers_type_wins_over_the_guess() -> None:
    llm = ScriptedLLM([judgement(True, 0.9)])
    outcome = decide_write("the sky is grey", MemoryType.FEEDBACK, llm)
    assert outcome.type is MemoryType.FEEDBACK


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("ok thanks", "收到，谢谢"),
        ("okay thanks", "好的，谢谢"),
        ("understood", "明白了"),
        ("mhm", "嗯嗯"),
        ("thank you very much", "辛苦了！"),
        ("noted", "收到"),
        ("OK!!", "OK的"),
        ("ok thank you", "ＯＫ的，没问题～"),
        ("great thanks", "好的好的，收到啦"),
        ("got it", "收到，thanks 🙏"),
    ],
)
def test_acknowledgements_and_their_combinations_stop_at_tier_one(
    english: str, chinese: str
) -> None:
    # given an English acknowledgement and a Chinese one run together with a comma or none
    # when tier 1 reads them
    verdicts = [tier1_filter(english), tier1_filter(chinese)]

    # then both are dropped as bare acknowledgements, normalised the same way
    assert [v.keep for v in verdicts] == [False, False]
    assert all(v.reason.startswith("bare acknowledgement") for v in verdicts)


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("ok, deploy to eu-west-1", "收到，明天部署到生产环境"),
        ("thanks, the fix is in billing/webhooks.py", "谢谢，修复在 billing/webhooks.py 里"),
        ("ok, Priya owns payments", "好的，支付模块交给张工"),
        ("no, use PostgreSQL", "不对，用 PostgreSQL"),
        ("sure, it is done now", "好的，PAY-12 已合并"),
        ("thanks, ship it Friday", "谢谢，周五上线"),
    ],
)
def test_an_acknowledgement_with_content_passes_tier_one(english: str, chinese: str) -> None:
    assert tier1_filter(english).keep
    assert tier1_filter(chinese).keep


def test_english_combinations_are_matched_whole_and_chinese_ones_by_pieces() -> None:
    # given acknowledgement words combined in a way the English list does not hold
    # then English keeps matching whole phrases only (as it always has), while a Chinese
    # message made of acknowledgement pieces is one, English pieces included
    assert tier1_filter("ok cool").keep
    assert not tier1_filter("好的，cool").keep


def test_a_line_with_a_speaker_is_left_to_tier_two() -> None:
    # given acknowledgements prefixed by their speaker, in both languages
    # then tier 1 (whole messages only) keeps both for the next tiers to judge
    assert tier1_filter("Dana: ok").keep
    assert tier1_filter("王经理：收到").keep


@pytest.mark.parametrize("content", ["ha " * 13 + "x", "哈" * 39 + "x", "嗯嗯" * 19 + "?x"])
def test_a_long_run_of_pieces_is_judged_in_linear_time(content: str) -> None:
    # given a message of repeated pieces that ends in content (a regex of alternatives
    # under "+" would try every way to split it: seconds at 30 characters)
    started = time.perf_counter()

    # when tier 1 reads it, then it is kept, at once
    assert tier1_filter(content).keep
    assert time.perf_counter() - started < 0.05
