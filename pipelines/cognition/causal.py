"""Causal proposals: which earlier memory a new one is the cause or the effect of.

The LLM port answers :class:`CausalBatch` JSON (:class:`CausalProposer`); the offline rules
(:func:`propose_causal_offline`) read cue phrases. In English "blocked by X", "because of X",
"due to X", "caused by X", "waits on X", "depends on X" make the memory naming X the cause;
"X delays / blocks / breaks / affects Y" makes the memory naming Y the effect. In Chinese the
cues are 因为 / 由于 / 依赖 / 等待 / 受…影响 / …所以 (the memory naming X is the cause) and
会影响 / 影响到 / 导致 / 推迟 / 延期 / 阻塞 (the memory naming Y is the effect); a Chinese phrase
names many memories in part (every memory about 支付模块), so it links only to those that
match it best. A causal statement links its two ends whichever was said first (the three
rules of :func:`propose_causal_offline`); a question states no cause.

Measured on the labeled chains of ``tests/data/cognition/causal.jsonl`` by ``memharness
bench cognition --sections causal``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.answers import parse_json
from pipelines.cognition.entities import extract_entities
from pipelines.cognition.protocol import compact
from pipelines.cognition.segments import is_question
from pipelines.records import EpisodicMemory
from pipelines.text.memo import memo_texts
from pipelines.text.sentences import split_sentences, split_speaker
from pipelines.text.words import content_tokens, has_han


class CausalEdge(BaseModel):
    """One proposed causal relation: the LLM's JSON schema for ``propose_causal``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cause_id: uuid.UUID
    effect_id: uuid.UUID
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field("", max_length=300)


class CausalBatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    edges: list[CausalEdge]


def parse_causal(raw: str) -> CausalBatch:
    """Validate an LLM's ``propose_causal`` JSON; raises MalformedLLMOutput."""
    return parse_json(raw, CausalBatch)


@runtime_checkable
class CausalProposer(Protocol):
    """What causal linking asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch: ...


_PHRASE = r"((?:the\s+)?[\w'/.#-]+(?:\s+[\w'/.#-]+){0,5})"
# The new memory is the effect of what the phrase names.
_EFFECT_OF_RE = re.compile(
    rf"\b(?:blocked\s+(?:by|on)|because\s+of|due\s+to|caused\s+by|waits?\s+(?:on|for)|"
    rf"waiting\s+(?:on|for)|"
    rf"as\s+a\s+result\s+of|depends\s+on|delayed\s+by|held\s+up\s+by|after)\s+{_PHRASE}",
    re.I,
)
# The new memory is the cause of what the phrase names.
_CAUSE_OF_RE = re.compile(
    rf"\b(?:delays?|delayed|block(?:s|ed)?|breaks?|broke|affects?|affected|pushes\s+back|"
    rf"pushed\s+back|impacts?|impacted|postpones?|postponed|slows?\s+down)"
    rf"(?!\s+(?:by|on)\b)\s+{_PHRASE}",  # "blocked by X" is the passive: X is the cause
    re.I,
)
_PHRASE_END_RE = re.compile(r"[,.;:!?]|\s(?:and|but|so|which|because|until|by)\s", re.I)

# The same in Chinese: X, a run up to a clause mark or a word that ends it (而推迟, 才能).
_PHRASE_ZH = r"([^，。；：！？,;:!?\n]{2,30}?)(?=[，。；：！？,;:!?\n]|而|才|所以|的影响|影响|$)"
_EFFECT_OF_ZH_RE = re.compile(
    rf"(?:因为|由于|受到?|依赖于?|取决于|等待|等着|要等|被|卡在|基于){_PHRASE_ZH}"
)
_CAUSE_OF_ZH_RE = re.compile(
    r"(?:会影响|影响到|影响了|影响|波及|导致了?|造成了?|使得|拖累了?|耽误了?|阻塞了?|拖慢了?|"
    rf"(?:推迟|延期|延误)了?(?![到至为成]))\s*{_PHRASE_ZH}"
)
# "X，所以 Y": the memory saying it is the effect of X, the clause before the connective.
_CONSEQUENCE_ZH_RE = re.compile(r"([^，。；！？,;!?\n]{2,30})[，,]?\s*(?:所以|因此|因而|于是)")


@memo_texts(maxsize=16_384)
def entities_of(text: str) -> frozenset[str]:
    return extract_entities(text)


@memo_texts(maxsize=16_384)
def tokens_of(text: str) -> frozenset[str]:
    return frozenset(content_tokens(text))


@memo_texts(maxsize=16_384)
def _phrase_keys(phrase: str) -> tuple[frozenset[str], frozenset[str]]:
    cut = _PHRASE_END_RE.search(phrase)
    phrase = phrase[: cut.start()] if cut else phrase
    return extract_entities(phrase), frozenset(content_tokens(phrase))


def _matches(phrase: tuple[frozenset[str], frozenset[str]], other: EpisodicMemory) -> float:
    entities, tokens = phrase
    other_entities = entities_of(other.content)
    if entities and entities & other_entities:
        return 0.8
    if tokens:
        other_tokens = tokens_of(other.content)
        overlap = len(tokens & other_tokens) / len(tokens)
        if overlap >= 0.5 and len(tokens & other_tokens) >= 2:
            return 0.6
    return 0.0


def _specific(entities: frozenset[str]) -> frozenset[str]:
    """The entities no other one contains: 支付模块联调 of {支付模块, 支付模块联调}."""
    return frozenset(e for e in entities if not any(e != o and e in o for o in entities))


def _best_matches(
    phrase: tuple[frozenset[str], frozenset[str]], others: Sequence[EpisodicMemory]
) -> list[tuple[EpisodicMemory, float]]:
    """The candidates a Chinese phrase names best, most shared entities then most shared
    words first. As :func:`_matches`, with one more demand: an entity match must be on the
    phrase's most specific entities (支付模块联调, not the 支付模块 inside it), since most
    memories of a project name its modules."""
    entities, tokens = phrase
    specific = _specific(entities)
    scored: list[tuple[tuple[int, int], EpisodicMemory, float]] = []
    for other in others:
        other_entities = entities_of(other.content)
        other_tokens = tokens_of(other.content)
        shared = (len(entities & other_entities), len(tokens & other_tokens))
        if specific & other_entities:
            confidence = 0.8
        elif tokens and shared[1] >= 2 and shared[1] >= 0.5 * len(tokens):
            confidence = 0.6
        else:
            continue
        scored.append((shared, other, confidence))
    if not scored:
        return []
    best = max(shared for shared, _, _ in scored)
    return [(other, confidence) for shared, other, confidence in scored if shared == best]


class _Cue(NamedTuple):
    """One causal cue in a memory's text."""

    memory_is_cause: bool  # the memory saying it is the cause of what ``phrase`` names
    phrase: str  # what the cue names: the other end of the edge
    subject: str  # for a cause cue, what the memory says is the cause ("" otherwise)
    text: str  # the cue as it stands in the text
    han: bool  # read with the Chinese rules (best matches only)


_CLAUSE_START_RE = re.compile(r"[,.;:!?，。；：！？\n]")


def _subject_before(body: str, at: int, *, han: bool) -> str:
    """The clause before a cue: "the search index rebuild" of "…; the search index rebuild
    delays the dashboard", 证书轮换失败 of 证书轮换失败导致了网关的故障."""
    clause = _CLAUSE_START_RE.split(body[:at])[-1].strip()
    # "支付模块的联调因为认证模块延期而推迟": the 延期 is inside a reason, not said of a subject.
    reason = _EFFECT_OF_ZH_RE if han else _EFFECT_OF_RE
    if reason.search(clause) or (han and _EFFECT_OF_RE.search(clause)):
        return ""
    if han:
        return clause[-30:]
    return " ".join(clause.split()[-6:])


@memo_texts(maxsize=16_384)
def _cues_of(body: str) -> tuple[_Cue, ...]:
    """The cues of a text's statements; a question ("did the SSO delay affect anything?",
    会不会影响别的模块？) asks about a cause and states none."""
    cues: list[_Cue] = []
    for sentence in split_sentences(body):
        if is_question(sentence):
            continue
        for pattern, memory_is_cause in ((_EFFECT_OF_RE, False), (_CAUSE_OF_RE, True)):
            for match in pattern.finditer(sentence):
                subject = (
                    _subject_before(sentence, match.start(), han=False) if memory_is_cause else ""
                )
                cues.append(_Cue(memory_is_cause, match.group(1), subject, match.group(0), False))
        if has_han(sentence):
            for pattern, memory_is_cause in (
                (_EFFECT_OF_ZH_RE, False),
                (_CONSEQUENCE_ZH_RE, False),
                (_CAUSE_OF_ZH_RE, True),
            ):
                for match in pattern.finditer(sentence):
                    subject = (
                        _subject_before(sentence, match.start(), han=True)
                        if memory_is_cause
                        else ""
                    )
                    cues.append(
                        _Cue(memory_is_cause, match.group(1), subject, match.group(0), True)
                    )
    return tuple(cues)


def _states_something(memory: EpisodicMemory) -> bool:
    """A memory that only asks is no end of a causal edge: it says nothing happened."""
    return not _only_asks(memory.content)


@memo_texts(maxsize=16_384)
def _only_asks(content: str) -> bool:
    _, body = split_speaker(content)
    return all(is_question(s) for s in split_sentences(body) or [body])


def propose_causal_offline(
    memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
) -> CausalBatch:
    """Causal edges between ``memory`` and ``candidates`` from cue phrases (module docstring).

    A causal statement links its two ends whichever of them was said first, so three rules
    read the cues:

    1. **The new memory's cues** name an older memory: "blocked by X" makes the memory naming
       X its cause, "delays Y" makes the memory naming Y its effect.
    2. **The subject of a new cause**: "the retraining pushes back the campaign" after "the
       retraining is held up by the schema change": what the older memory says about the
       retraining leads on to the campaign (older → new, at most 0.6), when one older memory
       matches the subject best.
    3. **An older memory's cues name the new one**: "the rebuild delays the dashboard", then
       later "the dashboard blocks the review deck": the older memory is the cause of the new
       one. Only cause cues reach ahead: a reason said earlier ("因为 P", "because of P") is
       restated in many later memories that are not its cause.

    An edge is never added against one already proposed in the other direction.
    """
    edges: dict[tuple[uuid.UUID, uuid.UUID], CausalEdge] = {}
    _, body = split_speaker(memory.content)
    if not _states_something(memory):
        return CausalBatch(edges=[])
    others = [
        c
        for c in candidates
        if c.id != memory.id and c.tenant_id == memory.tenant_id and _states_something(c)
    ]

    def add(other: EpisodicMemory, confidence: float, memory_is_cause: bool, cue: str) -> None:
        cause, effect = (memory.id, other.id) if memory_is_cause else (other.id, memory.id)
        key = (cause, effect)
        if (effect, cause) in edges:
            return
        if key not in edges or edges[key].confidence < confidence:
            edges[key] = CausalEdge(
                cause_id=cause,
                effect_id=effect,
                confidence=confidence,
                reason=f"offline cue {cue[:80]!r}",
            )

    def fresh(cue: _Cue, pool: Sequence[EpisodicMemory]) -> list[EpisodicMemory]:
        # A memory that says the same cue (因为…) again restates this one: no cause.
        said = compact(cue.text)
        return [o for o in pool if said not in compact(o.content)]

    cues = _cues_of(body)
    for cue in cues:  # rule 1
        phrase = _phrase_keys(cue.phrase)
        if cue.han:
            for other, confidence in _best_matches(phrase, fresh(cue, others)):
                add(other, confidence, cue.memory_is_cause, cue.text)
        else:
            for other in others:
                confidence = _matches(phrase, other)
                if confidence > 0:
                    add(other, confidence, cue.memory_is_cause, cue.text)
    for cue in cues:  # rule 2
        if cue.memory_is_cause and cue.subject:
            # Only a subject that names one earlier memory best: "报表模块要延期" names every
            # memory about the module, and none of them is the news that caused the delay.
            best = _best_matches(_phrase_keys(cue.subject), fresh(cue, others))
            if len(best) == 1:
                other, confidence = best[0]
                add(other, min(confidence, 0.6), False, f"{cue.subject} → {cue.text}")
    for other in others:  # rule 3
        _, other_body = split_speaker(other.content)
        for cue in _cues_of(other_body):
            if not cue.memory_is_cause:
                # "因为 P" / "because of P" said earlier: a reason, restated in many later
                # memories that are not its cause. Only "X delays / affects P" reaches ahead.
                continue
            phrase = _phrase_keys(cue.phrase)
            if cue.han:
                # A Chinese phrase names many memories in part: only its most specific
                # entities (支付模块联调, not 支付模块) tie it to the new memory.
                confidence = 0.6 if _specific(phrase[0]) & entities_of(memory.content) else 0.0
            else:
                confidence = _matches(phrase, memory)
            if confidence > 0:
                add(other, min(confidence, 0.6), False, cue.text)
    return CausalBatch(edges=list(edges.values()))


class OfflineCausal:
    @property
    def name(self) -> str:
        return "offline"

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch:
        return propose_causal_offline(memory, candidates)
