"""``memharness bench checkpoint``: save and restore of a ~50 KB checkpoint through PostgreSQL.

The checkpoint is what a long coding task looks like mid-way: a tree of 100 nodes (60
done, some blocked), 40 variables, the last 10 tool calls with their output, pending
actions (one of them a write to the outside world, so a restore runs the calibration and
inserts a verification node) and a working memory of 40 context items.

save = ``CheckpointService.checkpoint`` (encode, hash, one INSERT with retention, COMMIT);
restore = ``CheckpointService.resume`` (one SELECT, checksum, decode, calibration by the
offline rules, which is what runs without a key; a remote model adds its own latency).
The last stdout line is one JSON object.
"""

from __future__ import annotations

import gc
import json
import os
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from config import Settings
from memharness.progress import Progress, progress
from pipelines.state.models import (
    ActionEffect,
    NodeStatus,
    PendingAction,
    TaskNode,
    TaskState,
    TokenUsage,
    ToolCall,
    WorkingItem,
    WorkingMemory,
)

SAVE_P50_TARGET_MS = 2.0
RESTORE_P50_TARGET_MS = 1.0

_VOCABULARY = (
    "invoice", "ledger", "tax", "rate", "rounding", "currency", "refund", "customer", "account",
    "schema", "migration", "index", "query", "latency", "cache", "retry", "timeout", "worker",
    "queue", "billing", "module", "service", "handler", "request", "response", "payload",
    "validation", "error", "test", "fixture", "coverage", "deploy", "rollback", "config",
    "flag", "tenant", "region", "cluster", "endpoint", "token", "budget", "summary", "decision",
    "reason", "because", "therefore", "blocked", "review", "approve", "merge", "branch",
    "commit", "diff", "patch", "file", "path", "function", "class", "method", "argument",
    "return", "value", "null", "empty", "overflow", "boundary", "parse",
)  # fmt: skip


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_VOCABULARY) for _ in range(words))


def sample_state(seed: int = 7, *, nodes: int = 100) -> TaskState:
    """A realistic mid-task state of about 50 KB encoded (deterministic for a seed)."""
    rng = random.Random(seed)
    started = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    tree = [TaskNode(id="task", title="Rewrite the billing module", status=NodeStatus.RUNNING)]
    done = int(nodes * 0.6)
    for index in range(nodes - 1):
        if index < done:
            status, reason = NodeStatus.DONE, None
        elif index % 13 == 0:
            status, reason = NodeStatus.BLOCKED, f"waiting for review of {_text(rng, 6)}"
        else:
            status, reason = NodeStatus.PENDING, None
        parent = "task" if index % 10 == 0 else f"step-{index - index % 10}"
        tree.append(
            TaskNode(
                id=f"step-{index}",
                title=_text(rng, 7),
                status=status,
                parent_id=parent,
                blocked_reason=reason,
                note=_text(rng, 14),
            )
        )
    variables = {
        f"var_{index}": {
            "path": f"src/billing/{rng.choice(_VOCABULARY)}_{index}.py",
            "lines": [rng.randint(1, 2000) for _ in range(4)],
            "passing": rng.random() > 0.2,
            "note": _text(rng, 10),
        }
        for index in range(40)
    }
    calls = tuple(
        ToolCall(
            call_id=f"call-{index}",
            tool=rng.choice(("run_tests", "read_file", "grep", "apply_patch")),
            arguments={"path": f"src/billing/{rng.choice(_VOCABULARY)}.py"},
            result={"exit_code": 0, "output": _text(rng, 60)},
            started_at=started + timedelta(seconds=30 * index),
            duration_ms=round(rng.uniform(5, 900), 3),
        )
        for index in range(10)
    )
    pending = (
        PendingAction(
            action_id="act-local",
            node_id=f"step-{done}",
            tool="run_tests",
            arguments={"path": "tests/billing"},
        ),
        PendingAction(
            action_id="act-deploy",
            node_id=f"step-{done + 1}",
            tool="deploy_staging",
            arguments={"service": "billing", "version": "2.4.0"},
            effect=ActionEffect.EXTERNAL_WRITE,
            estimated_tokens=1500,
        ),
    )
    memory = WorkingMemory(
        items=tuple(
            WorkingItem(
                role=("system", "user", "assistant", "tool")[index % 4],
                content=_text(rng, 100),
                tokens=130,
            )
            for index in range(40)
        ),
        budget_tokens=8000,
    )
    return TaskState(
        phase="implement",
        tree=tuple(tree),
        current_node_id=f"step-{done}",
        variables=variables,
        last_tool_calls=calls,
        pending_actions=pending,
        token_usage=TokenUsage(
            prompt_tokens=182_000, completion_tokens=41_000, budget_tokens=400_000
        ),
        iteration=420,
        working_memory=memory,
    )


def percentile_ms(samples_s: list[float], fraction: float) -> float:
    ordered = sorted(samples_s)
    index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
    return round(ordered[index] * 1000, 3)


def _measure(action: Callable[[int], object], count: int, bar: Progress) -> list[float]:
    timings: list[float] = []
    for index in range(count):
        start = time.perf_counter()
        action(index)
        timings.append(time.perf_counter() - start)
        bar.advance()
    return timings


def run(settings: Settings, *, iterations: int = 1000, warmup: int = 100) -> int:
    from pipelines.state.codec import encode_checkpoint
    from workers.adapters.llm_offline import OfflineLLM
    from workers.db import migrate, open_pool
    from workers.state.service import CheckpointService

    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    migrate(settings.database_url)
    pool = open_pool(settings, name="memharness-bench-checkpoint")
    tenant, task = "bench", f"checkpoint-{os.getpid()}-{time.time_ns()}"
    base = sample_state()
    states = [base.with_changes(iteration=base.iteration + i) for i in range(warmup + iterations)]
    service = CheckpointService(pool, OfflineLLM())
    total = 2 * (warmup + iterations)
    try:
        with progress("checkpoint: save and resume", total=total) as bar:
            # warm-up: the pool's connections, psycopg's prepared statements, pydantic's caches
            _measure(lambda i: service.checkpoint(tenant, task, states[i]), warmup, bar)
            _measure(lambda i: service.resume(tenant, task), warmup, bar)
            gc.collect()
            saves = _measure(
                lambda i: service.checkpoint(tenant, task, states[warmup + i]), iterations, bar
            )
            restores = _measure(lambda i: service.resume(tenant, task), iterations, bar)
        result = service.resume(tenant, task)
        assert result is not None and result.checkpoint.state == states[-1]
        size = len(encode_checkpoint(result.checkpoint))
    finally:
        with pool.connection() as conn:
            conn.execute(
                "DELETE FROM checkpoints WHERE tenant_id = %s AND task_id = %s", (tenant, task)
            )
        pool.close()
    save_p50_ms = percentile_ms(saves, 0.50)
    restore_p50_ms = percentile_ms(restores, 0.50)
    met = save_p50_ms <= SAVE_P50_TARGET_MS and restore_p50_ms <= RESTORE_P50_TARGET_MS
    report: dict[str, object] = {
        "benchmark": "checkpoint",
        "iterations": iterations,
        "bytes": size,
        "save_p50_ms": save_p50_ms,
        "save_p99_ms": percentile_ms(saves, 0.99),
        "restore_p50_ms": restore_p50_ms,
        "restore_p99_ms": percentile_ms(restores, 0.99),
    }
    print(
        f"checkpoint of {size} bytes, {iterations} iterations after {warmup} warm-up: "
        f"save p50 {save_p50_ms} ms (target ≤ {SAVE_P50_TARGET_MS}), "
        f"restore p50 {restore_p50_ms} ms (target ≤ {RESTORE_P50_TARGET_MS}): "
        f"{'targets met' if met else 'targets MISSED'}"
    )
    report["targets_met"] = met
    print(json.dumps(report))
    return 0
