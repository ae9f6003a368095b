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
