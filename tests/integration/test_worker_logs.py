"""A real worker's log carries ids, counts and timings, never memory content: Celery logged
every task's return value at INFO, so each recall() and context() answer went to the log."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration

SCOPE = {"tenant_id": "acme", "task_id": "billing", "session_id": "s-1"}
SECRET = "ZEBRAFISH-7"


def test_recall_and_context_answers_never_reach_the_worker_log(workers: Any, client: Any) -> None:
    # given a store owner that logs at INFO and memories holding a word found nowhere else
    owner = workers("owner")
    receipts = [
        client.record(f"The nightly export {SECRET} runs at 02:00 for the billing team.", **SCOPE),
        client.record(f"Decision: {SECRET} writes its files to the archive bucket.", **SCOPE),
    ]
    client.wait_until_settled([r.memory_id for r in receipts])

    # when an agent recalls them and asks for its context
    hits = client.recall(f"{SECRET} nightly export", tenant_id="acme")
    context = client.context("billing", f"When does {SECRET} run?", 4000, tenant_id="acme")
    assert SECRET in str(hits) and SECRET in context.text  # the answers do hold the content

    # then the worker logged both tasks' success, and none of what they returned
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        log = owner.log_text()
        # the task lines ("name[id] succeeded"), not the names in the startup banner
        if "memory.recall.search[" in log and "memory.recall.context[" in log:
            break
        time.sleep(0.2)
    assert "succeeded in" in log
    for name in ("memory.recall.search", "memory.recall.context"):
        assert f"{name}[" in log, log[-3000:]
    assert SECRET not in log, [line for line in log.splitlines() if SECRET in line]
    # a drain's report is counts only: it stays readable in the log
    assert "'claimed':" in log
