"""Consolidation stage 1: knowledge candidates in episodes.

Preferences, effective patterns, mistakes to avoid, project conventions, owners (who owns,
maintains or is assigned a module, a service or a piece of work) and the stack (the
technology chosen for an aspect), each with a confidence and its source ids. An LLM adapter
answers :class:`KnowledgeBatch` JSON (:class:`KnowledgeExtractor` is what consolidation asks
of the LLM port); the offline rules (:class:`OfflineKnowledge`) find them by cue words, one
sentence at a time, in English and in Chinese (教训 / 不要再 a mistake, 负责人是 / 由…负责 /
归…管 an owner, 用Go写的 / 技术栈 a stack, 效果很好 a pattern, 统一 / 一律 / 本项目 a
convention, 请 / 希望 / 偏好 / 习惯 / 总是 / 不要 a preference). A technology is a proper name
(Go, PostgreSQL, RabbitMQ): "we use snake_case" is a convention, "we use PostgreSQL" a stack.

What is never knowledge, whatever its cue words: a summary (level ≥ 1: it restates its
sources, which are read themselves), a report (:func:`is_report`: "Weekly report: …",
"Status: …", 周报：…, or a long note about several things), chatter (``carries_fact`` false:
"Gotcha, Jon!", 好的收到), a question with or without its question mark (:func:`asks`:
谁负责支付模块) and a hypothetical (:func:`is_hypothetical`: "what if", 假如, 如果…会…).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.answers import parse_json
from pipelines.cognition.segments import is_question
from pipelines.cognition.stance import CUE_WORDS, conditions_of, topic_of, topic_overlap
from pipelines.records import EpisodicMemory, MemoryType
from pipelines.text.sentences import split_sentences, split_speaker
from pipelines.text.words import STOPWORDS, has_han, raw_tokens, word_count
from pipelines.write.facts import carries_fact


class KnowledgeKind(StrEnum):
    PREFERENCE = "preference"
    PATTERN = "pattern"
    MISTAKE = "mistake"
    CONVENTION = "convention"
    # Who owns, maintains or is assigned a module, a service or a piece of work.
    OWNER = "owner"
    # The technology chosen for an aspect: a language, a database, a framework, a broker.
    STACK = "stack"


class KnowledgeItem(BaseModel):
    """One piece of knowledge as an extractor states it: the LLM's JSON schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: KnowledgeKind
    statement: str = Field(min_length=3, max_length=1000)
    confidence: float = Field(ge=0.0, le=1.0)
    source_ids: list[uuid.UUID] = Field(min_length=1)
    conditions: str | None = Field(
        None, description="When the knowledge applies, e.g. 'for architecture questions'."
    )


class KnowledgeBatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[KnowledgeItem]


def parse_knowledge(raw: str) -> KnowledgeBatch:
    """Validate an LLM's ``extract_knowledge`` JSON; raises MalformedLLMOutput."""
    return parse_json(raw, KnowledgeBatch)


@runtime_checkable
class KnowledgeExtractor(Protocol):
    """What consolidation's first stage asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch: ...


_CUES: tuple[tuple[KnowledgeKind, re.Pattern[str]], ...] = (
    (
        KnowledgeKind.MISTAKE,
        re.compile(
            r"\b(?:mistake|lesson\s+learned|never\s+again|(?:don't|do\s+not|never)\s+\w+\s+"
            r"again|should\s+(?:have|not\s+have|n't\s+have)|avoid(?:ed)?\s+\w+ing|"
            # what broke is the work, not a car: "that change broke the build"
            r"broke\s+(?:the\s+|our\s+|prod\s+)?(?:build|prod(?:uction)?|deploy(?:ment)?s?|"
            r"tests?|ci|main|master|staging|release|site|app|api|pipeline|migration)|"
            r"caused\s+(?:a|an|the)?\s*(?:outage|incident|bug|regression|failure)|"
            r"was\s+(?:a\s+)?wrong|backfired|pitfalls?|(?:a|the|one|another)\s+gotcha|gotchas)\b",
            re.I,
        ),
    ),
    (
        KnowledgeKind.OWNER,
        re.compile(
            r"\b(?i:owns|owned\s+by|(?:the\s+)?owners?\s+of|(?:is|are)\s+(?:now\s+)?"
            r"(?:responsible|accountable)\s+for|(?:is|are)\s+(?:now\s+)?in\s+charge\s+of|"
            r"maintains|maintained\s+by|(?:re)?assigned\s+to|handed\s+(?:over\s+)?to|"
            r"takes\s+over|took\s+over|point\s+of\s+contact\s+for)\b|"
            # "questions about X go to Mike": a person's name after it
            r"\b(?i:go(?:es)?\s+to)\s+[A-Z][a-z]+\b"
        ),
    ),
    (
        KnowledgeKind.STACK,
        # A technology is a proper name (PostgreSQL, Go, GitHub Actions): the cue takes the
        # capitalised word after it, so "we use snake_case" stays a convention.
        re.compile(
            r"\b(?i:written|built|implemented|developed|coded)\s+(?i:in|with|on)\s+[A-Z]|"
            r"\b(?i:runs?|running|hosted|deployed|lives?)\s+(?i:on|in)\s+[A-Z]|"
            r"\b(?i:we|they|it|(?:the|our)\s+[\w-]+)\s+(?:(?i:always|now|mostly|still)\s+)?"
            r"(?i:use|uses|chose|picked|switched\s+to|moved\s+to|migrated\s+to|"
            r"standardi[sz]ed\s+on|rel(?:y|ies)\s+on)\s+[A-Z]|"
            r"\b(?i:is|are)\s+(?i:an?)\s+[A-Z][\w.+#-]*\s+(?i:app|application|service|project|"
            r"codebase|site|monorepo)\b|"
            r"\b(?i:(?:our|the)\s+(?:tech(?:nology)?\s+)?stack)\b|"
            r"\b(?i:on\s+top\s+of|powered\s+by|based\s+on)\s+[A-Z]"
        ),
    ),
    (
        KnowledgeKind.PATTERN,
        re.compile(
            r"\b(?:worked\s+(?:well|great|better)|works\s+(?:well|better)|fixed\s+(?:it\s+)?by|"
            r"the\s+fix\s+(?:is|was)|solved\s+(?:it\s+)?by|what\s+helped|helped\s+(?:a\s+lot|"
            r"to)|the\s+trick\s+(?:is|was)|best\s+practice|effective|speeds?\s+up|sped\s+up)\b",
            re.I,
        ),
    ),
    (
        KnowledgeKind.CONVENTION,
        re.compile(
            # a convention as a rule, not the event: "the convention is to …", "naming
            # convention", "by convention"; "the people at the convention" is a conference
            r"\b(?:(?:naming|coding|code|project|team|style|our|house)\s+conventions?|"
            r"by\s+convention|conventions?\s+(?:is|are)\s+(?:to|that)|conventions?\s+(?:for|of)\s+"
            r"(?!the\b)\w+|conventions?\s*:|naming\s+(?:rules?|schemes?|styles?)|"
            r"we\s+(?:always\s+)?use|our\s+(?:style|standard|rule)|"
            r"the\s+rule\s+is|in\s+this\s+(?:project|repo|codebase)|must\s+(?:always\s+)?use|"
            r"by\s+default\s+we|we\s+never|is\s+the\s+standard|code\s+style)\b",
            re.I,
        ),
    ),
    (
        KnowledgeKind.PREFERENCE,
        re.compile(
            r"\b(?:prefer(?:s|red|ence)?|i(?:'d|\s+would)\s+rather|i\s+(?:really\s+)?(?:like|"
            r"love|enjoy|hate|dislike)|(?:don't|do\s+not|never)\s+(?:like|want)|"
            r"can't\s+stand|(?:my|our)\s+fav(?:ou)?rite|please\s+(?!let\b|help\b)\w+|"
            r"always\s+(?:use|want|keep|give)|i\s+want|i'd\s+like)\b|"
            # an imperative about a thing is its user's wish ("Keep the comments in English");
            # one about oneself is encouragement ("Keep going!", "Keep up the great work!")
            r"^(?:keep|avoid)\s+(?:the|all|my|our)\s+(?!(?:great|good|amazing|hard)\b)\w+",
            re.I,
        ),
    ),
)

# The same kinds in Chinese, in the same order (a lesson before a convention before a
# preference). Chinese cues stand inside runs of characters, so they are matched in the text;
# 统一 / 一律 / 本项目 state a rule of the project (a convention), 请 / 希望 / 偏好 / 习惯 /
# 总是 / 不要 a person's wish (a preference).
_CUES_ZH: tuple[tuple[KnowledgeKind, re.Pattern[str]], ...] = (
    (
        KnowledgeKind.MISTAKE,
        re.compile(
            r"教训|吸取教训|踩坑|踩过的坑|踩了坑|(?:以后|下次|再也)(?:不要|别|不能|不会)|不要再|"
            r"别再|不该|不应该|本不该|搞砸|犯错|失误|(?:导致|造成|引发)了?[^，。；]{0,8}"
            r"(?:故障|事故|宕机|回滚|中断|问题)"
        ),
    ),
    (
        KnowledgeKind.OWNER,
        re.compile(
            r"负责人|对接人|(?<!谁)负责(?!任)|归[^，。；？]{1,8}?管|(?<!其)[他她]管|(?:分配|指派|交接|移交|转交)给|"
            r"接手了?|owner",
            re.I,
        ),
    ),
    (
        KnowledgeKind.STACK,
        # As in English, the technology is a Latin proper name (Go, PostgreSQL, RabbitMQ).
        re.compile(
            r"技术栈|技术选型|(?:用|使用|采用|基于|选用|换成了?|迁移到|跑在|部署在|运行在)(?:的是)?"
            r"\s*[A-Z][A-Za-z0-9.+#-]*|[A-Z][A-Za-z0-9.+#-]*(?:\s*[\d.]+)?\s*(?:写的|开发的|"
            r"实现的|搭的|构建的)|(?:端|库|框架|语言|队列|缓存|存储)(?:用的)?是\s*[A-Z]"
        ),
    ),
    (
        KnowledgeKind.PATTERN,
        re.compile(
            r"效果(?:很好|不错|明显|显著)|很有效|管用|奏效|解决(?:办法|方法)是|修复方法是|"
            r"(?:通过|靠)[^，。；]{1,12}解决|最佳实践|好办法|帮了大忙|很有帮助"
        ),
    ),
    (
        KnowledgeKind.CONVENTION,
        re.compile(
            r"约定|(?:代码|命名|编码|提交|开发)规范|规范是|惯例|命名规则|"
            r"统一(?:使用|用|采用|为)?|一律|本项目|这个项目(?:里|中)|"
            r"我们(?:的)?(?:规范|标准|规则)|规则是|技术栈|默认(?:用|使用)|必须(?:用|使用)|"
            r"团队(?:规定|约定)"
        ),
    ),
    (
        KnowledgeKind.PREFERENCE,
        re.compile(
            r"偏好|(?<!不)喜欢|不喜欢|讨厌|希望|想要|宁愿|宁可|倾向|习惯(?:用|于)?|"
            r"(?<![申邀])请(?![问假客教示求柬帖])|"
            r"总是|始终|(?<!并)不要|(?<![区识告级派特分个性类差鉴辨])别(?![人的处墅致针])|我的风格"
        ),
    ),
)

_TYPE_KIND = {MemoryType.PREFERENCE: KnowledgeKind.PREFERENCE}
# A sentence needs this much left after its cue words to say something reusable.
_MIN_TOPIC_WORDS = 2
# Owners and stacks keep their cue words: the cue holds the value ("用Go写的", "owned by").
_VALUE_KINDS = frozenset({KnowledgeKind.OWNER, KnowledgeKind.STACK})

# -- what is never knowledge -----------------------------------------------------------------
# A report or a summary as its heading says: "Weekly report: …", "Status: …", "Summary - …",
# "【周报】…", "本周总结：…", "今日进展：…". The marker opens the memory (with at most a few
# qualifying words before its colon), so "周报请用简洁的要点式" (a preference about reports)
# and "keep weekly reports short" are not reports.
_REPORT_HEADING_RE = re.compile(
    r"^\W{0,3}(?:(?:weekly|daily|monthly|quarterly|sprint|status|progress|project|standup|"
    r"stand-up|team|release|end[- ]of[- ](?:day|week))\s+(?:report|update|summary|recap|notes)"
    r"|status|summary|recap|digest|minutes|meeting\s+notes|tl;?dr|changelog)\b"
    r"[^:：.!?\n]{0,24}(?:[:：]|\s[—–-]\s)",
    re.I,
)
_REPORT_HEADING_ZH_RE = re.compile(
    r"^\W{0,3}[^，。；！？:：]{0,6}(?:周报|日报|月报|季报|总结|汇报|小结|纪要|进展|进度|简报|"
    r"报告|复盘总结)[^，。；！？:：]{0,6}(?:[:：】\]]|\s[—–-]\s)"
)
# A note this long whose sentences are about different things is a report of its day, not
# one piece of knowledge: four sentences and thirty words (sixty Han characters), where a
# statement of knowledge is one sentence of 5 to 20 words, and a wish listed in four short
# sentences ("Brief answers. Bullets. No tables. Under 200 words.") stays well below.
_REPORT_SENTENCES = 4
_REPORT_WORDS = 30
_REPORT_HAN_CHARS = 60
_REPORT_TOPIC_OVERLAP = 0.5


def is_report(content: str) -> bool:
    """Whether a memory is a report or a summary (its heading says so, or it is a long note
    about several things): it reports what happened, and what it mentions in passing is
    knowledge only when it is said on its own."""
    _, body = split_speaker(content)
    for text in dict.fromkeys((body.strip(), content.strip())):
        if _REPORT_HEADING_RE.match(text) or _REPORT_HEADING_ZH_RE.match(text):
            return True
    sentences = split_sentences(body)
    if len(sentences) < _REPORT_SENTENCES:
        return False
    long = (
        sum(1 for c in body if has_han(c)) >= _REPORT_HAN_CHARS
        if has_han(body)
        else word_count(body) >= _REPORT_WORDS
    )
    if not long:
        return False
    topics = [topic_of(s, None) for s in sentences]
    pairs = [(a, b) for i, a in enumerate(topics) for b in topics[i + 1 :]]
    mean = sum(topic_overlap(a, b) for a, b in pairs) / len(pairs)
    return mean < _REPORT_TOPIC_OVERLAP


# Questions that end without a question mark: "Who owns the search service", "谁负责支付模块",
# "数据分析用的是哪个数据库". An interrogative word opens the English one; in Chinese it stands
# anywhere unless 不管 / 无论 make it "whatever" (不管什么情况都要先写测试 is a rule).
_QUESTION_EN_RE = re.compile(
    r"^(?:who|whom|whose|which)\b|^(?:what|where|why|how)\s+(?:is|are|was|were|do|does|did|"
    r"should|can|could|would|will|about)\b|^(?:is|are|do|does|did|can|could|should|will|"
    r"shall|would)\s+(?:we|you|i|it|there|the|this|that|they|he|she)\b",
    re.I,
)
_QUESTION_ZH_RE = re.compile(
    r"谁|哪(?:个|些|里|儿|种|位|家|一)|(?<!没)什么|(?<!不)怎么|为什么|为啥|是否|是不是|有没有|能不能|可不可以|"
    r"要不要|会不会|对不对|行不行|好不好|[吗呢么]\s*[。.!！]?$"
)
_WHATEVER_ZH_RE = re.compile(r"不管|无论|不论|任何")

# Hypotheticals, wishes and maybes say what could be, not what is: "If we ever moved to
# MongoDB, we would …", "What if …", "Suppose …", "Maybe we should try Rust someday",
# "如果以后换成MongoDB，报表都得重写", "假如…", "要是…会怎样", "也许哪天可以试试…". A condition that
# scopes knowledge ("when reviewing, be brief", "如果是事故复盘，请写详细") has no would /
# 会 / 得 of a consequence and stays.
_HYPOTHETICAL_EN_RE = re.compile(
    r"\b(?:what\s+if|suppose|supposing|imagine|hypothetically|in\s+theory|maybe|perhaps|"
    r"someday|some\s+day|one\s+day)\b|"
    r"\bif\b[^.;!?]*\b(?:would|could|might)\b(?!\s+(?:like|rather|prefer|love|appreciate))|"
    r"\b(?:would|could|might)\b(?!\s+(?:like|rather|prefer|love|appreciate))[^.;!?]*\bif\b",
    re.I,
)
_HYPOTHETICAL_ZH_RE = re.compile(
    r"假如|假设|要是|万一|倘若|也许|或许|说不定|哪天|可以试试|不妨|会怎样|会不会|"
    r"如果[^。；！？]*[，,][^。；！？]*(?:会|得|可能)"
)


def asks(sentence: str) -> bool:
    """A question, with or without its question mark."""
    if is_question(sentence):
        return True
    text = sentence.strip()
    if has_han(text):
        match = _QUESTION_ZH_RE.search(text)
        return match is not None and not _WHATEVER_ZH_RE.search(text[: match.start()])
    return _QUESTION_EN_RE.match(text) is not None


def is_hypothetical(sentence: str) -> bool:
    """What could be rather than what is (see ``_HYPOTHETICAL_EN_RE``)."""
    if _HYPOTHETICAL_EN_RE.search(sentence):
        return True
    return has_han(sentence) and _HYPOTHETICAL_ZH_RE.search(sentence) is not None


def knowledge_sources(memories: Sequence[EpisodicMemory]) -> list[EpisodicMemory]:
    """The memories knowledge may come from, for any extractor: raw episodes (a summary
    restates its sources) that carry a fact and are no report."""
    return [m for m in memories if m.level == 0 and _may_hold_knowledge(m.content)]


# consolidate() filters before any extractor and the offline one filters again for its other
# callers: the second look at a run's memories is a cache hit (2,000 rows a run at most).
@functools.lru_cache(maxsize=4096)
def _may_hold_knowledge(content: str) -> bool:
    return not is_report(content) and carries_fact(content)


def extract_offline(memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
    """One candidate per sentence whose cue words name a kind (the first kind that matches).

    Never from a summary (level ≥ 1), a report (:func:`is_report`) or chatter
    (``carries_fact`` false, for the memory or the sentence), and never from a question
    (:func:`asks`) or a hypothetical (:func:`is_hypothetical`)."""
    items: list[KnowledgeItem] = []
    for memory in knowledge_sources(memories):
        _, body = split_speaker(memory.content)
        for sentence in split_sentences(body):
            kind = _kind_of(sentence, memory.type)
            if kind is None:
                continue
            if asks(sentence) or is_hypothetical(sentence) or not carries_fact(sentence):
                continue
            if len(_substance(sentence, kind)) < _MIN_TOPIC_WORDS:
                continue
            items.append(
                KnowledgeItem(
                    kind=kind,
                    statement=sentence.strip(),
                    confidence=0.6 if memory.type is None else 0.7,
                    source_ids=[memory.id],
                    conditions=conditions_of(sentence),
                )
            )
    return KnowledgeBatch(items=items)


def _substance(sentence: str, kind: KnowledgeKind) -> set[str]:
    """The words of a sentence beyond its cue words: "I love it." (我喜欢。) has none."""
    if has_han(sentence) and kind not in _VALUE_KINDS:
        for _, pattern in _CUES_ZH:
            sentence = pattern.sub(" ", sentence)
    return {t for t in raw_tokens(sentence) if t not in STOPWORDS and t not in CUE_WORDS}


def _kind_of(sentence: str, memory_type: MemoryType | None) -> KnowledgeKind | None:
    han = has_han(sentence)
    for (kind, pattern), (_, pattern_zh) in zip(_CUES, _CUES_ZH, strict=True):
        if pattern.search(sentence) or (han and pattern_zh.search(sentence)):
            return kind
    if memory_type in _TYPE_KIND and word_count(sentence) >= 4:
        return _TYPE_KIND[memory_type]
    return None


class OfflineKnowledge:
    @property
    def name(self) -> str:
        return "offline"

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
        return extract_offline(memories)
