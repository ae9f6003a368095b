from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.cognition.compress import compress_group, plan_groups, sources_from_drafts
from pipelines.cognition.levels import DAY_S, LevelPolicy, target_level
from pipelines.cognition.offline_compress import (
    MAX_DROPPED_UNIT_SHARE,
    OFFLINE,
    classify_segment,
    telegraphic,
)
from pipelines.cognition.protocol import (
    AnnotateRequest,
    AnnotationBatch,
    CompressionLLM,
    CompressRequest,
    SegmentKind,
    SourceMemory,
    SummaryOutput,
    annotation_json_schema,
    parse_annotations,
    parse_summary,
)
from pipelines.cognition.quality import QualityVerdict, check_compression
from pipelines.cognition.segments import segment_sources
from pipelines.errors import MalformedLLMOutput, TransientLLMError
from pipelines.records import Level
from pipelines.text.dates import DateSpan, find_dates, resolve_relative_dates
from pipelines.text.identifiers import find_identifiers

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def source(
    n: int,
    content: str,
    *,
    at: datetime = T0,
    session: str = "s1",
    task: str = "task-1",
    level: Level = Level.L0,
) -> SourceMemory:
    return SourceMemory(
        id=uuid.UUID(int=n),
        tenant_id="acme",
        task_id=task,
        session_id=session,
        timestamp=at + timedelta(seconds=n),
        content=content,
        level=level,
        source_words=len(content.split()),
    )


PROJECT = [
    source(1, "user: Hi there!"),
    source(
        2,
        "agent: We decided to use PostgreSQL for the job queue because it gives us "
        "transactional enqueue in the same commit as the write.",
    ),
    source(3, "user: I prefer short status updates; be detailed only for architecture."),
    source(
        4,
        "agent: I ran the migration scripts/migrate_ledger.py against staging yesterday and "
        "it moved 18231 rows in 14 minutes without any errors at all, which was nice.",
    ),
    source(
        5,
        'agent: Traceback (most recent call last):\n  File "app/jobs.py", line 88, in run\n'
        "    conn.execute(sql)\npsycopg.OperationalError: server closed the connection",
    ),
    source(6, "user: ok thanks"),
    source(7, "agent: Status: ATL-12 is now in review, waiting on Priya."),
]


# -- level policy ------------------------------------------------------------------------------


def test_levels_follow_age() -> None:
    assert target_level(3600, 0) == Level.L0
    assert target_level(2 * DAY_S, 0) == Level.L1
    assert target_level(10 * DAY_S, 0) == Level.L2
    assert target_level(400 * DAY_S, 0) == Level.L2  # L3 only at task completion


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(age=st.floats(0, 1000 * DAY_S), n1=st.integers(0, 10_000), n2=st.integers(0, 10_000))
def test_often_read_memories_stay_finer(age: float, n1: int, n2: int) -> None:
    few, many = sorted((n1, n2))
    assert target_level(age, many) <= target_level(age, few)


def test_retries_halve_the_target_ratio() -> None:
    policy = LevelPolicy()
    assert policy.ratio(Level.L1) == 10
    assert policy.ratio(Level.L1, version=2) == 5
    assert policy.ratio(Level.L2, version=3) == 12.5
    assert policy.ratio(Level.L1, version=9) == 1.0
    with pytest.raises(ValueError):
        policy.ratio(Level.L4)


# -- dates -----------------------------------------------------------------------------------


def spans(text: str, anchor: date | None = None) -> list[DateSpan]:
    return [span for _, _, span in find_dates(text, anchor)]


def day(text: str) -> DateSpan:
    d = date.fromisoformat(text)
    return DateSpan(d, d)


def test_absolute_dates_in_common_forms() -> None:
    assert spans("on 7 May 2023") == [day("2023-05-07")]
    assert spans("February 24, 2023") == [day("2023-02-24")]
    assert spans("15April, 2022.") == [day("2022-04-15")]
    assert spans("Januarty 5, 2024") == [day("2024-01-05")]
    assert spans("2023-05-07") == [day("2023-05-07")]
    assert spans("May, 2023") == [DateSpan(date(2023, 5, 1), date(2023, 5, 31))]
    assert spans("in 2022") == [DateSpan(date(2022, 1, 1), date(2022, 12, 31))]
    assert spans("2023-05-01..2023-05-07") == [DateSpan(date(2023, 5, 1), date(2023, 5, 7))]


def test_words_that_only_look_like_dates_are_not_dates() -> None:
    assert spans("I may go there with 3 friends") == []
    assert spans("10 years of practice, maybe 5 more") == []
    assert spans("she married 2 people") == []


def test_relations_to_an_explicit_date() -> None:
    assert spans("The week before 9 June 2023") == [DateSpan(date(2023, 6, 2), date(2023, 6, 8))]
    assert spans("The Friday before 15 July 2023") == [day("2023-07-14")]
    assert spans("the weekend before 17 July 2023") == [
        DateSpan(date(2023, 7, 15), date(2023, 7, 16))
    ]
    assert spans("two weekends before 17 July 2023") == [
        DateSpan(date(2023, 7, 8), date(2023, 7, 9))
    ]
    assert spans("first week of May 2023") == [DateSpan(date(2023, 5, 1), date(2023, 5, 7))]
    assert spans("the summer of 2022") == [DateSpan(date(2022, 6, 1), date(2022, 8, 31))]


def test_relative_dates_need_an_anchor() -> None:
    anchor = date(2023, 5, 8)  # a Monday
    assert spans("yesterday", None) == []
    assert spans("I went yesterday", anchor) == [day("2023-05-07")]
    assert spans("last week", anchor) == [DateSpan(date(2023, 5, 1), date(2023, 5, 7))]
    assert spans("last Friday", anchor) == [day("2023-05-05")]
    assert spans("last year", anchor) == [DateSpan(date(2022, 1, 1), date(2022, 12, 31))]
    assert spans("next month", anchor) == [DateSpan(date(2023, 6, 1), date(2023, 6, 30))]
    assert spans("two months ago", anchor) == [DateSpan(date(2023, 3, 1), date(2023, 3, 31))]
    assert spans("last summer", anchor) == [DateSpan(date(2022, 6, 1), date(2022, 8, 31))]


def test_resolving_relative_dates() -> None:
    anchor = date(2023, 5, 8)
    assert resolve_relative_dates("went yesterday", anchor) == "went 2023-05-07"
    assert resolve_relative_dates("painted last year", anchor) == "painted 2022"
    assert resolve_relative_dates("ten years ago", anchor) == "ten years ago [2013]"
    bracketed = resolve_relative_dates("I went yesterday.", anchor, bracket=True)
    assert bracketed == "I went yesterday [2023-05-07]."
    # a second pass (an L2 over an L1) does not bracket twice
    assert resolve_relative_dates(bracketed, anchor, bracket=True) == bracketed


# -- stage 1 rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            "We decided to use Redis for sessions because the old cache leaked memory.",
            SegmentKind.DECISION_RATIONALE,
        ),
        ("I prefer short status updates for routine work.", SegmentKind.USER_PREFERENCE),
        ("The frontend release is delayed until ATL-9 lands.", SegmentKind.STATUS_CHANGE),
        (
            "The 500 error came back, caused by a missing index on orders.user_id.",
            SegmentKind.ERROR_ROOT_CAUSE,
        ),
        ("Thanks, that's great!", SegmentKind.CHATTER),
        ("How are you doing?", SegmentKind.CHATTER),
        ("The nightly export wrote 3 files to s3://reports/daily.", SegmentKind.OUTCOME),
    ],
)
def test_classify_segment(text: str, kind: SegmentKind) -> None:
    assert classify_segment(text)[0] is kind


def test_decision_rationale_is_extracted_verbatim() -> None:
    kind, rationale, _ = classify_segment(
        "Going with gRPC for the event bus, because it streams back-pressure."
    )
    assert kind is SegmentKind.DECISION_RATIONALE
    assert rationale == "because it streams back-pressure"


def test_segments_keep_speakers_logs_and_code_whole() -> None:
    segments = segment_sources(PROJECT)
    by_memory = {s.memory_id.int: s for s in segments}
    assert by_memory[2].speaker == "agent"
    assert by_memory[2].addressee == "user"
    traceback = [s for s in segments if s.memory_id.int == 5]
    assert len(traceback) == 1 and "OperationalError" in traceback[0].text
    fenced = segment_sources([source(9, "agent: here:\n```\nx = 1\ny = 2\n```\nDone, it works.")])
    assert any(s.text.startswith("```") and "y = 2" in s.text for s in fenced)


def test_identifiers_exclude_the_speakers() -> None:
    ids = find_identifiers(
        "Thanks, Maria! Then Priya moved auth/login.py to ATL-12 in v2.3 at 14:00.",
        exclude=["Maria"],
    )
    assert {"Priya", "auth/login.py", "ATL-12", "v2.3", "14:00"} <= set(ids)
    assert "Maria" not in ids


def test_telegraphic_keeps_content_and_negations() -> None:
    text = telegraphic("Well, I really did not like the new CI runner at all.", "Joe")
    assert text == "not like new CI runner"


# -- the protocol ----------------------------------------------------------------------------


def test_offline_compression_keeps_what_the_protocol_promises() -> None:
    # a ratio of 1: nothing is dropped for the budget, only by the protocol's rules
    result = compress_group(PROJECT, Level.L1, policy=LevelPolicy(ratio_l1=1))
    draft = result.draft
    text = draft.content
    # decisions with their rationale and preferences verbatim
    assert (
        "We decided to use PostgreSQL for the job queue because it gives us transactional "
        "enqueue in the same commit as the write." in text
    )
    assert "I prefer short status updates" in text
    # chatter gone, identifiers kept, the relative date resolved
    assert "Hi there" not in text and "ok thanks" not in text
    for identifier in ("scripts/migrate_ledger.py", "18231", "ATL-12", "app/jobs.py"):
        assert identifier in text
    assert "2023-05-07" in text
    assert draft.compressed_by == "offline" and draft.malformed_answers == 0
    assert draft.parent_ids == tuple(s.id for s in PROJECT)
    assert draft.summary_words < draft.source_words
    assert draft.kinds["chatter"] >= 2


def test_budget_drops_outcomes_not_verbatim_segments() -> None:
    # given many outcome sentences and one preference
    rows = [source(1, "user: I prefer tabs over spaces in every Makefile we write.")]
    rows += [
        source(i, f"agent: Benchmark run {i} measured {i * 7} requests per second on host{i}.")
        for i in range(2, 30)
    ]
    draft = compress_group(rows, Level.L1).draft
    assert "I prefer tabs over spaces in every Makefile we write." in draft.content
    # the budget (a tenth) cannot be met without losing facts: at most one outcome in ten
    # goes, and the identifiers of the dropped ones are listed
    kept = [i for i in range(2, 30) if f"Benchmark run {i} " in draft.content]
    assert 28 - len(kept) == math.floor(MAX_DROPPED_UNIT_SHARE * 29)
    assert draft.summary_words < sum(r.source_words for r in rows)
    assert "\nids: " in draft.content
    # every identifier survives, in the text or the ids line
    for i in range(2, 30):
        assert f"host{i}" in draft.content


def test_summary_rows_are_versioned_and_deterministic() -> None:
    first = compress_group(PROJECT, Level.L1).draft
    again = compress_group(list(reversed(PROJECT)), Level.L1).draft
    retry = compress_group(PROJECT, Level.L1, version=2).draft
    assert first.id == again.id and first.content == again.content
    assert retry.id != first.id and retry.version == 2
    assert retry.summary_words >= first.summary_words  # a retry is gentler
    assert first.metadata()["parent_ids"] == [str(s.id) for s in PROJECT]


def test_annotate_only_drops_chatter_and_nothing_else() -> None:
    draft = compress_group(PROJECT, Level.L1, annotate_only=True).draft
    assert draft.annotate_only and draft.compressed_by == "annotate-only"
    assert "Hi there" not in draft.content
    assert "without any errors at all" in draft.content


def test_l2_builds_on_l1_rows() -> None:
    l1 = compress_group(PROJECT, Level.L1).draft
    l2 = compress_group(sources_from_drafts([l1]), Level.L2).draft
    assert l2.parent_ids == (l1.id,)
    assert l2.source_words == l1.source_words
    with pytest.raises(ValueError):
        compress_group(sources_from_drafts([l2]), Level.L1)


def test_compression_refuses_mixed_tenants_and_empty_groups() -> None:
    other = PROJECT[0].model_copy(update={"tenant_id": "other", "id": uuid.UUID(int=99)})
    with pytest.raises(ValueError):
        compress_group([*PROJECT, other], Level.L1)
    with pytest.raises(ValueError):
        compress_group([], Level.L1)


class ScriptedLLM:
    """A fake adapter: each call pops the next answer (a JSON string or an exception)."""

    def __init__(self, annotate: list[object], summarise: list[object]) -> None:
        self._annotate = annotate
        self._summarise = summarise
        self.calls = 0

    @property
    def name(self) -> str:
        return "scripted"

    def _next(self, queue: list[object]) -> str:
        self.calls += 1
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, str)
        return item

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch:
        return parse_annotations(self._next(self._annotate), request)

    def compress_segments(self, request: CompressRequest) -> SummaryOutput:
        return parse_summary(self._next(self._summarise), request)


def _offline_json(
    make: Callable[[], AnnotationBatch | SummaryOutput],
) -> str:
    return make().model_dump_json()


def test_a_good_llm_answer_is_used() -> None:
    segments = segment_sources(PROJECT)
    request = AnnotateRequest(segments=segments)
    annotations = OFFLINE.annotate_segments(request)
    verbatim = [
        s.text
        for s, a in zip(segments, annotations.segments, strict=True)
        if a.kind.value in {"decision_rationale", "user_preference", "status_change"}
    ]
    summary = json.dumps({"text": " ".join(verbatim) + " Migration moved 18231 rows."})
    llm = ScriptedLLM([annotations.model_dump_json()], [summary])
    assert isinstance(llm, CompressionLLM)
    draft = compress_group(PROJECT, Level.L1, llm).draft
    assert draft.annotated_by == "scripted" and draft.compressed_by == "scripted"
    # identifiers the model left out are appended, not lost
    assert "ids:" in draft.content and "scripts/migrate_ledger.py" in draft.content


def test_malformed_answers_are_retried_then_fall_back_to_offline() -> None:
    good = OFFLINE.annotate_segments(AnnotateRequest(segments=segment_sources(PROJECT)))
    llm = ScriptedLLM(
        ["{not json", good.model_dump_json()],
        ['{"text": "nothing verbatim here"}', '{"summary": "wrong schema"}'],
    )
    draft = compress_group(PROJECT, Level.L1, llm).draft
    assert draft.annotated_by == "scripted"
    assert draft.compressed_by == "offline-fallback"
    assert draft.malformed_answers == 3
    assert "We decided to use PostgreSQL" in draft.content


def test_annotations_for_the_wrong_segments_are_malformed() -> None:
    request = AnnotateRequest(segments=segment_sources(PROJECT))
    good = OFFLINE.annotate_segments(request)
    shuffled = AnnotationBatch(segments=list(reversed(good.segments)))
    with pytest.raises(MalformedLLMOutput):
        parse_annotations(shuffled.model_dump_json(), request)
    with pytest.raises(MalformedLLMOutput):
        parse_annotations('{"segments": [{"index": 0, "kind": "gossip", "resolved": ""}]}', request)


def test_transient_errors_propagate_for_the_job_to_retry() -> None:
    llm = ScriptedLLM([TransientLLMError("429")], [])
    with pytest.raises(TransientLLMError):
        compress_group(PROJECT, Level.L1, llm)


def test_the_schema_names_every_kind() -> None:
    schema = json.dumps(annotation_json_schema())
    for kind in SegmentKind:
        assert kind.value in schema


# -- groups ------------------------------------------------------------------------------------


def test_plan_groups_by_session_day_and_words() -> None:
    rows = [source(i, "word " * 400, session="a") for i in range(1, 8)]
    rows += [source(20, "other session", session="b")]
    rows += [source(30, "next day", session="a", at=T0 + timedelta(days=2))]
    groups = plan_groups(rows, Level.L1)
    sizes = sorted(len(g) for g in groups)
    assert sum(sizes) == len(rows)
    assert all(len({r.session_id for r in g}) == 1 for g in groups)
    assert all(sum(r.source_words for r in g) <= 2000 for g in groups if len(g) > 1)
    assert any(g == [rows[-1]] for g in groups)
    whole = plan_groups(rows, Level.L3)
    assert len(whole) == 1 and len(whole[0]) == len(rows)


def test_task_summary_at_completion_keeps_verbatim_segments_whole() -> None:
    # given the task's L1 row, then its completion
    l1 = compress_group(PROJECT, Level.L1, policy=LevelPolicy(ratio_l1=1)).draft
    (group,) = plan_groups(sources_from_drafts([l1]), Level.L3)
    l3 = compress_group(group, Level.L3).draft
    # then the preference with a ";" inside survives whole, and every identifier
    assert "I prefer short status updates; be detailed only for architecture." in l3.content
    assert "We decided to use PostgreSQL" in l3.content
    assert "scripts/migrate_ledger.py" in l3.content
    assert l3.level == Level.L3 and l3.parent_ids == (l1.id,)


# -- phase summaries ---------------------------------------------------------------------------

DANCE = [
    source(1, "Jon: I'm searching for a dance studio location for my business, it's tricky."),
    source(2, "Gina: Searching for a dance studio is a tough job."),
    source(3, "Jon: The dance studio needs a big floor and a good location near the station."),
    source(4, "Jon: I rehearsed new dance routines for the dance competition on 2023-03-12."),
    source(5, "Gina: The dance competition will show your dance routines to the judges."),
    source(6, "Jon: My business partner found a dance studio location near the station."),
]


def test_a_phase_summary_states_each_word_once() -> None:
    # given an L1 summary of a session that names the same things turn after turn
    l1 = compress_group(DANCE, Level.L1).draft
    # when it is summarised again as a phase
    l2 = compress_group(sources_from_drafts([l1]), Level.L2).draft
    # then the L2 is at least 1.5 times smaller than its L1
    assert l2.summary_words * 1.5 <= l1.summary_words
    # one line per speaker, each naming the studio once
    lines = dict(line.split(": ", 1) for line in l2.content.splitlines())
    assert set(lines) == {"Jon", "Gina"}
    assert all(text.count("studio") == 1 for text in lines.values())
    # and still passes the quality check against the L1 and against the raw turns
    for sources in (sources_from_drafts([l1]), DANCE):
        report = check_compression(sources, l2)
        assert report.verdict is QualityVerdict.KEEP, report.reason
    # numbers and dates stay where they stand
    assert "2023-03-12" in l2.content


def test_a_phase_summary_keeps_negations_and_verbatim_segments() -> None:
    rows = [
        source(1, "Ann: The release of the mobile app went out on Monday."),
        source(2, "Ann: We decided to ship the mobile app weekly because users want fixes fast."),
        source(3, "Ann: The release notes of the mobile app did not mention the crash fix."),
    ]
    l1 = compress_group(rows, Level.L1).draft
    l2 = compress_group(sources_from_drafts([l1]), Level.L2).draft
    assert "We decided to ship the mobile app weekly because users want fixes fast." in l2.content
    assert " not " in f" {l2.content} "
