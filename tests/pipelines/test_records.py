"""Input limits of the write path: each refusal names the field and the limit."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.errors import InvalidInput
from pipelines.records import MemoryType
from pipelines.requests.write import prepare_write

SCOPE = {"tenant_id": "acme", "task_id": "t-1", "session_id": "s-1"}


def refusal(**kwargs: object) -> InvalidInput:
    fields = {**SCOPE, **kwargs}
    content = fields.pop("content", "hello world")
    with pytest.raises(InvalidInput) as info:
        prepare_write(content, **fields)  # type: ignore[arg-type]
    return info.value


def test_a_valid_write_gets_a_deterministic_id() -> None:
    first = prepare_write("Deploy to eu-west-1", **SCOPE)
    again = prepare_write("Deploy to eu-west-1", **SCOPE)
    other_session = prepare_write("Deploy to eu-west-1", **{**SCOPE, "session_id": "s-2"})
    assert first.id == again.id
    assert first.id != other_session.id
    assert first.timestamp.tzinfo is not None


def test_a_caller_key_scopes_the_id_to_the_tenant() -> None:
    a = prepare_write("x y", idempotency_key="req-1", **SCOPE)
    b = prepare_write("x y", idempotency_key="req-1", **{**SCOPE, "session_id": "s-9"})
    c = prepare_write("x y", idempotency_key="req-1", **{**SCOPE, "tenant_id": "other"})
    assert a.id == b.id
    assert a.id != c.id


def test_oversized_content_names_the_field_and_the_limit() -> None:
    error = refusal(content="é" * 40_000, content_max_bytes=65536)
    assert error.field == "content"
    assert "80000 bytes" in str(error) and "65536" in str(error)


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_empty_content_is_refused(blank: str) -> None:
    assert refusal(content=blank).field == "content"


def test_invalid_utf8_bytes_are_refused_with_the_offset() -> None:
    error = refusal(content=b"caf\xc3(")
    assert error.field == "content"
    assert "UTF-8" in str(error) and "offset 3" in str(error)


def test_a_lone_surrogate_is_refused() -> None:
    error = refusal(content="half \ud800 pair")
    assert error.field == "content"
    assert "surrogate" in str(error)


def test_utf8_bytes_are_accepted_and_decoded() -> None:
    assert prepare_write("好的, 继续 café".encode(), **SCOPE).content == "好的, 继续 café"


def test_unknown_type_lists_the_known_ones() -> None:
    error = refusal(type="opinion")
    assert error.field == "type"
    assert "decision" in str(error) and "status_change" in str(error)


def test_wrong_types_are_refused() -> None:
    assert refusal(content=42).field == "content"
    assert refusal(tenant_id=7).field == "tenant_id"
    assert refusal(metadata=["a"]).field == "metadata"
    assert refusal(timestamp="2026-01-01").field == "timestamp"
    assert refusal(idempotency_key=5).field == "idempotency_key"


def test_malformed_ids_are_refused() -> None:
    for bad in ["", "has space", "x" * 129, "-leading", "semi;colon"]:
        assert refusal(task_id=bad).field == "task_id"


def test_oversized_metadata_names_the_limit() -> None:
    error = refusal(metadata={"blob": "x" * 9000}, metadata_max_bytes=8192)
    assert error.field == "metadata"
    assert "8192" in str(error)


def test_metadata_must_be_json() -> None:
    assert "JSON" in str(refusal(metadata={"when": datetime.now(UTC)}))
    assert refusal(metadata={"nan": float("nan")}).field == "metadata"


def test_a_naive_timestamp_is_refused() -> None:
    assert "timezone" in str(refusal(timestamp=datetime(2026, 1, 1)))


def test_nul_characters_are_refused() -> None:
    assert "NUL" in str(refusal(content="a\x00b"))


def test_type_accepts_enum_and_string() -> None:
    assert prepare_write("We chose X", type="decision", **SCOPE).type is MemoryType.DECISION
    assert (
        prepare_write("We chose X", type=MemoryType.DECISION, **SCOPE).type is MemoryType.DECISION
    )


@given(st.text(min_size=1, max_size=200).filter(lambda s: s.strip() and "\x00" not in s))
def test_any_clean_text_round_trips(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    new = prepare_write(text, **SCOPE)
    assert new.content == text
    assert isinstance(new.id, uuid.UUID)
    assert len(new.content_hash) == 32


@pytest.mark.parametrize(
    "when",
    [
        "9999-12-31T23:59:59-12:00",  # year 10000 in UTC: PostgreSQL stores it, no read loads it
        "0001-01-01T00:00:00+14:00",  # year 0 in UTC
    ],
)
def test_a_timestamp_without_a_utc_datetime_is_refused(when: str) -> None:
    error = refusal(timestamp=datetime.fromisoformat(when))
    assert error.field == "timestamp"
    assert "UTC" in error.message and error.limit is not None


def test_the_edges_of_the_utc_range_are_accepted() -> None:
    for when in ("9999-12-31T23:59:59.999999+00:00", "0001-01-01T00:00:00-00:30"):
        assert prepare_write("hello", timestamp=datetime.fromisoformat(when), **SCOPE)
