"""LLM faults through real worker processes: the write worker's ``openai`` adapter talks HTTP
to the local stub, which is scripted to be slow, down, rate limited or nonsensical.

Retries are rescheduled the way a deployment reschedules them: a failed job goes back to the
outbox with a backoff (``MEMHARNESS_JOB_RETRY_BASE_S`` is 0.2 s here), and celery beat's
outbox relay (every ``MEMHARNESS_RELAY_INTERVAL_S`` = 1 s here) publishes a drain once it is
overdue. So each test runs a write worker, a maintenance worker and beat.

Whatever the fault, no memory is dropped silently: each ends stored, discarded or dead, and
the reason is on record.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from memharness.processes import Managed, start_beat
from tests.support.openai_stub import OpenAIStub, serve_stub

pytestmark = pytest.mark.integration

SCOPE = {"tenant_id": "acme", "task_id": "billing-rewrite", "session_id": "s-1"}
DECISION = "We decided to keep the outbox in PostgreSQL because it commits with the memory."
STATUS = "Status: the auth module is delayed to 2027-01-15, blocked on SEC-12."
CHATTER = "hello how are you"
# Over the summary threshold (40 words), and over the 60-word summary budget so the summary
# is shorter than the note: storing it takes a summary call as well.
LONG = " ".join(
    [
        "We reviewed the billing rewrite today.",
        "The team decided to keep invoices in PostgreSQL because the ledger needs transactions.",
        "Alice prefers small pull requests and asked for one per module.",
        "The migration script lives in scripts/migrate_invoices.py and runs nightly at 02:00.",
        "Status: the payments module is blocked on SEC-12 until the audit finishes.",
        "Bob will write the rollback plan and share it with the whole group on Friday.",
        "Lunch was pizza again and nobody complained about it this time around.",
    ]
)
SETTLE_TIMEOUT_S = 60.0


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub() as running:
        yield running


@pytest.fixture
def relay(workers, log_dir: Path) -> Iterator[Managed]:  # type: ignore[no-untyped-def]
    """A maintenance worker and beat: the relay that publishes drains for due retries."""
    workers("maintenance", ("maintenance",))
    beat = start_beat(log_dir=log_dir)
    yield beat
    beat.stop(timeout_s=10)


def start_llm_worker(workers, stub: OpenAIStub, **settings: Any) -> Managed:  # type: ignore[no-untyped-def]
    return workers("write", ("write", "embed", "recall"), env=stub.worker_env(**settings))


def job_of(db, memory_id: uuid.UUID) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    row = db.execute(
        "SELECT status, attempts, last_error, dead_reason FROM jobs WHERE memory_id = %s",
        (memory_id,),
    ).fetchone()
    assert row is not None, f"no job for memory {memory_id}"
    return dict(zip(("status", "attempts", "last_error", "dead_reason"), row, strict=True))


def memory_of(db, memory_id: uuid.UUID) -> tuple[str, str | None]:  # type: ignore[no-untyped-def]
    row = db.execute(
        "SELECT status, status_reason FROM memories WHERE id = %s", (memory_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def decisions_of(db, memory_id: uuid.UUID) -> list[tuple[int, str, str, str]]:  # type: ignore[no-untyped-def]
    """(tier, verdict, source, reason) of every tier that looked at the memory."""
    return [
        (int(tier), verdict, source, reason)
        for tier, verdict, source, reason in db.execute(
            "SELECT tier, verdict, source, reason FROM write_decisions "
            "WHERE memory_id = %s ORDER BY tier",
            (memory_id,),
        ).fetchall()
    ]


def assert_none_dropped_silently(db, memory_ids: Sequence[uuid.UUID]) -> None:  # type: ignore[no-untyped-def]
    for memory_id in memory_ids:
        status, status_reason = memory_of(db, memory_id)
        assert status in {"stored", "discarded", "dead"}, (memory_id, status)
        decisions = decisions_of(db, memory_id)
        assert decisions, f"memory {memory_id} ended {status} without a recorded decision"
        assert all(reason.strip() for *_, reason in decisions)
        if status != "stored":
            assert status_reason, f"memory {memory_id} is {status} without a reason"
        job = job_of(db, memory_id)
        assert job["status"] == ("dead" if status == "dead" else "done"), (memory_id, job)


def test_the_stub_model_decides_and_summarises_through_the_worker(
    client, workers, db, stub: OpenAIStub
) -> None:
    # given a write worker whose LLM is the stub, answering normally
    start_llm_worker(workers, stub)

    # when the agent records a decision, a long note, a plain observation and small talk
    receipts = [
        client.record(text, **SCOPE)
        for text in (DECISION, LONG, "The office coffee machine was replaced", CHATTER)
    ]
    ids = [r.memory_id for r in receipts]
    counts = client.wait_until_settled(ids, timeout_s=SETTLE_TIMEOUT_S)

    # then the model's verdicts are the record, tier 3 ran for the unsure one
    assert counts == {"stored": 3, "discarded": 1}
    assert_none_dropped_silently(db, ids)
    decision, long_note, plain, chatter = (decisions_of(db, i) for i in ids)
    assert decision == [
        (2, "keep", "openai:deepseek-chat", "stub model: offline rules: decision cues")
    ]
    assert [(tier, verdict, source) for tier, verdict, source, _ in long_note] == [
        (2, "keep", "openai:deepseek-chat")
    ]
    assert [(tier, source) for tier, _, source, _ in plain] == [
        (2, "openai:deepseek-chat"),
        (3, "openai:deepseek-chat"),
    ]
    assert chatter[0][1:3] == ("drop", "openai:deepseek-chat")
    assert memory_of(db, ids[3]) == (
        "discarded",
        "stub model: offline rules: small talk without content",
    )
    # and the long note's summary came from the model, shorter than the note
    summary = client.get(ids[1], tenant_id="acme").summary
    assert summary and len(summary.split()) < len(LONG.split())
    assert stub.count("chat:summary") == 1
    assert all(job_of(db, i)["attempts"] == 1 for i in ids)


def test_a_slow_model_times_out_and_the_job_is_retried_until_stored(
    client, workers, relay, db, stub: OpenAIStub
) -> None:
    # given a model that takes 3 s for its next two answers and workers that wait 0.5 s
    stub.control("slow", delay_s=3.0, times=2)
    start_llm_worker(workers, stub, llm_timeout_s=0.5)

    # when the agent records a decision
    receipt = client.record(DECISION, **SCOPE)
    counts = client.wait_until_settled([receipt.memory_id], timeout_s=SETTLE_TIMEOUT_S)

    # then two attempts timed out, the third got the model's answer
    assert counts == {"stored": 1}
    job = job_of(db, receipt.memory_id)
    assert job["attempts"] == 3
    assert job["last_error"] == "LLM timeout"
    assert decisions_of(db, receipt.memory_id) == [
        (2, "keep", "openai:deepseek-chat", "stub model: offline rules: decision cues")
    ]
    assert stub.count("mode:slow") == 2
    assert_none_dropped_silently(db, [receipt.memory_id])


def test_a_rate_limited_model_is_retried_then_stored(
    client, workers, relay, db, stub: OpenAIStub
) -> None:
    # given a model that answers 429 twice
    stub.control("http429", times=2)
    start_llm_worker(workers, stub)

    receipt = client.record(STATUS, **SCOPE)
    counts = client.wait_until_settled([receipt.memory_id], timeout_s=SETTLE_TIMEOUT_S)

    assert counts == {"stored": 1}
    job = job_of(db, receipt.memory_id)
    assert job["attempts"] == 3
    assert job["last_error"] == "LLM rate limited (HTTP 429)"
    [(_, verdict, source, _)] = decisions_of(db, receipt.memory_id)
    assert (verdict, source) == ("keep", "openai:deepseek-chat")
    assert stub.count("mode:http429") == 2
    assert_none_dropped_silently(db, [receipt.memory_id])


def test_a_model_down_for_good_dead_letters_when_the_fallback_is_dead(
    client, workers, relay, db, stub: OpenAIStub
) -> None:
    # given a model that answers 500 forever, two attempts, and no offline fallback
    stub.control("http500")
    start_llm_worker(workers, stub, llm_fallback="dead", job_max_attempts=2)

    receipts = [client.record(text, **SCOPE) for text in (DECISION, STATUS)]
    ids = [r.memory_id for r in receipts]
    counts = client.wait_until_settled(ids, timeout_s=SETTLE_TIMEOUT_S)

    # then both are dead letters, and the reason names the error and the attempts
    assert counts == {"dead": 2}
    expected = "LLM unavailable after 2 attempts: LLM server error (HTTP 500)"
    for memory_id in ids:
        assert memory_of(db, memory_id) == ("dead", expected)
        job = job_of(db, memory_id)
        assert (job["status"], job["attempts"], job["dead_reason"]) == ("dead", 2, expected)
        assert decisions_of(db, memory_id) == [(2, "dead", "worker", expected)]
    assert stub.count("mode:http500") == 4
    assert_none_dropped_silently(db, ids)


def test_a_model_down_for_good_falls_back_to_the_offline_rules(
    client, workers, relay, db, stub: OpenAIStub
) -> None:
    # given a model that answers 500 forever, two attempts, and the default offline fallback
    stub.control("http500")
    start_llm_worker(workers, stub, job_max_attempts=2)

    receipts = [client.record(text, **SCOPE) for text in (DECISION, CHATTER)]
    ids = [r.memory_id for r in receipts]
    counts = client.wait_until_settled(ids, timeout_s=SETTLE_TIMEOUT_S)

    # then the offline rules decided on the last attempt, and the record says why
    assert counts == {"stored": 1, "discarded": 1}
    note = "(fallback to offline rules after 2 attempts: LLM server error (HTTP 500))"
    assert decisions_of(db, ids[0]) == [
        (2, "keep", "offline-fallback", f"offline rules: decision cues {note}")
    ]
    assert decisions_of(db, ids[1]) == [
        (2, "drop", "offline-fallback", f"offline rules: small talk without content {note}")
    ]
    assert memory_of(db, ids[1]) == ("discarded", "offline rules: small talk without content")
    for memory_id in ids:
        job = job_of(db, memory_id)
        assert (job["attempts"], job["last_error"]) == (2, "LLM server error (HTTP 500)")
    assert_none_dropped_silently(db, ids)


def test_a_model_down_for_good_still_stores_a_long_memory_with_an_offline_summary(
    client, workers, relay, db, stub: OpenAIStub
) -> None:
    # given a model that answers 500 forever and the default offline fallback
    stub.control("http500")
    start_llm_worker(workers, stub, job_max_attempts=2)

    # when the agent records a note long enough to need a summary
    receipt = client.record(LONG, **SCOPE)
    counts = client.wait_until_settled([receipt.memory_id], timeout_s=SETTLE_TIMEOUT_S)

    # then the offline rules decide and the extractive summariser summarises
    assert_none_dropped_silently(db, [receipt.memory_id])
    assert counts == {"stored": 1}
    [(_, verdict, source, _)] = decisions_of(db, receipt.memory_id)
    assert (verdict, source) == ("keep", "offline-fallback")
    summary = client.get(receipt.memory_id, tenant_id="acme").summary
    assert summary and len(summary.split()) < len(LONG.split())


def test_a_model_answering_prose_is_replaced_by_the_offline_rules_at_once(
    client, workers, db, stub: OpenAIStub
) -> None:
    # given a model that never answers JSON (no retry helps, so none is scheduled)
    stub.control("invalid_json")
    start_llm_worker(workers, stub)

    receipts = [client.record(text, **SCOPE) for text in (DECISION, LONG, CHATTER)]
    ids = [r.memory_id for r in receipts]
    counts = client.wait_until_settled(ids, timeout_s=SETTLE_TIMEOUT_S)

    # then each was decided by the offline rules on its first attempt, with the model's
    # failure in the reason, and the long one got the extractive summary instead
    assert counts == {"stored": 2, "discarded": 1}
    for memory_id in ids:
        [(tier, _, source, reason)] = decisions_of(db, memory_id)
        assert (tier, source) == (2, "offline-fallback")
        assert "(fallback: openai:deepseek-chat answered invalid JSON: 'Sure! Here is" in reason
        assert job_of(db, memory_id)["attempts"] == 1
    summary = client.get(ids[1], tenant_id="acme").summary
    assert summary and len(summary.split()) < len(LONG.split())
    # two judge calls per memory (one retry of a malformed answer), one summary call
    assert stub.count("chat:judge") == 6
    assert stub.count("chat:summary") == 1
    assert_none_dropped_silently(db, ids)
