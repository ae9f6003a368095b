"""Query rewriting: one question becomes three queries that fail in different ways.

- literal: the question as asked (what the user said is the best single query);
- intent: its content words and entities, without the question's grammar, so neither dense
  nor keyword recall is pulled toward other questions that share "what did ... do";
- associative: the entities and keywords plus terms that co-occur with them in the memory
  (pseudo-relevance feedback), reaching memories that say the same thing in other words.

An LLM adapter may write the three variants itself (``RewriteLLM``); offline, they come from
keyword and entity extraction here.

Chinese has no spaces and no capitals. A run of Han characters is cut at its function words
and question words (什么, 哪些, 为什么, 怎么, 是否, ...); the phrases left are its keywords
(``认证模块的JWT迁移有什么约束`` → 认证模块, JWT, 迁移, 约束). Its entities are quoted
phrases (“”, 「」, 《》, ...), the identifiers and Latin names around the Han runs, and people
named with a title (张工, 王经理, 老李). A text without Han characters is read exactly as
before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.errors import MalformedLLMOutput
from pipelines.text.analyzer import SEARCH_STOPWORDS, analyze
from pipelines.text.identifiers import PERSON_RE
from pipelines.text.words import (
    CJK_STOPWORDS,
    HAN,
    HAN_SEPARATOR_CHARS,
    has_han,
    words,
)

# Variant weights in fusion: the literal question is the most trustworthy query; the
# associative one reaches further and drifts further, so it counts least.
VARIANT_WEIGHTS: dict[str, float] = {"literal": 1.0, "intent": 0.8, "associative": 0.5}

_TOKEN_RE = re.compile(r"[^\W_][\w'./:@+-]*[^\W_]|[^\W_]", re.UNICODE)
_QUOTED_RE = re.compile(r"[\"“”'`]([^\"“”'`]{2,80})[\"“”'`]")
_CAPITALISED_RE = re.compile(r"^[A-Z][\w'-]*$")
_SENTENCE_END = (".", "!", "?", ":", ";", "\n")
# Capitalised words that are grammar, not names, when they open a question.
_NOT_NAMES = frozenset(
    {"i", "what", "when", "where", "who", "whom", "which", "why", "how", "did", "does", "do",
     "is", "are", "was", "were", "can", "could", "would", "should", "will", "has", "have",
     "had", "the", "a", "an", "in", "on", "at", "for", "and", "or", "but", "if", "please",
     "tell", "list", "show", "give", "find", "describe", "explain", "name"}
)  # fmt: skip
_IDENTIFIER_TOKEN_RE = re.compile(
    r"[\w.-]+/[\w./-]+|\b\w+\.\w{1,5}\b|\b[a-z]+_[a-z0-9_]+\b|\b[A-Z]{2,}-\d+\b|\b\d[\d.:/-]*\b"
)

_HAN_RUN_RE = re.compile(f"[{HAN}]+")
# A Han run stands between two words: Latin letters, digits and identifiers touching it
# ("JWT迁移", "PAY-3已完成") are read on their own, and a run of capitalised words ends at it.
_HAN_GAP = " , "
_SENTENCE_END_ZH = ("。", "！", "？", "；", "：")

# Chinese question words: the grammar of a question, dropped like "what" and "which". Those
# with 有/是 in front are one unit (有什么 约束 asks for 约束, not for 有).
CJK_QUESTION_WORDS: frozenset[str] = words(
    """什么 哪些 哪个 哪里 哪儿 哪天 为什么 为何 怎么 怎么样 怎样 如何 是否 是不是 能否 可否
    什么样 怎么回事 为啥 多少 多久 几时 何时 何处 谁 啥 咋 有什么 有哪些 有没有 有多少 是什么
    是谁 是哪"""
)
# Where a Han run is cut into keyword phrases: the function words ``pipelines.text.words``
# cuts its bigrams at (its multi-character stopwords and ``HAN_SEPARATOR_CHARS``) and the
# question words. Longest first, so 为什么 is cut whole before 什么.
_KEYWORD_BREAK_CHARS = "".join(
    sorted(HAN_SEPARATOR_CHARS | {w for w in CJK_QUESTION_WORDS if len(w) == 1})
)
_KEYWORD_BREAK_RE = re.compile(
    "|".join(
        [
            *sorted(
                (w for w in CJK_STOPWORDS | CJK_QUESTION_WORDS if len(w) > 1),
                key=lambda w: (-len(w), w),
            ),
            f"[{_KEYWORD_BREAK_CHARS}]",
        ]
    )
)

_CJK_QUOTED_RE = re.compile(
    r"「([^」]{1,80})」|『([^』]{1,80})』|《([^》]{1,80})》|【([^】]{1,80})】"
)
# A name opens a phrase (after a cut at a function word: 是张工, 和李工) or follows a verb
# that introduces a person; inside a phrase, 紧张工作 holds 张工 without naming anyone.
_NAME_INTRODUCERS = "跟找问请让叫由向同为"


class QueryVariants(BaseModel):
    model_config = ConfigDict(frozen=True)

    literal: str = Field(min_length=1)
    intent: str = Field(min_length=1)
    associative: str = Field(min_length=1)
    keywords: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    source: str = "offline"

    def items(self) -> list[tuple[str, str]]:
        """(variant name, text), distinct texts only, literal first."""
        seen: set[str] = set()
        out: list[tuple[str, str]] = []
        for name in ("literal", "intent", "associative"):
            text = getattr(self, name)
            key = " ".join(text.casefold().split())
            if key not in seen:
                seen.add(key)
                out.append((name, text))
        return out


@runtime_checkable
class RewriteLLM(Protocol):
    """What query rewriting asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def rewrite_query(
        self, query: str, phase: str | None, focus: Sequence[str]
    ) -> QueryVariants: ...


def extract_entities(text: str) -> list[str]:
    """Quoted phrases, identifiers, then names, each once (case-insensitively).

    Runs of capitalised words are one name ("New York"); a capitalised word that opens a
    sentence counts only when it is not grammar ("What", "When", "I"). In Chinese, 「」, 《》,
    『』 and 【】 quote too, identifiers and Latin names are read between the Han runs, and
    people are named with a title (张工, 王经理) where a phrase opens.
    """
    found: list[str] = []

    def keep(entity: str) -> None:
        entity = entity.strip(" .,;:!?")
        if entity and entity.casefold() not in {e.casefold() for e in found}:
            found.append(entity)

    han = has_han(text)
    for match in _QUOTED_RE.finditer(text):
        keep(match.group(1))
    if han:
        for match in _CJK_QUOTED_RE.finditer(text):
            keep(next(group for group in match.groups() if group))
    scan = _HAN_RUN_RE.sub(_HAN_GAP, text) if han else text
    for match in _IDENTIFIER_TOKEN_RE.finditer(scan):
        keep(match.group())
    ends = _SENTENCE_END + _SENTENCE_END_ZH if han else _SENTENCE_END
    run: list[str] = []
    sentence_start = True
    for match in _TOKEN_RE.finditer(scan):
        token = match.group()
        possessive = token.endswith(("'s", "’s"))
        bare = token[:-2] if possessive else token
        folded = bare.casefold()
        is_name = (
            _CAPITALISED_RE.match(bare) is not None
            and folded not in _NOT_NAMES
            and not (sentence_start and folded in SEARCH_STOPWORDS)
        )
        if is_name:
            run.append(bare)
        elif run:
            keep(" ".join(run))
            run = []
        gap = scan[match.end() : match.end() + 2]
        sentence_start = any(mark in gap for mark in ends)
        if run and (possessive or sentence_start or "," in gap):
            keep(" ".join(run))
            run = []
    if run:
        keep(" ".join(run))
    if han:
        for name in titled_names(text):
            keep(name)
    return found


def han_phrases(run: str) -> list[str]:
    """The phrases of a Han run between its function words and question words, in order
    (``认证模块的`` → 认证模块; ``迁移有什么约束`` → 迁移, 约束)."""
    return [part for part in _KEYWORD_BREAK_RE.split(run) if part]


def titled_names(text: str) -> list[str]:
    """People named with a title or a familiar prefix (张工, 王经理, 老李), where a phrase
    opens or after a verb that introduces a person (找张工, 由李工)."""
    names: list[str] = []
    for run in _HAN_RUN_RE.findall(text):
        for phrase in han_phrases(run):
            for match in PERSON_RE.finditer(phrase):
                start = match.start()
                if start == 0 or phrase[start - 1] in _NAME_INTRODUCERS:
                    names.append(match.group())
    return names


def extract_keywords(text: str) -> list[str]:
    """Content words in surface form (stopwords and question words dropped), no repeats.

    A Han run gives its phrases between function words and question words (``han_phrases``),
    the Latin words and identifiers touching it their own keywords (``JWT迁移`` → JWT, 迁移).
    """
    found: list[str] = []
    seen: set[str] = set()

    def keep(token: str) -> None:
        folded = token.casefold()
        if folded not in seen:
            seen.add(folded)
            found.append(token)

    for match in _TOKEN_RE.finditer(text):
        if _HAN_RUN_RE.search(match.group()):
            for piece in _han_pieces(match.group()):
                keep(piece)
            continue
        token = _keyword(match.group())
        if token:
            keep(token)
    return found


def _keyword(raw: str) -> str | None:
    """One token as a keyword: its surface form, or None for grammar and stopwords."""
    token = raw.strip("'.:-+")
    if token.endswith(("'s", "’s")):
        token = token[:-2]
    folded = token.casefold()
    if not token or folded in SEARCH_STOPWORDS or folded in _NOT_NAMES:
        return None
    if not analyze(token):
        return None
    return token


def _han_pieces(token: str) -> list[str]:
    """The keywords of a token holding Han runs: the runs' phrases minus stopwords and
    question words, and the keywords of what lies between the runs, in order."""
    pieces: list[str] = []
    start = 0
    for run in _HAN_RUN_RE.finditer(token):
        pieces += _latin_keywords(token[start : run.start()])
        pieces += [
            phrase
            for phrase in han_phrases(run.group())
            if phrase not in CJK_STOPWORDS and phrase not in CJK_QUESTION_WORDS
        ]
        start = run.end()
    pieces += _latin_keywords(token[start:])
    return pieces


def _latin_keywords(text: str) -> list[str]:
    return [token for match in _TOKEN_RE.finditer(text) if (token := _keyword(match.group()))]


def offline_rewrite(
    query: str, related: Callable[[str], Sequence[str]] | None = None
) -> QueryVariants:
    """The three variants by rules. ``related`` gives co-occurring terms (e.g. BM25 feedback).

    When the query has no content word at all the intent variant is the literal one.
    """
    literal = " ".join(query.split())
    entities = extract_entities(literal)
    keywords = extract_keywords(literal)
    # Keywords keep the question's word order (dense encoders read order); an entity with a
    # stopword inside ("the plan") is added whole when its words are not all keywords. A
    # Chinese word is covered by a keyword phrase holding it (张工 by 张工负责).
    folded_keywords = {word.casefold() for word in keywords}
    han_keywords = [word for word in keywords if has_han(word)]

    def covered(word: str) -> bool:
        if word.casefold() in folded_keywords:
            return True
        return has_han(word) and any(word in keyword for keyword in han_keywords)

    intent_words = keywords + [
        entity for entity in entities if not all(covered(word) for word in entity.split())
    ]
    intent = " ".join(intent_words) or literal
    associations: list[str] = []
    if related is not None:
        present = {term for word in intent_words for term in analyze(word)}
        for term in related(literal):
            if term not in present and term not in associations:
                associations.append(term)
    associative = " ".join([*intent_words, *associations]) or literal
    return QueryVariants(
        literal=literal,
        intent=intent,
        associative=associative,
        keywords=tuple(keywords),
        entities=tuple(entities),
        source="offline",
    )


def rewrite_query(
    query: str,
    *,
    llm: RewriteLLM | None = None,
    phase: str | None = None,
    focus: Sequence[str] = (),
    related: Callable[[str], Sequence[str]] | None = None,
) -> QueryVariants:
    """The LLM's variants when it answers well; a malformed answer gets one retry, then rules.

    Transient errors propagate (the caller decides whether a step can wait).
    """
    if llm is None:
        return offline_rewrite(query, related)
    for _ in range(2):
        try:
            variants = llm.rewrite_query(query, phase, focus)
        except MalformedLLMOutput:
            continue
        if variants.keywords or variants.entities:
            return variants.model_copy(update={"source": llm.name})
        offline = offline_rewrite(query, related)
        return variants.model_copy(
            update={
                "keywords": offline.keywords,
                "entities": offline.entities,
                "source": llm.name,
            }
        )
    return offline_rewrite(query, related).model_copy(update={"source": "offline-fallback"})
