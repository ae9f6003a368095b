from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest

from pipelines.cognition.compress import SummaryDraft, compress_group, compressor_id
from pipelines.cognition.health import CompressionHealth, plan_compression, split_resistant
from pipelines.cognition.levels import LevelPolicy
from pipelines.cognition.offline_compress import OFFLINE
from pipelines.cognition.protocol import (
    VERBATIM_KINDS,
    AnnotateRequest,
    AnnotationBatch,
    CompressRequest,
    SourceMemory,
    SummaryOutput,
)
from pipelines.cognition.quality import (
    DatedText,
    QualityVerdict,
    TextIndex,
    answer_recoverable,
    apply_quality,
    attempt_compression,
    check_compression,
    factual_statements,
    sample_statements,
    summarise_run,
)
from pipelines.records import Level

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def source(n: int, content: str) -> SourceMemory:
    return SourceMemory(
        id=uuid.UUID(int=n),
        tenant_id="acme",
        task_id="task-1",
        session_id="s1",
        timestamp=T0 + timedelta(seconds=n),
        content=content,
        source_words=len(content.split()),
    )


ROWS = [
    source(1, "Caroline: I went to an LGBTQ support group yesterday and it was so powerful."),
    source(2, "Melanie: Wow, that's great!"),
    source(3, "Melanie: I signed up for a pottery class on 2 July and bought 3 new brushes."),
    source(4, "Caroline: My friend Jordan moved from Sweden to Lisbon four years ago."),
    source(
        5,
        "Caroline: We decided to adopt through the Hope agency because it supports single parents.",
    ),
    source(6, "Melanie: The kids loved the dinosaur museum in Denver last weekend."),
    source(7, "Caroline: Painting sunsets at the lake helps me unwind after work."),
]


def index(*texts: str, anchor: date | None = date(2023, 5, 8)) -> TextIndex:
    return TextIndex(DatedText(text=t, anchor=anchor) for t in texts)


# -- the gold-answer rule ------------------------------------------------------------------


def test_answer_words_must_all_be_there() -> None:
    ix = index("Caroline: researching adoption agencies for months")
    assert answer_recoverable("Adoption agencies", ix).recoverable
    missing = answer_recoverable("Adoption agencies in Ohio", ix)
    assert missing.checkable and not missing.recoverable
    assert missing.missing_tokens == ("ohio",)


def test_numbers_match_as_numbers() -> None:
    ix = index("She has had them for three years")
    assert answer_recoverable("3 years", ix).recoverable
    assert not answer_recoverable("4 years", ix).recoverable


def test_dates_match_by_containment() -> None:
    # given a turn of 8 May 2023 saying "yesterday"
    ix = index("I went to a support group yesterday")
    assert answer_recoverable("7 May 2023", ix).recoverable
    assert answer_recoverable("May 2023", ix).recoverable  # a finer date answers a coarser one
    assert not answer_recoverable("6 May 2023", ix).recoverable
    # "the week before 9 June 2023" is what "last week" said on 9 June 2023 means
    june = index("I gave a talk at a school last week", anchor=date(2023, 6, 9))
    assert answer_recoverable("The week before 9 June 2023", june).recoverable
    # a coarse date never answers a finer question
    coarse = index("sometime in 2023-05", anchor=None)
    assert not answer_recoverable("7 May 2023", coarse).recoverable


def test_the_timestamp_is_a_date_of_the_row() -> None:
    assert answer_recoverable("8 May 2023", index("we met at the cafe")).recoverable


def test_yes_no_answers_are_not_checkable() -> None:
    result = answer_recoverable("Likely yes", index("anything"))
    assert not result.checkable and not result.recoverable


# -- statements and the check after compression ---------------------------------------------


def test_factual_statements_skip_chatter_and_questions() -> None:
    rows = [*ROWS, source(8, "Melanie: What did you paint?")]
    texts = [s.text for s in factual_statements(rows)]
    assert "Wow, that's great!" not in texts
    assert "What did you paint?" not in texts
    assert any("pottery class" in t for t in texts)


def test_sampling_is_deterministic_and_bounded() -> None:
    statements = factual_statements(ROWS)
    first = sample_statements(statements, "seed-a", 5)
    assert len(first) == 5
    assert first == sample_statements(statements, "seed-a", 5)
    assert len(sample_statements(statements[:2], "seed-a", 5)) == 2


def draft_with(content: str, parents: list[SourceMemory]) -> SummaryDraft:
    return SummaryDraft(
        id=uuid.UUID(int=1000),
        tenant_id="acme",
        task_id="task-1",
        session_id="s1",
        level=Level.L1,
        version=1,
        parent_ids=tuple(p.id for p in parents),
        timestamp=parents[0].timestamp,
        timestamp_end=parents[-1].timestamp,
        content=content,
        source_words=sum(p.source_words for p in parents),
        summary_words=len(content.split()),
        annotated_by="test",
        compressed_by="test",
    )


def test_a_faithful_summary_is_kept() -> None:
    draft = compress_group(ROWS, Level.L1, policy=LevelPolicy(ratio_l1=1)).draft
    report = check_compression(ROWS, draft)
    assert report.verdict is QualityVerdict.KEEP
    assert report.fact_recall == 1.0
    assert report.decision_fidelity == 1.0
    # every statement is checked: the six rows that are not chatter
    assert len(report.statements) == len(factual_statements(ROWS)) == 6


def test_a_lossy_summary_is_rolled_back() -> None:
    draft = draft_with("Caroline and Melanie chatted about art.", ROWS)
    report = check_compression(ROWS, draft)
    assert report.verdict is QualityVerdict.ROLLBACK
    assert report.fact_recall is not None and report.fact_recall < 0.85
    assert "fact recall" in report.reason


def test_a_lost_rationale_is_a_failure() -> None:
    rows = ROWS[4:5]
    kept = draft_with("Caroline: decided to adopt through Hope agency", rows)
    report = check_compression(rows, kept)
    assert report.decision_fidelity == 0.0
    assert report.decisions[0].missing == ("support", "singl", "parent")
    assert report.verdict is QualityVerdict.ROLLBACK


def test_rollback_counts_failures_and_marks_resistance() -> None:
    rows = ROWS[:3]
    draft = draft_with("nothing useful", rows)
    report = check_compression(rows, draft)
    health: dict[uuid.UUID, CompressionHealth] = {}
    now = T0 + timedelta(days=2)
    for expected in (1, 2, 3):
        outcome = apply_quality(report, draft, health, now)
        assert outcome.verdict is QualityVerdict.ROLLBACK
        assert outcome.rollback is not None
        assert outcome.rollback.parent_ids == draft.parent_ids
        assert outcome.rollback.next_version == 2
        health = {h.memory_id: h for h in outcome.health}
        assert all(h.failures == expected for h in outcome.health)
    assert all(h.resistant for h in health.values())
    assert set(outcome.newly_resistant) == {r.id for r in rows}
    # the mark holds for the compressor that failed ("" for a draft that names none)
    assert all(h.resistant_to == "" for h in health.values())
    normal, resistant = split_resistant([*rows, ROWS[5]], health, "")
    assert normal == [ROWS[5]] and resistant == rows


def test_a_resistant_row_is_tried_again_when_the_compressor_changes() -> None:
    # given rows whose summaries by one compressor failed three times
    health: dict[uuid.UUID, CompressionHealth] = {}
    lossy = LossyCompressor()
    for _ in range(3):
        attempt = attempt_compression(ROWS, Level.L1, health, T0, lossy)
        health = {h.memory_id: h for h in attempt.outcome.health}
    assert all(h.resists(compressor_id(lossy)) for h in health.values())
    assert attempt_compression(ROWS, Level.L1, health, T0, lossy).draft.annotate_only

    # when another compressor (here the offline rules) meets them
    plan = plan_compression(ROWS, health, compressor_id(None))
    assert not plan.annotate_only
    split = split_resistant(ROWS, health, compressor_id(None))
    assert split == (ROWS, [])
    attempt = attempt_compression(ROWS, Level.L1, health, T0)

    # then it compresses them normally, at the full ratio, as the next version
    assert plan.version == 4 and plan.attempt == 1
    assert attempt.draft.version == 4 and not attempt.draft.annotate_only
    assert attempt.draft.compressor == compressor_id(None)
    assert attempt.outcome.verdict is QualityVerdict.KEEP


def test_a_new_compressor_that_fails_too_marks_the_row_for_itself() -> None:
    # given rows marked resistant by an older compressor
    marked = {
        r.id: CompressionHealth(memory_id=r.id, failures=3, resistant=True, resistant_to="old")
        for r in ROWS
    }
    # when the lossy compressor fails on them once
    attempt = attempt_compression(ROWS, Level.L1, marked, T0, LossyCompressor())
    # then they are resistant to it now, and annotate-only next time
    assert attempt.outcome.verdict is QualityVerdict.ROLLBACK
    assert all(h.resistant_to == compressor_id(LossyCompressor()) for h in attempt.outcome.health)
    assert set(attempt.outcome.newly_resistant) == {r.id for r in ROWS}


def test_a_report_about_another_summary_is_refused() -> None:
    draft = draft_with("x", ROWS[:1])
    other = draft.model_copy(update={"id": uuid.UUID(int=5)})
    with pytest.raises(ValueError):
        apply_quality(check_compression(ROWS[:1], draft), other, {}, T0)


class LossyCompressor:
    """A model that keeps only the verbatim segments: valid answers that lose the outcomes."""

    @property
    def name(self) -> str:
        return "lossy"

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch:
        return OFFLINE.annotate_segments(request)

    def compress_segments(self, request: CompressRequest) -> SummaryOutput:
        verbatim = {a.index for a in request.annotations if a.kind in VERBATIM_KINDS}
        text = "\n".join(s.text for s in request.segments if s.index in verbatim)
        return SummaryOutput(text=text or "nothing", kept_verbatim=sorted(verbatim))


def test_attempts_get_gentler_then_annotate_only() -> None:
    # given a compressor whose summaries cannot pass
    health: dict[uuid.UUID, CompressionHealth] = {}
    versions = []
    for _ in range(6):
        attempt = attempt_compression(ROWS, Level.L1, health, T0, LossyCompressor())
        versions.append((attempt.draft.version, attempt.draft.annotate_only))
        if attempt.outcome.verdict is QualityVerdict.KEEP:
            break
        health = {h.memory_id: h for h in attempt.outcome.health}
    # then each retry is a new version and, after three failures, annotate-only is kept
    assert versions == [(1, False), (2, False), (3, False), (4, True)]
    assert attempt.outcome.verdict is QualityVerdict.KEEP
    assert attempt.report.fact_recall == 1.0


def test_run_figures() -> None:
    good = compress_group(ROWS, Level.L1, policy=LevelPolicy(ratio_l1=1)).draft
    bad = draft_with("nothing", ROWS)
    reports = [check_compression(ROWS, good), check_compression(ROWS, bad)]
    stats = summarise_run(reports)
    assert stats.checked == 2 and stats.kept == 1 and stats.rolled_back == 1
    assert stats.fact_recall_mean is not None and 0.0 <= stats.fact_recall_mean <= 0.6
    assert stats.statements_checked == 12
