from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.text.words import word_count
from pipelines.write.summary import extractive_summary, needs_summary


def test_short_text_is_its_own_summary() -> None:
    assert extractive_summary("We chose Redis.", 60) == "We chose Redis."
    assert not needs_summary("We chose Redis.")


def test_summary_keeps_decisions_and_identifiers_within_budget() -> None:
    text = (
        "Morning everyone. The weather was nice on the way in. "
        "We decided to move the ledger to PostgreSQL 15 because it gives us transactions. "
        "Somebody brought cake to the office and it was lovely. "
        "Status: ATL-104 is now blocked on the security review. "
        "Lunch was at the usual place and took a while."
    )
    summary = extractive_summary(text, 30)
    assert "PostgreSQL 15" in summary
    assert "ATL-104" in summary
    assert len(summary.split()) <= 30


@given(st.text(min_size=1, max_size=2000), st.integers(min_value=1, max_value=120))
def test_summary_never_exceeds_the_budget_by_more_than_an_ellipsis(text: str, budget: int) -> None:
    summary = extractive_summary(text, budget)
    assert len(summary.split()) <= budget + 1


def test_chinese_words_count_toward_the_summary_threshold() -> None:
    # given a long memory in each language (a Chinese paragraph has no spaces at all)
    english = " ".join(["We measured the checkout latency again after the cache change."] * 5)
    chinese = "我们在缓存改动之后又测了一遍结账接口的延迟，结果比上周好很多。" * 3

    # then both are long enough to summarise, and a short one in either is its own summary
    assert needs_summary(english) and needs_summary(chinese)
    assert not needs_summary("We chose Redis.") and not needs_summary("我们选了 Redis。")


def test_chinese_summary_keeps_decisions_and_identifiers_within_budget() -> None:
    # given the English summary test's text, written in Chinese: no space after a sentence
    text = (
        "大家早上好。来的路上天气很好。"
        "我们决定把账本迁移到 PostgreSQL 15，因为它支持事务。"
        "有人带了蛋糕到办公室，非常好吃。"
        "状态：ATL-104 现在因为安全评审被阻塞。"
        "午饭还是在老地方吃的，吃了很久。"
    )

    # when it is summarised within 30 words
    summary = extractive_summary(text, 30)

    # then whole sentences were chosen and joined in order, as Chinese writes them (no
    # space), the decision and the status first; the chatter did not fit
    assert summary == (
        "大家早上好。我们决定把账本迁移到 PostgreSQL 15，因为它支持事务。"
        "状态：ATL-104 现在因为安全评审被阻塞。"
    )
    assert word_count(summary) <= 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("one two three four five six seven eight", "one two three four five …"),
        ("支付模块负责人是张工因为他之前做过第三方支付网关的对接", "支付模块负责人 …"),
    ],
)
def test_a_sentence_over_budget_is_cut_at_a_word(text: str, expected: str) -> None:
    # given one sentence longer than the budget: cut at a word, a Han character in Chinese
    summary = extractive_summary(text, 5)
    assert summary == expected
    assert word_count(summary.removesuffix(" …")) <= 5


@given(
    st.text(alphabet="支付模块负责人是张工因为。，！？ abcdefgh.", min_size=1, max_size=600),
    st.integers(min_value=1, max_value=120),
)
def test_a_chinese_summary_never_exceeds_the_budget(text: str, budget: int) -> None:
    summary = extractive_summary(text, budget)
    assert word_count(summary.removesuffix(" …")) <= budget
    assert len(summary.split()) <= budget + 1
