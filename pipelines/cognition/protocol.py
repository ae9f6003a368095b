"""The two-stage compression protocol: its records, the JSON an LLM answers, and the checks
of its promises.

Stage 1, **annotate**: every segment (a sentence, a line of a summary, or a block of log or
code) gets a kind: ``decision_rationale``, ``outcome``, ``user_preference``, ``status_change``,
``error_root_cause``, ``debug_output``, or ``chatter`` (greetings, thanks and reactions that
carry nothing), plus its entities, identifiers, and a copy with pronouns and relative dates
resolved.

Stage 2, **compress**: only outcomes and debug output are compressed; decision rationales,
preferences, status changes and errors with their root cause are kept verbatim (relative
dates get an absolute date in brackets, nothing is reworded); chatter goes. Every identifier
(numbers, paths, names) survives: one that only a dropped segment held is listed at the end.

An LLM adapter answers both stages as JSON validated against :class:`AnnotationBatch` and
:class:`SummaryOutput` (temperature 0.3); :class:`CompressionLLM` is what the protocol asks of
the LLM port.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.answers import parse_json
from pipelines.errors import MalformedLLMOutput
from pipelines.records import EpisodicMemory, Level
from pipelines.text.words import (
    fold,
    has_han,
    normalise_token,
    raw_tokens,
    word_count,
)


class SegmentKind(StrEnum):
    DECISION_RATIONALE = "decision_rationale"
    OUTCOME = "outcome"
    USER_PREFERENCE = "user_preference"
    STATUS_CHANGE = "status_change"
    ERROR_ROOT_CAUSE = "error_root_cause"
    DEBUG_OUTPUT = "debug_output"
    CHATTER = "chatter"


# Kept word for word by stage 2.
VERBATIM_KINDS: frozenset[SegmentKind] = frozenset(
    {
        SegmentKind.DECISION_RATIONALE,
        SegmentKind.USER_PREFERENCE,
        SegmentKind.STATUS_CHANGE,
        SegmentKind.ERROR_ROOT_CAUSE,
    }
)


# The kinds as a model that answers in the memories' language may label them (the Chinese
# labels project notes use: 决策记录, 状态变更, 用户偏好, 错误 ...), read as the kinds above.
KIND_LABELS_ZH: dict[str, SegmentKind] = {
    **dict.fromkeys(("决策记录", "决策", "决定", "决策理由"), SegmentKind.DECISION_RATIONALE),
    **dict.fromkeys(("结果", "产出", "成果"), SegmentKind.OUTCOME),
    **dict.fromkeys(("用户偏好", "偏好"), SegmentKind.USER_PREFERENCE),
    **dict.fromkeys(("状态变更", "状态"), SegmentKind.STATUS_CHANGE),
    **dict.fromkeys(("错误", "错误根因", "报错", "根因"), SegmentKind.ERROR_ROOT_CAUSE),
    **dict.fromkeys(("调试输出", "日志"), SegmentKind.DEBUG_OUTPUT),
    **dict.fromkeys(("闲聊", "寒暄"), SegmentKind.CHATTER),
}


class SourceMemory(BaseModel):
    """What compression needs of a memory or of a lower-level summary."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    task_id: str
    session_id: str
    timestamp: datetime
    content: str
    level: Level = Level.L0
    # Raw words this row stands for: its own for L0, the covered originals' for a summary.
    source_words: int = Field(ge=0)
    importance: float = Field(0.5, ge=0.0, le=1.0)

    @classmethod
    def from_memory(cls, memory: EpisodicMemory) -> SourceMemory:
        covered = memory.metadata.get("source_words")
        return cls(
            id=memory.id,
            tenant_id=memory.tenant_id,
            task_id=memory.task_id,
            session_id=memory.session_id,
            timestamp=memory.timestamp,
            content=memory.content,
            level=memory.level,
            source_words=int(covered)
            if isinstance(covered, int) and covered >= 0
            else word_count(memory.content),
            importance=memory.importance,
        )


class Segment(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int = Field(ge=0)
    memory_id: uuid.UUID
    speaker: str | None = None
    addressee: str | None = None
    timestamp: datetime
    text: str


class SegmentAnnotation(BaseModel):
    """Stage 1's answer for one segment: the schema the LLM's JSON is validated against."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    kind: SegmentKind
    resolved: str = Field(
        description="The segment with pronouns resolved to the entities they name and "
        "relative dates made absolute; no other change."
    )
    entities: list[str] = Field(default_factory=list, max_length=64)
    identifiers: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Numbers, paths, names, ids exactly as written in the segment.",
    )
    rationale: str | None = Field(None, description="For a decision: its reason, verbatim.")
    root_cause: str | None = Field(None, description="For an error: its root cause, verbatim.")

    @field_validator("kind", mode="before")
    @classmethod
    def _kind_label(cls, value: object) -> object:
        """A kind given as its Chinese label (状态变更) is that kind."""
        if isinstance(value, str):
            return KIND_LABELS_ZH.get(value.strip(), value)
        return value


class AnnotationBatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    segments: list[SegmentAnnotation]


class SummaryOutput(BaseModel):
    """Stage 2's answer: the schema the LLM's JSON is validated against."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1)
    kept_verbatim: list[int] = Field(default_factory=list)
    dropped: list[int] = Field(default_factory=list)


class AnnotateRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    segments: tuple[Segment, ...]


class CompressRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    level: Level
    target_words: int = Field(ge=1)
    segments: tuple[Segment, ...]
    annotations: tuple[SegmentAnnotation, ...]


def annotation_json_schema() -> dict[str, object]:
    return AnnotationBatch.model_json_schema()


def summary_json_schema() -> dict[str, object]:
    return SummaryOutput.model_json_schema()


def parse_annotations(raw: str, request: AnnotateRequest) -> AnnotationBatch:
    """Validate an LLM's stage-1 JSON; raises MalformedLLMOutput (the adapter retries)."""
    batch = parse_json(raw, AnnotationBatch)
    check_annotations(batch, request)
    return batch


def parse_summary(raw: str, request: CompressRequest) -> SummaryOutput:
    """Validate an LLM's stage-2 JSON and the protocol's promises; raises MalformedLLMOutput."""
    output = parse_json(raw, SummaryOutput)
    return check_summary(output, request)


def check_annotations(batch: AnnotationBatch, request: AnnotateRequest) -> None:
    expected = [s.index for s in request.segments]
    got = [a.index for a in batch.segments]
    if got != expected:
        raise MalformedLLMOutput(
            f"annotations cover segments {got[:8]}…, expected {expected[:8]}… in order"
        )


# Joins the segments of one turn in an offline summary; verbatim text rarely holds it, so the
# next level can cut a summary back into its segments.
SEGMENT_GLUE = " | "

_BRACKETED_RE = re.compile(r" \[[^\]\n]*\]")


def without_insertions(text: str) -> str:
    """The text without its bracketed insertions (a resolved date after "yesterday"): what
    was written. In Chinese an insertion splits a run ("271 周后 [2029-05-07]停止"), so the
    words around it are only whole again without it."""
    return _BRACKETED_RE.sub("", text)


def _norm_ws(text: str) -> str:
    return " ".join(fold(text).split())


def check_summary(output: SummaryOutput, request: CompressRequest) -> SummaryOutput:
    """Every verbatim segment must be in the text word for word (whitespace and case aside).

    Identifiers that went missing are listed at the end instead of failing the answer:
    losing one is common and the repair is exact.
    """
    # Bracketed insertions (a resolved date after "yesterday") are not rewording.
    text = _norm_ws(without_insertions(output.text))
    segments = {s.index: s for s in request.segments}
    for annotation in request.annotations:
        if annotation.kind in VERBATIM_KINDS:
            original = _norm_ws(segments[annotation.index].text)
            if original not in text:
                raise MalformedLLMOutput(
                    f"{annotation.kind.value} segment {annotation.index} is not verbatim in "
                    "the summary"
                )
    missing = missing_identifiers(output.text, request.annotations)
    if missing:
        return output.model_copy(update={"text": f"{output.text}\nids: {', '.join(missing)}"})
    return output


def compact(text: str) -> str:
    """Folded, without whitespace: how an identifier with Chinese in it is looked for.
    Chinese puts no space between words, so "30 天" is in "每30天轮换" and in "每 30 天轮换"
    alike, while its last character is part of a bigram (天轮) and no token of its own."""
    return "".join(fold(text).split())


def missing_identifiers(text: str, annotations: Iterable[SegmentAnnotation]) -> list[str]:
    present = set(raw_tokens(text)) | {normalise_token(t) for t in raw_tokens(text)}
    compacted = compact(text)
    missing: list[str] = []
    seen: set[str] = set()
    for annotation in annotations:
        if annotation.kind is SegmentKind.CHATTER:
            continue
        for identifier in annotation.identifiers:
            key = fold(identifier)
            if key in seen:
                continue
            seen.add(key)
            if has_han(identifier):
                if compact(identifier) not in compacted:
                    missing.append(identifier)
                continue
            parts = raw_tokens(identifier)
            if parts and not all(p in present or normalise_token(p) in present for p in parts):
                missing.append(identifier)
    return missing


@runtime_checkable
class CompressionLLM(Protocol):
    """What the two-stage protocol asks of the LLM port.

    Both methods raise ``MalformedLLMOutput`` when the answer does not fit the schema (the
    adapter validates with :func:`parse_annotations` / :func:`parse_summary`) and
    ``TransientLLMError`` when the call itself failed.
    """

    @property
    def name(self) -> str: ...

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch: ...

    def compress_segments(self, request: CompressRequest) -> SummaryOutput: ...
