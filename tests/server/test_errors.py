"""Every refusal in one shape, FastAPI's own validation errors included."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memharness.server.errors import field_of, first_error, from_validation, invalid_body
from memharness.server.models import BatchBody, RecallBody
from pipelines.errors import InvalidInput
from pipelines.state.models import TaskState


def test_an_invalid_input_keeps_the_client_body_and_adds_the_error_kind() -> None:
    exc = InvalidInput(
        "content", "is 70000 bytes of UTF-8; the limit is 65536 bytes", "65536 bytes"
    )
    assert invalid_body(exc) == {"error": "invalid_input", **exc.to_json()}


def test_locations_become_the_field_names_of_the_python_client() -> None:
    assert field_of(("body", "items", 3, "content")) == "items[3].content"
    assert field_of(("query", "limit")) == "limit"
    assert field_of(("tree", 0, "title"), "state") == "state.tree[0].title"
    assert field_of(("body",)) == "body"


def test_a_validation_error_names_its_field_and_limit() -> None:
    with pytest.raises(ValidationError) as caught:
        BatchBody.model_validate({"items": [{"content": "x", "task_id": "t", "session_id": "s"},
                                            {"task_id": "t", "session_id": "s"}]})  # fmt: skip
    error = first_error(list(caught.value.errors()))
    assert error.field == "items[1].content"
    with pytest.raises(ValidationError) as caught:
        RecallBody.model_validate({"query": "q", "limit": "many"})
    assert first_error(list(caught.value.errors())).field == "limit"
    with pytest.raises(ValidationError) as caught:
        RecallBody.model_validate({"query": "q", "tenantid": "x"})
    assert first_error(list(caught.value.errors())).field == "tenantid"


def test_a_task_state_error_is_named_inside_state() -> None:
    with pytest.raises(ValidationError) as caught:
        TaskState.model_validate({"tree": [{"id": "n1", "title": "t"}], "iteration": -1})
    error = from_validation(caught.value, "state")
    assert error.field == "state.iteration"
    assert error.limit == "0"


def test_a_body_must_be_strict_json() -> None:
    from memharness.server.strict import check_json_body

    assert check_json_body(b'{"query": "q", "nested": {"a": [1, 2]}}')["nested"] == {"a": [1, 2]}
    for data, says in [
        (b'{"a": 1, "a": 2}', "twice"),
        (b'{"a": {"b": 1, "b": 1}}', "twice"),
        (b'{"a": "\xff"}', "UTF-8"),
        (b"[" * 50_000 + b"]" * 50_000, "deeply"),
        (b'{"a": NaN}', "NaN"),
        (b'{"a": -Infinity}', "Infinity"),
        (b"{not json", "not valid JSON"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            check_json_body(data)
        assert caught.value.field == "body" and says in caught.value.message, data[:30]


def test_an_undeclared_query_parameter_is_named() -> None:
    from memharness.server.strict import check_query

    check_query(["limit", "cursor"], frozenset({"limit", "cursor", "status"}))
    with pytest.raises(InvalidInput) as caught:
        check_query(["limit", "tenant_id"], frozenset({"limit"}))
    assert caught.value.field == "tenant_id" and "limit" in caught.value.message


def test_postgresql_unreachable_is_a_503_with_retry_after() -> None:
    # given an app with the server's handlers whose route finds PostgreSQL gone
    import psycopg
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from psycopg_pool import PoolTimeout

    from memharness.server.app import add_error_handlers

    app = FastAPI()
    add_error_handlers(app)

    @app.get("/pool")
    def pool() -> None:
        raise PoolTimeout("couldn't get a connection after 30.00 sec")

    @app.get("/refused")
    def refused() -> None:
        raise psycopg.OperationalError("connection refused")

    @app.get("/wrapped")
    def wrapped() -> None:
        try:
            raise psycopg.OperationalError("connection refused")
        except psycopg.OperationalError as exc:
            raise RuntimeError("Retry limit exceeded") from exc

    # then each answers 503 in the one shape, naming the service, with Retry-After
    with TestClient(app, raise_server_exceptions=False) as client:
        for path in ("/pool", "/refused", "/wrapped"):
            answer = client.get(path)
            assert answer.status_code == 503, answer.text
            assert set(answer.json()) == {"error", "field", "message", "limit"}
            assert answer.json()["error"] == "unavailable"
            assert "PostgreSQL" in answer.json()["message"]
            assert int(answer.headers["retry-after"]) > 0
