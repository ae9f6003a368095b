"""Which older memory a new one corrects: the automatic path of corrections, made to do no harm.

A superseded memory leaves recall() and context(), so an automatic supersession hides what the
user said: it is taken only on precise evidence, and anything weaker keeps both memories and
records the pair as a *conflict* (context() shows both with their dates; history() lists it).

Candidates: a new preference or decision and an older one of the same scope (tenant and user),
both at level 0, in the same situation ("when reviewing", 遇到架构问题时: each holds in its own).

Never a supersession, nor a conflict, when:

* the new memory is a **question** (认证模块的JWT迁移有什么约束？ asks about the constraint, it
  does not replace it) — question sentences are left out of every comparison;
* either is a **report or summary** (周报：, "Weekly update:", "Release notes 4.1:", a list of
  three clauses or more, four sentences or more): it
  mentions many things and is no statement of its own (its plainest sentence makes a conflict
  at most);
* the two have **different speakers** ("Dana: …" and "Lee: …" may simply disagree);
* they are **copies** (the same words) or the new one **elaborates** the old one (it says all the
  old one said and more): nothing said before is contradicted.

Evidence, sentence by sentence (a long note shares half the words of any short decision):

* **supersede** when a sentence of each is about the same thing (at least two topic words in
  common, covering two thirds of the shorter and 40 % of the longer sentence's topic) and
  - they take opposite ends of a stance axis (tabs/spaces, brief/detailed, 同步/异步) (half
    of the longer topic in common, or the shorter one whole with a correction cue), or
  - the new sentence says it corrects ("actually", "instead", "no longer", 改为, 不再, 推迟到)
    and a value changed (each side has a topic word the other lacks), or
  - without a cue, a single value changed: each side names an identifier the other does not
    (a date, a number, a person, a technology: "due May 3" → "due May 10", 负责人是张工 →
    负责人是李工) while at least 60 % of the longer topic is shared, or
  - one kind of value was replaced (a time for a time, a quantity for a quantity, a name for a
    name; never a name and a date at once, never a numbered thing such as eu-3): with a cue
    ("extending", "dropped", 调到, 挪到, 现在) half of the old statement's other words said
    again suffice, and the old value may be named beside the new one ("dropped Redux ... for
    Zustand"); without a cue every other word of the old statement is said again (three
    quarters of its character pairs in Chinese), so "the staging database runs PostgreSQL
    14" / "the production database ... 16" stays two statements, or
  - one negates the other on a topic they share almost whole (three quarters of the longer);
* **conflict** when the weaker signs hold (the topic overlap the rule of consolidation uses,
  half of the shorter topic, and opposed stances or a correction cue) but not the above.

With a model configured the rule only proposes: :func:`confirm` asks the model about each
proposal (``confirm_correction``, its own narrow JSON protocol), and a proposal the model does
not confirm is kept as a conflict or dropped; when the model cannot answer, both stay.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.cognition.stance import (
    Stance,
    conditions_of,
    opposed,
    stance_by_clause,
    topic_of,
    topic_overlap,
)
from pipelines.errors import LLMError, MalformedLLMOutput
from pipelines.records import EpisodicMemory, Level, MemoryType
from pipelines.text.identifiers import find_identifiers
from pipelines.text.sentences import split_sentences, split_speaker
from pipelines.text.words import (
    NEGATIONS,
    STOPWORDS,
    fold,
    has_han,
    normalise_token,
    raw_tokens,
    word_count,
)

# The types whose later statements replace earlier ones: what the user wants (preference),
# what was decided (decision; a constraint is recorded as one of these two).
CORRECTABLE = frozenset({MemoryType.PREFERENCE, MemoryType.DECISION})
# The weak sign (a conflict): consolidation's measure, half of the smaller topic in common.
TOPIC_OVERLAP = 0.5
# The strong signs (a supersession): two thirds of the shorter topic and 40 % of the longer
# one, with at least two topic words in common, so a one-word topic ("like") never decides.
STRICT_OVERLAP = 2 / 3
STRICT_LONGER_OVERLAP = 0.4
MIN_SHARED = 2
# A changed value without a cue: most of both sentences is the same statement.
VALUE_LONGER_OVERLAP = 0.6
# A negation without a cue or an axis: the same statement, negated.
NEGATION_LONGER_OVERLAP = 0.75
# A report or summary: four sentences or more, or this many words, states many things.
REPORT_SENTENCES = 4
REPORT_WORDS = 80

_CORRECTION_CUE_RE = re.compile(
    r"\b(?:actually|no longer|not anymore|any ?more|instead|changed? (?:my|our) minds?|"
    r"switch(?:ed|ing)? (?:to|over)|correction|scratch that|from now on|moved? to|"
    r"pushed (?:back )?to|postponed to|rescheduled|replaced? (?:by|with)|rather than|"
    r"changed to|updated to|is now|are now|now (?:uses?|prefers?|owns?|leads?)|now|"
    r"these days|going forward|as of|after all|in favou?r of|reassigned|swap(?:ped)?|"
    r"(?:steps?|stepped) down|takes? over|took over|handed over|hand(?:s|ed|ing)? .{1,40}? over|"
    r"(?:dropped|retired|decommission(?:ed|ing)|sunset|slipped)|extend(?:s|ed|ing)|"
    r"brought forward|moved up|goes back to|(?:upgraded|raised|increased|lowered|reduced|cut|"
    r"bumped|passed|rolled back) (?:\w+ )?to|moves? from|moved from)\b|"
    r"不再|(?<!修)改(?![进善动革造])|其实|更正|换成|换为|换(?=[\u4e00-\u9fff]{1,4}主持|[\u4e00-\u9fff]{1,3}负责)|"
    r"调整为|调整到|变更为|推迟|延期到|提前到|延后|延到|延长|挪到|挪至|往后挪|调到|调回|调成|"
    r"提高到|提升到|降到|降低到|减到|减少到|扩到|扩容到|升级到|迁到|迁移到|交给|划给|"
    r"卸任|下线|去掉|停了|停用|弃用|回滚到|保留到|重新分配|最后还是|还是用|以后|接下来|"
    r"现在由|现在是|现在用|现在跑|现在|别再|不要再|不用.{0,12}了",
    re.I,
)
# The cue words themselves say nothing about the topic.
_CUE_WORDS = """actually now longer anymore instead changed change mind minds switch switched
switching correction scratch from moved move pushed back postponed rescheduled replaced
replace rather updated"""
_CUE_TOKENS = frozenset(normalise_token(w) for w in _CUE_WORDS.split())
_SITUATION_RE = re.compile(r"\b(?:when|whenever|if|during|while|unless)\b", re.I)
# A report names itself at its start: "Weekly update: …", 周报：…, 本周总结：….
_REPORT_RE = re.compile(
    r"^\s*(?:(?:weekly|daily|monthly|status|progress|project)\s+(?:update|report|summary)|"
    r"summary|recap|report|minutes|meeting notes)\b|"
    r"^\s*(?:[\w-]+\s+){0,3}(?:update|report|summary|recap|minutes|notes|review)\b[^:]{0,24}:|"
    r"^\s*(?:本周|今日|今天|本月|上周|本次|项目)?(?:周报|日报|月报|总结|汇报|纪要|进展|会议记录)"
    r"\s*[:：]",
    re.I,
)
_QUESTION_ZH_RE = re.compile(
    r"(?:吗|呢|么)[。.!！]?$|什么|怎么|为什么|哪些|哪个|是否|有没有|多少|几时"
)
_CAPITALISED_RE = re.compile(r"\b[A-Z][\w.+#-]*[A-Za-z0-9+#]")


class Verdict(StrEnum):
    """What becomes of a proposed pair: the older is superseded, or both stay as a conflict."""

    SUPERSEDE = "supersede"
    CONFLICT = "conflict"


class Supersession(BaseModel):
    """A proposal about one (older, newer) pair: ``verdict`` says what is done with it."""

    model_config = ConfigDict(frozen=True)

    old_id: uuid.UUID
    new_id: uuid.UUID
    reason: str
    verdict: Verdict = Verdict.SUPERSEDE


def has_correction_cue(text: str) -> bool:
    return bool(_CORRECTION_CUE_RE.search(text))


def _correctable(memory: EpisodicMemory) -> bool:
    return memory.level == Level.L0 and memory.type in CORRECTABLE


def situation_of(text: str) -> str | None:
    """The situation a statement is limited to, folded; None when it holds generally."""
    if _SITUATION_RE.search(text) or has_han(text):
        found = conditions_of(text)
        return fold(found) if found else None
    return None


def topic_words(text: str) -> frozenset[str]:
    """What a statement is about: consolidation's topic words of the whole statement (its
    "for ..." phrase included), without the correction cues."""
    return topic_of(_CORRECTION_CUE_RE.sub(" ", text), None) - _CUE_TOKENS


def is_question(sentence: str) -> bool:
    """A sentence that asks rather than states (its final mark, or a Chinese question word)."""
    text = sentence.strip()
    if text.endswith(("?", "？")):
        return True
    return has_han(text) and bool(_QUESTION_ZH_RE.search(text))


def is_report(text: str) -> bool:
    """A report or summary: it mentions many statements and replaces none of them."""
    _, body = split_speaker(text)
    if _REPORT_RE.search(body) or len(re.findall(r"[;；]", body)) >= 2:
        return True  # it names itself, or it lists three things or more
    return len(split_sentences(body)) >= REPORT_SENTENCES or word_count(body) >= REPORT_WORDS


# Values of time Chinese writes without digits or capitals: 周四, 星期五, 三季度, 上午, 凌晨4点半,
# 月底, 下月中旬.
_TIME_ZH_RE = re.compile(
    r"(?:下|上|本)?(?:周|星期|礼拜)[一二三四五六日天]|[一二三四]季度[初中末]?|"
    r"(?:凌晨|早上|上午|中午|下午|晚上)?\d{1,2}点半?|上午|下午|中午|晚上|凌晨|"
    r"(?:下|上|本)?月[初中底末]|(?:下|上|本)?月?中旬|(?:下|上|本)?月?下旬|(?:下|上|本)?月?上旬"
)


def _values(sentence: str) -> frozenset[str]:
    """The values a sentence names: identifiers (dates, numbers, people, modules, paths),
    capitalised words (technologies and names) and Chinese times, folded."""
    found = {fold(v) for v in find_identifiers(sentence)}
    found |= {fold(m.group()) for m in _TIME_ZH_RE.finditer(sentence)}
    for match in _CAPITALISED_RE.finditer(sentence):
        if sentence[: match.start()].strip() and fold(match.group()) not in STOPWORDS:
            found.add(fold(match.group()))  # the first word is capitalised anyway
    return frozenset(found)


def _content(text: str) -> frozenset[str]:
    """Content words and negations: "we will not migrate" says something "we will" does not."""
    return frozenset(
        normalise_token(t) for t in raw_tokens(text) if t not in STOPWORDS or t in NEGATIONS
    )


def _stance(sentence: str) -> Stance:
    return stance_by_clause(sentence)


class _Statement(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    topic: frozenset[str]
    stance: Stance
    values: frozenset[str]
    cued: bool


# The reason a statement gives ("…, because the team knows it", "…，因为供应商明年起不再打补丁"):
# what it is about and the value it names are in the clause before it. Project notes restate
# the same reasons for different subjects, so a reason shared by two decisions about two
# modules must not make them one statement.
_REASON_RE = re.compile(
    r"(?:[,;]\s*|\s+)(?:because|since|as\s+a\s+result|given\s+that|the\s+reason\s+(?:is|was))\b.*$"
    r"|[，,；;：:]?\s*(?:是因为|因为|由于|原因是|理由是|考虑到|出于).*$",
    re.I | re.S,
)


def main_clause(sentence: str) -> str:
    """A sentence without the reason it gives (the whole sentence when nothing is left)."""
    cut = _REASON_RE.sub("", sentence).strip()
    return cut if topic_words(cut) else sentence


def _statements(text: str) -> list[_Statement]:
    """Each sentence that states something (questions and sentences without topic words left
    out), with its topic words and values (of its main clause: without the reason it gives),
    stance and whether it says it corrects."""
    parts = []
    for sentence in split_sentences(text) or [text]:
        if is_question(sentence):
            continue
        clause = main_clause(sentence)
        topic = topic_words(clause)
        if topic:
            parts.append(
                _Statement(
                    text=sentence,
                    topic=topic,
                    stance=_stance(sentence),
                    values=_values(clause),
                    cued=has_correction_cue(sentence),
                )
            )
    return parts


def _same_speaker(old: str, new: str) -> tuple[bool, str, str]:
    """Whether both lines have one speaker (or none), and their bodies."""
    old_speaker, old_body = split_speaker(old)
    new_speaker, new_body = split_speaker(new)
    if old_speaker is not None and new_speaker is not None:
        return fold(old_speaker) == fold(new_speaker), old_body, new_body
    return True, old_body, new_body


_NAMED_RE = re.compile(r"[^\W\d_]")


def _names_a_thing(value: str) -> bool:
    """A value of letters and digits together ("eu-10", "archive-7", "ADR-12", "ledger_3")
    names a thing of its own: another one is another subject, not a new value."""
    return any(c.isdigit() for c in value) and bool(_NAMED_RE.search(value))


def _one_value_changed(old: frozenset[str], new: frozenset[str]) -> bool:
    """Without a cue, one value for one value, and none of them naming a thing: "the deadline
    is May 3" → "May 10". Two changes at once ("archive-3 at 02:03" → "archive-8 at 02:08")
    or another named thing ("region eu-3" → "region eu-8") speak of another subject."""
    old_only, new_only = old - new, new - old
    if len(old_only) != 1 or len(new_only) != 1:
        return False
    return not any(_names_a_thing(v) for v in old_only | new_only)


def _topic_changed_beyond(old: _Statement, new: _Statement) -> bool:
    """Whether words other than the changed value differ on both sides: "the search
    endpoint's limit is 100" → "the login endpoint's limit is 5" names another endpoint."""
    values = old.values ^ new.values
    return bool(old.topic - new.topic - values) and bool(new.topic - old.topic - values)


_WEEKDAYS_MONTHS = frozenset(
    [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
)


def _value_kind(value: str) -> str:
    """What a value measures: a time (a date, a day, an hour), a quantity, or a name."""
    if value in _WEEKDAYS_MONTHS or _TIME_ZH_RE.fullmatch(value) or ":" in value:
        return "time"
    if re.search(r"\d(?:st|nd|rd|th)$|[日号月]$|^q\d$", value):
        return "time"
    if any(c.isdigit() for c in value):
        return "quantity"
    return "name"


def _core(statement: _Statement, changed: frozenset[str]) -> frozenset[str]:
    """A statement's topic without the words of the values that changed: what it is about."""
    return frozenset(t for t in statement.topic if not any(t in v for v in changed))


def _replaced_value(old: _Statement, new: _Statement) -> str | None:
    """Why ``new`` gives a new value to what ``old`` said, when the rest of ``old`` is said
    again: one kind of value changed ("ends on the 9th" → "ends on the 16th", 每分钟100次 →
    每分钟300次, Saturday 02:00 → Sunday 01:00), old's other words are in the new statement, and
    with a cue, half of them are enough (the cue says a value was replaced)."""
    old_only, new_only = old.values - new.values, new.values - old.values
    if not new_only or len(old_only) > 2 or len(new_only) > 3:
        return None
    if any(_names_a_thing(v) or subjects(v) for v in old_only | new_only):
        # another numbered thing (eu-3 / eu-8), another module (认证模块 / 账单系统): another
        # subject, not a new value
        return None
    kinds_new = {_value_kind(v) for v in new_only}
    if len(kinds_new) != 1:
        return None  # a name and a date changed at once: another subject
    if old_only:
        if {_value_kind(v) for v in old_only} != kinds_new:
            return None
    elif not (new.cued and any(_value_kind(v) in kinds_new for v in old.values)):
        # The old value named again beside a new one of its kind is what the cue replaces
        # ("dropped Redux in the mobile app, state is Zustand"); without a cue it is an
        # addition.
        return None
    changed = old_only | new_only
    old_core, new_core = _core(old, changed), _core(new, changed)
    shared = old_core & new_core
    if not old_core or not shared:
        return None
    covered = len(shared) / len(old_core)
    if new.cued and covered >= 0.5 and len(shared) >= 1 + (len(old_core) > 3):
        return "says it replaces a value of the same statement"
    # Without a cue every other word of the old statement is said again ("the staging
    # database runs PostgreSQL 14" / "the production database ... 16" names another database);
    # Chinese topics are character pairs, and a pair across a word boundary (示安 of 演示安排)
    # may change with the phrasing, so three quarters suffice there.
    needed = 0.75 if has_han(old.text) else 1.0
    if not new.cued and covered >= needed and len(shared) >= MIN_SHARED:
        return "states another value for the same thing"
    return None


def _strong(old: _Statement, new: _Statement) -> str | None:
    """Why ``new`` replaces ``old`` on precise evidence, or None."""
    shared = old.topic & new.topic
    longer = len(shared) / max(len(old.topic), len(new.topic))
    axis = opposed(old.stance, new.stance) and bool(old.stance[1]) and bool(new.stance[1])
    if axis and old.values and new.values and not old.values & new.values:
        # "tabs in Go files" / "spaces in YAML files": the side and the thing both changed,
        # so it speaks of another thing.
        axis = False
    if axis and shared and longer >= 0.5:
        return "takes the opposite side on the same topic"
    if axis and shared and new.cued and topic_overlap(old.topic, new.topic) >= STRICT_OVERLAP:
        # "Actually I now prefer spaces for indentation" after "tabs for indentation in every
        # repository": the shorter topic whole, the other side, and a cue.
        return "says it changed sides on the same topic"
    values_changed = bool(old.values - new.values) and bool(new.values - old.values)
    if new.cued and values_changed and shared and topic_overlap(old.topic, new.topic) >= 0.5:
        # "we write the backend in Go" → "the backend moves to Rust": a cue and a new value
        # say it, even when the rest shares one word (后端).
        return "says it corrects the same statement and names a new value"
    replaced = _replaced_value(old, new)
    if replaced is not None:
        return replaced
    if len(shared) < MIN_SHARED or topic_overlap(old.topic, new.topic) < STRICT_OVERLAP:
        return None
    if longer < STRICT_LONGER_OVERLAP:
        return None
    changed = bool(old.topic - new.topic) and bool(new.topic - old.topic)
    if new.cued and (changed or axis):
        return "says it corrects the same statement and changes its value"
    if (
        longer >= VALUE_LONGER_OVERLAP
        and _one_value_changed(old.values, new.values)
        and not _topic_changed_beyond(old, new)
    ):
        return "states another value for the same thing"
    polarity_flip = opposed(old.stance, new.stance) and not old.stance[1] and not new.stance[1]
    if polarity_flip and longer >= NEGATION_LONGER_OVERLAP:
        return "negates the same statement"
    return None


def _weak(old: _Statement, new: _Statement) -> str | None:
    """The signs that make a pair worth showing side by side, short of a supersession."""
    shared = old.topic & new.topic
    if len(shared) < MIN_SHARED or topic_overlap(old.topic, new.topic) < TOPIC_OVERLAP:
        return None
    if opposed(old.stance, new.stance):
        return "may state the opposite on the same topic"
    if new.cued:
        return "may correct an earlier statement on the same topic"
    return None


# The part of a system a statement is about: 支付模块, 搜索服务, 账单系统, "the billing service",
# "the search endpoint". Two statements about two different ones are about two subjects,
# however alike the rest of their words ("报表模块的数据库采用 TiDB" / "网关的数据库决定用 TiDB").
# A Chinese name is the two characters before its head (账单系统, 支付模块), or the head alone
# (网关) after a particle.
_SUBJECT_ZH_RE = re.compile(
    r"(?:(?<![\u4e00-\u9fff])|(?<=[的了为和与把用在是])|[\u4e00-\u9fff]{2})(?:模块|服务|系统|平台|网关|接口(?!协议|规范|文档|风格))"
)
_PARTICLES_ZH = frozenset("的了为和与把用在是作")
_SUBJECT_EN_RE = re.compile(
    r"\b([a-z][\w-]*(?:\s+[a-z][\w-]*)?)\s+(?:module|service|system|endpoint|api|gateway)\b",
    re.I,
)
_SUBJECT_LEAD_RE = re.compile(r"^(?:the|our|a|an|new|old)\s+", re.I)


def subjects(text: str) -> frozenset[str]:
    """The modules, services and systems a text names, folded."""
    found = {m.group(0).lstrip("".join(_PARTICLES_ZH)) for m in _SUBJECT_ZH_RE.finditer(text)}
    found |= {_SUBJECT_LEAD_RE.sub("", fold(m.group(0))) for m in _SUBJECT_EN_RE.finditer(text)}
    return frozenset(found)


# What of a module a Chinese statement is about: 报表模块的「数据库」采用 TiDB, 网关的「日志方案」.
_ATTRIBUTE_ZH_RE = re.compile(
    r"(?:模块|服务|系统|平台|网关)的([\u4e00-\u9fff]{2,4}?)"
    r"(?=采用|决定|是|用|改|不再|定|换|由|要|为|[，,。；;：:\s]|$)"
)


def attributes(text: str) -> frozenset[str]:
    """The attributes of a module a Chinese text names (数据库, 消息队列, 负责人 ...)."""
    return frozenset(m.group(1) for m in _ATTRIBUTE_ZH_RE.finditer(text))


def _other_subject(old: str, new: str) -> bool:
    """Both name the part of the system they are about, and no part is the same; or both
    name what of it they are about, and that differs (报表模块的数据库 / 报表模块的消息队列)."""
    old_clause, new_clause = main_clause(old), main_clause(new)
    a, b = subjects(old_clause), subjects(new_clause)
    if a and b and not (a & b):
        return True
    x, y = attributes(old_clause), attributes(new_clause)
    return bool(x) and bool(y) and not (x & y)


def _names_a_replacement(old_parts: list[_Statement], new_parts: list[_Statement]) -> bool:
    """Whether a new sentence says it corrects and names, beside an old value, a new one of
    its kind: "dropped Redux ... for Zustand" repeats every old word and still replaces one."""
    old_values = frozenset().union(*(p.values for p in old_parts)) if old_parts else frozenset()
    kinds = {_value_kind(v) for v in old_values}
    return any(
        part.cued and any(_value_kind(v) in kinds for v in part.values - old_values)
        for part in new_parts
    )


def judge_pair(older: str, newer: str) -> tuple[Verdict, str] | None:
    """The rule on two statements' texts: a verdict and why, or None when they do not bear on
    each other. (Scope, types, order and situations are the caller's: see
    :func:`contradicted`.)"""
    same, old_body, new_body = _same_speaker(older, newer)
    if not same:
        return None
    report = is_report(old_body) or is_report(new_body)
    old_parts, new_parts = _statements(old_body), _statements(new_body)
    old_content, new_content = _content(old_body), _content(new_body)
    if (
        not old_content - new_content
        and old_content & NEGATIONS == new_content & NEGATIONS
        and not _names_a_replacement(old_parts, new_parts)
    ):
        return None  # a copy, or an elaboration: all the old one said is said again
    if _other_subject(old_body, new_body):
        return None  # the same words about another module: another subject
    weak: str | None = None
    best: tuple[str, float] | None = None
    for old in old_parts:
        for new in new_parts:
            why = _strong(old, new)
            overlap = topic_overlap(old.topic, new.topic)
            if why is not None and (best is None or overlap > best[1]):
                best = (why, overlap)
            elif weak is None:
                found = _weak(old, new)
                if found is not None:
                    weak = f"{found} (topic overlap {overlap:.2f})"
    if best is not None and report:
        # A report's sentence may say it plainly, but the report is no statement of its own.
        return Verdict.CONFLICT, f"a report {best[0]} (topic overlap {best[1]:.2f})"
    if best is not None:
        return Verdict.SUPERSEDE, f"{best[0]} (topic overlap {best[1]:.2f})"
    if weak is not None and not report:
        return Verdict.CONFLICT, weak
    return None


def contradicted(new: EpisodicMemory, older: Sequence[EpisodicMemory]) -> list[Supersession]:
    """The rule's proposals for ``new`` against ``older`` (any order; only those before
    ``new`` in time count): supersessions on precise evidence, conflicts on weaker signs."""
    if not _correctable(new):
        return []
    _, new_body = split_speaker(new.content)
    if not _statements(new_body):
        return []  # a question, or nothing stated
    new_situation = situation_of(new.content)
    found: list[Supersession] = []
    for old in older:
        if old.id == new.id or not _correctable(old):
            continue
        if old.tenant_id != new.tenant_id or old.user_id != new.user_id:
            continue
        if (old.timestamp, str(old.id)) >= (new.timestamp, str(new.id)):
            continue
        if situation_of(old.content) != new_situation:
            continue  # each holds in its own situation
        judged = judge_pair(old.content, new.content)
        if judged is None:
            continue
        verdict, why = judged
        found.append(
            Supersession(
                old_id=old.id,
                new_id=new.id,
                verdict=verdict,
                reason=f"automatic: a later {new.type} {why}",
            )
        )
    return found


# -- the model's confirmation ----------------------------------------------------------------


class ConfirmVerdict(StrEnum):
    SUPERSEDES = "supersedes"  # the newer statement replaces the older one
    CONFLICT = "conflict"  # they disagree and it is not clear which holds: keep both
    UNRELATED = "unrelated"  # they do not bear on each other


class CorrectionStatement(BaseModel):
    model_config = ConfigDict(frozen=True)

    content: str
    date: str  # ISO date of the statement
    type: str


class CorrectionRequest(BaseModel):
    """What the model is shown: the older and the newer statement, with their dates."""

    model_config = ConfigDict(frozen=True)

    older: CorrectionStatement
    newer: CorrectionStatement


class CorrectionAnswer(BaseModel):
    """The model's answer, as the ``confirm_correction`` protocol asks for it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    verdict: ConfirmVerdict
    reason: str = Field("", max_length=2_000)


@runtime_checkable
class CorrectionLLM(Protocol):
    """What the automatic path of corrections asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def confirm_correction(self, request: CorrectionRequest) -> CorrectionAnswer: ...


def correction_request(old: EpisodicMemory, new: EpisodicMemory) -> CorrectionRequest:
    return CorrectionRequest(
        older=CorrectionStatement(
            content=old.content, date=old.timestamp.date().isoformat(), type=str(old.type)
        ),
        newer=CorrectionStatement(
            content=new.content, date=new.timestamp.date().isoformat(), type=str(new.type)
        ),
    )


def offline_confirmation(request: CorrectionRequest) -> CorrectionAnswer:
    """The rule's own answer, for the offline adapter: what :func:`judge_pair` says."""
    judged = judge_pair(request.older.content, request.newer.content)
    if judged is None:
        return CorrectionAnswer(verdict=ConfirmVerdict.UNRELATED, reason="offline rules")
    verdict, why = judged
    return CorrectionAnswer(
        verdict=(
            ConfirmVerdict.SUPERSEDES if verdict is Verdict.SUPERSEDE else ConfirmVerdict.CONFLICT
        ),
        reason=f"offline rules: {why}",
    )


def apply_confirmation(proposal: Supersession, answer: CorrectionAnswer) -> Supersession | None:
    """A proposal after the model's answer. The model confirms or weakens, never strengthens:
    a supersession it confirms stands; a conflict stays a conflict even if it says
    ``supersedes`` (the rule's evidence was not precise enough to hide a memory on a model's
    word alone); ``unrelated`` drops the proposal."""
    said = answer.reason.strip()[:300] or "no reason given"
    if answer.verdict is ConfirmVerdict.UNRELATED:
        return None
    if answer.verdict is ConfirmVerdict.SUPERSEDES and proposal.verdict is Verdict.SUPERSEDE:
        return proposal.model_copy(update={"reason": f"{proposal.reason}; confirmed: {said}"})
    return proposal.model_copy(
        update={"verdict": Verdict.CONFLICT, "reason": f"{proposal.reason}; model: {said}"}
    )


def unconfirmed(proposal: Supersession, why: str) -> Supersession:
    """A proposal the model could not be asked about: both memories stay, as a conflict."""
    return proposal.model_copy(
        update={
            "verdict": Verdict.CONFLICT,
            "reason": f"{proposal.reason}; not confirmed ({why}): both kept",
        }
    )


def confirm(
    llm: CorrectionLLM,
    new: EpisodicMemory,
    older: Sequence[EpisodicMemory],
    proposals: Sequence[Supersession],
) -> list[Supersession]:
    """Each proposal after the model's answer (see :func:`apply_confirmation`). Any error of
    the model keeps both memories as a conflict with the reason: the pair is never lost and
    nothing is hidden on the rule's word alone."""
    by_id = {m.id: m for m in older}
    out: list[Supersession] = []
    for proposal in proposals:
        old = by_id.get(proposal.old_id)
        if old is None:
            continue
        request = correction_request(old, new)
        answer: CorrectionAnswer | None = None
        failure = ""
        for _ in range(2):  # a malformed answer gets one retry, as every protocol's does
            try:
                answer = llm.confirm_correction(request)
                break
            except MalformedLLMOutput as exc:
                failure = f"malformed answer: {exc}"
            except LLMError as exc:  # unreachable, refused: a model's failure must not decide
                failure = f"{type(exc).__name__}: {exc}"
                break
        if answer is None:
            out.append(unconfirmed(proposal, failure[:200]))
            continue
        kept = apply_confirmation(proposal, answer)
        if kept is not None:
            out.append(kept)
    return out
