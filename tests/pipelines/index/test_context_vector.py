from __future__ import annotations

import pytest

from pipelines.index.context_vector import (
    CONTEXT_MAX_CHARS,
    PHASE_FUSION_WEIGHTS,
    context_text,
    fusion_weights,
    query_context_text,
)
from pipelines.records import TaskPhase


def test_the_write_context_comes_from_phase_focus_and_trigger() -> None:
    metadata = {
        "phase": "debugging",
        "focus": ["errors", "state"],
        "trigger": "  test   failure ",
        "user": "ignored",
    }
    assert context_text(metadata, "decision", "t-1") == (
        "phase: debugging; focus: errors, state; trigger: test failure"
    )


def test_without_situation_metadata_the_type_and_task_stand_in() -> None:
    assert context_text({"user": "x"}, "decision", "billing") == "type: decision; task: billing"
    assert context_text(None, None, None) == "unspecified"


def test_a_long_focus_is_capped() -> None:
    assert len(context_text({"focus": "word " * 500}, None, None)) == CONTEXT_MAX_CHARS


def test_a_query_context_renders_like_a_write_context() -> None:
    written = context_text({"phase": "planning", "focus": ["decisions"]}, "decision", "t")
    assert query_context_text(TaskPhase.PLANNING, ["decisions"]) == written


@pytest.mark.parametrize("phase", [None, *TaskPhase])
def test_content_always_leads_the_fusion(phase: TaskPhase | None) -> None:
    content, context = fusion_weights(phase)
    assert content > context > 0
    assert content + context == pytest.approx(1.0)


def test_debugging_leans_on_context_more_than_execution() -> None:
    assert fusion_weights(TaskPhase.DEBUGGING)[1] > fusion_weights(TaskPhase.EXECUTION)[1]
    assert set(PHASE_FUSION_WEIGHTS) == {None, *TaskPhase}
