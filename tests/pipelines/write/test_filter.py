"""Tier 1 rules, the offline tier-2/3 heuristics, and the uncertain band that sends a write
to tier 3."""

from __future__ import annotations

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
