"""Tiers 2 and 3 of the write decision, taken by the write workers.

Tier 2 is a fast LLM call or the offline heuristic below; tier 3 is a deeper look, taken only
when tier 2's confidence falls inside the uncertain band. ``WriteLLM`` is what this asks of
the LLM port. A malformed answer is asked again once, then the offline rules decide; a
transient error propagates, and the outbox retries the job with backoff.

The offline rules keep every statement of fact, however short ("I'm allergic to peanuts.",
"我住在北京。"): what they drop is only what ``pipelines.write.facts.carries_fact`` calls chatter
(acknowledgements, small talk, reactions, laughter, stalling, noise). Length no longer decides
keeping; it only nudges importance. Both languages are read alike: words are counted by
``word_count`` (a run of Han characters counts its characters / 1.5), cues and identifiers
come from ``pipelines.text``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.errors import MalformedLLMOutput
from pipelines.records import MemoryType
from pipelines.text.cues import guess_type, names_commitment
from pipelines.text.identifiers import count_identifiers
from pipelines.text.sentences import split_speaker
from pipelines.text.words import has_han, word_count
from pipelines.write.facts import carries_fact
from pipelines.write.facts import is_small_talk as is_small_talk  # its public home, as before


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

# A memory that states a fact (a person's fact, a plan, an event, a setting, a choice) is never
# rated below the decay sweep's eviction line: ``DecayPolicy.evict_below_importance``'s
# default, 0.5, below which a faded memory is deleted instead of compressed. An observation's
# base (0.4) and a short text's malus (-0.1) put most short personal facts at 0.3 to 0.45.
FACT_IMPORTANCE_FLOOR = 0.5
# Chatter that was kept anyway (a caller's type, a model's verdict) stays well under that line.
CHATTER_IMPORTANCE_CAP = 0.2


def estimate_importance(content: str, memory_type: MemoryType) -> float:
    """Type sets the base; identifiers and length add a little; a commitment lifts a decision
    to ``COMMITMENT_FLOOR``; a statement of fact scores at least ``FACT_IMPORTANCE_FLOOR`` and
    chatter at most ``CHATTER_IMPORTANCE_CAP``; capped to [0.05, 1]."""
    base = _TYPE_WEIGHT[memory_type]
    ids = min(_count_identifiers(content), 5) * 0.02
    n_words = word_count(content)
    length = 0.05 if n_words >= 12 else (-0.1 if n_words <= 3 else 0.0)
    importance = base + ids + length
    if memory_type is MemoryType.DECISION and names_commitment(content):
        importance = max(importance, COMMITMENT_FLOOR)
    if carries_fact(content):
        importance = max(importance, FACT_IMPORTANCE_FLOOR)
    else:
        importance = min(importance, CHATTER_IMPORTANCE_CAP)
    return round(max(0.05, min(1.0, importance)), 3)


def offline_judge(content: str, type_hint: MemoryType | None) -> WriteJudgement:
    """Tier 2 by rules: a caller's type keeps; chatter (no fact, whatever cue words it holds)
    goes; cues of decisions, preferences and states keep; identifiers or detail keep; any
    other statement is kept as a plain observation, unsure enough for tier 3 to look again."""
    guessed, cue_hits = guess_type(content)
    memory_type = type_hint or guessed
    n_words = word_count(content)
    identifiers = _count_identifiers(content)
    if type_hint is not None and type_hint is not MemoryType.OBSERVATION:
        confidence, keep, why = 0.9, True, f"caller marked it {type_hint.value}"
    elif not carries_fact(content):
        confidence, keep, why = 0.8, False, "small talk without content"
    elif cue_hits >= 2 or (cue_hits == 1 and (identifiers or n_words >= 8)):
        confidence, keep, why = 0.85, True, f"{guessed.value} cues"
    elif identifiers >= 2 or n_words >= 15:
        confidence, keep, why = 0.75, True, "carries identifiers or detail"
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
    """Tier 3 by rules: a memory that names a thing, states a fact or was typed as more than
    an observation is kept; only one that carries no fact goes, however long it is."""
    identifiers = _count_identifiers(content)
    states_fact = carries_fact(content)
    keep = identifiers > 0 or states_fact or first.type is not MemoryType.OBSERVATION
    why = (
        "names identifiers"
        if identifiers
        else ("states something" if states_fact else "carries no fact")
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
    """Tier 2, and tier 3 when tier 2 is unsure; a kept statement of fact is given at least
    ``FACT_IMPORTANCE_FLOOR``. Raises TransientLLMError to be retried."""
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
    importance = final.importance
    if final.keep and carries_fact(content):
        # Whoever judged it (a model rates by its own scale), a kept fact stays above the
        # decay sweep's eviction line; the verdicts keep the judge's own figure.
        importance = max(importance, FACT_IMPORTANCE_FLOOR)
    return WriteOutcome(
        keep=final.keep,
        type=memory_type,
        importance=importance,
        reason=final.reason,
        verdicts=tuple(verdicts),
    )
