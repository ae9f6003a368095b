"""The request models: strict types, unknown fields refused, every limit a column or the
engine can hold, and the project's InvalidInput naming the field and the limit."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pipelines.errors import InvalidInput
from pipelines.requests.base import Limits
from pipelines.requests.own import ForgetArgs, ListArgs
from pipelines.requests.read import ContextArgs, RecallArgs
from pipelines.requests.tasks import CheckpointArgs, GoldenArgs
from pipelines.requests.write import RecordArgs, RecordManyArgs

RECORD = {"content": "we chose Postgres", "tenant_id": "t1", "task_id": "k", "session_id": "s"}


def refused(model: type, data: object, limits: Limits | None = None) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        model.parse(data, limits or Limits())
    return caught.value


def test_record_parses_and_gets_a_deterministic_id() -> None:
    first = RecordArgs.parse(RECORD).new_memory()
    again = RecordArgs.parse(dict(RECORD)).new_memory()
    assert first.id == again.id
    assert first.timestamp.tzinfo is not None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"task_id": 5}, "task_id"),
        ({"type": "nope"}, "type"),
        ({"content": "  "}, "content"),
        ({"metadata": {"a": [1, float("inf")]}}, "metadata"),
        ({"tenant": "x"}, "tenant"),
        ({"timestamp": "9999-12-31T23:59:59-12:00"}, "timestamp"),
        ({"timestamp": datetime(2020, 1, 1)}, "timestamp"),  # naive: ambiguous
        ({"idempotency_key": "k" * 201}, "idempotency_key"),
    ],
)
def test_record_refuses_with_the_field(change: dict[str, object], field: str) -> None:
    assert refused(RecordArgs, {**RECORD, **change}).field == field


def test_year_ten_thousand_in_utc_names_the_range() -> None:
    error = refused(RecordArgs, {**RECORD, "timestamp": "9999-12-31T23:59:59-12:00"})
    assert error.limit is not None and "9999-12-31" in error.limit


def test_content_limit_comes_from_the_limits() -> None:
    error = refused(RecordArgs, {**RECORD, "content": "x" * 11}, Limits(content_max_bytes=10))
    assert (error.field, error.limit) == ("content", "10 bytes")


def test_json_body_is_strict_too() -> None:
    parsed = RecordArgs.parse_json(json.dumps({**RECORD, "timestamp": "2026-01-01T00:00:00Z"}))
    assert parsed.timestamp == datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidInput) as caught:
        RecallArgs.parse_json(json.dumps({"query": "q", "tenant_id": "t", "limit": "5"}))
    assert caught.value.field == "limit"


def test_a_batch_names_the_item() -> None:
    error = refused(RecordManyArgs, {"items": [RECORD, {**RECORD, "session_id": "a b"}]})
    assert error.field == "items[1].session_id"
    bounded = Limits(batch_max_items=1)
    assert refused(RecordManyArgs, {"items": [RECORD, RECORD]}, bounded).limit == "1 items"


def test_recall_limit_is_an_integer_not_text() -> None:
    assert refused(RecallArgs, {"query": "q", "tenant_id": "t", "limit": "5"}).field == "limit"
    assert refused(RecallArgs, {"query": "q", "tenant_id": "t", "limit": True}).field == "limit"
    assert refused(RecallArgs, {"query": "q", "tenant_id": "t", "limit": 101}).limit == "100"


def test_context_budget_checked_once_against_the_layout() -> None:
    call = ContextArgs.parse(
        {"tenant_id": "t", "task_id": "k", "query": "what  next", "budget_tokens": 8000}
    ).call()
    assert call.request.query == "what next"
    assert refused(
        ContextArgs, {"tenant_id": "t", "task_id": "k", "query": "q", "budget_tokens": 10}
    ).field == ("budget_tokens")


def test_forget_needs_one_target() -> None:
    error = refused(ForgetArgs, {"tenant_id": "t", "reason": "wrong"})
    assert error.field == "target"
    assert ForgetArgs.parse({"tenant_id": "t", "reason": "r", "task_id": "k"}).call().target_id


def test_listing_since_must_be_storable() -> None:
    assert refused(ListArgs, {"tenant_id": "t", "since": "10000-01-01"}).field == "since"


def test_checkpoint_iteration_fits_the_integer_column() -> None:
    state = {"task_id": "k", "iteration": 2**31}
    error = refused(CheckpointArgs, {"tenant_id": "t", "task_id": "k", "state": state})
    assert error.field == "state.iteration"


def test_golden_queries_name_the_item() -> None:
    args = GoldenArgs.parse({"tenant_id": "t", "queries": [{"query": "q", "expected_id": "x"}]})
    with pytest.raises(InvalidInput) as caught:
        args.golden()
    assert caught.value.field == "queries[0].expected_id"
