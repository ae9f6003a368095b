"""Consolidation stage 1: knowledge candidates in episodes.

Preferences, effective patterns, mistakes to avoid and project conventions, each with a
confidence and its source ids. An LLM adapter answers :class:`KnowledgeBatch` JSON
(:class:`KnowledgeExtractor` is what consolidation asks of the LLM port); the offline rules
(:class:`OfflineKnowledge`) find them by cue words, one sentence at a time, in English and in
Chinese (教训 / 不要再 a mistake, 效果很好 a pattern, 统一 / 一律 / 本项目 a convention, 请 /
希望 / 偏好 / 习惯 / 总是 / 不要 a preference).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.answers import parse_json
from pipelines.cognition.segments import is_question
from pipelines.cognition.stance import CUE_WORDS, conditions_of
from pipelines.records import EpisodicMemory, MemoryType
from pipelines.text.sentences import split_sentences, split_speaker
from pipelines.text.words import STOPWORDS, has_han, raw_tokens, word_count


class KnowledgeKind(StrEnum):
    PREFERENCE = "preference"
    PATTERN = "pattern"
    MISTAKE = "mistake"
    CONVENTION = "convention"


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
            r"again|should\s+(?:have|not\s+have|n't\s+have)|avoid(?:ed)?\s+\w+ing|broke|"
            r"caused\s+(?:a|an|the)?\s*(?:outage|incident|bug|regression|failure)|"
            r"was\s+(?:a\s+)?wrong|backfired|pitfall|gotcha)\b",
            re.I,
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
            r"\b(?:convention|naming|we\s+(?:always\s+)?use|our\s+(?:style|standard|rule)|"
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
            r"can't\s+stand|(?:my|our)\s+fav(?:ou)?rite|please\s+(?:always|never|don't|do\s+not"
            r"|keep|use|avoid|be)|always\s+(?:use|want|keep|give)|i\s+want|i'd\s+like)\b",
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
            r"(?<![申邀])请(?:用|使用|保持|不要|别|务必|一律|总是|始终|先|尽量|以后|统一|把)|"
            r"总是|始终|(?<!并)不要|别再|我的风格"
        ),
    ),
)

_TYPE_KIND = {MemoryType.PREFERENCE: KnowledgeKind.PREFERENCE}
# A sentence needs this much left after its cue words to say something reusable.
_MIN_TOPIC_WORDS = 2


def extract_offline(memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
    """One candidate per sentence whose cue words name a kind (the first kind that matches)."""
    items: list[KnowledgeItem] = []
    for memory in memories:
        _, body = split_speaker(memory.content)
        for sentence in split_sentences(body):
            if is_question(sentence):
                continue
            kind = _kind_of(sentence, memory.type)
            if kind is None:
                continue
            if len(_substance(sentence)) < _MIN_TOPIC_WORDS:
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


def _substance(sentence: str) -> set[str]:
    """The words of a sentence beyond its cue words: "I love it." (我喜欢。) has none."""
    if has_han(sentence):
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
