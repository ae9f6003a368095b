"""A scripted agent for the crash test: it works through a task tree node by node and
checkpoints through ``CheckpointService`` as ``CheckpointPolicy`` says.

    python -m tests.support.checkpoint_agent run --tenant T --task K [--step-delay-s 0.05]
    python -m tests.support.checkpoint_agent resume --tenant T --task K

``run`` starts the task from scratch; ``resume`` continues it from its last checkpoint after
doing the verification nodes the calibration inserted. Every step is deterministic, so
``expected_state(n)``, the state after ``n`` finished nodes, is what any run, interrupted or
not, must have saved at that point. Each event is one JSON line on stdout, flushed, written
only after the checkpoint it reports has committed; the test synchronises on these lines.
The database comes from the environment (``MEMHARNESS_DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pipelines.state.models import (
    ActionEffect,
    NodeKind,
    NodeStatus,
    PendingAction,
    TaskNode,
    TaskState,
    TokenUsage,
    ToolCall,
    WorkingItem,
    WorkingMemory,
)
from pipelines.state.policy import AgentEvent, CheckpointPolicy

STEPS = 30
PHASES = ("explore", "implement", "verify")
STEPS_PER_PHASE = STEPS // len(PHASES)
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
WORKING_MEMORY_ITEMS = 6


def step_id(index: int) -> str:
    return f"step-{index:02d}"


def phase_of(index: int) -> str:
    return PHASES[min(index // STEPS_PER_PHASE, len(PHASES) - 1)]


def action_for(index: int) -> PendingAction:
    # every fifth step publishes something: a write to the outside world
    external = index % 5 == 4
    return PendingAction(
        action_id=f"act-{index:02d}",
        node_id=step_id(index),
        tool="publish_report" if external else "edit_file",
        arguments={"step": index, "target": f"src/module_{index}.py"},
        effect=ActionEffect.EXTERNAL_WRITE if external else ActionEffect.LOCAL,
        estimated_tokens=200 + index,
    )


def initial_state() -> TaskState:
    tree = [TaskNode(id="task", title="Port the billing module", status=NodeStatus.RUNNING)]
    for phase in PHASES:
        tree.append(TaskNode(id=f"phase-{phase}", title=f"Phase {phase}", parent_id="task"))
    for index in range(STEPS):
        tree.append(
            TaskNode(
                id=step_id(index),
                title=f"Step {index}: handle module_{index}",
                parent_id=f"phase-{phase_of(index)}",
            )
        )
    return TaskState(
        phase=PHASES[0],
        tree=tuple(tree),
        current_node_id=step_id(0),
        variables={"files_done": [], "checksum": 0, "notes": {}},
        pending_actions=(action_for(0),),
        token_usage=TokenUsage(budget_tokens=200_000),
        working_memory=WorkingMemory(
            items=(WorkingItem(role="system", content="You port billing code.", tokens=6),),
            budget_tokens=2000,
        ),
    )


def steps_done(state: TaskState) -> int:
    return sum(
        1
        for node in state.tree
        if node.kind is NodeKind.STEP and node.id.startswith("step-") and node.status == "done"
    )


def work_on(state: TaskState, index: int) -> TaskState:
    """Finish step ``index``: the deterministic effect of one node of work."""
    node = step_id(index)
    variables: dict[str, Any] = json.loads(json.dumps(state.variables))
    variables["files_done"].append(f"src/module_{index}.py")
    variables["checksum"] = (variables["checksum"] * 31 + index * index + 7) % 1_000_003
    variables["notes"][node] = {"lines": 40 + index, "ratio": round(1 / (index + 3), 6)}
    call = ToolCall(
        call_id=f"call-{index:02d}",
        tool="edit_file",
        arguments={"path": f"src/module_{index}.py"},
        result={"changed_lines": 40 + index},
        started_at=T0 + timedelta(minutes=index),
        duration_ms=12.5 + index,
    )
    memory = (
        *state.working_memory.items,
        WorkingItem(role="assistant", content=f"Ported module_{index}.", tokens=4),
    )
    next_index = index + 1
    tree = tuple(
        TaskNode(**{**dict(n), "status": NodeStatus.DONE}) if n.id == node else n
        for n in state.tree
    )
    finished = next_index == STEPS
    if finished:
        tree = tuple(
            TaskNode(**{**dict(n), "status": NodeStatus.DONE}) if n.id == "task" else n
            for n in tree
        )
    usage = state.token_usage
    return state.with_changes(
        phase=phase_of(next_index if not finished else index),
        tree=tree,
        current_node_id=None if finished else step_id(next_index),
        variables=variables,
        last_tool_calls=(*state.last_tool_calls, call)[-5:],
        pending_actions=() if finished else (action_for(next_index),),
        token_usage=usage.model_copy(
            update={
                "prompt_tokens": usage.prompt_tokens + 900 + index,
                "completion_tokens": usage.completion_tokens + 120,
            }
        ),
        iteration=state.iteration + 1,
        working_memory=state.working_memory.model_copy(
            update={"items": memory[-WORKING_MEMORY_ITEMS:]}
        ),
    )


def expected_state(finished_steps: int) -> TaskState:
    state = initial_state()
    for index in range(finished_steps):
        state = work_on(state, index)
    return state


def state_as_json(state: TaskState) -> dict[str, Any]:
    data: dict[str, Any] = state.model_dump(mode="json")
    data["working_memory"] = state.working_memory.model_dump(mode="json")
    return data


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def continue_task(
    service: Any, tenant: str, task: str, state: TaskState, step_delay_s: float
) -> TaskState:
    policy = CheckpointPolicy()
    last_iteration = state.iteration
    last_tokens = state.token_usage.total_tokens
    for index in range(steps_done(state), STEPS):
        emit("working", step=index)
        time.sleep(step_delay_s)  # the model thinking; the crash test kills us in here
        before_phase = state.phase
        state = work_on(state, index)
        events = [AgentEvent.NODE_COMPLETED]
        if state.phase != before_phase:
            events.append(AgentEvent.PHASE_CHANGED)
        decisions = [
            policy.decide(
                event,
                iteration=state.iteration,
                token_usage=state.token_usage,
                last_iteration=last_iteration,
                last_total_tokens=last_tokens,
            )
            for event in events
        ]
        if any(decision.should_checkpoint for decision in decisions):
            checkpoint_id = service.checkpoint(
                tenant,
                task,
                state,
                phase_transition=any(decision.phase_transition for decision in decisions),
            )
            last_iteration, last_tokens = state.iteration, state.token_usage.total_tokens
            emit("checkpoint", steps_done=index + 1, id=str(checkpoint_id))
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("run", "resume"))
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--step-delay-s", type=float, default=0.0)
    args = parser.parse_args(argv)

    from config import Settings
    from workers.adapters import build_llm
    from workers.db import open_pool
    from workers.state.service import CheckpointService

    settings = Settings()
    pool = open_pool(settings, name="checkpoint-agent")
    service = CheckpointService(pool, build_llm(settings))
    try:
        if args.mode == "run":
            state = initial_state()
            first = service.checkpoint(args.tenant, args.task, state, phase_transition=True)
            emit("checkpoint", steps_done=0, id=str(first))
        else:
            result = service.resume(args.tenant, args.task)
            if result is None:
                emit("nothing_to_resume")
                return 1
            emit(
                "resumed",
                id=str(result.checkpoint.checkpoint_id),
                steps_done=steps_done(result.checkpoint.state),
                state=state_as_json(result.checkpoint.state),
                verification_nodes=[
                    n.id for n in result.state.tree if n.kind is NodeKind.VERIFICATION
                ],
                current_node_id=result.state.current_node_id,
                calibrated_by=result.calibrated_by,
                fell_back_from=[str(f.checkpoint_id) for f in result.fell_back_from],
            )
            state = result.state
            for node in state.tree:
                if node.kind is NodeKind.VERIFICATION and node.status is NodeStatus.PENDING:
                    # the check itself: here the report was not published yet
                    state = state.with_node_status(node.id, NodeStatus.DONE)
                    emit("verified", node=node.id)
        state = continue_task(service, args.tenant, args.task, state, args.step_delay_s)
        emit("finished", state=state_as_json(state))
        return 0
    finally:
        pool.close()


if __name__ == "__main__":
    raise SystemExit(main())
