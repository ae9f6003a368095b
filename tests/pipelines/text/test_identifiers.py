"""Identifiers, in English and in Chinese side by side: the count, the yes/no and the list."""

from __future__ import annotations

import pytest

from pipelines.text.identifiers import count_identifiers, find_identifiers, holds_identifiers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # people: a capitalised name inside a sentence; a surname and a title (or 小/老)
        ("We asked Priya and Omar about it.", ["Priya", "Omar"]),
        (
            "我们问了张工和李总，王经理、刘老师也在，小王做记录。",
            ["张工", "李总", "王经理", "刘老师", "小王"],
        ),
        # modules and systems: code names; a name and what it is (模块, 服务, 网关, 系统)
        ("Deploy AuthService and billing-api/v2 first.", ["AuthService", "billing-api/v2"]),
        (
            "支付模块、认证服务、第三方网关和订单系统先部署。",
            ["支付模块", "认证服务", "第三方网关", "订单系统"],
        ),
        # numbers; in Chinese with their unit (a number alone is one too)
        ("It took 3 days, 20 runs and 2 hours.", ["3", "20", "2"]),
        (
            "用了3天，提升20%，预算5万，每次2小时，共 107 个用例。",
            ["3天", "20%", "5万", "2小时", "107 个"],
        ),
        # dates as written
        ("The auth module slips to 2027-01-15.", ["2027-01-15"]),
        ("认证模块延期到 2027 年 1 月 15 日。", ["认证模块", "2027 年 1 月 15 日"]),
        # tickets, paths and code names between Han characters
        (
            "Fixed PAY-12 in tests/test_gateway.py, see #400.",
            ["PAY-12", "tests/test_gateway.py", "#400"],
        ),
        (
            "在tests/test_gateway.py里修了PAY-12，见#400，用Redis存。",
            ["tests/test_gateway.py", "PAY-12", "#400", "Redis"],
        ),
    ],
)
def test_find_identifiers(text: str, expected: list[str]) -> None:
    assert find_identifiers(text) == expected


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        # words that point at a thing without naming it
        ("this module and all the services are fine", "这个模块和所有服务都很好"),
        # a time word before a title-like character, a party, a product
        ("next week's work report", "下周工作总结，每周总结一下"),
        ("the other side's engineer", "对方工程师说"),
        ("the mini program", "小程序"),
        # a capital at a sentence start is not a name
        ("Great work. Thanks!", "干得好，谢谢！"),
    ],
)
def test_words_that_only_look_like_identifiers_are_not(english: str, chinese: str) -> None:
    assert find_identifiers(english) == []
    assert find_identifiers(chinese) == []


def test_the_speakers_and_names_can_be_left_out() -> None:
    # given the party of a conversation, or a log where capitals are not names
    assert find_identifiers("Dana says Priya fixed ATL-12", exclude=["Priya"]) == ["ATL-12"]
    assert find_identifiers("王经理说张工修好了 PAY-12", exclude=["张工"]) == ["王经理", "PAY-12"]
    assert find_identifiers("Dana says Priya fixed ATL-12", names=False) == ["ATL-12"]
    assert find_identifiers("王经理说张工修好了 PAY-12", names=False) == ["PAY-12"]


@pytest.mark.parametrize(
    ("english", "chinese", "count"),
    [
        ("Fixed ATL-12 in billing/webhooks.py", "在 billing/webhooks.py 里修了 ATL-12", 2),
        ("It took 3 days and 20 runs", "用了3天，跑了20次", 2),
        ("Moved to Jan 15", "延期到1月15日", 1),
        ("The queue was long", "队列很长", 0),
    ],
)
def test_count_identifiers_counts_alike(english: str, chinese: str, count: int) -> None:
    assert count_identifiers(english) == count
    assert count_identifiers(chinese) == count


def test_chinese_names_and_modules_are_counted() -> None:
    # English counts no capitalised names (the eviction check sees them); Chinese has no
    # capitals, so its people and modules are counted like tickets
    assert count_identifiers("Priya owns the billing module") == 0
    assert holds_identifiers("ask Priya about it")
    assert count_identifiers("张工负责支付模块") == 2
    assert holds_identifiers("问一下张工")


@pytest.mark.parametrize(
    ("english", "chinese"), [("the build was green", "构建通过了"), ("it went well", "一切顺利")]
)
def test_plain_text_holds_no_identifiers(english: str, chinese: str) -> None:
    assert not holds_identifiers(english)
    assert not holds_identifiers(chinese)
