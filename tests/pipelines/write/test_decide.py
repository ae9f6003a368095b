"""The offline tier-2/3 rules in both languages: words counted as ``word_count`` counts them,
cues of every type, Chinese small talk, and the importance of commitments."""

from __future__ import annotations

import pytest

from pipelines.records import MemoryType
from pipelines.write.decide import (
    COMMITMENT_FLOOR,
    FACT_IMPORTANCE_FLOOR,
    UNCERTAIN_HIGH,
    UNCERTAIN_LOW,
    WriteJudgement,
    estimate_importance,
    is_small_talk,
    offline_deep_judge,
    offline_judge,
)


def settle(content: str) -> WriteJudgement:
    """Tier 2 by rules, then tier 3 by rules when tier 2 is unsure (as ``decide_write``)."""
    first = offline_judge(content, None)
    if UNCERTAIN_LOW <= first.confidence <= UNCERTAIN_HIGH:
        return offline_deep_judge(content, None, first)
    return first


def test_an_owner_decision_with_its_reason_is_kept_alike_in_both_languages() -> None:
    # given the same decision, with its reason, in English and in Chinese
    english = (
        "Zhang owns the payment module because he integrated the third-party payment "
        "gateway before and has the most experience."
    )
    chinese = "支付模块负责人是张工，因为他之前做过第三方支付网关的对接，经验最丰富。"

    # when the offline rules judge them
    verdicts = [settle(english), settle(chinese)]

    # then both are kept as decisions at tier 2, with a high importance
    for verdict in verdicts:
        assert verdict.keep
        assert verdict.type is MemoryType.DECISION
        assert verdict.reason == "offline rules: decision cues"
        assert verdict.importance >= 0.9


@pytest.mark.parametrize(
    ("english", "chinese", "memory_type"),
    [
        ("We chose Redis for sessions.", "我们决定用 Redis 存会话。", MemoryType.DECISION),
        ("Because SEC-7 requires it.", "原因是 SEC-7 的要求。", MemoryType.DECISION),
        ("I prefer brief answers.", "周报请用简洁的要点式。", MemoryType.PREFERENCE),
        ("AUTH-3 moved to done.", "工单 AUTH-3 已完成。", MemoryType.STATUS_CHANGE),
        ("That's wrong, PAY-7 is open.", "错了，PAY-7 还没关。", MemoryType.FEEDBACK),
        ("Ran the suite on feature/pay-3.", "在 feature/pay-3 上运行了测试。", MemoryType.ACTION),
    ],
)
def test_cues_of_every_type_keep_a_short_turn_in_both_languages(
    english: str, chinese: str, memory_type: MemoryType
) -> None:
    for content in (english, chinese):
        verdict = settle(content)
        assert verdict.keep, content
        assert verdict.type is memory_type, content


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("Priya owns the billing module.", "张工负责支付模块。"),
        ("Milestone 1: login ships on 2027-01-20.", "里程碑：1月20日上线登录。"),
        ("Deadline: Friday.", "截止日期：周五。"),
        ("We must not log tokens.", "必须加密。"),
        ("The report is due by Friday.", "第二周周三前完成联调。"),
    ],
)
def test_commitments_score_high_however_short(english: str, chinese: str) -> None:
    # given decisions naming an owner, a milestone, a deadline or a constraint
    for content in (english, chinese):
        # when the rules judge them
        verdict = settle(content)

        # then they are kept as decisions that later reasoning can lean on
        assert verdict.keep, content
        assert verdict.type is MemoryType.DECISION, content
        assert verdict.importance >= COMMITMENT_FLOOR >= 0.85, content


def test_the_commitment_floor_lifts_decisions_only() -> None:
    # given short texts naming a deadline, typed as a decision and as an observation
    # then only the decision is lifted to the commitment floor; the observation, a statement
    # of fact, stays at the fact floor, above the decay sweep's eviction line
    for content in ("Deadline: Friday.", "截止：周五。"):
        assert estimate_importance(content, MemoryType.DECISION) == COMMITMENT_FLOOR
        assert estimate_importance(content, MemoryType.OBSERVATION) == FACT_IMPORTANCE_FLOOR
        assert FACT_IMPORTANCE_FLOOR < COMMITMENT_FLOOR


def test_length_counts_chinese_words_not_whitespace_pieces() -> None:
    # given a long decision and a three-word one in each language
    long_en = "We decided to move the ledger to PostgreSQL because it gives us transactions."
    long_zh = "我们决定把账本迁移到 PostgreSQL，因为它支持事务，还能和任务一起提交。"
    short_en, short_zh = "We chose it.", "选定了。"

    # then length adds to the long ones and takes from the short ones alike
    assert estimate_importance(long_en, MemoryType.DECISION) > 0.85
    assert estimate_importance(long_zh, MemoryType.DECISION) > 0.85
    assert estimate_importance(short_en, MemoryType.DECISION) < 0.85
    assert estimate_importance(short_zh, MemoryType.DECISION) < 0.85


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("hi there", "大家好，早上好"),
        ("hey, see you", "王经理：辛苦了，明天再聊。"),
        ("bye", "助手：收到，谢谢"),
        ("talk later", "王经理：辛苦了，talk tomorrow。"),
    ],
)
def test_small_talk_is_dropped_at_tier_two(english: str, chinese: str) -> None:
    # when the rules judge small talk, a speaker's line of acknowledgements included
    for content in (english, chinese):
        verdict = offline_judge(content, None)

        # then it goes, confidently enough to skip tier 3
        assert not verdict.keep, content
        assert verdict.confidence > UNCERTAIN_HIGH, content
        assert verdict.reason == "offline rules: small talk without content"


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("hi, the deploy to eu-west-1 is done", "大家好，PAY-12 已经上线了"),
        (
            "Dana: thanks, the fix is in billing/webhooks.py",
            "王经理：谢谢，修复在 billing/webhooks.py",
        ),
    ],
)
def test_a_greeting_with_content_is_kept(english: str, chinese: str) -> None:
    for content in (english, chinese):
        assert settle(content).keep, content


def test_chinese_small_talk_needs_a_han_character() -> None:
    # an English line is judged by the English chatter pattern alone, as before
    assert not is_small_talk("Dana: thanks, talk tomorrow")
    assert is_small_talk("Dana：辛苦了，talk tomorrow")


def unsure(content: str) -> WriteJudgement:
    """A tier-2 answer inside the uncertain band, as a model may give for any line."""
    return WriteJudgement(
        keep=True, type=MemoryType.OBSERVATION, confidence=0.5, reason="unsure", importance=0.4
    )


@pytest.mark.parametrize(
    ("english", "chinese"),
    [("looks fine", "看着还行"), ("hmm, let me think about it", "嗯……让我想想")],
)
def test_tier_three_drops_a_line_that_carries_no_fact(english: str, chinese: str) -> None:
    # given chatter that tier 2 (a model, say) was unsure about
    for content in (english, chinese):
        # when tier 3 looks again, then it goes: it states nothing
        deep = offline_deep_judge(content, None, unsure(content))
        assert not deep.keep, content
        assert deep.reason == "offline deep rules: carries no fact"


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("the queue is long", "队列很长"),
        ("I'm allergic to peanuts.", "我住在北京。"),
        ("the build log shows a very long queue", "构建日志显示排队的时间非常长"),
    ],
)
def test_tier_three_keeps_a_statement_of_fact_however_short(english: str, chinese: str) -> None:
    for content in (english, chinese):
        first = offline_judge(content, None)
        assert UNCERTAIN_LOW <= first.confidence <= UNCERTAIN_HIGH, content
        deep = offline_deep_judge(content, None, first)
        assert deep.keep, content
        assert deep.reason == "offline deep rules: states something"


@pytest.mark.parametrize(
    ("english", "chinese"),
    [("ask about ATL-12", "问一下张工"), ("check the 20% drop", "看看下降的20%")],
)
def test_tier_three_keeps_a_short_observation_naming_an_identifier(
    english: str, chinese: str
) -> None:
    for content in (english, chinese):
        first = offline_judge(content, None)
        deep = offline_deep_judge(content, None, first)
        assert deep.keep, content


@pytest.mark.parametrize(
    ("line", "body"),
    [
        ("Dana: we chose Redis for the sessions", "we chose Redis for the sessions"),
        ("王经理：我们选了 Redis 存会话", "我们选了 Redis 存会话"),
    ],
)
def test_a_speaker_is_not_an_identifier_of_the_memory(line: str, body: str) -> None:
    # given a line and its body: a Chinese speaker reads as a person's name (王经理)
    # then the speaker adds nothing to the importance, in either language
    for memory_type in (MemoryType.OBSERVATION, MemoryType.DECISION):
        assert estimate_importance(line, memory_type) == estimate_importance(body, memory_type)
