"""Compression quality: is what the originals said still recoverable from the summary?

After a compression, the factual statements of the originals are checked against the
summary (**fact recall**), and every decision's rationale is checked (**decision
fidelity**). Below 85 % fact recall, or when a rationale was lost (the protocol
promises rationales verbatim, so losing one is a failure too), the summary is rolled back:
it is retired, its parents are untouched, and each parent's failure count goes up. After
three failures a memory is marked compression-resistant and gets annotate-only compression
(``compress_group(..., annotate_only=True)``). Figures are kept per run
(:class:`QualityRunStats`).

How many facts, and what error
------------------------------
Every statement is checked when the originals hold at most ``FACT_SAMPLE_SIZE`` (400) of
them, which covers every L1 and L2 group (an L1 group is at most 2,000 raw words, some 150
statements): the recall is then exact, and the verdict is the rule's, with no sampling
error. A larger group (a task summary of a long task) is sampled: 400 statements drawn
without replacement by a hash of the summary id, so the standard error of the recall is at
most ``sqrt(p(1-p)/400)``, 0.018 at p = 0.85, and the 95 % interval is within ±0.035 of the
true share. The five statements sampled before gave a verdict that one miss flipped (4 of
5 is 0.80 < 0.85): a summary that kept 95 % of its facts was rolled back a quarter of the
time (1 - 0.95^5 = 0.23). With n statements one miss moves the recall by 1/n, 0.007 at
n = 150.

What "recoverable" means here
-----------------------------
Texts are compared after the same normalisation on both sides: NFKC, case-folded, split into
words and identifiers, stopwords dropped, number words made digits ("three" → 3, "18th" →
18), a light stemmer (plurals, -ing, -ed, a final e).

* A **statement** (a sentence of the originals that is not chatter, debug output or a
  question) is recoverable when every identifier it holds (numbers, paths, names) is in the
  summary, at least 60 % of its other content words are, and every date it states (relative
  dates resolved against the memory's timestamp) falls inside a date the summary states.
* Chinese is compared the same way, its words being the character bigrams of
  ``pipelines.text.words`` (a statement's speakers and its clauses of pure reaction, such as
  收到，谢谢, are no words of it); an identifier with Chinese in it (李工, 30 天, 支付模块) is
  looked for as text, spacing aside, since its last character may be part of a bigram in
  the summary (每30天轮换); and a bracketed insertion (a resolved date) inside a Han run is
  read away, as the protocol reads it when it checks verbatim segments.
* A **rationale** survived when all its content words are in the summary.
* A **gold answer** (the benchmarks) is recoverable when all its content words (minus
  hedges such as "around", "likely") are in the texts, and each date it names contains some
  date of the texts: a day inside the gold week matches "the week before 9 June 2023",
  "2023-05" does not match "7 May 2023". A text's dates are those it states (relative ones
  resolved against its timestamp) plus its timestamp's day, since a row's timestamp is part
  of the memory. An answer with neither content words nor a date ("yes", "likely no") is
  not checkable.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from pipelines.cognition.compress import SummaryDraft, compress_group, compressor_id
from pipelines.cognition.health import CompressionHealth, plan_compression
from pipelines.cognition.kinds import classify_segment, strip_reactions
from pipelines.cognition.levels import DEFAULT_LEVELS, LevelPolicy
from pipelines.cognition.protocol import (
    CompressionLLM,
    SegmentKind,
    SourceMemory,
    compact,
    without_insertions,
)
from pipelines.cognition.segments import is_question, segment_sources
from pipelines.records import Level
from pipelines.text.dates import DateSpan, find_dates
from pipelines.text.identifiers import find_identifiers
from pipelines.text.words import (
    FILLERS,
    REACTIONS,
    STOPWORDS,
    content_tokens,
    fold,
    has_han,
    normalise_token,
    raw_tokens,
    words,
)

# Statements checked per summary: all of them up to this many (the recall is exact), else a
# sample this large (95 % interval within ±0.035 at p = 0.85; module docstring).
FACT_SAMPLE_SIZE = 400
MIN_FACT_RECALL = 0.85
MIN_DECISION_FIDELITY = 1.0
MAX_FAILURES = 3
# Share of a statement's plain content words that must survive. Identifiers and dates must
# all survive; the rest may lose a word or two to paraphrase ("the kids" → "children").
STATEMENT_TOKEN_RECALL = 0.6

# Words a gold answer hedges with, which no text has to repeat.
ANSWER_HEDGES: frozenset[str] = words(
    "around approximately roughly about since probably possibly maybe likely perhaps"
)

# Relative date words: a statement's date is checked as a date, not as these words.
_DATE_WORDS: frozenset[str] = words(
    """yesterday today tonight tomorrow last next past previous ago week weeks weekend
    weekends month months year years day days morning afternoon evening night monday tuesday
    wednesday thursday friday saturday sunday spring summer fall autumn winter"""
)


class DatedText(BaseModel):
    """A text and the timestamp its relative dates are read against."""

    model_config = ConfigDict(frozen=True)

    text: str
    anchor: date | None = None


class TextIndex:
    """The normalised tokens and date spans of some texts, computed once and queried often."""

    def __init__(self, texts: Iterable[DatedText]) -> None:
        self.tokens: set[str] = set()
        self.spans: list[DateSpan] = []
        compacted: list[str] = []
        for item in texts:
            written = [item.text]
            if has_han(item.text):
                written.append(without_insertions(item.text))
            for text in written:
                compacted.append(compact(text))
                for token in raw_tokens(text):
                    self.tokens.add(normalise_token(token))
            self.spans.extend(span for _, _, span in find_dates(item.text, item.anchor))
            if item.anchor is not None:
                self.spans.append(DateSpan(item.anchor, item.anchor))

        self.compact = "\n".join(compacted)

    def has_token(self, token: str) -> bool:
        return token in self.tokens

    def has_phrase(self, phrase: str) -> bool:
        """An identifier with Chinese in it, as text (see ``protocol.compact``)."""
        return compact(phrase) in self.compact

    def has_date_within(self, gold: DateSpan) -> bool:
        return any(span.within(gold) for span in self.spans)


class AnswerCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    checkable: bool
    recoverable: bool
    missing_tokens: tuple[str, ...] = ()
    missing_dates: tuple[str, ...] = ()


def answer_recoverable(answer: str, index: TextIndex) -> AnswerCheck:
    """The gold-answer rule of the module docstring."""
    dates = find_dates(answer)
    rest = answer
    for start, end, _ in sorted(dates, reverse=True):
        rest = rest[:start] + " " + rest[end:]
    tokens = list(
        dict.fromkeys(
            normalise_token(t)
            for t in raw_tokens(rest)
            if t not in STOPWORDS and t not in ANSWER_HEDGES
        )
    )
    if not dates and not tokens:
        return AnswerCheck(checkable=False, recoverable=False)
    missing_tokens = tuple(t for t in tokens if not index.has_token(t))
    missing_dates = tuple(
        answer[start:end] for start, end, span in dates if not index.has_date_within(span)
    )
    return AnswerCheck(
        checkable=True,
        recoverable=not missing_tokens and not missing_dates,
        missing_tokens=missing_tokens,
        missing_dates=missing_dates,
    )


class Statement(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    text: str
    anchor: date
    identifiers: tuple[str, ...]
    words: tuple[str, ...]
    dates: tuple[DateSpan, ...]
    # Identifiers with Chinese in them (李工, 30 天, 支付模块), looked for as text.
    phrases: tuple[str, ...] = ()


class StatementCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    statement: str
    recovered: bool
    missing: tuple[str, ...]


def _statement(memory_id: uuid.UUID, text: str, anchor: date, party: set[str]) -> Statement:
    found = find_identifiers(text, exclude=party)
    phrases = tuple(dict.fromkeys(i for i in found if has_han(i)))
    identifiers = tuple(
        dict.fromkeys(
            normalise_token(t) for ident in found if not has_han(ident) for t in raw_tokens(ident)
        )
    )
    names = {fold(p) for p in party}
    dates = find_dates(text, anchor)
    undated = text
    for start, end, _ in sorted(dates, reverse=True):
        undated = undated[:start] + " " + undated[end:]
    if has_han(text):
        # Chinese names its speakers by their bigrams, and reacts in whole clauses (收到，谢谢);
        # what the Chinese identifiers say is checked as text.
        names |= {t for p in party if has_han(p) for t in raw_tokens(p)}
        names |= {normalise_token(t) for p in phrases for t in raw_tokens(p)}
        undated = strip_reactions(undated)
    words = tuple(
        dict.fromkeys(
            normalise_token(t)
            for t in raw_tokens(undated)
            if t not in STOPWORDS
            and t not in FILLERS
            and t not in REACTIONS
            and t not in names
            and t not in _DATE_WORDS
        )
    )
    return Statement(
        memory_id=memory_id,
        text=text,
        anchor=anchor,
        identifiers=identifiers,
        words=tuple(w for w in words if w not in identifiers),
        dates=tuple(span for _, _, span in dates),
        phrases=phrases,
    )


def factual_statements(sources: Sequence[SourceMemory]) -> list[Statement]:
    """Sentences of the originals that state something: not chatter, debug or questions."""
    statements: list[Statement] = []
    for segment in segment_sources(sources):
        party = {p for p in (segment.speaker, segment.addressee) if p}
        kind, _, _ = classify_segment(segment.text, party)
        if kind in (SegmentKind.CHATTER, SegmentKind.DEBUG_OUTPUT):
            continue
        if is_question(segment.text):
            continue
        statement = _statement(segment.memory_id, segment.text, segment.timestamp.date(), party)
        if statement.identifiers or statement.phrases or len(statement.words) >= 2:
            statements.append(statement)
    return statements


def sample_statements(
    statements: Sequence[Statement], seed: str, k: int = FACT_SAMPLE_SIZE
) -> list[Statement]:
    """``k`` statements chosen by a hash of ``seed``: a replayed check samples the same ones."""

    def rank(item: tuple[int, Statement]) -> bytes:
        return hashlib.blake2b(f"{seed}\x1f{item[0]}".encode(), digest_size=8).digest()

    chosen = sorted(enumerate(statements), key=rank)[:k]
    return [statement for _, statement in sorted(chosen, key=lambda item: item[0])]


def check_statement(statement: Statement, index: TextIndex) -> StatementCheck:
    missing = [i for i in statement.identifiers if not index.has_token(i)]
    missing += [p for p in statement.phrases if not index.has_phrase(p)]
    missing_words = [w for w in statement.words if not index.has_token(w)]
    kept = len(statement.words) - len(missing_words)
    words_ok = not statement.words or kept >= STATEMENT_TOKEN_RECALL * len(statement.words)
    missing_dates = [span for span in statement.dates if not index.has_date_within(span)]
    recovered = not missing and words_ok and not missing_dates
    return StatementCheck(
        statement=statement.text,
        recovered=recovered,
        missing=tuple(missing + (missing_words if not words_ok else []))
        + tuple(f"{s.start}..{s.end}" for s in missing_dates),
    )


class DecisionCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    decision: str
    rationale: str
    survived: bool
    missing: tuple[str, ...]


def decision_rationales(sources: Sequence[SourceMemory]) -> list[tuple[str, str]]:
    """(decision sentence, its rationale) for every decision that gives a reason."""
    found: list[tuple[str, str]] = []
    for segment in segment_sources(sources):
        party = {p for p in (segment.speaker, segment.addressee) if p}
        kind, rationale, _ = classify_segment(segment.text, party)
        if kind is SegmentKind.DECISION_RATIONALE and rationale:
            found.append((segment.text, rationale))
    return found


def check_rationale(decision: str, rationale: str, index: TextIndex) -> DecisionCheck:
    missing = tuple(dict.fromkeys(t for t in content_tokens(rationale) if not index.has_token(t)))
    return DecisionCheck(
        decision=decision, rationale=rationale, survived=not missing, missing=missing
    )


class QualityPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    sample_size: int = Field(FACT_SAMPLE_SIZE, ge=1)
    min_fact_recall: float = Field(MIN_FACT_RECALL, ge=0, le=1)
    min_decision_fidelity: float = Field(MIN_DECISION_FIDELITY, ge=0, le=1)
    max_failures: int = Field(MAX_FAILURES, ge=1)


DEFAULT_QUALITY = QualityPolicy()


class QualityVerdict(StrEnum):
    KEEP = "keep"
    ROLLBACK = "rollback"


class QualityReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    summary_id: uuid.UUID
    level: int
    version: int
    statements: tuple[StatementCheck, ...]
    decisions: tuple[DecisionCheck, ...]
    fact_recall: float | None
    decision_fidelity: float | None
    verdict: QualityVerdict
    reason: str


def check_compression(
    sources: Sequence[SourceMemory],
    draft: SummaryDraft,
    policy: QualityPolicy = DEFAULT_QUALITY,
) -> QualityReport:
    """Sample statements and decisions of ``sources`` and look for them in ``draft``."""
    index = TextIndex([DatedText(text=draft.content, anchor=draft.timestamp.date())])
    statements = sample_statements(factual_statements(sources), str(draft.id), policy.sample_size)
    checks = tuple(check_statement(s, index) for s in statements)
    decisions = tuple(check_rationale(d, r, index) for d, r in decision_rationales(sources))
    fact_recall = sum(c.recovered for c in checks) / len(checks) if checks else None
    fidelity = sum(d.survived for d in decisions) / len(decisions) if decisions else None
    problems: list[str] = []
    if fact_recall is not None and fact_recall < policy.min_fact_recall:
        problems.append(f"fact recall {fact_recall:.2f} < {policy.min_fact_recall}")
    if fidelity is not None and fidelity < policy.min_decision_fidelity:
        problems.append(f"decision fidelity {fidelity:.2f} < {policy.min_decision_fidelity}")
    return QualityReport(
        summary_id=draft.id,
        level=int(draft.level),
        version=draft.version,
        statements=checks,
        decisions=decisions,
        fact_recall=fact_recall,
        decision_fidelity=fidelity,
        verdict=QualityVerdict.ROLLBACK if problems else QualityVerdict.KEEP,
        reason="; ".join(problems) if problems else "passed",
    )


class RollbackRecord(BaseModel):
    """What the worker applies and logs when a summary fails its check."""

    model_config = ConfigDict(frozen=True)

    summary_id: uuid.UUID
    parent_ids: tuple[uuid.UUID, ...]
    level: int
    version: int
    rolled_back_at: datetime
    reason: str
    fact_recall: float | None
    decision_fidelity: float | None
    next_version: int


class QualityOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    verdict: QualityVerdict
    rollback: RollbackRecord | None
    health: tuple[CompressionHealth, ...]
    newly_resistant: tuple[uuid.UUID, ...]


def apply_quality(
    report: QualityReport,
    draft: SummaryDraft,
    health: Mapping[uuid.UUID, CompressionHealth],
    now: datetime,
    policy: QualityPolicy = DEFAULT_QUALITY,
) -> QualityOutcome:
    """Keep the summary, or roll it back and count a failure against each parent.

    A parent becomes resistant after ``max_failures`` failures, marked with the compressor
    that failed (``draft.compressor``); a parent resistant to another compressor that fails
    again under this one is marked anew, for this one.
    """
    compressor = draft.compressor
    if report.summary_id != draft.id:
        raise ValueError("the report is about another summary")
    if report.verdict is QualityVerdict.KEEP:
        current = tuple(health.get(p, CompressionHealth(memory_id=p)) for p in draft.parent_ids)
        return QualityOutcome(
            verdict=report.verdict, rollback=None, health=current, newly_resistant=()
        )
    updated: list[CompressionHealth] = []
    newly: list[uuid.UUID] = []
    for parent in draft.parent_ids:
        before = health.get(parent, CompressionHealth(memory_id=parent))
        failures = before.failures + 1
        resistant = before.resistant or failures >= policy.max_failures
        if resistant and not before.resists(compressor):
            newly.append(parent)
        updated.append(
            CompressionHealth(
                memory_id=parent,
                failures=failures,
                resistant=resistant,
                resistant_to=compressor if resistant else None,
            )
        )
    return QualityOutcome(
        verdict=report.verdict,
        rollback=RollbackRecord(
            summary_id=draft.id,
            parent_ids=draft.parent_ids,
            level=int(draft.level),
            version=draft.version,
            rolled_back_at=now,
            reason=report.reason,
            fact_recall=report.fact_recall,
            decision_fidelity=report.decision_fidelity,
            next_version=draft.version + 1,
        ),
        health=tuple(updated),
        newly_resistant=tuple(newly),
    )


class QualityRunStats(BaseModel):
    """The figures of one sampling run, kept per run."""

    model_config = ConfigDict(frozen=True)

    checked: int
    kept: int
    rolled_back: int
    newly_resistant: int
    fact_recall_mean: float | None
    decision_fidelity_mean: float | None
    statements_checked: int
    decisions_checked: int


def summarise_run(
    reports: Sequence[QualityReport], outcomes: Sequence[QualityOutcome] = ()
) -> QualityRunStats:
    recalls = [r.fact_recall for r in reports if r.fact_recall is not None]
    fidelities = [r.decision_fidelity for r in reports if r.decision_fidelity is not None]
    return QualityRunStats(
        checked=len(reports),
        kept=sum(r.verdict is QualityVerdict.KEEP for r in reports),
        rolled_back=sum(r.verdict is QualityVerdict.ROLLBACK for r in reports),
        newly_resistant=sum(len(o.newly_resistant) for o in outcomes),
        fact_recall_mean=sum(recalls) / len(recalls) if recalls else None,
        decision_fidelity_mean=sum(fidelities) / len(fidelities) if fidelities else None,
        statements_checked=sum(len(r.statements) for r in reports),
        decisions_checked=sum(len(r.decisions) for r in reports),
    )


class Attempt(BaseModel):
    """One compression of a group with its check and what follows from it."""

    model_config = ConfigDict(frozen=True)

    draft: SummaryDraft
    report: QualityReport
    outcome: QualityOutcome


def attempt_compression(
    sources: Sequence[SourceMemory],
    level: Level,
    health: Mapping[uuid.UUID, CompressionHealth],
    now: datetime,
    llm: CompressionLLM | None = None,
    *,
    levels: LevelPolicy = DEFAULT_LEVELS,
    policy: QualityPolicy = DEFAULT_QUALITY,
) -> Attempt:
    """What one compress sweep does with a group: compress, check, keep or roll back.

    The version is one more than the parents' worst failure count, and each version halves
    the target ratio (:meth:`LevelPolicy.ratio`), so a retry is gentler. A group holding a
    memory resistant to this compressor is compressed annotate-only
    (:func:`plan_compression`); that summary is kept whatever its check says (there is
    nothing gentler left), and its report is still recorded.
    """
    plan = plan_compression(sources, health, compressor_id(llm))
    result = compress_group(
        sources,
        level,
        llm,
        version=plan.version,
        annotate_only=plan.annotate_only,
        policy=levels,
        attempt=plan.attempt,
    )
    report = check_compression(sources, result.draft, policy)
    if plan.annotate_only and report.verdict is QualityVerdict.ROLLBACK:
        report = report.model_copy(
            update={
                "verdict": QualityVerdict.KEEP,
                "reason": f"annotate-only summary kept despite: {report.reason}",
            }
        )
    return Attempt(
        draft=result.draft,
        report=report,
        outcome=apply_quality(report, result.draft, health, now, policy),
    )
