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
* outcomes lose the words the quality check never asks for: stopwords, fillers and
  reactions (thanks, great, sounds, feel ...);
* over budget (raw words / target ratio), clauses of outcomes are dropped, lowest value per
  word first, but at most one unit in ten (``MAX_DROPPED_UNIT_SHARE``): value counts words
  no other clause says and identifiers, and is halved for sentences aimed at the other
  party ("your painting is lovely") or wishes ("hope it goes well"), which in a dialogue
  mostly react rather than inform. Verbatim segments are never dropped, so a summary can
  stay above its budget; the draft records the words it has;
* a phase summary (L2, L3) also drops the outcome clauses whose every content word an
  earlier clause already says, groups each day's clauses by speaker, one line each, and
  names each thing once per line: an outcome clause loses the words its speaker's line has
  already said that day (not its negations, numbers or dates). The quality check and the
  answer check compare bags of words, so they cannot see what this costs a reader (a later
  clause no longer repeats its subject); it stays within one speaker's line for that reason;
* the segments of one turn are joined as sentences (no separator word).

Segment kinds come from cue words (:mod:`pipelines.cognition.kinds`). Chinese is compressed
by the same rules: 你/您 become the addressee and 他/她 the one person named before; an
outcome's clauses end at ``，；：`` and each keeps its Han runs without their function words
and particles, cut where ``pipelines.text.words`` cuts a run into bigrams, so every content
bigram the quality check looks for survives (negations such as 没有 stay); clauses of one
turn are joined with ``，``.

What the rules reach is measured by ``memharness bench compression``: on chat data, dropping
and shortening sentences cannot reach 10:1 without losing facts; the quality check
(``pipelines.cognition.quality``) then rolls back and retries gentler.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from datetime import date
from typing import NamedTuple

from pipelines.cognition.kinds import classify_segment, strip_reactions
from pipelines.cognition.protocol import (
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
from pipelines.cognition.segments import looks_like_debug, split_clauses_han
from pipelines.records import Level
from pipelines.text.dates import resolve_relative_dates
from pipelines.text.identifiers import (
    EDGE_PUNCT,
    WORD_SPAN_RE,
    find_identifiers,
    is_capitalised_name,
)
from pipelines.text.words import (
    FILLERS,
    HAN,
    HAN_SEPARATOR_CHARS,
    HAN_SEPARATOR_WORDS,
    NEGATIONS,
    REACTIONS,
    STOPWORDS,
    content_tokens,
    fold,
    has_han,
    raw_tokens,
    word_count,
)

_ERROR_LINE_RE = re.compile(r"(?:error|exception|fail|fatal|panic|denied|refused|timeout)", re.I)

_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "i'm", "i've", "i'd", "i'll"})
_SECOND_PERSON = {"you": "", "your": "'s", "yours": "'s", "yourself": ""}
_THIRD_PERSON = {"he": "", "she": "", "him": "", "her": "", "his": "'s", "hers": "'s"}


# The version of the offline rules. Every compressor falls back on them, so it is part of
# every compressor's identity (``pipelines.cognition.compress.compressor_id``): raise it when
# a change of the rules changes what a summary keeps, and rows marked compression-resistant
# under the old rules are tried again.
OFFLINE_RULES_VERSION = 3


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
    names = [w for w in identifiers if is_capitalised_name(w) or _is_han_person(w)]
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


def _is_han_person(identifier: str) -> bool:
    """A person among the Chinese identifiers (张工, 王经理, 小李): the others are numbers and
    dates, which hold digits, and modules or systems, which are four characters or more."""
    return (
        has_han(identifier)
        and len(identifier) <= 3
        and not any(ch.isdigit() or ch.isspace() for ch in identifier)
    )


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
    text = re.sub(
        r"\b(?:you|your|yours|yourself|he|she|him|her|his|hers)\b", swap, text, flags=re.I
    )
    if not has_han(text):
        return text

    def swap_han(match: re.Match[str]) -> str:
        if match.group(0) in "你您":
            return addressee or match.group(0)
        return third_person or match.group(0)

    return _PRONOUN_ZH_RE.sub(swap_han, text)


# Singular pronouns of Chinese: 你/您 the addressee, 他/她 a third person; not inside words
# (其他 "other", 吉他 "guitar", 他人 "others") and not plural (你们, 他们).
_PRONOUN_ZH_RE = re.compile(r"(?<![其吉])[他她](?![们人])|[你您](?!们)")

# What a telegraphic Chinese outcome cuts out of a Han run: the function words and particles
# at which ``pipelines.text.words`` cuts a run into bigrams (so every content bigram of the
# original survives), except the negations, which carry the meaning ("没有报错").
_HAN_FUNCTION_RE = re.compile(
    "|".join(w for w in HAN_SEPARATOR_WORDS if w not in {"没有", "不是", "有没"})
    + f"|[{''.join(sorted(HAN_SEPARATOR_CHARS))}]"
)
_HAN_OR_REST_RE = re.compile(f"([{HAN}]+)")
_CJK_PUNCT_RE = re.compile(r"[，、；：“”‘’（）《》【】「」『』…—·～。！？]")


def telegraphic(text: str, speaker: str | None = None) -> str:
    """Content words, negations, numbers, dates and identifiers, in order; the rest goes.

    In Chinese: each Han run without its function words and particles, its pieces kept in
    order; the words between the runs as in English.
    """
    if not has_han(text):
        return _telegraphic_words(text, speaker)
    kept: list[str] = []
    for i, part in enumerate(_HAN_OR_REST_RE.split(text)):
        if i % 2:
            if speaker and part == speaker:
                continue
            kept += [p for p in _HAN_FUNCTION_RE.split(part) if p]
        else:
            words = _telegraphic_words(_CJK_PUNCT_RE.sub(" ", part), speaker)
            if words:
                kept.append(words)
    return " ".join(kept)


def _telegraphic_words(text: str, speaker: str | None) -> str:
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
        if bare in STOPWORDS or bare in FILLERS or bare in _FIRST_PERSON or bare in REACTIONS:
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


# Share of the units (clauses of outcomes, debug blocks) stage 2 may drop to meet its
# budget, the least salient first. The quality check rolls a summary back below 85 % of its
# statements and a dropped clause can take a statement with it; dropping at most one unit
# in ten leaves five points for the statements that lose a clause and a word. Past it the
# budget is not met: a summary that keeps its facts is worth more than one that meets its
# ratio and is rolled back (a model behind the port reaches further by rewording).
MAX_DROPPED_UNIT_SHARE = 0.1


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
    resolved = annotation.resolved
    clauses = split_clauses_han(resolved) if has_han(resolved) else _CLAUSE_SPLIT_RE.split(resolved)
    for clause in clauses:
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
    phase = request.level >= Level.L2 and not annotate_only
    if phase:
        dropped_units = _redundant_units(units)
        units = [u for u in units if (u.segment.index, u.clause) not in dropped_units]
    if not annotate_only:
        dropped_units |= _drop_for_budget(units, request.target_words)
    kept = [u for u in units if (u.segment.index, u.clause) not in dropped_units]
    if phase:
        kept = _merge_repeated_words(_by_speaker(kept))
    text = _layout(kept, per_speaker=True) if phase else _layout(kept)
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


def _redundant_units(units: Sequence[_Unit]) -> set[tuple[int, int]]:
    """Outcome clauses that say nothing the summary has not said before them: every content
    word and identifier already in an earlier kept unit (a fact restated in a later session,
    an L1 line repeating another). A phase summary states each thing once."""
    seen: set[str] = set()
    redundant: set[tuple[int, int]] = set()
    for unit in units:
        tokens = set(content_tokens(unit.text))
        if unit.annotation.kind not in VERBATIM_KINDS and tokens and tokens <= seen:
            redundant.add((unit.segment.index, unit.clause))
            continue
        seen |= tokens
    return redundant


_NUMBERISH_RE = re.compile(r"\d")


def _merge_repeated_words(units: Sequence[_Unit]) -> list[_Unit]:
    """A phase summary names each thing once per speaker and day: in an outcome clause, a
    word whose every content token that speaker's line has already said goes ("support
    group made ... support group gave courage" says "support group" once). Negations,
    numbers and dates stay where they stand (they qualify their own clause), and a clause
    keeps at least one word."""
    said: dict[tuple[date, str | None], set[str]] = {}
    merged: list[_Unit] = []
    for unit in units:
        seen = said.setdefault((unit.segment.timestamp.date(), unit.segment.speaker), set())
        if unit.annotation.kind in VERBATIM_KINDS:
            seen |= set(content_tokens(unit.text))
            merged.append(unit)
            continue
        kept: list[str] = []
        for word in unit.text.split():
            tokens = set(content_tokens(word))
            repeated = (
                tokens
                and tokens <= seen
                and not _NUMBERISH_RE.search(word)
                and fold(word).strip(EDGE_PUNCT) not in NEGATIONS
            )
            if not repeated:
                kept.append(word)
            seen |= tokens
        text = " ".join(kept).strip(" ,，") if kept else ""
        merged.append(unit._replace(text=text or unit.text))
    return merged


def _by_speaker(units: Sequence[_Unit]) -> list[_Unit]:
    """The units of each day grouped by speaker, in the order the speakers first speak: a
    phase summary says what each party said, one line each, rather than replay the turns."""
    order: dict[tuple[date, str | None], list[_Unit]] = {}
    for unit in units:
        order.setdefault((unit.segment.timestamp.date(), unit.segment.speaker), []).append(unit)
    return [unit for group in order.values() for unit in group]


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
        # fsum: exact, so the order a set yields its tokens in (per process) cannot change
        # a tie between two units' values, and the summary is the same in every process.
        novelty = math.fsum(1.0 / counts[t] for t in tokens)
        novelty += sum(1.0 for i in unit.annotation.identifiers if fold(i) in fold(unit.text))
        size = max(1, word_count(unit.text))
        value = novelty * salience(unit.segment) / size
        scored.append((value, -unit.segment.index, unit.segment.index, unit.clause))
    dropped: set[tuple[int, int]] = set()
    sizes = {(u.segment.index, u.clause): word_count(u.text) for u in units}
    drops_left = math.floor(MAX_DROPPED_UNIT_SHARE * len(units))
    for _, _, index, clause in sorted(scored):
        if total <= target_words or drops_left <= 0:
            break
        dropped.add((index, clause))
        drops_left -= 1
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


_FIRST_PERSON_ZH_RE = re.compile(r"我|咱们")
_SECOND_PERSON_ZH_RE = re.compile(r"[你您]")
_WISH_ZH_RE = re.compile(r"希望你|祝|加油|期待|等不及|听起来|一定很")


def salience(segment: Segment) -> float:
    """How much a sentence tells about the world rather than reacts to the conversation.

    In a dialogue, facts come from what a speaker says about themselves or about third
    parties; sentences aimed at the other party ("your painting is lovely", "hope it goes
    well") mostly react to what was just said. Used only to order drops under a budget.
    """
    text = segment.text
    han = has_han(text)
    weight = 1.0
    first = bool(_FIRST_PERSON_RE.search(text) or (han and _FIRST_PERSON_ZH_RE.search(text)))
    second = bool(_SECOND_PERSON_RE.search(text) or (han and _SECOND_PERSON_ZH_RE.search(text)))
    if first:
        weight *= 1.5
    elif second:
        weight *= 0.5
    if _WISH_RE.search(text) or (han and _WISH_ZH_RE.search(text)):
        weight *= 0.5
    tokens = raw_tokens(strip_reactions(text)) if han else raw_tokens(text)
    reactions = sum(1 for t in tokens if t in REACTIONS)
    content = sum(1 for t in tokens if t not in STOPWORDS and t not in FILLERS)
    if content and reactions * 2 >= content:
        weight *= 0.5
    return weight


# The segments of one turn are joined as sentences, so the next level cuts them apart again
# with the sentence rules; a separator word would cost a word per segment.
_SENTENCE_ENDS = (".", "!", "?", "。", "！", "？")
_ANY_MEMORY = uuid.UUID(int=0)


def _layout(units: Sequence[_Unit], *, per_speaker: bool = False) -> str:
    """One line per speaker turn (``per_speaker``: per speaker and day); a ``[date]`` header
    when the summary spans several days."""
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
        key = (_ANY_MEMORY if per_speaker else segment.memory_id, segment.speaker)
        if key == current_key:
            han = has_han(unit.text)
            if segment.index == current_segment:
                glue = "，" if han else ", "
            elif lines[-1].endswith(_SENTENCE_ENDS):
                glue = "" if han else " "
            else:
                glue = "。" if han else ". "
            lines[-1] = f"{lines[-1]}{glue}{unit.text}"
        else:
            lines.append(f"{segment.speaker}: {unit.text}" if segment.speaker else unit.text)
            current_key = key
        current_segment = segment.index
    return "\n".join(lines)


OFFLINE = OfflineCompressor()
