"""What one statement says, for comparing two (:mod:`pipelines.own.contradict`): the
sentences that state something (questions left out) with their topic words, the values they
name and the kind of each (a time, a quantity, a name), their stance and whether they say they
correct; the main clause without the reason it gives; the situation a statement is limited
to; the modules and attributes it is about; whether it is a report.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from pipelines.cognition.stance import (
    Stance,
    conditions_of,
    stance_by_clause,
    topic_of,
)
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

# A report or summary: four sentences or more, or this many words, states many things.
REPORT_SENTENCES = 4
REPORT_WORDS = 80

CORRECTION_CUE_RE = re.compile(
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


def has_correction_cue(text: str) -> bool:
    return bool(CORRECTION_CUE_RE.search(text))


def situation_of(text: str) -> str | None:
    """The situation a statement is limited to, folded; None when it holds generally."""
    if _SITUATION_RE.search(text) or has_han(text):
        found = conditions_of(text)
        return fold(found) if found else None
    return None


def topic_words(text: str) -> frozenset[str]:
    """What a statement is about: consolidation's topic words of the whole statement (its
    "for ..." phrase included), without the correction cues."""
    return topic_of(CORRECTION_CUE_RE.sub(" ", text), None) - _CUE_TOKENS


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
TIME_ZH_RE = re.compile(
    r"(?:下|上|本)?(?:周|星期|礼拜)[一二三四五六日天]|[一二三四]季度[初中末]?|"
    r"(?:凌晨|早上|上午|中午|下午|晚上)?\d{1,2}点半?|上午|下午|中午|晚上|凌晨|"
    r"(?:下|上|本)?月[初中底末]|(?:下|上|本)?月?中旬|(?:下|上|本)?月?下旬|(?:下|上|本)?月?上旬"
)


def values_of(sentence: str) -> frozenset[str]:
    """The values a sentence names: identifiers (dates, numbers, people, modules, paths),
    capitalised words (technologies and names) and Chinese times, folded."""
    found = {fold(v) for v in find_identifiers(sentence)}
    found |= {fold(m.group()) for m in TIME_ZH_RE.finditer(sentence)}
    for match in _CAPITALISED_RE.finditer(sentence):
        if sentence[: match.start()].strip() and fold(match.group()) not in STOPWORDS:
            found.add(fold(match.group()))  # the first word is capitalised anyway
    return frozenset(found)


def content_words(text: str) -> frozenset[str]:
    """Content words and negations: "we will not migrate" says something "we will" does not."""
    return frozenset(
        normalise_token(t) for t in raw_tokens(text) if t not in STOPWORDS or t in NEGATIONS
    )


def _stance(sentence: str) -> Stance:
    return stance_by_clause(sentence)


class Statement(BaseModel):
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


def statements(text: str) -> list[Statement]:
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
                Statement(
                    text=sentence,
                    topic=topic,
                    stance=_stance(sentence),
                    values=values_of(clause),
                    cued=has_correction_cue(sentence),
                )
            )
    return parts


_NAMED_RE = re.compile(r"[^\W\d_]")


def names_a_thing(value: str) -> bool:
    """A value of letters and digits together ("eu-10", "archive-7", "ADR-12", "ledger_3")
    names a thing of its own: another one is another subject, not a new value."""
    return any(c.isdigit() for c in value) and bool(_NAMED_RE.search(value))


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


def value_kind(value: str) -> str:
    """What a value measures: a time (a date, a day, an hour), a quantity, or a name."""
    if value in _WEEKDAYS_MONTHS or TIME_ZH_RE.fullmatch(value) or ":" in value:
        return "time"
    if re.search(r"\d(?:st|nd|rd|th)$|[日号月]$|^q\d$", value):
        return "time"
    if any(c.isdigit() for c in value):
        return "quantity"
    return "name"


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
