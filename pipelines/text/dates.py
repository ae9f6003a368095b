"""Dates in free text: absolute ones in the usual written forms, and relative ones
("yesterday", "last Friday", "two months ago", "last summer") resolved against an anchor date,
rendered as ISO days, months or ranges. Used by the compression protocol to keep every date
recoverable after pronouns and relative phrases lose their anchor.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta
from typing import NamedTuple

from pipelines.text.words import NUMBER_WORDS


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
    rf"(?P<what>weekend|week|month|year|{_WEEKDAY}|{_SEASON}))\b",
    re.I,
)

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
    # Longest match wins; ties go to the earlier pattern (the list order above).
    chosen: list[_Found] = []
    for found in sorted(candidates, key=lambda f: -(f.end - f.start)):
        if all(found.end <= c.start or found.start >= c.end for c in chosen):
            chosen.append(found)
    return sorted(chosen, key=lambda f: f.start)


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


def _relative_span(match: re.Match[str], anchor: date) -> DateSpan | None:
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
        # "ten years ago" says how long ago as well as when: keep the words too.
        keep_words = bracket or bool(m["ago_n"])
        pieces.append(f"{m.group(0)} [{rendered}]" if keep_words else rendered)
        cursor = m.end()
    pieces.append(text[cursor:])
    return "".join(pieces)
