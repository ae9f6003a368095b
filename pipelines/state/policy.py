"""When an agent should checkpoint: the events that always call for one, and the policy
that spaces the others.
"""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import (
    BaseModel,
    Field,
)

from pipelines.state.models import STRICT, ActionEffect, PendingAction, TokenUsage


class AgentEvent(StrEnum):
    NODE_COMPLETED = "node_completed"
    PHASE_CHANGED = "phase_changed"
    USER_PAUSED = "user_paused"
    BEFORE_ACTION = "before_action"
    ITERATION_DONE = "iteration_done"


class CheckpointTrigger(StrEnum):
    NODE_COMPLETED = "node_completed"
    PHASE_TRANSITION = "phase_transition"
    USER_PAUSE = "user_pause"
    HIGH_COST_ACTION = "high_cost_action"
    EVERY_N_ITERATIONS = "every_n_iterations"
    TOKEN_WARNING = "token_warning"


_ALWAYS: dict[AgentEvent, CheckpointTrigger] = {
    AgentEvent.NODE_COMPLETED: CheckpointTrigger.NODE_COMPLETED,
    AgentEvent.PHASE_CHANGED: CheckpointTrigger.PHASE_TRANSITION,
    AgentEvent.USER_PAUSED: CheckpointTrigger.USER_PAUSE,
}


class CheckpointDecision(BaseModel):
    model_config = STRICT

    triggers: tuple[CheckpointTrigger, ...] = ()

    @property
    def should_checkpoint(self) -> bool:
        return bool(self.triggers)

    @property
    def phase_transition(self) -> bool:
        return CheckpointTrigger.PHASE_TRANSITION in self.triggers

    @property
    def reason(self) -> str:
        return ", ".join(trigger.value for trigger in self.triggers) or "no trigger"


class CheckpointPolicy(BaseModel):
    """When to checkpoint. Pure: the agent reports an event and what it last saved."""

    model_config = STRICT

    # The most work a crash can cost between milestones. A save takes ~1.5 ms (bench) and an
    # iteration an LLM call of seconds, so lower it freely where iterations are expensive.
    every_iterations: int = Field(10, ge=1)
    # Leaves a fifth of the budget to finish or hand over after a resume.
    token_warning_fraction: float = Field(0.8, gt=0, le=1)
    # The warning line when the task has no token budget; None: no token trigger then.
    token_warning_tokens: int | None = Field(None, ge=1)
    # About a minute of model output at common decoding speeds: redoing that after a crash
    # costs far more than the save before it.
    high_cost_tokens: int = Field(4000, ge=1)

    def warning_line_tokens(self, usage: TokenUsage) -> int | None:
        if usage.budget_tokens is not None:
            return math.ceil(usage.budget_tokens * self.token_warning_fraction)
        return self.token_warning_tokens

    def decide(
        self,
        event: AgentEvent,
        *,
        iteration: int,
        token_usage: TokenUsage,
        action: PendingAction | None = None,
        last_iteration: int | None = None,
        last_total_tokens: int = 0,
    ) -> CheckpointDecision:
        """``last_*`` describe the previous checkpoint (None: there is none yet)."""
        triggers: list[CheckpointTrigger] = []
        if event in _ALWAYS:
            triggers.append(_ALWAYS[event])
        if event is AgentEvent.BEFORE_ACTION:
            if action is None:
                raise ValueError("a before_action event needs the action")
            # A write to the outside world cannot be taken back, which makes it costly to
            # get wrong after a crash whatever its token estimate.
            if (
                action.estimated_tokens >= self.high_cost_tokens
                or action.effect is ActionEffect.EXTERNAL_WRITE
            ):
                triggers.append(CheckpointTrigger.HIGH_COST_ACTION)
        since = iteration - (last_iteration if last_iteration is not None else 0)
        if since >= self.every_iterations:
            triggers.append(CheckpointTrigger.EVERY_N_ITERATIONS)
        line = self.warning_line_tokens(token_usage)
        if line is not None and token_usage.total_tokens >= line > last_total_tokens:
            triggers.append(CheckpointTrigger.TOKEN_WARNING)
        return CheckpointDecision(triggers=tuple(triggers))
