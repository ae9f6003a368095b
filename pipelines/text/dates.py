"""Dates in free text: absolute ones in the usual written forms, and relative ones
("yesterday", "last Friday", "two months ago", "last summer") resolved against an anchor date,
rendered as ISO days, months or ranges. Used by the compression protocol to keep every date
recoverable after pronouns and relative phrases lose their anchor.

Chinese forms are read the same way: 2027年1月15日, 1月15日 (the anchor's year), 2027年3月,
1月底 and 1月第二周周三 (a part of a month, as "end of" and "second week of"), and relative
to the anchor 昨天, 明天, 3天前, 两天后, 上个月, 去年夏天, 下周, 上周三 and 第二周周三 (the
anchor month's second week, as "the second week of" reads it). 上周/下周 are calendar weeks
(Monday to Sunday), as Chinese means them, and 上周三 is the Wednesday of that week, not the
last Wednesday before the anchor. A weekday alone (周五) is not a date: it is as often a rule
("周五不要上线") as a day.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta
from typing import NamedTuple

from pipelines.text.words import NUMBER_WORDS, has_han


class DateSpan(NamedTuple):
    """A closed interval of days a date expression stands for."""

    start: date
    end: date

    def within(self, other: DateSpan) -> bool:
        return other.start <= self.start and self.end <= other.end


_MONTH_NAMES = [calendar.month_name[i].lower() for i in range(1, 13)]
_MONTH_ABBREVIATIONS = {name[:3]: i + 1 for i, name in enumerate(_MONTH_NAMES)}


_WEEKDAYS = [calendar.day_name[i].lower() for i in range(7)]
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11)}


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def month_number(word: str) -> int | None:
    """``May``, ``sept.``, ``January`` and near misses of full names (``Janury``)."""
    w = word.lower().rstrip(".")
    if w in _MONTH_NAMES:
        return _MONTH_NAMES.index(w) + 1
    if w in _MONTH_ABBREVIATIONS:
        return _MONTH_ABBREVIATIONS[w]
    if len(w) >= 5:
        for i, name in enumerate(_MONTH_NAMES):
            # Only long names take near misses: "maybe" is not May, "juney" not June.
            if len(name) >= 5 and w[:3] == name[:3] and _edit_distance(w, name) <= 2:
                return i + 1
    return None


def _month_span(year: int, month: int) -> DateSpan:
    return DateSpan(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))


def _shift_month(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _year_span(year: int) -> DateSpan:
    return DateSpan(date(year, 1, 1), date(year, 12, 31))


def _weekday_before(anchor: date, weekday: int) -> date:
    back = (anchor.weekday() - weekday) % 7 or 7
    return anchor - timedelta(days=back)


def _weekday_after(anchor: date, weekday: int) -> date:
    ahead = (weekday - anchor.weekday()) % 7 or 7
    return anchor + timedelta(days=ahead)


def _weekend_before(anchor: date) -> DateSpan:
    sunday = _weekday_before(anchor, 6)
    return DateSpan(sunday - timedelta(days=1), sunday)


def _weekend_after(anchor: date) -> DateSpan:
    saturday = _weekday_after(anchor, 5)
    return DateSpan(saturday, saturday + timedelta(days=1))


def _season_span(year: int, season: str) -> DateSpan:
    if season == "winter":  # the winter that starts in December of ``year``
        end_year, end_month = year + 1, 2
        return DateSpan(date(year, 12, 1), _month_span(end_year, end_month).end)
    first, last = _SEASONS[season]
    return DateSpan(date(year, first, 1), _month_span(year, last).end)


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


_NUM = r"(?:\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a|an)"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_SEASON = r"(?:spring|summer|fall|autumn|winter)"

_ISO_RANGE_RE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\.\.(\d{4})-(\d{2})-(\d{2})\b")
_ISO_DAY_RE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_ISO_MONTH_RE = re.compile(r"\b(\d{4})-(\d{2})\b(?![-.\d])")
_DMY_RE = re.compile(
    r"\b(\d{1,2})(?:st|nd|rd|th)?\s*(?:of\s+)?([A-Za-z]{3,10})\.?(?:,?\s*(\d{4}))?\b"
)
_MDY_RE = re.compile(
    r"\b([A-Za-z]{3,10})\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b"
    r"(?!\s*(?:years?|days?|weeks?|months?|hours?|minutes?|am|pm|%|:|\d))(?:,?\s*(\d{4}))?"
)
_MY_RE = re.compile(r"\b([A-Za-z]{3,10})[.,]?\s*((?:19|20)\d{2})\b")
_Y_RE = re.compile(r"\b((?:19|20)\d{2})\b")
_SEASON_YEAR_RE = re.compile(rf"\b(?:the\s+)?({_SEASON})\s+(?:of\s+)?((?:19|20)\d{{2}})\b", re.I)

# Chinese absolute dates: year-month-day, month-day, year-month (with a part of the month:
# 初/上旬 early, 中旬 mid, 下旬/底/末 late, or 第N周 the Nth week and a weekday in it), year.
_ZH_WEEKDAY = r"[一二三四五六日天1-7]"
_ZH_WEEK = r"(?:周|星期|礼拜)"
_ZH_YMD_RE = re.compile(r"(?<!\d)(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
_ZH_YM_RE = re.compile(
    r"(?<![\d.])(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月份?(?!\s*\d{1,2}\s*[日号])"
    r"(?:\s*(?P<phase>初|上旬|中旬|下旬|底|末)"
    rf"|\s*第\s*(?P<nth>[一二三四五1-5])\s*(?:周|个星期)(?:\s*{_ZH_WEEK}(?P<day>{_ZH_WEEKDAY}))?)?"
)
_ZH_Y_RE = re.compile(r"(?<!\d)((?:19|20)\d{2})\s*年(?!\s*\d{1,2}\s*月)")
_ZH_PHASES = {
    "初": "early",
    "上旬": "early",
    "中旬": "mid",
    "下旬": "late",
    "底": "late",
    "末": "late",
}
_ZH_DIGITS = {ch: i for i, ch in enumerate("零一二三四五六七八九")} | {"两": 2}


def _zh_count(text: str) -> int:
    """A number written in digits or in Chinese numerals up to 99 (三, 两, 十二, 二十)."""
    if text.isdigit():
        return int(text)
    tens, ten, ones = text.partition("十")
    if not ten:
        return _ZH_DIGITS.get(text, 1)
    return _ZH_DIGITS.get(tens, 1) * 10 + _ZH_DIGITS.get(ones, 0)


def _zh_weekday(char: str) -> int:
    """Monday is 0: 一..六 and 1..6 are Monday to Saturday, 日/天/七/7 Sunday."""
    return 6 if char in "日天七7" else (int(char) - 1 if char.isdigit() else _ZH_DIGITS[char] - 1)


def _nth_week(month: DateSpan, nth: str, day: str | None) -> DateSpan:
    """The Nth seven days of a month ("second week of"), or the given weekday within them."""
    start = month.start + timedelta(days=7 * (_zh_count(nth) - 1))
    if day is None:
        return DateSpan(start, start + timedelta(days=6))
    d = start + timedelta(days=(_zh_weekday(day) - start.weekday()) % 7)
    return DateSpan(d, d)


def _zh_phase(month: DateSpan, phase: str) -> DateSpan:
    """A part of a month, as "early", "mid" and "late" read it: a third of it."""
    third = max(1, ((month.end - month.start).days + 1) // 3)
    if _ZH_PHASES[phase] == "early":
        return DateSpan(month.start, month.start + timedelta(days=third - 1))
    if _ZH_PHASES[phase] == "mid":
        return DateSpan(month.start + timedelta(days=third), month.end - timedelta(days=third))
    return DateSpan(month.end - timedelta(days=third - 1), month.end)


# A relation written before an explicit date: "the week before 9 June", "two weekends
# before", "the Friday before", "the weekend of", "few days before", "first week of".
_RELATION_RE = re.compile(
    rf"(?:\b(?:the\s+)?(?:(?P<n>{_NUM}|few|a\s+few|couple(?:\s+of)?|a\s+couple(?:\s+of)?)\s+)?"
    rf"(?P<unit>weeks?|weekends?|days?|{_WEEKDAY}s?)\s+(?P<rel>before|after|of|prior\s+to)"
    rf"|\b(?P<part>first|last|second)\s+(?P<punit>week|weekend)\s+of"
    rf"|\b(?P<phase>early|mid|late|end\s+of|beginning\s+of|start\s+of))\s*$",
    re.I,
)

# Relative expressions that need the memory's timestamp.
RELATIVE_RE = re.compile(
    rf"\b(?:(?P<dby>the\s+day\s+before\s+yesterday)"
    rf"|(?P<yday>yesterday|last\s+night)"
    rf"|(?P<today>today|tonight|this\s+(?:morning|afternoon|evening))"
    rf"|(?P<tmrw>tomorrow)"
    rf"|(?P<ago_n>{_NUM}|a\s+couple\s+of|couple\s+of)\s+(?P<ago_unit>days?|weeks?|months?|years?)"
    rf"\s+ago"
    rf"|(?P<which>last|past|previous|this|next|coming)\s+"
    rf"(?P<what>weekend|week|month|year|{_WEEKDAY}|{_SEASON}))\b"
    # Chinese, with no word boundaries: a day by name, N units before or after, a week
    # (上周, 下周三, 本周末), a month (上个月), a year or a season of it (去年夏天), the Nth
    # week of the anchor's month (第二周周三). 之前天气 ("the weather before") and 马上月底
    # ("soon, at the month's end") hold 前天 and 上月 without meaning them.
    rf"|(?P<zh_day>大前天|(?<![之以提目])前天|昨天|昨日|昨晚|今天|今日|今晚|今早|大后天|明天|明日"
    rf"|明早|明晚|(?<![之以然最])后天)"
    rf"|(?<![\d.])(?P<zh_n>\d{{1,3}}|[一二两三四五六七八九十]{{1,3}})\s*"
    rf"(?P<zh_unit>天|个?{_ZH_WEEK}|个月|年)\s*(?P<zh_dir>之前|以前|前|之后|以后|后)"
    rf"|(?P<zh_wk>上上个?|下下个?|上个?|下个?|本|这个?){_ZH_WEEK}"
    # 下周一起 is "together next week", 本周天气 "this week's weather": not a day.
    rf"(?:(?P<zh_wk_day>一(?![起些直])|天(?!气)|[二三四五六日1-7])|(?P<zh_wk_end>末)|(?!期))"
    rf"|(?P<zh_month>上上个|下下个|上个|下个|(?<![马剩])[上下]|本|这个)月"
    rf"|(?P<zh_year>前年|去年|今年|明年|后年)(?P<zh_season>春天|夏天|秋天|冬天|春季|夏季|秋季|冬季)?"
    rf"|(?<![月份])第\s*(?P<zh_nth>[一二三四五1-5])\s*(?:周|个星期)"
    rf"(?:\s*{_ZH_WEEK}(?P<zh_nth_day>{_ZH_WEEKDAY}))?",
    re.I,
)
_ZH_DAY_OFFSETS = {"大前": -3, "前": -2, "昨": -1, "今": 0, "明": 1, "后": 2, "大后": 3}
_ZH_WHICH_OFFSETS = {"上上": -2, "上": -1, "本": 0, "这": 0, "下": 1, "下下": 2}
_ZH_YEAR_OFFSETS = {"前年": -2, "去年": -1, "今年": 0, "明年": 1, "后年": 2}
_ZH_SEASONS = {"春": "spring", "夏": "summer", "秋": "autumn", "冬": "winter"}

_NUMBER_VALUES = {w: int(v) for w, v in NUMBER_WORDS.items()} | {"a": 1, "an": 1}


def _count(word: str | None) -> int:
    if word is None:
        return 1
    w = " ".join(word.lower().split())
    if w.isdigit():
        return int(w)
    if "couple" in w:
        return 2
    if "few" in w:
        return 3
    return _NUMBER_VALUES.get(w, 1)


class _Found(NamedTuple):
    start: int
    end: int
    span: DateSpan
    point: bool  # a single day or a month/year as written, which a relation may qualify


def _absolute_dates(text: str, default_year: int | None) -> list[_Found]:
    candidates: list[_Found] = []

    def add(match: re.Match[str], span: DateSpan | None, point: bool = True) -> None:
        if span is not None:
            candidates.append(_Found(match.start(), match.end(), span, point))

    for m in _ISO_RANGE_RE.finditer(text):
        a = _safe_date(int(m[1]), int(m[2]), int(m[3]))
        b = _safe_date(int(m[4]), int(m[5]), int(m[6]))
        add(m, DateSpan(a, b) if a and b and a <= b else None, point=False)
    for m in _ISO_DAY_RE.finditer(text):
        d = _safe_date(int(m[1]), int(m[2]), int(m[3]))
        add(m, DateSpan(d, d) if d else None)
    for m in _ISO_MONTH_RE.finditer(text):
        if 1 <= int(m[2]) <= 12:
            add(m, _month_span(int(m[1]), int(m[2])))
    for m in _SEASON_YEAR_RE.finditer(text):
        add(m, _season_span(int(m[2]), m[1].lower()), point=False)
    for m in _DMY_RE.finditer(text):
        month = month_number(m[2])
        year = int(m[3]) if m[3] else default_year
        if month and year:
            d = _safe_date(year, month, int(m[1]))
            add(m, DateSpan(d, d) if d else None)
    for m in _MDY_RE.finditer(text):
        month = month_number(m[1])
        year = int(m[3]) if m[3] else default_year
        if month and year:
            d = _safe_date(year, month, int(m[2]))
            add(m, DateSpan(d, d) if d else None)
    for m in _MY_RE.finditer(text):
        month = month_number(m[1])
        if month:
            add(m, _month_span(int(m[2]), month))
    for m in _Y_RE.finditer(text):
        add(m, _year_span(int(m[1])))
    if has_han(text):
        candidates += _zh_absolute_dates(text, default_year)
    # Longest match wins; ties go to the earlier pattern (the list order above).
    chosen: list[_Found] = []
    for found in sorted(candidates, key=lambda f: -(f.end - f.start)):
        if all(found.end <= c.start or found.start >= c.end for c in chosen):
            chosen.append(found)
    return sorted(chosen, key=lambda f: f.start)


def _zh_absolute_dates(text: str, default_year: int | None) -> list[_Found]:
    found: list[_Found] = []
    for m in _ZH_YMD_RE.finditer(text):
        year = int(m[1]) if m[1] else default_year
        d = _safe_date(year, int(m[2]), int(m[3])) if year else None
        if d is not None:
            found.append(_Found(m.start(), m.end(), DateSpan(d, d), True))
    for m in _ZH_YM_RE.finditer(text):
        year = int(m[1]) if m[1] else default_year
        if year is None or not 1 <= int(m[2]) <= 12:
            continue
        span = _month_span(year, int(m[2]))
        if m["phase"]:
            found.append(_Found(m.start(), m.end(), _zh_phase(span, m["phase"]), False))
        elif m["nth"]:
            found.append(_Found(m.start(), m.end(), _nth_week(span, m["nth"], m["day"]), False))
        else:
            found.append(_Found(m.start(), m.end(), span, True))
    for m in _ZH_Y_RE.finditer(text):
        found.append(_Found(m.start(), m.end(), _year_span(int(m[1])), True))
    return found


def _apply_relation(match: re.Match[str], span: DateSpan) -> DateSpan | None:
    if match["phase"]:
        phase = " ".join(match["phase"].lower().split())
        first, last = span.start, span.end
        length = (last - first).days + 1
        third = max(1, length // 3)
        if phase in {"early", "beginning of", "start of"}:
            return DateSpan(first, first + timedelta(days=third - 1))
        if phase == "mid":
            return DateSpan(first + timedelta(days=third), last - timedelta(days=third))
        return DateSpan(last - timedelta(days=third - 1), last)
    if match["part"]:
        part, unit = match["part"].lower(), match["punit"].lower()
        if unit == "week":
            if part == "last":
                return DateSpan(span.end - timedelta(days=6), span.end)
            offset = 0 if part == "first" else 7
            return DateSpan(span.start + timedelta(days=offset), span.start + timedelta(offset + 6))
        if part == "last":
            return _weekend_before(span.end + timedelta(days=1))
        weekend = _weekend_after(span.start - timedelta(days=1))
        if part == "second":
            weekend = _weekend_after(weekend.end)
        return weekend
    unit = match["unit"].lower().rstrip("s") if match["unit"] else ""
    rel = " ".join(match["rel"].lower().split())
    n = _count(match["n"])
    anchor = span.start if rel != "after" else span.end
    if unit == "day":
        if rel == "of":
            return span
        if match["n"] and "few" in match["n"].lower():
            return DateSpan(anchor - timedelta(days=6), anchor - timedelta(days=1))
        delta = timedelta(days=n)
        d = anchor - delta if rel != "after" else anchor + delta
        return DateSpan(d, d)
    if unit == "week":
        if rel == "of":
            monday = anchor - timedelta(days=anchor.weekday())
            return DateSpan(monday, monday + timedelta(days=6))
        if rel == "after":
            return DateSpan(anchor + timedelta(days=7 * (n - 1) + 1), anchor + timedelta(7 * n))
        return DateSpan(anchor - timedelta(days=7 * n), anchor - timedelta(days=7 * (n - 1) + 1))
    if unit == "weekend":
        if rel == "of":
            saturday = anchor - timedelta(days=anchor.weekday()) + timedelta(days=5)
            return DateSpan(saturday, saturday + timedelta(days=1))
        weekend = _weekend_after(anchor) if rel == "after" else _weekend_before(anchor)
        for _ in range(n - 1):
            weekend = (
                _weekend_after(weekend.end) if rel == "after" else _weekend_before(weekend.start)
            )
        return weekend
    if unit in _WEEKDAYS:
        weekday = _WEEKDAYS.index(unit)
        if rel == "after":
            d = _weekday_after(anchor, weekday)
        elif rel == "of":
            d = anchor - timedelta(days=anchor.weekday() - weekday)
        else:
            d = _weekday_before(anchor, weekday)
        return DateSpan(d, d)
    return None


def _zh_relative_span(match: re.Match[str], anchor: date) -> DateSpan | None:
    if match["zh_day"]:
        word = match["zh_day"]
        d = anchor + timedelta(days=_ZH_DAY_OFFSETS[word[:2] if word[0] == "大" else word[0]])
        return DateSpan(d, d)
    if match["zh_n"]:
        n = _zh_count(match["zh_n"]) * (-1 if "前" in match["zh_dir"] else 1)
        unit = match["zh_unit"]
        if unit == "天":
            d = anchor + timedelta(days=n)
            return DateSpan(d, d)
        if unit == "个月":
            return _month_span(*_shift_month(anchor.year, anchor.month, n))
        if unit == "年":
            return _year_span(anchor.year + n)
        # weeks, as "two weeks ago" reads them: that day give or take three days
        middle = anchor + timedelta(days=7 * n)
        return DateSpan(middle - timedelta(days=3), middle + timedelta(days=3))
    if match["zh_wk"]:
        which = match["zh_wk"].rstrip("个")
        monday = anchor - timedelta(days=anchor.weekday() - 7 * _ZH_WHICH_OFFSETS[which])
        if match["zh_wk_day"]:
            d = monday + timedelta(days=_zh_weekday(match["zh_wk_day"]))
            return DateSpan(d, d)
        if match["zh_wk_end"]:
            return DateSpan(monday + timedelta(days=5), monday + timedelta(days=6))
        return DateSpan(monday, monday + timedelta(days=6))
    if match["zh_month"]:
        delta = _ZH_WHICH_OFFSETS[match["zh_month"].rstrip("个")]
        return _month_span(*_shift_month(anchor.year, anchor.month, delta))
    if match["zh_year"]:
        year = anchor.year + _ZH_YEAR_OFFSETS[match["zh_year"]]
        if match["zh_season"]:
            return _season_span(year, _ZH_SEASONS[match["zh_season"][0]])
        return _year_span(year)
    month = _month_span(anchor.year, anchor.month)
    return _nth_week(month, match["zh_nth"], match["zh_nth_day"])


def _relative_span(match: re.Match[str], anchor: date) -> DateSpan | None:
    if has_han(match.group()):
        return _zh_relative_span(match, anchor)
    if match["dby"]:
        d = anchor - timedelta(days=2)
        return DateSpan(d, d)
    if match["yday"]:
        d = anchor - timedelta(days=1)
        return DateSpan(d, d)
    if match["today"]:
        return DateSpan(anchor, anchor)
    if match["tmrw"]:
        d = anchor + timedelta(days=1)
        return DateSpan(d, d)
    if match["ago_n"]:
        n = _count(match["ago_n"])
        unit = match["ago_unit"].lower().rstrip("s")
        if unit == "day":
            d = anchor - timedelta(days=n)
            return DateSpan(d, d)
        if unit == "week":
            start = anchor - timedelta(days=7 * n)
            return DateSpan(start - timedelta(days=3), start + timedelta(days=3))
        if unit == "month":
            return _month_span(*_shift_month(anchor.year, anchor.month, -n))
        return _year_span(anchor.year - n)
    which, what = match["which"].lower(), match["what"].lower()
    back = which in {"last", "past", "previous"}
    ahead = which in {"next", "coming"}
    if what == "week":
        if back:
            return DateSpan(anchor - timedelta(days=7), anchor - timedelta(days=1))
        if ahead:
            return DateSpan(anchor + timedelta(days=1), anchor + timedelta(days=7))
        monday = anchor - timedelta(days=anchor.weekday())
        return DateSpan(monday, monday + timedelta(days=6))
    if what == "weekend":
        if back:
            return _weekend_before(anchor)
        if anchor.weekday() >= 5 and not ahead:
            saturday = anchor - timedelta(days=anchor.weekday() - 5)
            return DateSpan(saturday, saturday + timedelta(days=1))
        return _weekend_after(anchor)
    if what == "month":
        delta = -1 if back else (1 if ahead else 0)
        return _month_span(*_shift_month(anchor.year, anchor.month, delta))
    if what == "year":
        return _year_span(anchor.year + (-1 if back else (1 if ahead else 0)))
    if what in _WEEKDAYS:
        weekday = _WEEKDAYS.index(what)
        d = _weekday_before(anchor, weekday) if back else _weekday_after(anchor, weekday)
        if which == "this" and anchor.weekday() <= weekday:
            d = anchor + timedelta(days=weekday - anchor.weekday())
        return DateSpan(d, d)
    # a season: "last summer" is the most recent one that has ended, "this/next" the coming
    if back:
        for year in (anchor.year, anchor.year - 1, anchor.year - 2):
            span = _season_span(year, what)
            if span.end < anchor:
                return span
        return None
    span = _season_span(anchor.year, what)
    if ahead and span.start <= anchor:
        span = _season_span(anchor.year + 1, what)
    return span


def find_dates(text: str, anchor: date | None = None) -> list[tuple[int, int, DateSpan]]:
    """Every date expression of ``text`` as (start, end, span), in text order.

    Absolute dates in the common English and ISO forms, a relation written before one
    ("the week before 9 June 2023", "the Friday before", "two weekends before", "first week
    of"), and, when ``anchor`` is given, expressions relative to it ("yesterday", "last
    week", "three months ago", "last summer"); a day written without a year takes the
    anchor's year.
    """
    found: list[tuple[int, int, DateSpan]] = []
    for item in _absolute_dates(text, anchor.year if anchor else None):
        start, span = item.start, item.span
        relation = _RELATION_RE.search(text[max(0, start - 40) : start])
        if relation is not None and (item.point or relation["phase"] or relation["part"]):
            related = _apply_relation(relation, span)
            if related is not None:
                start, span = max(0, item.start - 40) + relation.start(), related
        found.append((start, item.end, span))
    if anchor is not None:
        taken = [(s, e) for s, e, _ in found]
        for m in RELATIVE_RE.finditer(text):
            if any(s < m.end() and m.start() < e for s, e in taken):
                continue
            relative = _relative_span(m, anchor)
            if relative is not None:
                found.append((m.start(), m.end(), relative))
    return sorted(found, key=lambda item: item[0])


def render_span(span: DateSpan) -> str:
    """ISO: a day, a whole month, a whole year, else ``first..last``."""
    if span.start == span.end:
        return span.start.isoformat()
    if span == _month_span(span.start.year, span.start.month):
        return f"{span.start.year:04d}-{span.start.month:02d}"
    if span == _year_span(span.start.year):
        return f"{span.start.year:04d}"
    return f"{span.start.isoformat()}..{span.end.isoformat()}"


def resolve_relative_dates(text: str, anchor: date, *, bracket: bool = False) -> str:
    """Relative date expressions replaced by ISO dates (or followed by them in brackets)."""
    pieces: list[str] = []
    cursor = 0
    for m in RELATIVE_RE.finditer(text):
        span = _relative_span(m, anchor)
        if span is None or text.startswith(" [", m.end()):
            continue  # unknown, or resolved already by an earlier pass
        pieces.append(text[cursor : m.start()])
        rendered = render_span(span)
        # "ten years ago" (3天前) says how long ago as well as when: keep the words too.
        keep_words = bracket or bool(m["ago_n"]) or bool(m["zh_n"])
        pieces.append(f"{m.group(0)} [{rendered}]" if keep_words else rendered)
        cursor = m.end()
    pieces.append(text[cursor:])
    return "".join(pieces)
