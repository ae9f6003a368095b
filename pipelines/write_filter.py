"""The three tiers of the write decision.

Tier 1 runs on the synchronous path and must stay pure and fast (microseconds): it drops bare
acknowledgements. Exact repeats are caught by the database's unique index on the content hash,
which is both cheaper and race-free. Tier 2 is a fast LLM call or the offline heuristic below;
tier 3 is a deeper look, taken only when tier 2's confidence falls inside the uncertain band.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from pipelines.ports import LLM, MalformedLLMOutput, WriteJudgement
from pipelines.records import MemoryType

# Tier 3 runs only between these confidences (the design's uncertain band).
UNCERTAIN_LOW = 0.3
UNCERTAIN_HIGH = 0.7

# Whole messages that carry no information. Matched after normalisation (case, width,
# punctuation and emoji stripped), so "OK!!", "ｏｋ" and "好的。" all match.
ACKNOWLEDGEMENTS: frozenset[str] = frozenset(
    {
        # English
        "ok",
        "okay",
        "okey",
        "k",
        "kk",
        "yes",
        "yep",
        "yeah",
        "yup",
        "no",
        "nope",
        "sure",
        "thanks",
        "thank you",
        "thx",
        "ty",
        "thanks a lot",
        "thank you very much",
        "cool",
        "great",
        "nice",
        "good",
        "fine",
        "got it",
        "gotcha",
        "understood",
        "roger",
        "ack",
        "noted",
        "sounds good",
        "lgtm",
        "right",
        "alright",
        "all right",
        "continue",
        "go on",
        "go ahead",
        "next",
        "done",
        "hmm",
        "hm",
        "uh huh",
        "mhm",
        "i see",
        "makes sense",
        "perfect",
        "awesome",
        "will do",
        "np",
        "no problem",
        "yes please",
        "ok thanks",
        "okay thanks",
        "ok thank you",
        "great thanks",
        "cheers",
        # Chinese
        "好",
        "好的",
        "好滴",
        "好吧",
        "行",
        "可以",
        "嗯",
        "嗯嗯",
        "哦",
        "噢",
        "收到",
        "明白",
        "明白了",
        "知道了",
        "了解",
        "继续",
        "谢谢",
        "多谢",
        "感谢",
        "没问题",
        "对",
        "是的",
        "好的谢谢",
        "ok谢谢",
    }
)


class Tier1Result(BaseModel):
    model_config = ConfigDict(frozen=True)

    keep: bool
    reason: str


def normalise_for_ack(text: str) -> str:
    """Lower-case, NFKC, punctuation and symbols dropped, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    kept = [
        ch if not unicodedata.category(ch).startswith(("P", "S", "C")) else " " for ch in folded
    ]
    return " ".join("".join(kept).split())


def tier1_filter(content: str) -> Tier1Result:
    """Drop a bare acknowledgement; keep everything else for tier 2."""
    if len(content) > 40:  # no acknowledgement is this long; skip the normalisation
        return Tier1Result(keep=True, reason="passed tier-1 rules")
    norm = normalise_for_ack(content)
    if not norm:
        return Tier1Result(keep=False, reason="no words: punctuation or symbols only")
    if norm in ACKNOWLEDGEMENTS:
        return Tier1Result(keep=False, reason=f"bare acknowledgement {norm!r}")
    return Tier1Result(keep=True, reason="passed tier-1 rules")


# -- offline tier-2 / tier-3 heuristics ------------------------------------------------------

_TYPE_CUES: tuple[tuple[MemoryType, re.Pattern[str]], ...] = (
    (
        MemoryType.DECISION,
        re.compile(
            r"\b(decid\w*|we(?:'ll| will) (?:use|go with)|chose|choos\w+|agreed|settled on|"
            r"going with|opt(?:ed)? for|switch(?:ed)? to|instead of|because|rationale|"
            r"trade-?off|constraint|must(?: not)?|may not|required to|deadline)\b|"
            r"决定|选择|采用|必须",
            re.I,
        ),
    ),
    (
        MemoryType.PREFERENCE,
        re.compile(
            r"\b(prefer\w*|i like|i don't like|i dislike|always|never|please (?:always|"
            r"don't|do not)|i want|i'd rather|rather than|my style)\b|喜欢|偏好|不要|希望",
            re.I,
        ),
    ),
    (
        MemoryType.STATUS_CHANGE,
        re.compile(
            r"\b(status|blocked|unblocked|is now|moved to|done|completed|finished|shipped|"
            r"merged|deployed|released|in progress|started|delayed|slipp\w+|on hold|"
            r"closed|reopened)\b|完成|阻塞|延期|上线",
            re.I,
        ),
    ),
    (
        MemoryType.FEEDBACK,
        re.compile(
            r"\b(wrong|incorrect|that's not|not what i|good job|well done|mistake|fix this|"
            r"too (?:long|short|verbose)|should have|don't do that)\b|错了|不对",
            re.I,
        ),
    ),
    (
        MemoryType.ACTION,
        re.compile(
            r"\b(ran|run|running|created|deleted|wrote|updated|installed|executed|called|"
            r"opened|committed|pushed|refactor\w*|implemented|added|removed|renamed)\b",
            re.I,
        ),
    ),
)

_IDENTIFIER_RE = re.compile(
    r"(?:[\w.-]+/[\w./-]+|\b\w+\.\w{1,5}\b|\b[A-Z]{2,}-\d+\b|\b\d+(?:\.\d+)*\b|"
    r"\b[A-Z_]{3,}\b|`[^`]+`|#\d+)"
)
_CHATTER_RE = re.compile(
    r"^(?:hi|hello|hey|good (?:morning|afternoon|evening)|how are you|lol|haha|bye|"
    r"see you|talk later|brb|one sec|just a moment|let me think|interesting|wow)\b",
    re.I,
)

_TYPE_WEIGHT: dict[MemoryType, float] = {
    MemoryType.DECISION: 0.85,
    MemoryType.PREFERENCE: 0.8,
    MemoryType.STATUS_CHANGE: 0.7,
    MemoryType.FEEDBACK: 0.65,
    MemoryType.ACTION: 0.5,
    MemoryType.OBSERVATION: 0.4,
}


def guess_type(content: str) -> tuple[MemoryType, int]:
    """The first type whose cues match, and how many cue words matched in all."""
    best: MemoryType | None = None
    hits = 0
    for memory_type, pattern in _TYPE_CUES:
        found = len(pattern.findall(content))
        if found and best is None:
            best = memory_type
        hits += found
    return (best or MemoryType.OBSERVATION), hits


def count_identifiers(content: str) -> int:
    return len(_IDENTIFIER_RE.findall(content))


def estimate_importance(content: str, memory_type: MemoryType) -> float:
    """Type sets the base; identifiers and length add a little; capped to [0.05, 1]."""
    base = _TYPE_WEIGHT[memory_type]
    ids = min(count_identifiers(content), 5) * 0.02
    words = len(content.split())
    length = 0.05 if words >= 12 else (-0.1 if words <= 3 else 0.0)
    return round(max(0.05, min(1.0, base + ids + length)), 3)


def offline_judge(content: str, type_hint: MemoryType | None) -> WriteJudgement:
    """Tier 2 by rules: cues of decisions, preferences and states keep; small talk goes."""
    guessed, cue_hits = guess_type(content)
    memory_type = type_hint or guessed
    words = len(content.split())
    identifiers = count_identifiers(content)
    if type_hint is not None and type_hint is not MemoryType.OBSERVATION:
        confidence, keep, why = 0.9, True, f"caller marked it {type_hint.value}"
    elif cue_hits >= 2 or (cue_hits == 1 and (identifiers or words >= 8)):
        confidence, keep, why = 0.85, True, f"{guessed.value} cues"
    elif _CHATTER_RE.match(content.strip()) and identifiers == 0 and words <= 8:
        confidence, keep, why = 0.8, False, "small talk without content"
    elif identifiers >= 2 or words >= 15:
        confidence, keep, why = 0.75, True, "carries identifiers or detail"
    elif words <= 3 and identifiers == 0:
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
    identifiers = count_identifiers(content)
    words = len(content.split())
    has_verb_object = words >= 5
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


# -- orchestration ------------------------------------------------------------------------


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


def decide_write(content: str, type_hint: MemoryType | None, llm: LLM) -> WriteOutcome:
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
