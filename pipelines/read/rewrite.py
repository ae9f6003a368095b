"""Query rewriting: one question becomes three queries that fail in different ways.

- literal: the question as asked (what the user said is the best single query);
- intent: its content words and entities, without the question's grammar, so neither dense
  nor keyword recall is pulled toward other questions that share "what did ... do";
- associative: the entities and keywords plus terms that co-occur with them in the memory
  (pseudo-relevance feedback), reaching memories that say the same thing in other words.

An LLM adapter may write the three variants itself (``RewriteLLM``); offline, they come from
keyword and entity extraction here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.errors import MalformedLLMOutput
from pipelines.text.analyzer import SEARCH_STOPWORDS, analyze

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
    sentence counts only when it is not grammar ("What", "When", "I").
    """
    found: list[str] = []

    def keep(entity: str) -> None:
        entity = entity.strip(" .,;:!?")
        if entity and entity.casefold() not in {e.casefold() for e in found}:
            found.append(entity)

    for match in _QUOTED_RE.finditer(text):
        keep(match.group(1))
    for match in _IDENTIFIER_TOKEN_RE.finditer(text):
        keep(match.group())
    run: list[str] = []
    sentence_start = True
    for match in _TOKEN_RE.finditer(text):
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
        gap = text[match.end() : match.end() + 2]
        sentence_start = any(mark in gap for mark in _SENTENCE_END)
        if run and (possessive or sentence_start or "," in gap):
            keep(" ".join(run))
            run = []
    if run:
        keep(" ".join(run))
    return found


def extract_keywords(text: str) -> list[str]:
    """Content words in surface form (stopwords and question words dropped), no repeats."""
    words: list[str] = []
    seen: set[str] = set()
    for match in _TOKEN_RE.finditer(text):
        token = match.group().strip("'.:-+")
        if token.endswith(("'s", "’s")):
            token = token[:-2]
        folded = token.casefold()
        if not token or folded in SEARCH_STOPWORDS or folded in _NOT_NAMES:
            continue
        if not analyze(token):
            continue
        if folded not in seen:
            seen.add(folded)
            words.append(token)
    return words


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
    # stopword inside ("the plan") is added whole when its words are not all keywords.
    folded_keywords = {word.casefold() for word in keywords}
    intent_words = keywords + [
        entity
        for entity in entities
        if not all(word.casefold() in folded_keywords for word in entity.split())
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
