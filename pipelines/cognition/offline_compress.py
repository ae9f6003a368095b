"""The compression protocol by rules: deterministic, no network; the offline adapter's
compressor and the fallback of a model that answers badly.

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

What the rules reach is measured by ``memharness bench compression``: on chat data, dropping
and shortening sentences cannot reach 10:1 without losing facts; the quality check
(``pipelines.cognition.quality``) then rolls back and retries gentler.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from datetime import date
from typing import NamedTuple

from pipelines.cognition.protocol import (
    SEGMENT_GLUE,
    VERBATIM_KINDS,
    AnnotateRequest,
    AnnotationBatch,
    CompressRequest,
    Segment,
    SegmentAnnotation,
    SegmentKind,
    SummaryOutput,
    missing_identifiers,
)
from pipelines.cognition.segments import looks_like_debug
from pipelines.text.dates import RELATIVE_RE, find_dates, resolve_relative_dates
from pipelines.text.identifiers import (
    EDGE_PUNCT,
    WORD_SPAN_RE,
    find_identifiers,
    is_capitalised_name,
)
from pipelines.text.words import (
    FILLERS,
    NEGATIONS,
    REACTIONS,
    STOPWORDS,
    content_tokens,
    fold,
    raw_tokens,
    word_count,
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


def _informative(tokens: Iterable[str], names: set[str]) -> list[str]:
    return [
        t
        for t in tokens
        if t not in STOPWORDS and t not in FILLERS and t not in REACTIONS and t not in names
    ]


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
    identifiers = find_identifiers(text, exclude=party, names=not looks_like_debug(text))
    names = [w for w in identifiers if is_capitalised_name(w)]
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
    if looks_like_debug(text) or text.lstrip().startswith("```"):
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
    for raw in WORD_SPAN_RE.findall(text):
        word = raw.strip(EDGE_PUNCT) if not raw.startswith("`") else raw
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


OFFLINE = OfflineCompressor()
