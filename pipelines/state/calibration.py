"""Resume calibration: resuming a checkpoint after a pause, which pending actions must be
checked against the outside world first. A pending action that writes outside may already
have happened before the interruption; a read may be stale. The offline rules insert
verification nodes; ``CalibrationLLM`` is what a model is asked instead.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from pipelines.state.models import (
    ID_MAX_CHARS,
    ActionEffect,
    NodeKind,
    NodeStatus,
    TaskCheckpoint,
    TaskNode,
)

# After this long the outside world may have moved on: what the agent read is re-read.
STALE_AFTER_S = 3600.0


class VerificationCheck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    action_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    reason: str = Field(min_length=1, max_length=500)


class ResumeCalibration(BaseModel):
    """The verdict of a resume's calibration step (from the LLM port or the offline rules)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    needs_verification: bool
    reason: str = Field(min_length=1, max_length=1000)
    checks: tuple[VerificationCheck, ...] = ()

    @model_validator(mode="after")
    def _checks_match(self) -> ResumeCalibration:
        if self.needs_verification != bool(self.checks):
            raise ValueError("needs_verification must be true exactly when checks are given")
        ids = [check.action_id for check in self.checks]
        if len(set(ids)) != len(ids):
            raise ValueError("an action is checked twice")
        return self


@runtime_checkable
class CalibrationLLM(Protocol):
    """What a resume asks of the LLM port."""

    def calibrate_resume(self, checkpoint: TaskCheckpoint, elapsed_s: float) -> ResumeCalibration:
        """Resuming ``checkpoint`` after ``elapsed_s``: which pending actions must be checked
        against the outside world first (:func:`offline_calibration` by rules)."""
        ...


def offline_calibration(
    checkpoint: TaskCheckpoint, elapsed_s: float, *, stale_after_s: float = STALE_AFTER_S
) -> ResumeCalibration:
    """The offline rules: verify every pending write to the outside world (it may have run
    between the checkpoint and the crash), and pending outside reads once the pause is long
    enough for their answers to be stale. Local actions are simply redone."""
    checks: list[VerificationCheck] = []
    stale = elapsed_s >= stale_after_s
    for action in checkpoint.state.pending_actions:
        if action.effect is ActionEffect.EXTERNAL_WRITE:
            checks.append(
                VerificationCheck(
                    action_id=action.action_id,
                    reason=f"{action.tool} changes the outside world and may have run before "
                    "the interruption; confirm whether it took effect before repeating it",
                )
            )
        elif action.effect is ActionEffect.EXTERNAL_READ and stale:
            checks.append(
                VerificationCheck(
                    action_id=action.action_id,
                    reason=f"{action.tool} reads the outside world and "
                    f"{elapsed_s / 3600:.1f} h have passed; refresh what it depends on",
                )
            )
    pause = f"{elapsed_s:.0f} s since the checkpoint"
    if not checks:
        return ResumeCalibration(
            needs_verification=False,
            reason=f"{pause}; no pending action needs checking against the outside world",
        )
    return ResumeCalibration(
        needs_verification=True,
        reason=f"{pause}; {len(checks)} pending action(s) touch the outside world",
        checks=tuple(checks),
    )


def verification_node_id(action_id: str) -> str:
    return f"verify:{action_id}"[:ID_MAX_CHARS]


def apply_calibration(checkpoint: TaskCheckpoint, verdict: ResumeCalibration) -> TaskCheckpoint:
    """Insert a verification node before the node of each checked action, once.

    Idempotent: a node already present (an earlier resume inserted it and the agent saved
    since) is not inserted again. The current node moves to the first new verification node.
    """
    state = checkpoint.state
    actions = {action.action_id: action for action in state.pending_actions}
    existing = {node.id for node in state.tree}
    before: dict[str, list[TaskNode]] = {}
    for check in verdict.checks:
        action = actions.get(check.action_id)
        if action is None:
            raise ValueError(f"calibration checks unknown pending action {check.action_id!r}")
        node_id = verification_node_id(action.action_id)
        if node_id in existing:
            continue
        existing.add(node_id)
        target = state.node(action.node_id)
        before.setdefault(target.id, []).append(
            TaskNode(
                id=node_id,
                title=f"Verify before {action.tool} ({action.action_id})",
                parent_id=target.parent_id,
                kind=NodeKind.VERIFICATION,
                note=check.reason,
            )
        )
    if not before:
        return checkpoint
    tree: list[TaskNode] = []
    first: str | None = None
    for node in state.tree:
        for inserted in before.get(node.id, ()):
            tree.append(inserted)
            first = first or inserted.id
        tree.append(node)
    # No re-validation (it would double the restore time): the new nodes have fresh ids,
    # their parent precedes the node they precede, and a pending node changes neither the
    # completed nor the blocked ids. The tests re-validate the result.
    resumed = state.model_copy(update={"tree": tuple(tree), "current_node_id": first})
    return checkpoint.model_copy(update={"state": resumed})


def describe_for_calibration(checkpoint: TaskCheckpoint, elapsed_s: float) -> dict[str, Any]:
    """What a model needs to calibrate a resume, as JSON-ready data (arguments cut short)."""
    state = checkpoint.state
    return {
        "elapsed_s": round(elapsed_s, 1),
        "phase": state.phase,
        "current_node": state.current_node_id,
        "nodes": {
            status.value: sum(n.status is status for n in state.tree) for status in NodeStatus
        },
        "pending_actions": [
            {
                "action_id": action.action_id,
                "tool": action.tool,
                "effect": action.effect.value,
                "node": state.node(action.node_id).title[:200],
                "arguments": json.dumps(action.arguments, ensure_ascii=False)[:500],
            }
            for action in state.pending_actions
        ],
        "last_tool_calls": [
            {"tool": call.tool, "error": (call.error or "")[:200]}
            for call in state.last_tool_calls[-5:]
        ],
    }
