"""Hierarchical compression: the level policy and the two-stage annotate/compress protocol.

Levels
------
L0 raw (about a day) → L1 fine summary (1–7 days, about 10:1) → L2 phase summary (1–4 weeks,
about 50:1) → L3 task summary at task completion (about 200:1) → L4 semantic knowledge (made
by :mod:`pipelines.consolidate`, not here). The ratio is always against the raw words the
summary covers. The level a memory should sit at follows its age *and* its reads: age is
divided by ``1 + ln(1 + access_count)`` (the factor the forgetting curve uses), so an
often-retrieved memory stays fine (:func:`target_level`).

Compression never destroys anything: a summary is a new row (:class:`SummaryDraft`) with
parent pointers and a version, and its id is derived from them, so a replay writes the same
row and a rollback (``pipelines.quality``) only retires the summary. A retry after a rollback
is the next version and aims at half the previous ratio (:meth:`LevelPolicy.ratio`). Final
eviction is the decay model's business (``pipelines.decay``) and is logged there.

The protocol
------------
Stage 1, **annotate**: every segment (a sentence, a line of a summary, or a block of log or
code) gets a kind: ``decision_rationale``, ``outcome``, ``user_preference``, ``status_change``,
``error_root_cause``, ``debug_output``, or ``chatter`` (greetings, thanks and reactions that
carry nothing; a kind the issue does not list, but a compressor has to name what it drops),
plus its entities, identifiers, and a copy with pronouns and relative dates resolved.

Stage 2, **compress**: only outcomes and debug output are compressed; decision rationales,
preferences, status changes and errors with their root cause are kept verbatim (relative
dates get an absolute date in brackets, nothing is reworded); chatter goes. Every identifier
(numbers, paths, names) survives: one that only a dropped segment held is listed at the end.

An LLM adapter answers both stages as JSON validated against :class:`AnnotationBatch` and
:class:`SummaryOutput` (temperature 0.3); a malformed answer is retried once, then the offline
rules below (:class:`OfflineCompressor`) answer, implementing the same protocol:

* pronouns: first person is attributed by the line's ``Speaker:`` prefix; ``you``/``your``
  become the other party of a two-party conversation; ``he``/``she`` become the one person
  named in the two previous segments, and stay as they are when that is not unique;
* relative dates (``yesterday``, ``last week``, ``last Friday``, ``two months ago``,
  ``next month``, ``last summer`` …) are resolved against the memory's timestamp and written
  as ISO dates or ranges (``2023-05-07``, ``2023-05-01..2023-05-07``, ``2023-05``);
* outcomes become telegraphic: function words, fillers and interjections go, negations,
  content words, numbers and names stay, in their order;
* debug output becomes its first line, its error lines and its identifiers;
* over budget (raw words / target ratio), clauses of outcomes are dropped, lowest value per
  word first: value counts words no other clause says and identifiers, and is halved for
  sentences aimed at the other party ("your painting is lovely") or wishes ("hope it goes
  well"), which in a dialogue mostly react rather than inform. Verbatim segments are never
  dropped, so a summary can stay above its budget; the draft records the words it has.

What the offline rules reach is measured by ``memharness bench compression``: on chat data,
dropping and shortening sentences cannot reach 10:1 without losing facts; the quality check
(``pipelines.quality``) then rolls back and retries gentler.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime
from enum import StrEnum
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipelines.dates import RELATIVE_RE, find_dates, resolve_relative_dates
from pipelines.ports import MalformedLLMOutput
from pipelines.records import ID_NAMESPACE, EpisodicMemory, Level
from pipelines.summarize import split_sentences
from pipelines.text import (
    FILLERS,
    NEGATIONS,
    REACTIONS,
    STOPWORDS,
    content_tokens,
    fold,
    normalise_token,
    raw_tokens,
    word_count,
)

DAY_S = 86_400.0

# -- level policy ----------------------------------------------------------------------------


class LevelPolicy(BaseModel):
    """Age bands of the levels and their target ratios (issue 4's defaults)."""

    model_config = ConfigDict(frozen=True)

    l0_max_age_s: float = Field(1 * DAY_S, gt=0)
    l1_max_age_s: float = Field(7 * DAY_S, gt=0)
    ratio_l1: float = Field(10.0, ge=1)
    ratio_l2: float = Field(50.0, ge=1)
    ratio_l3: float = Field(200.0, ge=1)
    # One L1 summary covers at most a day of one session and this many raw words, so an L1
    # row stays a readable paragraph (~200 words at 10:1).
    l1_group_max_words: int = Field(2000, ge=1)
    l1_group_span_s: float = Field(1 * DAY_S, gt=0)
    # One L2 summary covers one phase of a task: at most a week of L1 rows.
    l2_group_span_s: float = Field(7 * DAY_S, gt=0)

    def ratio(self, level: Level, version: int = 1) -> float:
        """The target ratio of a level; each retry after a rollback halves it (never < 1)."""
        if level == Level.L1:
            ratio = self.ratio_l1
        elif level == Level.L2:
            ratio = self.ratio_l2
        elif level == Level.L3:
            ratio = self.ratio_l3
        else:
            raise ValueError(f"no compression ratio for L{int(level)}")
        halvings = max(1, version) - 1
        return max(1.0, float(ratio) / float(2**halvings))


DEFAULT_LEVELS = LevelPolicy()


def effective_age_s(age_s: float, access_count: int) -> float:
    """Age slowed by reads, with the forgetting curve's access factor."""
    if access_count < 0:
        raise ValueError(f"access_count must be >= 0, got {access_count}")
    return max(0.0, age_s) / (1.0 + math.log1p(access_count))


def target_level(age_s: float, access_count: int, policy: LevelPolicy = DEFAULT_LEVELS) -> Level:
    """The finest level allowed for a memory of this age and reads; L3 only at task end."""
    age = effective_age_s(age_s, access_count)
    if age < policy.l0_max_age_s:
        return Level.L0
    if age < policy.l1_max_age_s:
        return Level.L1
    return Level.L2


# -- segments and the schemas of the protocol ------------------------------------------------


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


M = TypeVar("M", bound=BaseModel)


def parse_json(raw: str, model: type[M]) -> M:
    """An LLM's JSON answer as ``model``; any schema error is MalformedLLMOutput."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise MalformedLLMOutput(
            f"{model.__name__}: {exc.error_count()} schema error(s): {exc.errors()[0]['msg']}"
        ) from None


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


def _norm_ws(text: str) -> str:
    return " ".join(fold(text).split())


def check_summary(output: SummaryOutput, request: CompressRequest) -> SummaryOutput:
    """Every verbatim segment must be in the text word for word (whitespace and case aside).

    Identifiers that went missing are listed at the end instead of failing the answer:
    losing one is common and the repair is exact.
    """
    # Bracketed insertions (a resolved date after "yesterday") are not rewording.
    text = _norm_ws(_BRACKETED_RE.sub("", output.text))
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


def missing_identifiers(text: str, annotations: Iterable[SegmentAnnotation]) -> list[str]:
    present = set(raw_tokens(text)) | {normalise_token(t) for t in raw_tokens(text)}
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
            parts = raw_tokens(identifier)
            if parts and not all(p in present or normalise_token(p) in present for p in parts):
                missing.append(identifier)
    return missing


# -- the port the protocol needs ---------------------------------------------------------


@runtime_checkable
class CompressionLLM(Protocol):
    """What the two-stage protocol asks of an LLM adapter (the lead adds it to ``LLM``).

    Both methods raise ``MalformedLLMOutput`` when the answer does not fit the schema (the
    adapter validates with :func:`parse_annotations` / :func:`parse_summary`) and
    ``TransientLLMError`` when the call itself failed.
    """

    @property
    def name(self) -> str: ...

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch: ...

    def compress_segments(self, request: CompressRequest) -> SummaryOutput: ...


# -- the offline rules -------------------------------------------------------------------

_SPEAKER_RE = re.compile(
    r"^\s*([A-Z][\w.'’-]{0,24}(?:\s[A-Z][\w.'’-]{0,24}){0,3}|user|assistant|agent|system|"
    r"human|ai)\s*:\s+(?=\S)"
)
_FENCE_RE = re.compile(r"```.*?(?:```|$)", re.S)
_LOG_LINE_RE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[?(?:DEBUG|TRACE|INFO|WARN(?:ING)?|ERROR|"
    r"FATAL|CRITICAL)\]?[\s:]|Traceback \(most recent call last\)|File \".*\", line \d+|"
    r"at [\w.$<>]+\(.*\)|\$ \S|>>> |[\w.]+(?:Error|Exception):|E\s{2,}|\d+ (?:passed|failed)"
    r"|=+ .* =+$|debug(?: output)?:)",
    re.I,
)
_ERROR_LINE_RE = re.compile(r"(?:error|exception|fail|fatal|panic|denied|refused|timeout)", re.I)

_DECISION_RE = re.compile(
    r"\b(?:decid(?:e|ed|ing)|decision|we(?:'ll|\s+will|\s+shall)\s+(?:use|go\s+with|keep|"
    r"switch|adopt|drop)|going\s+with|go\s+with|chose|choose|chosen|opt(?:ed)?\s+(?:for|to)|"
    r"settled\s+on|agreed\s+(?:to|on)|switch(?:ed|ing)?\s+(?:to|from)|picked\s+(?!up\b)|went\s+with|"
    r"instead\s+of|rather\s+than)\b",
    re.I,
)
_RATIONALE_RE = re.compile(
    r"\b(?:because|since|so\s+that|as\s+it|given\s+that|due\s+to|in\s+order\s+to|to\s+avoid|"
    r"which\s+means|the\s+reason)\b",
    re.I,
)
_PREFERENCE_RE = re.compile(
    r"\b(?:prefer(?:s|red|ence)?|i(?:'d|\s+would)\s+rather|i\s+(?:really\s+)?(?:like|love|"
    r"enjoy|hate|dislike|adore)|(?:don't|do\s+not|never)\s+(?:like|want)|can't\s+stand|"
    r"(?:my|our)\s+fav(?:ou)?rite|please\s+(?:always|never|don't|do\s+not|keep|use|avoid)|"
    r"always\s+(?:use|want|keep)|i\s+want|i'd\s+like)\b",
    re.I,
)
_STATUS_RE = re.compile(
    r"\b(?:is\s+now|are\s+now|moved\s+to|(?:un)?blocked|completed|finished|shipped|merged|"
    r"deployed|released|in\s+progress|on\s+hold|delayed|slipp(?:ed|ing)|closed|reopened|"
    r"status|got\s+(?:a\s+|the\s+)?(?:new\s+)?job|graduated|promoted|retired|quit|launched|"
    r"signed\s+up|started\s+(?:a|my|the|working|to)|(?:is|are|was)\s+done)\b",
    re.I,
)
_ERROR_RE = re.compile(
    r"\b(?:error|exception|traceback|stack\s*trace|crash(?:ed|es)?|bug|regression|segfault|"
    r"panic|oom|out\s+of\s+memory|timed?\s*out|deadlock|race\s+condition|"
    r"(?:http|status)\s*[45]\d\d|[45]\d\d\s+(?:error|response))\b",
    re.I,
)
_CAUSE_RE = re.compile(
    r"\b(?:because|caused\s+by|root\s+cause|due\s+to|turned\s+out|the\s+reason|was\s+caused|"
    r"came\s+from|triggered\s+by)\b",
    re.I,
)
_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "i'm", "i've", "i'd", "i'll"})
_SECOND_PERSON = {"you": "", "your": "'s", "yours": "'s", "yourself": ""}
_THIRD_PERSON = {"he": "", "she": "", "him": "", "her": "", "his": "'s", "hers": "'s"}
_IDENTIFIER_SHAPES = re.compile(
    r"^(?:\d[\d.,:/-]*\w*|[\w.-]*[/\\][\w./\\-]+|[A-Za-z]+-\d+|#\d+|\w+_\w+|[A-Za-z]+\d\w*|"
    r"[a-z]+[A-Z]\w*|[A-Z]{2,}\w*|\w+\.\w{1,5}|v\d[\w.]*|`[^`]+`)$"
)
_WORD_SPAN_RE = re.compile(r"`[^`]+`|\S+")
_EDGE_PUNCT = "\"'“”‘’()[]{}<>,.;:!?…*"


def split_speaker(content: str) -> tuple[str | None, str]:
    match = _SPEAKER_RE.match(content)
    if match and len(match.group(1).split()) <= 4:
        return match.group(1).strip(), content[match.end() :]
    return None, content


def _is_capitalised_name(word: str) -> bool:
    return len(word) > 1 and word[0].isupper() and not word.isupper() and word.isalpha()


def find_identifiers(text: str, exclude: Iterable[str] = (), *, names: bool = True) -> list[str]:
    """Numbers, paths, ids, code names, and capitalised names not at a sentence start.

    ``names=False`` for logs and code, where capitals ("File", "Traceback") are not names.
    """
    skip = {fold(e) for e in exclude}
    found: list[str] = []
    seen: set[str] = set()
    sentence_start = True
    for raw in _WORD_SPAN_RE.findall(text):
        word = raw.strip(_EDGE_PUNCT) if not raw.startswith("`") else raw
        word = re.sub(r"['’]s$", "", word)
        ends_sentence = raw.rstrip("\"')”’").endswith((".", "!", "?"))
        if word and fold(word) not in skip:
            is_id = bool(_IDENTIFIER_SHAPES.match(word)) and any(c.isalnum() for c in word)
            is_name = (
                names
                and not sentence_start
                and _is_capitalised_name(word)
                and fold(word) not in STOPWORDS
                and word not in {"I", "I'm", "I've", "I'd", "I'll"}
            )
            if (is_id or is_name) and fold(word) not in seen:
                seen.add(fold(word))
                found.append(word)
        sentence_start = ends_sentence
    return found


def _informative(tokens: Iterable[str], names: set[str]) -> list[str]:
    return [
        t
        for t in tokens
        if t not in STOPWORDS and t not in FILLERS and t not in REACTIONS and t not in names
    ]


def _looks_like_debug(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    logish = sum(1 for line in lines if _LOG_LINE_RE.match(line))
    return logish >= max(1, (len(lines) + 1) // 2)


def segment_sources(sources: Sequence[SourceMemory]) -> tuple[Segment, ...]:
    """Cut memories into segments: code/log blocks whole, otherwise lines and sentences.

    The addressee of a line is the other party when the rows have exactly two speakers.
    """
    speakers: list[str] = []
    split: list[tuple[SourceMemory, str | None, str]] = []
    for source in sources:
        for line in source.content.splitlines() or [source.content]:
            if not line.strip():
                continue
            speaker, body = split_speaker(line)
            if speaker and speaker not in speakers:
                speakers.append(speaker)
            split.append((source, speaker, body))
    # Join lines back per (memory, speaker) run so multi-line logs stay together.
    runs: list[tuple[SourceMemory, str | None, list[str]]] = []
    for source, speaker, body in split:
        if runs and runs[-1][0].id == source.id and (speaker is None or speaker == runs[-1][1]):
            runs[-1][2].append(body)
        else:
            runs.append((source, speaker, [body]))
    segments: list[Segment] = []
    for source, speaker, bodies in runs:
        addressee = None
        if speaker and len(speakers) == 2:
            addressee = speakers[1] if speaker == speakers[0] else speakers[0]
        for piece in _pieces("\n".join(bodies), summary=source.level > Level.L0):
            segments.append(
                Segment(
                    index=len(segments),
                    memory_id=source.id,
                    speaker=speaker,
                    addressee=addressee,
                    timestamp=source.timestamp,
                    text=piece,
                )
            )
    return tuple(segments)


def _pieces(text: str, *, summary: bool = False) -> list[str]:
    pieces: list[str] = []
    cursor = 0
    for fence in _FENCE_RE.finditer(text):
        pieces.extend(_prose_pieces(text[cursor : fence.start()], summary=summary))
        pieces.append(fence.group(0).strip())
        cursor = fence.end()
    pieces.extend(_prose_pieces(text[cursor:], summary=summary))
    return [p for p in pieces if p.strip()]


def _prose_pieces(text: str, *, summary: bool) -> list[str]:
    """Sentences; in a summary also the parts the offline layout joined with " | "."""
    if not text.strip():
        return []
    if _looks_like_debug(text):
        return [text.strip()]
    pieces: list[str] = []
    for sentence in split_sentences(text):
        if summary:
            pieces.extend(part.strip() for part in sentence.split(SEGMENT_GLUE) if part.strip())
        else:
            pieces.append(sentence.strip())
    return pieces


class OfflineCompressor:
    """The protocol by rules: deterministic, no network; also the fallback of the LLM."""

    @property
    def name(self) -> str:
        return "offline"

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch:
        recent_names: list[list[str]] = []
        annotations: list[SegmentAnnotation] = []
        for segment in request.segments:
            annotation, names = annotate_segment(segment, recent_names[-2:])
            annotations.append(annotation)
            recent_names.append(names)
        return AnnotationBatch(segments=annotations)

    def compress_segments(self, request: CompressRequest) -> SummaryOutput:
        return compress_offline(request)


def annotate_segment(
    segment: Segment, recent_names: Sequence[Sequence[str]] = ()
) -> tuple[SegmentAnnotation, list[str]]:
    """Stage 1 for one segment; also returns the names it mentions (for the next segments)."""
    text = segment.text
    party = {p for p in (segment.speaker, segment.addressee) if p}
    identifiers = find_identifiers(text, exclude=party, names=not _looks_like_debug(text))
    names = [w for w in identifiers if _is_capitalised_name(w)]
    entities = sorted(set(names) | ({segment.speaker} if segment.speaker else set()))
    kind, rationale, root_cause = classify_segment(text, party)
    anchor = segment.timestamp.date()
    candidates = sorted(
        {n for group in recent_names for n in group} - party - set(names),
    )
    resolved = resolve_references(
        text,
        addressee=segment.addressee,
        third_person=candidates[0] if len(candidates) == 1 else None,
    )
    resolved = resolve_relative_dates(resolved, anchor)
    return (
        SegmentAnnotation(
            index=segment.index,
            kind=kind,
            resolved=resolved,
            entities=entities,
            identifiers=identifiers,
            rationale=rationale,
            root_cause=root_cause,
        ),
        names,
    )


def classify_segment(
    text: str, party: Iterable[str] = ()
) -> tuple[SegmentKind, str | None, str | None]:
    """The kind of a segment by cue words, with the rationale or root cause when there is one."""
    if _looks_like_debug(text) or text.lstrip().startswith("```"):
        return SegmentKind.DEBUG_OUTPUT, None, None
    names = {fold(p) for p in party}
    tokens = raw_tokens(text)
    informative = _informative(tokens, names)
    has_ids = bool(find_identifiers(text, exclude=party))
    error = _ERROR_RE.search(text)
    cause = _CAUSE_RE.search(text)
    if error and (cause or has_ids):
        root = text[cause.end() :].strip(" ,.:;") if cause else None
        return SegmentKind.ERROR_ROOT_CAUSE, None, root or None
    if _DECISION_RE.search(text) and informative:
        reason = _RATIONALE_RE.search(text)
        rationale = text[reason.start() :].strip(" ,.;") if reason else None
        return SegmentKind.DECISION_RATIONALE, rationale or None, None
    if len(informative) < 2 and not has_ids and not _mentions_date(text):
        return SegmentKind.CHATTER, None, None
    if text.rstrip().endswith("?") and not has_ids:
        return SegmentKind.CHATTER, None, None
    if _PREFERENCE_RE.search(text):
        return SegmentKind.USER_PREFERENCE, None, None
    if _STATUS_RE.search(text):
        return SegmentKind.STATUS_CHANGE, None, None
    return SegmentKind.OUTCOME, None, None


def _mentions_date(text: str) -> bool:
    return bool(RELATIVE_RE.search(text)) or bool(find_dates(text))


def resolve_references(text: str, *, addressee: str | None, third_person: str | None) -> str:
    """Second person to the addressee, he/she to the one person named just before."""

    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        key = word.lower()
        if addressee and key in _SECOND_PERSON:
            return addressee + _SECOND_PERSON[key]
        if third_person and key in _THIRD_PERSON:
            return third_person + _THIRD_PERSON[key]
        return word

    if not addressee and not third_person:
        return text
    return re.sub(
        r"\b(?:you|your|yours|yourself|he|she|him|her|his|hers)\b", swap, text, flags=re.I
    )


def telegraphic(text: str, speaker: str | None = None) -> str:
    """Content words, negations, numbers, dates and identifiers, in order; the rest goes."""
    kept: list[str] = []
    for raw in _WORD_SPAN_RE.findall(text):
        word = raw.strip(_EDGE_PUNCT) if not raw.startswith("`") else raw
        if not word:
            continue
        key = fold(word)
        bare = key.strip("'")
        if bare in NEGATIONS:
            kept.append("not" if bare not in {"no", "never", "nothing", "none"} else bare)
            continue
        if speaker and key in {fold(speaker), fold(speaker) + "'s"}:
            continue  # the line's "Speaker:" already says who
        if bare in STOPWORDS or bare in FILLERS or bare in _FIRST_PERSON:
            continue
        kept.append(word)
    return " ".join(kept)


def _compress_debug(text: str) -> str:
    lines = [line.strip() for line in text.strip().strip("`").splitlines() if line.strip()]
    if not lines:
        return ""
    keep = [lines[0]]
    keep += [line for line in lines[1:] if _ERROR_LINE_RE.search(line)][:3]
    summary = " / ".join(dict.fromkeys(keep))
    ids = [i for i in find_identifiers(text, names=False) if i not in summary][:12]
    extra = f" [{', '.join(ids)}]" if ids else ""
    return f"debug output ({len(lines)} lines): {summary}{extra}"


class _Unit(NamedTuple):
    """The smallest piece stage 2 keeps or drops: a clause of an outcome, else a segment."""

    segment: Segment
    annotation: SegmentAnnotation
    clause: int
    text: str


_CLAUSE_SPLIT_RE = re.compile(r"\s*(?:[,;:](?=\s)|\s[-–—]+\s|\s+(?=but\b|so\b|which\b))\s*")


def _render_units(
    segment: Segment, annotation: SegmentAnnotation, *, annotate_only: bool
) -> list[_Unit]:
    kind = annotation.kind
    if kind is SegmentKind.CHATTER:
        return []
    if kind in VERBATIM_KINDS:
        text = resolve_relative_dates(segment.text, segment.timestamp.date(), bracket=True)
        return [_Unit(segment, annotation, 0, text)]
    if annotate_only:
        return [_Unit(segment, annotation, 0, annotation.resolved)]
    if kind is SegmentKind.DEBUG_OUTPUT:
        return [_Unit(segment, annotation, 0, _compress_debug(segment.text))]
    units: list[_Unit] = []
    for clause in _CLAUSE_SPLIT_RE.split(annotation.resolved):
        text = telegraphic(clause, segment.speaker)
        if text:
            units.append(_Unit(segment, annotation, len(units), text))
    return units


def compress_offline(request: CompressRequest, *, annotate_only: bool = False) -> SummaryOutput:
    """Stage 2 by rules (or, ``annotate_only``, stage 1 rendered: chatter dropped, no budget)."""
    by_index = {a.index: a for a in request.annotations}
    units: list[_Unit] = []
    for segment in request.segments:
        units.extend(_render_units(segment, by_index[segment.index], annotate_only=annotate_only))
    dropped_units: set[tuple[int, int]] = set()
    if not annotate_only:
        dropped_units = _drop_for_budget(units, request.target_words)
    kept = [u for u in units if (u.segment.index, u.clause) not in dropped_units]
    text = _layout(kept)
    orphan_ids = missing_identifiers(text, (u.annotation for u in units))
    if orphan_ids:
        text = f"{text}\nids: {', '.join(orphan_ids)}" if text else f"ids: {', '.join(orphan_ids)}"
    if not text.strip():
        text = "(nothing to keep)"
    kept_segments = {u.segment.index for u in kept}
    return SummaryOutput(
        text=text,
        kept_verbatim=sorted(
            {u.segment.index for u in kept if u.annotation.kind in VERBATIM_KINDS}
        ),
        dropped=[s.index for s in request.segments if s.index not in kept_segments],
    )


def _drop_for_budget(units: Sequence[_Unit], target_words: int) -> set[tuple[int, int]]:
    """Drop compressible units, the least salient per word first, until the text fits."""
    total = sum(word_count(u.text) for u in units)
    if total <= target_words:
        return set()
    counts: dict[str, int] = {}
    for unit in units:
        for token in set(content_tokens(unit.text)):
            counts[token] = counts.get(token, 0) + 1
    scored: list[tuple[float, int, int, int]] = []
    for unit in units:
        if unit.annotation.kind in VERBATIM_KINDS:
            continue
        tokens = set(content_tokens(unit.text))
        # Words nobody else says weigh 1, shared ones less; identifiers weigh double.
        novelty = sum(1.0 / counts[t] for t in tokens)
        novelty += sum(1.0 for i in unit.annotation.identifiers if fold(i) in fold(unit.text))
        size = max(1, word_count(unit.text))
        value = novelty * salience(unit.segment) / size
        scored.append((value, -unit.segment.index, unit.segment.index, unit.clause))
    dropped: set[tuple[int, int]] = set()
    sizes = {(u.segment.index, u.clause): word_count(u.text) for u in units}
    for _, _, index, clause in sorted(scored):
        if total <= target_words:
            break
        dropped.add((index, clause))
        total -= sizes[(index, clause)]
    return dropped


_SECOND_PERSON_RE = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd)\b", re.I)
_FIRST_PERSON_RE = re.compile(
    r"\b(?:i|me|my|mine|we|us|our|ours|i'm|i've|i'd|i'll|we're|we've)\b", re.I
)
_WISH_RE = re.compile(
    r"\b(?:hope|hoping|wish|wishing|can't\s+wait|good\s+luck|keep\s+(?:it\s+)?up|"
    r"sounds?\s+like|must\s+(?:be|have\s+been))\b",
    re.I,
)


def salience(segment: Segment) -> float:
    """How much a sentence tells about the world rather than reacts to the conversation.

    In a dialogue, facts come from what a speaker says about themselves or about third
    parties; sentences aimed at the other party ("your painting is lovely", "hope it goes
    well") mostly react to what was just said. Used only to order drops under a budget.
    """
    text = segment.text
    weight = 1.0
    first = bool(_FIRST_PERSON_RE.search(text))
    second = bool(_SECOND_PERSON_RE.search(text))
    if first:
        weight *= 1.5
    elif second:
        weight *= 0.5
    if _WISH_RE.search(text):
        weight *= 0.5
    tokens = raw_tokens(text)
    reactions = sum(1 for t in tokens if t in REACTIONS)
    content = sum(1 for t in tokens if t not in STOPWORDS and t not in FILLERS)
    if content and reactions * 2 >= content:
        weight *= 0.5
    return weight


def _layout(units: Sequence[_Unit]) -> str:
    """One line per speaker turn; a ``[date]`` header when the summary spans several days."""
    days = {u.segment.timestamp.date() for u in units}
    lines: list[str] = []
    current_day: date | None = None
    current_key: tuple[uuid.UUID, str | None] | None = None
    current_segment = -1
    for unit in units:
        segment = unit.segment
        day = segment.timestamp.date()
        if len(days) > 1 and day != current_day:
            lines.append(f"[{day.isoformat()}]")
            current_key = None
        current_day = day
        key = (segment.memory_id, segment.speaker)
        if key == current_key:
            glue = ", " if segment.index == current_segment else SEGMENT_GLUE
            lines[-1] = f"{lines[-1]}{glue}{unit.text}"
        else:
            lines.append(f"{segment.speaker}: {unit.text}" if segment.speaker else unit.text)
            current_key = key
        current_segment = segment.index
    return "\n".join(lines)


# -- the protocol, orchestrated ----------------------------------------------------------

T = TypeVar("T")

OFFLINE = OfflineCompressor()


def ask_with_fallback(
    call: Callable[[], T], fallback: Callable[[], T], llm_name: str
) -> tuple[T, str, int]:
    """One call, one retry on a malformed answer, then the offline rules.

    Returns the answer, who gave it, and how many LLM attempts were malformed. Transient
    errors propagate so that the job is retried with backoff.
    """
    failures = 0
    for _ in range(2):
        try:
            return call(), llm_name, failures
        except MalformedLLMOutput:
            failures += 1
    return fallback(), "offline-fallback", failures


class SummaryDraft(BaseModel):
    """A summary row to insert: new, versioned, pointing at what it summarises."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    task_id: str
    session_id: str
    level: Level
    version: int = Field(ge=1)
    parent_ids: tuple[uuid.UUID, ...]
    timestamp: datetime
    timestamp_end: datetime
    content: str
    source_words: int = Field(ge=0)
    summary_words: int = Field(ge=0)
    annotate_only: bool = False
    annotated_by: str
    compressed_by: str
    malformed_answers: int = Field(0, ge=0)
    kinds: dict[str, int] = Field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.source_words / max(1, self.summary_words)

    def metadata(self) -> dict[str, object]:
        """What the worker stores in the row's ``metadata`` (JSON)."""
        return {
            "parent_ids": [str(p) for p in self.parent_ids],
            "version": self.version,
            "source_words": self.source_words,
            "summary_words": self.summary_words,
            "timestamp_end": self.timestamp_end.isoformat(),
            "annotate_only": self.annotate_only,
            "annotated_by": self.annotated_by,
            "compressed_by": self.compressed_by,
            "malformed_answers": self.malformed_answers,
            "kinds": self.kinds,
        }


class CompressionResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    draft: SummaryDraft
    segments: tuple[Segment, ...]
    annotations: tuple[SegmentAnnotation, ...]


def summary_id(
    tenant_id: str, level: Level, version: int, parent_ids: Iterable[uuid.UUID]
) -> uuid.UUID:
    parents = ",".join(sorted(str(p) for p in parent_ids))
    return uuid.uuid5(
        ID_NAMESPACE, f"summary\x1f{tenant_id}\x1f{int(level)}\x1f{version}\x1f{parents}"
    )


def compress_group(
    sources: Sequence[SourceMemory],
    level: Level,
    llm: CompressionLLM | None = None,
    *,
    version: int = 1,
    annotate_only: bool = False,
    policy: LevelPolicy = DEFAULT_LEVELS,
) -> CompressionResult:
    """Run the protocol over one group and return the summary row to write.

    ``annotate_only`` is the mode of a compression-resistant memory: stage 1 only, rendered
    with chatter dropped and nothing else cut. Raises TransientLLMError to be retried.
    """
    if not sources:
        raise ValueError("nothing to compress")
    if level not in (Level.L1, Level.L2, Level.L3):
        raise ValueError(f"compression produces L1-L3, not L{int(level)}")
    if any(s.level >= level for s in sources):
        raise ValueError(f"an L{int(level)} summary needs lower-level sources")
    if len({s.tenant_id for s in sources}) != 1:
        raise ValueError("a summary never mixes tenants")
    # Stable on the caller's order: turns written in the same second keep their sequence.
    ordered = sorted(sources, key=lambda s: s.timestamp)
    engine: CompressionLLM = llm or OFFLINE
    segments = segment_sources(ordered)
    if not segments:
        raise ValueError("the sources hold no text")
    annotate_request = AnnotateRequest(segments=segments)

    def annotate() -> AnnotationBatch:
        batch = engine.annotate_segments(annotate_request)
        check_annotations(batch, annotate_request)
        return batch

    batch, annotated_by, bad_annotations = ask_with_fallback(
        annotate, lambda: OFFLINE.annotate_segments(annotate_request), engine.name
    )
    source_words = sum(s.source_words for s in ordered)
    target = max(1, math.ceil(source_words / policy.ratio(level, version)))
    compress_request = CompressRequest(
        level=level, target_words=target, segments=segments, annotations=tuple(batch.segments)
    )
    if annotate_only:
        output = compress_offline(compress_request, annotate_only=True)
        compressed_by, bad_summaries = "annotate-only", 0
    else:

        def compress() -> SummaryOutput:
            return check_summary(engine.compress_segments(compress_request), compress_request)

        output, compressed_by, bad_summaries = ask_with_fallback(
            compress, lambda: compress_offline(compress_request), engine.name
        )
    kinds: dict[str, int] = {}
    for annotation in batch.segments:
        kinds[annotation.kind.value] = kinds.get(annotation.kind.value, 0) + 1
    parent_ids = tuple(s.id for s in ordered)
    first = ordered[0]
    draft = SummaryDraft(
        id=summary_id(first.tenant_id, level, version, parent_ids),
        tenant_id=first.tenant_id,
        task_id=first.task_id,
        session_id=first.session_id
        if len({s.session_id for s in ordered}) == 1
        else f"{first.task_id}:L{int(level)}",
        level=level,
        version=version,
        parent_ids=parent_ids,
        timestamp=first.timestamp,
        timestamp_end=ordered[-1].timestamp,
        content=output.text,
        source_words=source_words,
        summary_words=word_count(output.text),
        annotate_only=annotate_only,
        annotated_by=annotated_by,
        compressed_by=compressed_by,
        malformed_answers=bad_annotations + bad_summaries,
        kinds=kinds,
    )
    return CompressionResult(draft=draft, segments=segments, annotations=tuple(batch.segments))


# -- which rows go together ----------------------------------------------------------------


def plan_groups(
    sources: Sequence[SourceMemory], level: Level, policy: LevelPolicy = DEFAULT_LEVELS
) -> list[list[SourceMemory]]:
    """Cut the rows to promote into groups that one summary each will cover.

    L1: one session of one task, at most a day and ``l1_group_max_words`` raw words.
    L2: one task, at most a week of L1 rows. L3: the whole task (call it at completion).
    """
    if level not in (Level.L1, Level.L2, Level.L3):
        raise ValueError(f"no groups for L{int(level)}")
    keyed: dict[tuple[str, ...], list[SourceMemory]] = {}
    for source in sorted(sources, key=lambda s: s.timestamp):
        key: tuple[str, ...] = (source.tenant_id, source.task_id)
        if level == Level.L1:
            key += (source.session_id,)
        keyed.setdefault(key, []).append(source)
    if level == Level.L3:
        return list(keyed.values())
    span_s = policy.l1_group_span_s if level == Level.L1 else policy.l2_group_span_s
    max_words = policy.l1_group_max_words if level == Level.L1 else None
    groups: list[list[SourceMemory]] = []
    for rows in keyed.values():
        current: list[SourceMemory] = []
        words = 0
        for row in rows:
            too_long = bool(current) and (
                (row.timestamp - current[0].timestamp).total_seconds() > span_s
                or (max_words is not None and words + row.source_words > max_words)
            )
            if too_long:
                groups.append(current)
                current, words = [], 0
            current.append(row)
            words += row.source_words
        if current:
            groups.append(current)
    return groups


def sources_from_drafts(drafts: Iterable[SummaryDraft]) -> list[SourceMemory]:
    """Summary rows as the sources of the next level."""
    return [
        SourceMemory(
            id=d.id,
            tenant_id=d.tenant_id,
            task_id=d.task_id,
            session_id=d.session_id,
            timestamp=d.timestamp,
            content=d.content,
            level=d.level,
            source_words=d.source_words,
        )
        for d in drafts
    ]
