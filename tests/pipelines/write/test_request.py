"""``prepare_write``'s metadata check: every bad value is an ``InvalidInput`` on ``metadata``
naming the rule (depth included), never a TypeError, ValueError or RecursionError."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.errors import InvalidInput
from pipelines.requests.write import prepare_write
from pipelines.write.request import METADATA_MAX_DEPTH, check_write_metadata

SCOPE = {"tenant_id": "acme", "task_id": "billing", "session_id": "s-1"}


def refusal(metadata: object, max_bytes: int = 8192) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        prepare_write("hello", metadata=metadata, metadata_max_bytes=max_bytes, **SCOPE)
    return caught.value


def nested(depth: int, leaf: object = 1) -> Any:
    value: Any = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return {"top": value}


def test_a_list_or_a_string_is_refused_as_a_json_object() -> None:
    for bad in ([1, 2], [("a", 1)], "text", 42, b"{}"):
        error = refusal(bad)
        assert (error.field, error.limit) == ("metadata", "JSON object")
        assert "must be a JSON object" in error.message


def test_deep_nesting_names_the_depth_limit_and_never_recurses() -> None:
    # given values nested just within, just past and far past the limit (a 100k-deep one
    # used to raise RecursionError from the JSON encoder)
    assert prepare_write("hi", metadata=nested(METADATA_MAX_DEPTH - 1), **SCOPE).metadata
    for depth in (METADATA_MAX_DEPTH, 1_000, 100_000):
        error = refusal(nested(depth))
        assert error.limit == f"{METADATA_MAX_DEPTH} levels", depth
        assert "deeper than" in error.message


def test_a_cycle_is_refused_by_the_depth_limit() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert refusal(loop).limit == f"{METADATA_MAX_DEPTH} levels"


def test_the_message_says_where_the_bad_part_is() -> None:
    error = refusal({"tags": ["ok", {"when": datetime.now(UTC)}]})
    assert error.field == "metadata"
    assert error.message.startswith("metadata.tags[1].when is a datetime")
    assert "metadata.score" in refusal({"score": math.inf}).message
    assert "key of type int" in refusal({"a": {1: "x"}}).message


def test_good_metadata_passes_unchanged_and_mappings_become_dicts() -> None:
    value = {"phase": "review", "tags": ["a", "b"], "n": 3, "ok": True, "none": None}
    assert check_write_metadata(value, 8192) == value
    assert check_write_metadata(MappingProxyType({"a": 1}), 8192) == {"a": 1}
    assert check_write_metadata(None, 8192) == {}


def test_size_nul_and_surrogates_keep_their_rules() -> None:
    assert refusal({"blob": "x" * 9000}).limit == "8192 bytes"
    assert "NUL" in refusal({"a": "x\x00y"}).message
    assert "surrogate" in refusal({"a": "\ud800"}).message


# -- randomised: about 200 bad calls, every one an InvalidInput ------------------------------

_json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_not_json = st.sampled_from(
    [datetime.now(UTC), float("nan"), float("inf"), b"bytes", {1, 2}, object(), 1j, ...]
)


_bad_metadata = st.one_of(
    # not an object at the top
    st.lists(_json_leaf, max_size=4),
    st.text(max_size=20),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=8),
    st.tuples(st.text(max_size=3), _json_leaf),
    # an object holding something JSON cannot say, at some depth
    st.builds(
        lambda key, bad, depth: nested(depth, {key: bad}),
        st.text(max_size=5),
        _not_json,
        st.integers(0, 6),
    ),
    # non-string keys
    st.builds(lambda key: {"a": {key: 1}}, st.integers() | st.tuples(st.integers())),
    # too deep
    st.builds(nested, st.integers(METADATA_MAX_DEPTH, 3 * METADATA_MAX_DEPTH)),
    # too big
    st.builds(lambda n: {"blob": "x" * n}, st.integers(8193, 20000)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bad_metadata)
def test_randomised_bad_metadata_is_always_a_typed_refusal(bad: object) -> None:
    try:
        prepare_write("hello", metadata=bad, **SCOPE)
    except InvalidInput as exc:
        assert exc.field == "metadata"
        assert exc.message
    else:
        pytest.fail(f"accepted {bad!r}")


_wrong_type = st.integers() | st.floats() | st.lists(st.integers(), max_size=2) | st.none()
_bad_argument = st.one_of(
    st.tuples(st.just("content"), _wrong_type.filter(lambda v: v is not None)),
    st.tuples(st.just("content"), st.sampled_from(["", "   ", "a\x00b", b"\xff\xfe"])),
    st.tuples(
        st.sampled_from(["tenant_id", "task_id", "session_id"]),
        _wrong_type | st.sampled_from(["", "has space", "-lead", "x" * 129, "semi;colon"]),
    ),
    st.tuples(
        st.sampled_from(["user_id", "agent_id"]),
        _wrong_type.filter(lambda v: v is not None) | st.just("bad id"),
    ),
    st.tuples(
        st.sampled_from(["type", "modality"]),
        st.text(min_size=1, max_size=6).filter(lambda v: v not in {"text", "code"}) | st.integers(),
    ),
    st.tuples(
        st.just("timestamp"),
        st.text(max_size=10) | st.integers() | st.just(datetime(2026, 1, 1)),
    ),
    st.tuples(
        st.just("idempotency_key"),
        st.integers() | st.just("") | st.just("k" * 201) | st.lists(st.integers(), max_size=1),
    ),
    st.tuples(st.just("metadata"), _bad_metadata),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bad_argument)
def test_randomised_bad_arguments_of_a_write_each_name_their_field(
    case: tuple[str, object],
) -> None:
    field, bad = case
    arguments: dict[str, object] = {"content": "hello", **SCOPE, field: bad}
    content = arguments.pop("content")
    try:
        prepare_write(content, **arguments)
    except InvalidInput as exc:
        assert exc.field == field, (field, bad, exc)
    else:
        pytest.fail(f"{field}={bad!r} was accepted")
