"""Dates in English and in Chinese side by side: absolute forms, parts of a month, and
expressions relative to the memory's timestamp."""

from __future__ import annotations

from datetime import date

import pytest

from pipelines.text.dates import find_dates, render_span, resolve_relative_dates

# A Wednesday.
ANCHOR = date(2027, 1, 6)


def found(text: str, anchor: date | None = ANCHOR) -> list[tuple[str, str]]:
    """Each date expression of ``text`` as written, with its ISO rendering."""
    return [(text[s:e], render_span(span)) for s, e, span in find_dates(text, anchor)]


@pytest.mark.parametrize(
    ("english", "chinese", "iso"),
    [
        # absolute days, months and years
        ("15 January 2027", "2027年1月15日", "2027-01-15"),
        ("2027-03-01", "2027 年 3 月 1 日", "2027-03-01"),
        ("15 January", "1月15日", "2027-01-15"),  # the anchor's year
        ("March 2027", "2027年3月", "2027-03"),
        ("in 2026", "2026年", "2026"),
        # parts of a month: early, mid, end; the first and second week
        ("early January 2027", "2027年1月初", "2027-01-01..2027-01-10"),
        ("mid January 2027", "2027年1月中旬", "2027-01-11..2027-01-21"),
        ("end of January 2027", "2027年1月底", "2027-01-22..2027-01-31"),
        ("first week of January 2027", "2027年1月第一周", "2027-01-01..2027-01-07"),
        ("second week of January 2027", "2027年1月第二周", "2027-01-08..2027-01-14"),
        # relative to the anchor
        ("yesterday", "昨天", "2027-01-05"),
        ("today", "今天", "2027-01-06"),
        ("tomorrow", "明天", "2027-01-07"),
        ("the day before yesterday", "前天", "2027-01-04"),
        ("3 days ago", "3天前", "2027-01-03"),
        ("two weeks ago", "两周前", "2026-12-20..2026-12-26"),
        ("three months ago", "3个月前", "2026-10"),
        ("a year ago", "一年前", "2026"),
        ("last month", "上个月", "2026-12"),
        ("next month", "下个月", "2027-02"),
        ("last year", "去年", "2026"),
        ("next year", "明年", "2028"),
        ("last summer", "去年夏天", "2026-06-01..2026-08-31"),
        ("this weekend", "本周末", "2027-01-09..2027-01-10"),
    ],
)
def test_the_same_date_in_both_languages(english: str, chinese: str, iso: str) -> None:
    assert [iso for _, iso in found(english)] == [iso]
    assert found(chinese) == [(chinese, iso)]


@pytest.mark.parametrize(
    ("chinese", "iso"),
    [
        # days after the anchor, which English writes as a relation to a date
        ("两天后", "2027-01-08"),
        ("后天", "2027-01-08"),
        ("大后天", "2027-01-09"),
        ("两周后", "2027-01-17..2027-01-23"),
        # calendar weeks, Monday to Sunday, as Chinese means them
        ("下周", "2027-01-11..2027-01-17"),
        ("上周", "2026-12-28..2027-01-03"),
        ("这周", "2027-01-04..2027-01-10"),
        ("下周五", "2027-01-15"),
        ("上周三", "2026-12-30"),
        ("上个星期天", "2027-01-03"),
        # the Nth week of the anchor's month, and a weekday in it
        ("第二周周三", "2027-01-13"),
        ("第一周", "2027-01-01..2027-01-07"),
        ("1月第二周周三", "2027-01-13"),
    ],
)
def test_chinese_relative_dates(chinese: str, iso: str) -> None:
    assert found(chinese) == [(chinese, iso)]


def test_last_wednesday_is_rolling_but_the_chinese_one_is_last_calendar_weeks() -> None:
    # given a Friday: English "last Wednesday" is two days back, Chinese 上周三 is the
    # Wednesday of the week before
    friday = date(2027, 1, 8)
    assert found("last Wednesday", friday) == [("last Wednesday", "2027-01-06")]
    assert found("上周三", friday) == [("上周三", "2026-12-30")]


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        # a weekday alone is as often a rule as a day
        ("never deploy on Friday", "周五不要上线"),
        # words that hold a date word without meaning one
        ("the next cycle", "下周期"),
        ("the days before", "之前天气很好"),
        ("it is coming soon", "马上月底前完成"),
        ("until the 15th", "15日前完成"),
    ],
)
def test_words_that_are_not_dates(english: str, chinese: str) -> None:
    assert found(english) == []
    assert found(chinese) == []


def test_a_weekday_is_not_read_out_of_a_longer_word() -> None:
    # 下周一起 is "together next week": next week, not next Monday
    assert found("下周一起讨论") == [("下周", "2027-01-11..2027-01-17")]
    assert found("下周一下午讨论") == [("下周一", "2027-01-11")]


def test_a_day_without_a_year_needs_an_anchor() -> None:
    assert found("15 January", None) == []
    assert found("1月15日", None) == []
    assert found("2027年1月15日", None) == [("2027年1月15日", "2027-01-15")]


@pytest.mark.parametrize(
    ("text", "resolved"),
    [
        ("Shipped yesterday.", "Shipped 2027-01-05."),
        ("昨天上线了。", "2027-01-05上线了。"),
        # "ago" says how long ago as well as when: its words stay
        ("Done 3 days ago.", "Done 3 days ago [2027-01-03]."),
        ("3天前完成。", "3天前 [2027-01-03]完成。"),
        # absolute dates are left as written
        ("Due 15 January 2027.", "Due 15 January 2027."),
        ("2027年1月15日到期。", "2027年1月15日到期。"),
    ],
)
def test_resolve_relative_dates(text: str, resolved: str) -> None:
    assert resolve_relative_dates(text, ANCHOR) == resolved


def test_resolve_relative_dates_in_brackets_and_only_once() -> None:
    once = resolve_relative_dates("昨天上线，明天复盘。", ANCHOR, bracket=True)
    assert once == "昨天 [2027-01-05]上线，明天 [2027-01-07]复盘。"
    assert resolve_relative_dates(once, ANCHOR, bracket=True) == once
    english = resolve_relative_dates("Shipped yesterday.", ANCHOR, bracket=True)
    assert english == "Shipped yesterday [2027-01-05]."
    assert resolve_relative_dates(english, ANCHOR, bracket=True) == english


def test_a_week_of_an_explicit_month_is_not_read_again_as_the_anchors() -> None:
    # given "the second week of March" written out: no relative reading of 第二周 in it
    text = "3月第二周周三上线"
    assert resolve_relative_dates(text, ANCHOR) == text
    assert found(text) == [("3月第二周周三", "2027-03-10")]
