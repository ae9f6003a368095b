"""Tiers 2 and 3 of the write decision, taken by the write workers.

Tier 2 is a fast LLM call or the offline heuristic below; tier 3 is a deeper look, taken only
when tier 2's confidence falls inside the uncertain band. ``WriteLLM`` is what this asks of
the LLM port. A malformed answer is asked again once, then the offline rules decide; a
transient error propagates, and the outbox retries the job with backoff.

The offline rules read both languages alike: words are counted by ``word_count`` (a run of
Han characters counts its characters / 1.5), cues and identifiers come from
``pipelines.text``, and Chinese small talk, which runs its pieces together ("辛苦了，明天再聊"),
is recognised piece by piece.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.errors import MalformedLLMOutput
from pipelines.records import MemoryType
from pipelines.text.cues import guess_type, names_commitment
from pipelines.text.identifiers import count_identifiers
from pipelines.text.sentences import split_speaker
from pipelines.text.words import has_han, word_count, words
from pipelines.write.filter import ACK_PIECES, compact_pieces, made_of, normalise_for_ack


class WriteJudgement(BaseModel):
    """A tier-2 or tier-3 answer: keep the memory or not, what it is, how sure."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    keep: bool
    type: MemoryType
    confidence: float = Field(ge=0.0, le=1.0)
    importance: float = Field(0.5, ge=0.0, le=1.0)
    reason: str = Field(min_length=1, max_length=500)


@runtime_checkable
class WriteLLM(Protocol):
    """What the write decision asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def judge_write(self, content: str, type_hint: MemoryType | None) -> WriteJudgement:
        """Tier 2: a fast call. Is this worth keeping, what type, how confident?"""
        ...

    def deep_judge_write(
        self, content: str, type_hint: MemoryType | None, first: WriteJudgement
    ) -> WriteJudgement:
        """Tier 3: a careful second look when tier 2 was unsure."""
        ...


# Tier 3 runs only between these confidences (the design's uncertain band).
UNCERTAIN_LOW = 0.3
UNCERTAIN_HIGH = 0.7


_CHATTER_RE = re.compile(
    r"^(?:hi|hello|hey|good (?:morning|afternoon|evening)|how are you|lol|haha|bye|"
    r"see you|talk later|brb|one sec|just a moment|let me think|interesting|wow)\b",
    re.I,
)

# Chinese small talk runs its greetings, thanks and goodbyes together ("辛苦了，明天再聊"):
# a line (its speaker aside) made only of these and acknowledgements says nothing to recall.
# The English phrases are pieces too, for the mixed lines ("辛苦了，talk tomorrow").
_SMALL_TALK_PIECES: frozenset[str] = compact_pieces(ACK_PIECES) | words(
    """你好 您好 大家好 早 早上好 早安 上午好 下午好 晚上好 晚安 再见 拜拜 回头聊 明天再聊
    改天再聊 下次再聊 回聊 稍等 等一下 等等 让我想想 我想想 我看看 我看一下 我跟进一下 我跟进
    我来跟进 跟进一下 有意思 哇 哈哈哈 加油 辛苦辛苦 hi hello hey bye byebye seeyou
    talklater talktomorrow seeyoutomorrow goodnight"""
)


def is_small_talk(content: str) -> bool:
    """Chinese (or mixed) small talk: the line after its speaker is only small-talk pieces."""
    _, body = split_speaker(content)
    return made_of(normalise_for_ack(body), _SMALL_TALK_PIECES)


def _count_identifiers(content: str) -> int:
    """Identifiers the memory carries. A Chinese speaker (王经理：) reads as a person's name
    while an English one (Dana:) is never counted: only the line after a Chinese speaker is
    counted, so the speaker adds nothing in either language."""
    speaker, body = split_speaker(content)
    return count_identifiers(body if speaker is not None and has_han(speaker) else content)


_TYPE_WEIGHT: dict[MemoryType, float] = {
    MemoryType.DECISION: 0.85,
    MemoryType.PREFERENCE: 0.8,
    MemoryType.STATUS_CHANGE: 0.7,
    MemoryType.FEEDBACK: 0.65,
    MemoryType.ACTION: 0.5,
    MemoryType.OBSERVATION: 0.4,
}


# A decision naming an owner, a milestone, a deadline or a constraint is what later reasoning
# depends on: it never scores below a plain decision's base, however short it is.
COMMITMENT_FLOOR = _TYPE_WEIGHT[MemoryType.DECISION]


def estimate_importance(content: str, memory_type: MemoryType) -> float:
    """Type sets the base; identifiers and length add a little; capped to [0.05, 1]."""
    base = _TYPE_WEIGHT[memory_type]
    ids = min(_count_identifiers(content), 5) * 0.02
    n_words = word_count(content)
    length = 0.05 if n_words >= 12 else (-0.1 if n_words <= 3 else 0.0)
    importance = base + ids + length
    if memory_type is MemoryType.DECISION and names_commitment(content):
        importance = max(importance, COMMITMENT_FLOOR)
    return round(max(0.05, min(1.0, importance)), 3)


def offline_judge(content: str, type_hint: MemoryType | None) -> WriteJudgement:
    """Tier 2 by rules: cues of decisions, preferences and states keep; small talk goes."""
    guessed, cue_hits = guess_type(content)
    memory_type = type_hint or guessed
    n_words = word_count(content)
    identifiers = _count_identifiers(content)
    if type_hint is not None and type_hint is not MemoryType.OBSERVATION:
        confidence, keep, why = 0.9, True, f"caller marked it {type_hint.value}"
    elif cue_hits >= 2 or (cue_hits == 1 and (identifiers or n_words >= 8)):
        confidence, keep, why = 0.85, True, f"{guessed.value} cues"
    elif (
        _CHATTER_RE.match(content.strip()) and identifiers == 0 and n_words <= 8
    ) or is_small_talk(content):
        confidence, keep, why = 0.8, False, "small talk without content"
    elif identifiers >= 2 or n_words >= 15:
        confidence, keep, why = 0.75, True, "carries identifiers or detail"
    elif n_words <= 3 and identifiers == 0:
        confidence, keep, why = 0.5, False, "very short, no identifiers"
    else:
        confidence, keep, why = 0.55, True, "plain observation"
    return WriteJudgement(
        keep=keep,
        type=memory_type,
        confidence=confidence,
        importance=estimate_importance(content, memory_type),
        reason=f"offline rules: {why}",
    )


def offline_deep_judge(
    content: str, type_hint: MemoryType | None, first: WriteJudgement
) -> WriteJudgement:
    """Tier 3 by rules: a memory that names a thing or states a fact is kept."""
    identifiers = _count_identifiers(content)
    has_verb_object = word_count(content) >= 5
    keep = identifiers > 0 or has_verb_object or first.type is not MemoryType.OBSERVATION
    why = (
        "names identifiers"
        if identifiers
        else ("states something in full" if has_verb_object else "too thin to recall")
    )
    return WriteJudgement(
        keep=keep,
        type=first.type,
        confidence=0.8 if keep else 0.75,
        importance=first.importance,
        reason=f"offline deep rules: {why}",
    )


class TierVerdict(BaseModel):
    """One tier's record, as ``write_decisions`` keeps it."""

    model_config = ConfigDict(frozen=True)

    tier: int
    keep: bool
    type: MemoryType
    confidence: float
    importance: float
    reason: str
    source: str


class WriteOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    keep: bool
    type: MemoryType
    importance: float
    reason: str
    verdicts: tuple[TierVerdict, ...]


def _ask(
    call: Callable[[], WriteJudgement], fallback: Callable[[], WriteJudgement], llm_name: str
) -> tuple[WriteJudgement, str]:
    """One LLM call; a malformed answer gets one retry, then the offline rules decide.

    Transient errors propagate: the job is retried with backoff by the outbox.
    """
    try:
        return call(), llm_name
    except MalformedLLMOutput:
        pass
    try:
        return call(), llm_name
    except MalformedLLMOutput as exc:
        judgement = fallback()
        return (
            judgement.model_copy(
                update={"reason": f"{judgement.reason} (fallback: {llm_name} answered {exc})"}
            ),
            "offline-fallback",
        )


def decide_write(content: str, type_hint: MemoryType | None, llm: WriteLLM) -> WriteOutcome:
    """Tier 2, and tier 3 when tier 2 is unsure. Raises TransientLLMError to be retried."""
    first, source = _ask(
        lambda: llm.judge_write(content, type_hint),
        lambda: offline_judge(content, type_hint),
        llm.name,
    )
    verdicts = [
        TierVerdict(
            tier=2,
            keep=first.keep,
            type=first.type,
            confidence=first.confidence,
            importance=first.importance,
            reason=first.reason,
            source=source,
        )
    ]
    final = first
    if UNCERTAIN_LOW <= first.confidence <= UNCERTAIN_HIGH:
        final, source = _ask(
            lambda: llm.deep_judge_write(content, type_hint, first),
            lambda: offline_deep_judge(content, type_hint, first),
            llm.name,
        )
        verdicts.append(
            TierVerdict(
                tier=3,
                keep=final.keep,
                type=final.type,
                confidence=final.confidence,
                importance=final.importance,
                reason=final.reason,
                source=source,
            )
        )
    memory_type = type_hint or final.type
    return WriteOutcome(
        keep=final.keep,
        type=memory_type,
        importance=final.importance,
        reason=final.reason,
        verdicts=tuple(verdicts),
    )
