"""Hierarchical compression: the level policy and the two-stage annotate/compress protocol.

Levels
------
L0 raw (about a day) → L1 fine summary (1–7 days, about 10:1) → L2 phase summary (1–4 weeks,
about 50:1) → L3 task summary at task completion (about 200:1) → L4 semantic knowledge (made
by :mod:`pipelines.consolidate`, not here). The ratio is always against the raw words the
summary covers. The level a memory should sit at follows its age *and* its reads: age is
divided by ``1 + ln(1 + access_count)`` (the factor the forgetting curve uses), so an
often-retrieved memory stays fine (:func:`target_level`).

Compression never destroys anything: a summary is a new row (:class:`SummaryDraft`) with
parent pointers and a version, and its id is derived from them, so a replay writes the same
row and a rollback (``pipelines.quality``) only retires the summary. A retry after a rollback
is the next version and aims at half the previous ratio (:meth:`LevelPolicy.ratio`). Final
eviction is the decay model's business (``pipelines.decay``) and is logged there.

The protocol
------------
Stage 1, **annotate**: every segment (a sentence, a line of a summary, or a block of log or
code) gets a kind: ``decision_rationale``, ``outcome``, ``user_preference``, ``status_change``,
``error_root_cause``, ``debug_output``, or ``chatter`` (greetings, thanks and reactions that
carry nothing; a kind the issue does not list, but a compressor has to name what it drops),
plus its entities, identifiers, and a copy with pronouns and relative dates resolved.

Stage 2, **compress**: only outcomes and debug output are compressed; decision rationales,
preferences, status changes and errors with their root cause are kept verbatim (relative
dates get an absolute date in brackets, nothing is reworded); chatter goes. Every identifier
(numbers, paths, names) survives: one that only a dropped segment held is listed at the end.

An LLM adapter answers both stages as JSON validated against :class:`AnnotationBatch` and
:class:`SummaryOutput` (temperature 0.3); a malformed answer is retried once, then the offline
rules below (:class:`OfflineCompressor`) answer, implementing the same protocol:

* pronouns: first person is attributed by the line's ``Speaker:`` prefix; ``you``/``your``
  become the other party of a two-party conversation; ``he``/``she`` become the one person
  named in the two previous segments, and stay as they are when that is not unique;
* relative dates (``yesterday``, ``last week``, ``last Friday``, ``two months ago``,
  ``next month``, ``last summer`` …) are resolved against the memory's timestamp and written
  as ISO dates or ranges (``2023-05-07``, ``2023-05-01..2023-05-07``, ``2023-05``);
* outcomes become telegraphic: function words, fillers and interjections go, negations,
  content words, numbers and names stay, in their order;
* debug output becomes its first line, its error lines and its identifiers;
* over budget (raw words / target ratio), clauses of outcomes are dropped, lowest value per
  word first: value counts words no other clause says and identifiers, and is halved for
  sentences aimed at the other party ("your painting is lovely") or wishes ("hope it goes
  well"), which in a dialogue mostly react rather than inform. Verbatim segments are never
  dropped, so a summary can stay above its budget; the draft records the words it has.

What the offline rules reach is measured by ``memharness bench compression``: on chat data,
dropping and shortening sentences cannot reach 10:1 without losing facts; the quality check
(``pipelines.quality``) then rolls back and retries gentler.
"""

from __future__ import annotations

import calendar
import math
import re
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipelines.ports import MalformedLLMOutput
from pipelines.records import ID_NAMESPACE, EpisodicMemory, Level
from pipelines.summarize import split_sentences

DAY_S = 86_400.0

# -- level policy ----------------------------------------------------------------------------


class LevelPolicy(BaseModel):
    """Age bands of the levels and their target ratios (issue 4's defaults)."""

    model_config = ConfigDict(frozen=True)

    l0_max_age_s: float = Field(1 * DAY_S, gt=0)
    l1_max_age_s: float = Field(7 * DAY_S, gt=0)
    ratio_l1: float = Field(10.0, ge=1)
    ratio_l2: float = Field(50.0, ge=1)
    ratio_l3: float = Field(200.0, ge=1)
    # One L1 summary covers at most a day of one session and this many raw words, so an L1
    # row stays a readable paragraph (~200 words at 10:1).
    l1_group_max_words: int = Field(2000, ge=1)
    l1_group_span_s: float = Field(1 * DAY_S, gt=0)
    # One L2 summary covers one phase of a task: at most a week of L1 rows.
    l2_group_span_s: float = Field(7 * DAY_S, gt=0)

    def ratio(self, level: Level, version: int = 1) -> float:
        """The target ratio of a level; each retry after a rollback halves it (never < 1)."""
        if level == Level.L1:
            ratio = self.ratio_l1
        elif level == Level.L2:
            ratio = self.ratio_l2
        elif level == Level.L3:
            ratio = self.ratio_l3
        else:
            raise ValueError(f"no compression ratio for L{int(level)}")
        halvings = max(1, version) - 1
        return max(1.0, float(ratio) / float(2**halvings))


DEFAULT_LEVELS = LevelPolicy()


def effective_age_s(age_s: float, access_count: int) -> float:
    """Age slowed by reads, with the forgetting curve's access factor."""
    if access_count < 0:
        raise ValueError(f"access_count must be >= 0, got {access_count}")
    return max(0.0, age_s) / (1.0 + math.log1p(access_count))


def target_level(age_s: float, access_count: int, policy: LevelPolicy = DEFAULT_LEVELS) -> Level:
    """The finest level allowed for a memory of this age and reads; L3 only at task end."""
    age = effective_age_s(age_s, access_count)
    if age < policy.l0_max_age_s:
        return Level.L0
    if age < policy.l1_max_age_s:
        return Level.L1
    return Level.L2


# -- text normalisation (shared with pipelines.quality) --------------------------------------


def words(text: str) -> frozenset[str]:
    """A word list written as one string, the way stopword lists read best."""
    return frozenset(text.split())


STOPWORDS: frozenset[str] = words(
    """a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have
    haven't having he he'd he'll he's her here here's hers herself him himself his how how's
    i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
    myself no nor not of off on once only or other ought our ours ourselves out over own same
    shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this
    those through to too under until up very was wasn't we we'd we'll we're we've were
    weren't what what's when when's where where's which while who who's whom why why's will
    with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
    just also yes yeah yep likely since"""
)

NEGATIONS: frozenset[str] = words(
    "no not nor never none nobody nothing neither without don't doesn't didn't isn't aren't "
    "wasn't weren't won't wouldn't can't cannot couldn't shouldn't haven't hasn't hadn't "
    "mustn't"
)

# Words a telegraphic summary drops on top of the stopwords: interjections, intensifiers,
# hedges and discourse markers. They colour a sentence but state no fact.
FILLERS: frozenset[str] = words(
    """hey hi hello oh ooh wow whoa yay haha hahaha lol omg hmm um uh ah aw aww yeah yep yup
    okay ok well anyway anyways btw really truly totally super pretty quite kinda sorta
    actually basically literally definitely absolutely seriously honestly certainly surely
    simply especially particularly extremely incredibly awfully bit thing things stuff
    something anything everything"""
)

# Reactions and politeness: a sentence made only of these (plus stopwords) is chatter.
REACTIONS: frozenset[str] = words(
    """thanks thank thx appreciate appreciated welcome congrats congratulations glad happy
    sorry great good nice cool awesome amazing wonderful fantastic fabulous incredible
    inspiring inspired lovely sweet beautiful brilliant excellent perfect impressive proud
    excited exciting fun interesting glad hear heard sound sounds seem seems look looks
    feel feels feeling felt mean means meant sure agree agreed true totally right love
    loved care take hope hoping wish wishing luck chat talk talking catch later soon bye
    see seeing know knew glad cheers keep going doing done stay same"""
)

_SMALL_NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
_NUMBER_WORDS: dict[str, str] = {
    word: str(value) for value, word in enumerate(_SMALL_NUMBERS.split(" "))
}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70"})
_NUMBER_WORDS.update({"eighty": "80", "ninety": "90", "hundred": "100", "dozen": "12"})

_TOKEN_RE = re.compile(r"[^\W_](?:[\w'’]*[^\W_]|)(?:[./:_-][^\W_][\w'’]*)*", re.UNICODE)
_ORDINAL_RE = re.compile(r"^(\d+)(?:st|nd|rd|th)$")


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace("’", "'")


def raw_tokens(text: str) -> list[str]:
    """Words, numbers and identifiers (``auth/login.py``, ``ATL-12``, ``v1.2``), folded."""
    return _TOKEN_RE.findall(fold(text))


def stem(token: str) -> str:
    """A light, symmetric stemmer: plurals, -ing, -ed, a final e; good enough to compare."""
    if token.endswith("'s"):
        token = token[:-2]
    if len(token) <= 3 or not token.isalpha():
        return token
    for suffix, replacement in (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh")):
        if token.endswith(suffix):
            token = token[: -len(suffix)] + replacement
            break
    else:
        if token.endswith("s") and not token.endswith(("ss", "us", "is")):
            token = token[:-1]
    for suffix in ("ing", "ed"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 3:
            token = token[: -len(suffix)]
            if len(token) >= 3 and token[-1] == token[-2] and token[-1] not in "lsz":
                token = token[:-1]
            break
    if len(token) >= 4 and token.endswith("e"):
        token = token[:-1]
    return token


def normalise_token(token: str) -> str:
    """Number words and ordinals become digits; words are stemmed."""
    if token in _NUMBER_WORDS:
        return _NUMBER_WORDS[token]
    match = _ORDINAL_RE.match(token)
    if match:
        return match.group(1)
    return stem(token)


def content_tokens(text: str) -> list[str]:
    """Normalised tokens of ``text`` minus stopwords, in order."""
    return [normalise_token(t) for t in raw_tokens(text) if t not in STOPWORDS]


def word_count(text: str) -> int:
    return len(text.split())


def is_number(token: str) -> bool:
    return token.replace(".", "", 1).replace(",", "").isdigit()


# -- dates -----------------------------------------------------------------------------------


class DateSpan(NamedTuple):
    """A closed interval of days a date expression stands for."""

    start: date
    end: date

    def within(self, other: DateSpan) -> bool:
        return other.start <= self.start and self.end <= other.end


_MONTH_NAMES = [calendar.month_name[i].lower() for i in range(1, 13)]
_MONTH_ABBREVIATIONS = {name[:3]: i + 1 for i, name in enumerate(_MONTH_NAMES)}
_MONTH_ABBREVIATIONS["sept"] = 9
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
_RELATIVE_RE = re.compile(
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

_NUMBER_VALUES = {w: int(v) for w, v in _NUMBER_WORDS.items()} | {"a": 1, "an": 1}


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
        for m in _RELATIVE_RE.finditer(text):
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
    for m in _RELATIVE_RE.finditer(text):
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


# -- segments and the schemas of the protocol ------------------------------------------------


class SegmentKind(StrEnum):
    DECISION_RATIONALE = "decision_rationale"
    OUTCOME = "outcome"
    USER_PREFERENCE = "user_preference"
    STATUS_CHANGE = "status_change"
    ERROR_ROOT_CAUSE = "error_root_cause"
    DEBUG_OUTPUT = "debug_output"
    CHATTER = "chatter"


# Kept word for word by stage 2.
VERBATIM_KINDS: frozenset[SegmentKind] = frozenset(
    {
        SegmentKind.DECISION_RATIONALE,
        SegmentKind.USER_PREFERENCE,
        SegmentKind.STATUS_CHANGE,
        SegmentKind.ERROR_ROOT_CAUSE,
    }
)


class SourceMemory(BaseModel):
    """What compression needs of a memory or of a lower-level summary."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    task_id: str
    session_id: str
    timestamp: datetime
    content: str
    level: Level = Level.L0
    # Raw words this row stands for: its own for L0, the covered originals' for a summary.
    source_words: int = Field(ge=0)
    importance: float = Field(0.5, ge=0.0, le=1.0)

    @classmethod
    def from_memory(cls, memory: EpisodicMemory) -> SourceMemory:
        covered = memory.metadata.get("source_words")
        return cls(
            id=memory.id,
            tenant_id=memory.tenant_id,
            task_id=memory.task_id,
            session_id=memory.session_id,
            timestamp=memory.timestamp,
            content=memory.content,
            level=memory.level,
            source_words=int(covered)
            if isinstance(covered, int) and covered >= 0
            else word_count(memory.content),
            importance=memory.importance,
        )


class Segment(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int = Field(ge=0)
    memory_id: uuid.UUID
    speaker: str | None = None
    addressee: str | None = None
    timestamp: datetime
    text: str


class SegmentAnnotation(BaseModel):
    """Stage 1's answer for one segment: the schema the LLM's JSON is validated against."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    kind: SegmentKind
    resolved: str = Field(
        description="The segment with pronouns resolved to the entities they name and "
        "relative dates made absolute; no other change."
    )
    entities: list[str] = Field(default_factory=list, max_length=64)
    identifiers: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Numbers, paths, names, ids exactly as written in the segment.",
    )
    rationale: str | None = Field(None, description="For a decision: its reason, verbatim.")
    root_cause: str | None = Field(None, description="For an error: its root cause, verbatim.")


class AnnotationBatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    segments: list[SegmentAnnotation]


class SummaryOutput(BaseModel):
    """Stage 2's answer: the schema the LLM's JSON is validated against."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1)
    kept_verbatim: list[int] = Field(default_factory=list)
    dropped: list[int] = Field(default_factory=list)


class AnnotateRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    segments: tuple[Segment, ...]


class CompressRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    level: Level
    target_words: int = Field(ge=1)
    segments: tuple[Segment, ...]
    annotations: tuple[SegmentAnnotation, ...]


def annotation_json_schema() -> dict[str, object]:
    return AnnotationBatch.model_json_schema()


def summary_json_schema() -> dict[str, object]:
    return SummaryOutput.model_json_schema()


M = TypeVar("M", bound=BaseModel)


def parse_json(raw: str, model: type[M]) -> M:
    """An LLM's JSON answer as ``model``; any schema error is MalformedLLMOutput."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise MalformedLLMOutput(
            f"{model.__name__}: {exc.error_count()} schema error(s): {exc.errors()[0]['msg']}"
        ) from None


def parse_annotations(raw: str, request: AnnotateRequest) -> AnnotationBatch:
    """Validate an LLM's stage-1 JSON; raises MalformedLLMOutput (the adapter retries)."""
    batch = parse_json(raw, AnnotationBatch)
    check_annotations(batch, request)
    return batch


def parse_summary(raw: str, request: CompressRequest) -> SummaryOutput:
    """Validate an LLM's stage-2 JSON and the protocol's promises; raises MalformedLLMOutput."""
    output = parse_json(raw, SummaryOutput)
    return check_summary(output, request)


def check_annotations(batch: AnnotationBatch, request: AnnotateRequest) -> None:
    expected = [s.index for s in request.segments]
    got = [a.index for a in batch.segments]
    if got != expected:
        raise MalformedLLMOutput(
            f"annotations cover segments {got[:8]}…, expected {expected[:8]}… in order"
        )


# Joins the segments of one turn in an offline summary; verbatim text rarely holds it, so the
# next level can cut a summary back into its segments.
SEGMENT_GLUE = " | "

_BRACKETED_RE = re.compile(r" \[[^\]\n]*\]")


def _norm_ws(text: str) -> str:
    return " ".join(fold(text).split())


def check_summary(output: SummaryOutput, request: CompressRequest) -> SummaryOutput:
    """Every verbatim segment must be in the text word for word (whitespace and case aside).

    Identifiers that went missing are listed at the end instead of failing the answer:
    losing one is common and the repair is exact.
    """
    # Bracketed insertions (a resolved date after "yesterday") are not rewording.
    text = _norm_ws(_BRACKETED_RE.sub("", output.text))
    segments = {s.index: s for s in request.segments}
    for annotation in request.annotations:
        if annotation.kind in VERBATIM_KINDS:
            original = _norm_ws(segments[annotation.index].text)
            if original not in text:
                raise MalformedLLMOutput(
                    f"{annotation.kind.value} segment {annotation.index} is not verbatim in "
                    "the summary"
                )
    missing = missing_identifiers(output.text, request.annotations)
    if missing:
        return output.model_copy(update={"text": f"{output.text}\nids: {', '.join(missing)}"})
    return output


def missing_identifiers(text: str, annotations: Iterable[SegmentAnnotation]) -> list[str]:
    present = set(raw_tokens(text)) | {normalise_token(t) for t in raw_tokens(text)}
    missing: list[str] = []
    seen: set[str] = set()
    for annotation in annotations:
        if annotation.kind is SegmentKind.CHATTER:
            continue
        for identifier in annotation.identifiers:
            key = fold(identifier)
            if key in seen:
                continue
            seen.add(key)
            parts = raw_tokens(identifier)
            if parts and not all(p in present or normalise_token(p) in present for p in parts):
                missing.append(identifier)
    return missing


# -- the port the protocol needs ---------------------------------------------------------


@runtime_checkable
class CompressionLLM(Protocol):
    """What the two-stage protocol asks of an LLM adapter (the lead adds it to ``LLM``).

    Both methods raise ``MalformedLLMOutput`` when the answer does not fit the schema (the
    adapter validates with :func:`parse_annotations` / :func:`parse_summary`) and
    ``TransientLLMError`` when the call itself failed.
    """

    @property
    def name(self) -> str: ...

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch: ...

    def compress_segments(self, request: CompressRequest) -> SummaryOutput: ...


# -- the offline rules -------------------------------------------------------------------

_SPEAKER_RE = re.compile(
    r"^\s*([A-Z][\w.'’-]{0,24}(?:\s[A-Z][\w.'’-]{0,24}){0,3}|user|assistant|agent|system|"
    r"human|ai)\s*:\s+(?=\S)"
)
_FENCE_RE = re.compile(r"```.*?(?:```|$)", re.S)
_LOG_LINE_RE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[?(?:DEBUG|TRACE|INFO|WARN(?:ING)?|ERROR|"
    r"FATAL|CRITICAL)\]?[\s:]|Traceback \(most recent call last\)|File \".*\", line \d+|"
    r"at [\w.$<>]+\(.*\)|\$ \S|>>> |[\w.]+(?:Error|Exception):|E\s{2,}|\d+ (?:passed|failed)"
    r"|=+ .* =+$|debug(?: output)?:)",
    re.I,
)
_ERROR_LINE_RE = re.compile(r"(?:error|exception|fail|fatal|panic|denied|refused|timeout)", re.I)

_DECISION_RE = re.compile(
    r"\b(?:decid(?:e|ed|ing)|decision|we(?:'ll|\s+will|\s+shall)\s+(?:use|go\s+with|keep|"
    r"switch|adopt|drop)|going\s+with|go\s+with|chose|choose|chosen|opt(?:ed)?\s+(?:for|to)|"
    r"settled\s+on|agreed\s+(?:to|on)|switch(?:ed|ing)?\s+(?:to|from)|picked\s+(?!up\b)|went\s+with|"
    r"instead\s+of|rather\s+than)\b",
    re.I,
)
_RATIONALE_RE = re.compile(
    r"\b(?:because|since|so\s+that|as\s+it|given\s+that|due\s+to|in\s+order\s+to|to\s+avoid|"
    r"which\s+means|the\s+reason)\b",
    re.I,
)
_PREFERENCE_RE = re.compile(
    r"\b(?:prefer(?:s|red|ence)?|i(?:'d|\s+would)\s+rather|i\s+(?:really\s+)?(?:like|love|"
    r"enjoy|hate|dislike|adore)|(?:don't|do\s+not|never)\s+(?:like|want)|can't\s+stand|"
    r"(?:my|our)\s+fav(?:ou)?rite|please\s+(?:always|never|don't|do\s+not|keep|use|avoid)|"
    r"always\s+(?:use|want|keep)|i\s+want|i'd\s+like)\b",
    re.I,
)
_STATUS_RE = re.compile(
    r"\b(?:is\s+now|are\s+now|moved\s+to|(?:un)?blocked|completed|finished|shipped|merged|"
    r"deployed|released|in\s+progress|on\s+hold|delayed|slipp(?:ed|ing)|closed|reopened|"
    r"status|got\s+(?:a\s+|the\s+)?(?:new\s+)?job|graduated|promoted|retired|quit|launched|"
    r"signed\s+up|started\s+(?:a|my|the|working|to)|(?:is|are|was)\s+done)\b",
    re.I,
)
_ERROR_RE = re.compile(
    r"\b(?:error|exception|traceback|stack\s*trace|crash(?:ed|es)?|bug|regression|segfault|"
    r"panic|oom|out\s+of\s+memory|timed?\s*out|deadlock|race\s+condition|"
    r"(?:http|status)\s*[45]\d\d|[45]\d\d\s+(?:error|response))\b",
    re.I,
)
_CAUSE_RE = re.compile(
    r"\b(?:because|caused\s+by|root\s+cause|due\s+to|turned\s+out|the\s+reason|was\s+caused|"
    r"came\s+from|triggered\s+by)\b",
    re.I,
)
_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "i'm", "i've", "i'd", "i'll"})
_SECOND_PERSON = {"you": "", "your": "'s", "yours": "'s", "yourself": ""}
_THIRD_PERSON = {"he": "", "she": "", "him": "", "her": "", "his": "'s", "hers": "'s"}
_IDENTIFIER_SHAPES = re.compile(
    r"^(?:\d[\d.,:/-]*\w*|[\w.-]*[/\\][\w./\\-]+|[A-Za-z]+-\d+|#\d+|\w+_\w+|[A-Za-z]+\d\w*|"
    r"[a-z]+[A-Z]\w*|[A-Z]{2,}\w*|\w+\.\w{1,5}|v\d[\w.]*|`[^`]+`)$"
)
_WORD_SPAN_RE = re.compile(r"`[^`]+`|\S+")
_EDGE_PUNCT = "\"'“”‘’()[]{}<>,.;:!?…*"


def split_speaker(content: str) -> tuple[str | None, str]:
    match = _SPEAKER_RE.match(content)
    if match and len(match.group(1).split()) <= 4:
        return match.group(1).strip(), content[match.end() :]
    return None, content


def _is_capitalised_name(word: str) -> bool:
    return len(word) > 1 and word[0].isupper() and not word.isupper() and word.isalpha()


def find_identifiers(text: str, exclude: Iterable[str] = (), *, names: bool = True) -> list[str]:
    """Numbers, paths, ids, code names, and capitalised names not at a sentence start.

    ``names=False`` for logs and code, where capitals ("File", "Traceback") are not names.
    """
    skip = {fold(e) for e in exclude}
    found: list[str] = []
    seen: set[str] = set()
    sentence_start = True
    for raw in _WORD_SPAN_RE.findall(text):
        word = raw.strip(_EDGE_PUNCT) if not raw.startswith("`") else raw
        word = re.sub(r"['’]s$", "", word)
        ends_sentence = raw.rstrip("\"')”’").endswith((".", "!", "?"))
        if word and fold(word) not in skip:
            is_id = bool(_IDENTIFIER_SHAPES.match(word)) and any(c.isalnum() for c in word)
            is_name = (
                names
                and not sentence_start
                and _is_capitalised_name(word)
                and fold(word) not in STOPWORDS
                and word not in {"I", "I'm", "I've", "I'd", "I'll"}
            )
            if (is_id or is_name) and fold(word) not in seen:
                seen.add(fold(word))
                found.append(word)
        sentence_start = ends_sentence
    return found


def _informative(tokens: Iterable[str], names: set[str]) -> list[str]:
    return [
        t
        for t in tokens
        if t not in STOPWORDS and t not in FILLERS and t not in REACTIONS and t not in names
    ]


def _looks_like_debug(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    logish = sum(1 for line in lines if _LOG_LINE_RE.match(line))
    return logish >= max(1, (len(lines) + 1) // 2)


def segment_sources(sources: Sequence[SourceMemory]) -> tuple[Segment, ...]:
    """Cut memories into segments: code/log blocks whole, otherwise lines and sentences.

    The addressee of a line is the other party when the rows have exactly two speakers.
    """
    speakers: list[str] = []
    split: list[tuple[SourceMemory, str | None, str]] = []
    for source in sources:
        for line in source.content.splitlines() or [source.content]:
            if not line.strip():
                continue
            speaker, body = split_speaker(line)
            if speaker and speaker not in speakers:
                speakers.append(speaker)
            split.append((source, speaker, body))
    # Join lines back per (memory, speaker) run so multi-line logs stay together.
    runs: list[tuple[SourceMemory, str | None, list[str]]] = []
    for source, speaker, body in split:
        if runs and runs[-1][0].id == source.id and (speaker is None or speaker == runs[-1][1]):
            runs[-1][2].append(body)
        else:
            runs.append((source, speaker, [body]))
    segments: list[Segment] = []
    for source, speaker, bodies in runs:
        addressee = None
        if speaker and len(speakers) == 2:
            addressee = speakers[1] if speaker == speakers[0] else speakers[0]
        for piece in _pieces("\n".join(bodies), summary=source.level > Level.L0):
            segments.append(
                Segment(
                    index=len(segments),
                    memory_id=source.id,
                    speaker=speaker,
                    addressee=addressee,
                    timestamp=source.timestamp,
                    text=piece,
                )
            )
    return tuple(segments)


def _pieces(text: str, *, summary: bool = False) -> list[str]:
    pieces: list[str] = []
    cursor = 0
    for fence in _FENCE_RE.finditer(text):
        pieces.extend(_prose_pieces(text[cursor : fence.start()], summary=summary))
        pieces.append(fence.group(0).strip())
        cursor = fence.end()
    pieces.extend(_prose_pieces(text[cursor:], summary=summary))
    return [p for p in pieces if p.strip()]


def _prose_pieces(text: str, *, summary: bool) -> list[str]:
    """Sentences; in a summary also the parts the offline layout joined with " | "."""
    if not text.strip():
        return []
    if _looks_like_debug(text):
        return [text.strip()]
    pieces: list[str] = []
    for sentence in split_sentences(text):
        if summary:
            pieces.extend(part.strip() for part in sentence.split(SEGMENT_GLUE) if part.strip())
        else:
            pieces.append(sentence.strip())
    return pieces


class OfflineCompressor:
    """The protocol by rules: deterministic, no network; also the fallback of the LLM."""

    @property
    def name(self) -> str:
        return "offline"

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch:
        recent_names: list[list[str]] = []
        annotations: list[SegmentAnnotation] = []
        for segment in request.segments:
            annotation, names = annotate_segment(segment, recent_names[-2:])
            annotations.append(annotation)
            recent_names.append(names)
        return AnnotationBatch(segments=annotations)

    def compress_segments(self, request: CompressRequest) -> SummaryOutput:
        return compress_offline(request)


def annotate_segment(
    segment: Segment, recent_names: Sequence[Sequence[str]] = ()
) -> tuple[SegmentAnnotation, list[str]]:
    """Stage 1 for one segment; also returns the names it mentions (for the next segments)."""
    text = segment.text
    party = {p for p in (segment.speaker, segment.addressee) if p}
    identifiers = find_identifiers(text, exclude=party, names=not _looks_like_debug(text))
    names = [w for w in identifiers if _is_capitalised_name(w)]
    entities = sorted(set(names) | ({segment.speaker} if segment.speaker else set()))
    kind, rationale, root_cause = classify_segment(text, party)
    anchor = segment.timestamp.date()
    candidates = sorted(
        {n for group in recent_names for n in group} - party - set(names),
    )
    resolved = resolve_references(
        text,
        addressee=segment.addressee,
        third_person=candidates[0] if len(candidates) == 1 else None,
    )
    resolved = resolve_relative_dates(resolved, anchor)
    return (
        SegmentAnnotation(
            index=segment.index,
            kind=kind,
            resolved=resolved,
            entities=entities,
            identifiers=identifiers,
            rationale=rationale,
            root_cause=root_cause,
        ),
        names,
    )


def classify_segment(
    text: str, party: Iterable[str] = ()
) -> tuple[SegmentKind, str | None, str | None]:
    """The kind of a segment by cue words, with the rationale or root cause when there is one."""
    if _looks_like_debug(text) or text.lstrip().startswith("```"):
        return SegmentKind.DEBUG_OUTPUT, None, None
    names = {fold(p) for p in party}
    tokens = raw_tokens(text)
    informative = _informative(tokens, names)
    has_ids = bool(find_identifiers(text, exclude=party))
    error = _ERROR_RE.search(text)
    cause = _CAUSE_RE.search(text)
    if error and (cause or has_ids):
        root = text[cause.end() :].strip(" ,.:;") if cause else None
        return SegmentKind.ERROR_ROOT_CAUSE, None, root or None
    if _DECISION_RE.search(text) and informative:
        reason = _RATIONALE_RE.search(text)
        rationale = text[reason.start() :].strip(" ,.;") if reason else None
        return SegmentKind.DECISION_RATIONALE, rationale or None, None
    if len(informative) < 2 and not has_ids and not _mentions_date(text):
        return SegmentKind.CHATTER, None, None
    if text.rstrip().endswith("?") and not has_ids:
        return SegmentKind.CHATTER, None, None
    if _PREFERENCE_RE.search(text):
        return SegmentKind.USER_PREFERENCE, None, None
    if _STATUS_RE.search(text):
        return SegmentKind.STATUS_CHANGE, None, None
    return SegmentKind.OUTCOME, None, None


def _mentions_date(text: str) -> bool:
    return bool(_RELATIVE_RE.search(text)) or bool(find_dates(text))


def resolve_references(text: str, *, addressee: str | None, third_person: str | None) -> str:
    """Second person to the addressee, he/she to the one person named just before."""

    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        key = word.lower()
        if addressee and key in _SECOND_PERSON:
            return addressee + _SECOND_PERSON[key]
        if third_person and key in _THIRD_PERSON:
            return third_person + _THIRD_PERSON[key]
        return word

    if not addressee and not third_person:
        return text
    return re.sub(
        r"\b(?:you|your|yours|yourself|he|she|him|her|his|hers)\b", swap, text, flags=re.I
    )


def telegraphic(text: str, speaker: str | None = None) -> str:
    """Content words, negations, numbers, dates and identifiers, in order; the rest goes."""
    kept: list[str] = []
    for raw in _WORD_SPAN_RE.findall(text):
        word = raw.strip(_EDGE_PUNCT) if not raw.startswith("`") else raw
        if not word:
            continue
        key = fold(word)
        bare = key.strip("'")
        if bare in NEGATIONS:
            kept.append("not" if bare not in {"no", "never", "nothing", "none"} else bare)
            continue
        if speaker and key in {fold(speaker), fold(speaker) + "'s"}:
            continue  # the line's "Speaker:" already says who
        if bare in STOPWORDS or bare in FILLERS or bare in _FIRST_PERSON:
            continue
        kept.append(word)
    return " ".join(kept)


def _compress_debug(text: str) -> str:
    lines = [line.strip() for line in text.strip().strip("`").splitlines() if line.strip()]
    if not lines:
        return ""
    keep = [lines[0]]
    keep += [line for line in lines[1:] if _ERROR_LINE_RE.search(line)][:3]
    summary = " / ".join(dict.fromkeys(keep))
    ids = [i for i in find_identifiers(text, names=False) if i not in summary][:12]
    extra = f" [{', '.join(ids)}]" if ids else ""
    return f"debug output ({len(lines)} lines): {summary}{extra}"


class _Unit(NamedTuple):
    """The smallest piece stage 2 keeps or drops: a clause of an outcome, else a segment."""

    segment: Segment
    annotation: SegmentAnnotation
    clause: int
    text: str


_CLAUSE_SPLIT_RE = re.compile(r"\s*(?:[,;:](?=\s)|\s[-–—]+\s|\s+(?=but\b|so\b|which\b))\s*")


def _render_units(
    segment: Segment, annotation: SegmentAnnotation, *, annotate_only: bool
) -> list[_Unit]:
    kind = annotation.kind
    if kind is SegmentKind.CHATTER:
        return []
    if kind in VERBATIM_KINDS:
        text = resolve_relative_dates(segment.text, segment.timestamp.date(), bracket=True)
        return [_Unit(segment, annotation, 0, text)]
    if annotate_only:
        return [_Unit(segment, annotation, 0, annotation.resolved)]
    if kind is SegmentKind.DEBUG_OUTPUT:
        return [_Unit(segment, annotation, 0, _compress_debug(segment.text))]
    units: list[_Unit] = []
    for clause in _CLAUSE_SPLIT_RE.split(annotation.resolved):
        text = telegraphic(clause, segment.speaker)
        if text:
            units.append(_Unit(segment, annotation, len(units), text))
    return units


def compress_offline(request: CompressRequest, *, annotate_only: bool = False) -> SummaryOutput:
    """Stage 2 by rules (or, ``annotate_only``, stage 1 rendered: chatter dropped, no budget)."""
    by_index = {a.index: a for a in request.annotations}
    units: list[_Unit] = []
    for segment in request.segments:
        units.extend(_render_units(segment, by_index[segment.index], annotate_only=annotate_only))
    dropped_units: set[tuple[int, int]] = set()
    if not annotate_only:
        dropped_units = _drop_for_budget(units, request.target_words)
    kept = [u for u in units if (u.segment.index, u.clause) not in dropped_units]
    text = _layout(kept)
    orphan_ids = missing_identifiers(text, (u.annotation for u in units))
    if orphan_ids:
        text = f"{text}\nids: {', '.join(orphan_ids)}" if text else f"ids: {', '.join(orphan_ids)}"
    if not text.strip():
        text = "(nothing to keep)"
    kept_segments = {u.segment.index for u in kept}
    return SummaryOutput(
        text=text,
        kept_verbatim=sorted(
            {u.segment.index for u in kept if u.annotation.kind in VERBATIM_KINDS}
        ),
        dropped=[s.index for s in request.segments if s.index not in kept_segments],
    )


def _drop_for_budget(units: Sequence[_Unit], target_words: int) -> set[tuple[int, int]]:
    """Drop compressible units, the least salient per word first, until the text fits."""
    total = sum(word_count(u.text) for u in units)
    if total <= target_words:
        return set()
    counts: dict[str, int] = {}
    for unit in units:
        for token in set(content_tokens(unit.text)):
            counts[token] = counts.get(token, 0) + 1
    scored: list[tuple[float, int, int, int]] = []
    for unit in units:
        if unit.annotation.kind in VERBATIM_KINDS:
            continue
        tokens = set(content_tokens(unit.text))
        # Words nobody else says weigh 1, shared ones less; identifiers weigh double.
        novelty = sum(1.0 / counts[t] for t in tokens)
        novelty += sum(1.0 for i in unit.annotation.identifiers if fold(i) in fold(unit.text))
        size = max(1, word_count(unit.text))
        value = novelty * salience(unit.segment) / size
        scored.append((value, -unit.segment.index, unit.segment.index, unit.clause))
    dropped: set[tuple[int, int]] = set()
    sizes = {(u.segment.index, u.clause): word_count(u.text) for u in units}
    for _, _, index, clause in sorted(scored):
        if total <= target_words:
            break
        dropped.add((index, clause))
        total -= sizes[(index, clause)]
    return dropped


_SECOND_PERSON_RE = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd)\b", re.I)
_FIRST_PERSON_RE = re.compile(
    r"\b(?:i|me|my|mine|we|us|our|ours|i'm|i've|i'd|i'll|we're|we've)\b", re.I
)
_WISH_RE = re.compile(
    r"\b(?:hope|hoping|wish|wishing|can't\s+wait|good\s+luck|keep\s+(?:it\s+)?up|"
    r"sounds?\s+like|must\s+(?:be|have\s+been))\b",
    re.I,
)


def salience(segment: Segment) -> float:
    """How much a sentence tells about the world rather than reacts to the conversation.

    In a dialogue, facts come from what a speaker says about themselves or about third
    parties; sentences aimed at the other party ("your painting is lovely", "hope it goes
    well") mostly react to what was just said. Used only to order drops under a budget.
    """
    text = segment.text
    weight = 1.0
    first = bool(_FIRST_PERSON_RE.search(text))
    second = bool(_SECOND_PERSON_RE.search(text))
    if first:
        weight *= 1.5
    elif second:
        weight *= 0.5
    if _WISH_RE.search(text):
        weight *= 0.5
    tokens = raw_tokens(text)
    reactions = sum(1 for t in tokens if t in REACTIONS)
    content = sum(1 for t in tokens if t not in STOPWORDS and t not in FILLERS)
    if content and reactions * 2 >= content:
        weight *= 0.5
    return weight


def _layout(units: Sequence[_Unit]) -> str:
    """One line per speaker turn; a ``[date]`` header when the summary spans several days."""
    days = {u.segment.timestamp.date() for u in units}
    lines: list[str] = []
    current_day: date | None = None
    current_key: tuple[uuid.UUID, str | None] | None = None
    current_segment = -1
    for unit in units:
        segment = unit.segment
        day = segment.timestamp.date()
        if len(days) > 1 and day != current_day:
            lines.append(f"[{day.isoformat()}]")
            current_key = None
        current_day = day
        key = (segment.memory_id, segment.speaker)
        if key == current_key:
            glue = ", " if segment.index == current_segment else SEGMENT_GLUE
            lines[-1] = f"{lines[-1]}{glue}{unit.text}"
        else:
            lines.append(f"{segment.speaker}: {unit.text}" if segment.speaker else unit.text)
            current_key = key
        current_segment = segment.index
    return "\n".join(lines)


# -- the protocol, orchestrated ----------------------------------------------------------

T = TypeVar("T")

OFFLINE = OfflineCompressor()


def ask_with_fallback(
    call: Callable[[], T], fallback: Callable[[], T], llm_name: str
) -> tuple[T, str, int]:
    """One call, one retry on a malformed answer, then the offline rules.

    Returns the answer, who gave it, and how many LLM attempts were malformed. Transient
    errors propagate so that the job is retried with backoff.
    """
    failures = 0
    for _ in range(2):
        try:
            return call(), llm_name, failures
        except MalformedLLMOutput:
            failures += 1
    return fallback(), "offline-fallback", failures


class SummaryDraft(BaseModel):
    """A summary row to insert: new, versioned, pointing at what it summarises."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    task_id: str
    session_id: str
    level: Level
    version: int = Field(ge=1)
    parent_ids: tuple[uuid.UUID, ...]
    timestamp: datetime
    timestamp_end: datetime
    content: str
    source_words: int = Field(ge=0)
    summary_words: int = Field(ge=0)
    annotate_only: bool = False
    annotated_by: str
    compressed_by: str
    malformed_answers: int = Field(0, ge=0)
    kinds: dict[str, int] = Field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.source_words / max(1, self.summary_words)

    def metadata(self) -> dict[str, object]:
        """What the worker stores in the row's ``metadata`` (JSON)."""
        return {
            "parent_ids": [str(p) for p in self.parent_ids],
            "version": self.version,
            "source_words": self.source_words,
            "summary_words": self.summary_words,
            "timestamp_end": self.timestamp_end.isoformat(),
            "annotate_only": self.annotate_only,
            "annotated_by": self.annotated_by,
            "compressed_by": self.compressed_by,
            "malformed_answers": self.malformed_answers,
            "kinds": self.kinds,
        }


class CompressionResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    draft: SummaryDraft
    segments: tuple[Segment, ...]
    annotations: tuple[SegmentAnnotation, ...]


def summary_id(
    tenant_id: str, level: Level, version: int, parent_ids: Iterable[uuid.UUID]
) -> uuid.UUID:
    parents = ",".join(sorted(str(p) for p in parent_ids))
    return uuid.uuid5(
        ID_NAMESPACE, f"summary\x1f{tenant_id}\x1f{int(level)}\x1f{version}\x1f{parents}"
    )


def compress_group(
    sources: Sequence[SourceMemory],
    level: Level,
    llm: CompressionLLM | None = None,
    *,
    version: int = 1,
    annotate_only: bool = False,
    policy: LevelPolicy = DEFAULT_LEVELS,
) -> CompressionResult:
    """Run the protocol over one group and return the summary row to write.

    ``annotate_only`` is the mode of a compression-resistant memory: stage 1 only, rendered
    with chatter dropped and nothing else cut. Raises TransientLLMError to be retried.
    """
    if not sources:
        raise ValueError("nothing to compress")
    if level not in (Level.L1, Level.L2, Level.L3):
        raise ValueError(f"compression produces L1-L3, not L{int(level)}")
    if any(s.level >= level for s in sources):
        raise ValueError(f"an L{int(level)} summary needs lower-level sources")
    if len({s.tenant_id for s in sources}) != 1:
        raise ValueError("a summary never mixes tenants")
    # Stable on the caller's order: turns written in the same second keep their sequence.
    ordered = sorted(sources, key=lambda s: s.timestamp)
    engine: CompressionLLM = llm or OFFLINE
    segments = segment_sources(ordered)
    if not segments:
        raise ValueError("the sources hold no text")
    annotate_request = AnnotateRequest(segments=segments)

    def annotate() -> AnnotationBatch:
        batch = engine.annotate_segments(annotate_request)
        check_annotations(batch, annotate_request)
        return batch

    batch, annotated_by, bad_annotations = ask_with_fallback(
        annotate, lambda: OFFLINE.annotate_segments(annotate_request), engine.name
    )
    source_words = sum(s.source_words for s in ordered)
    target = max(1, math.ceil(source_words / policy.ratio(level, version)))
    compress_request = CompressRequest(
        level=level, target_words=target, segments=segments, annotations=tuple(batch.segments)
    )
    if annotate_only:
        output = compress_offline(compress_request, annotate_only=True)
        compressed_by, bad_summaries = "annotate-only", 0
    else:

        def compress() -> SummaryOutput:
            return check_summary(engine.compress_segments(compress_request), compress_request)

        output, compressed_by, bad_summaries = ask_with_fallback(
            compress, lambda: compress_offline(compress_request), engine.name
        )
    kinds: dict[str, int] = {}
    for annotation in batch.segments:
        kinds[annotation.kind.value] = kinds.get(annotation.kind.value, 0) + 1
    parent_ids = tuple(s.id for s in ordered)
    first = ordered[0]
    draft = SummaryDraft(
        id=summary_id(first.tenant_id, level, version, parent_ids),
        tenant_id=first.tenant_id,
        task_id=first.task_id,
        session_id=first.session_id
        if len({s.session_id for s in ordered}) == 1
        else f"{first.task_id}:L{int(level)}",
        level=level,
        version=version,
        parent_ids=parent_ids,
        timestamp=first.timestamp,
        timestamp_end=ordered[-1].timestamp,
        content=output.text,
        source_words=source_words,
        summary_words=word_count(output.text),
        annotate_only=annotate_only,
        annotated_by=annotated_by,
        compressed_by=compressed_by,
        malformed_answers=bad_annotations + bad_summaries,
        kinds=kinds,
    )
    return CompressionResult(draft=draft, segments=segments, annotations=tuple(batch.segments))


# -- which rows go together ----------------------------------------------------------------


def plan_groups(
    sources: Sequence[SourceMemory], level: Level, policy: LevelPolicy = DEFAULT_LEVELS
) -> list[list[SourceMemory]]:
    """Cut the rows to promote into groups that one summary each will cover.

    L1: one session of one task, at most a day and ``l1_group_max_words`` raw words.
    L2: one task, at most a week of L1 rows. L3: the whole task (call it at completion).
    """
    if level not in (Level.L1, Level.L2, Level.L3):
        raise ValueError(f"no groups for L{int(level)}")
    keyed: dict[tuple[str, ...], list[SourceMemory]] = {}
    for source in sorted(sources, key=lambda s: s.timestamp):
        key: tuple[str, ...] = (source.tenant_id, source.task_id)
        if level == Level.L1:
            key += (source.session_id,)
        keyed.setdefault(key, []).append(source)
    if level == Level.L3:
        return list(keyed.values())
    span_s = policy.l1_group_span_s if level == Level.L1 else policy.l2_group_span_s
    max_words = policy.l1_group_max_words if level == Level.L1 else None
    groups: list[list[SourceMemory]] = []
    for rows in keyed.values():
        current: list[SourceMemory] = []
        words = 0
        for row in rows:
            too_long = bool(current) and (
                (row.timestamp - current[0].timestamp).total_seconds() > span_s
                or (max_words is not None and words + row.source_words > max_words)
            )
            if too_long:
                groups.append(current)
                current, words = [], 0
            current.append(row)
            words += row.source_words
        if current:
            groups.append(current)
    return groups


def sources_from_drafts(drafts: Iterable[SummaryDraft]) -> list[SourceMemory]:
    """Summary rows as the sources of the next level."""
    return [
        SourceMemory(
            id=d.id,
            tenant_id=d.tenant_id,
            task_id=d.task_id,
            session_id=d.session_id,
            timestamp=d.timestamp,
            content=d.content,
            level=d.level,
            source_words=d.source_words,
        )
        for d in drafts
    ]
