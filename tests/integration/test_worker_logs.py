"""A real worker's log carries ids, counts and timings, never memory content: Celery logged
every task's return value at INFO, so each recall() and context() answer went to the log."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration

SCOPE = {"tenant_id": "acme", "task_id": "billing", "session_id": "s-1"}
SECRET = "ZEBRAFISH-7"


@pytest.mark.parametrize("transport", ["celery", "direct"])
def test_recall_and_context_answers_never_reach_the_worker_log(
    workers: Any, client: Any, transport: str
) -> None:
    from memharness.client import MemoryClient

    # given a store owner that logs at INFO and memories holding a word found nowhere else,
    # and an agent whose reads go through Celery tasks or straight to the owner's reply slot
    owner = workers("owner")
    reader = MemoryClient(client.settings.model_copy(update={"read_transport": transport}))
    receipts = [
        client.record(f"The nightly export {SECRET} runs at 02:00 for the billing team.", **SCOPE),
        client.record(f"Decision: {SECRET} writes its files to the archive bucket.", **SCOPE),
    ]
    client.wait_until_settled([r.memory_id for r in receipts])

    # when an agent recalls them and asks for its context
    try:
        hits = reader.recall(f"{SECRET} nightly export", tenant_id="acme")
        context = reader.context("billing", f"When does {SECRET} run?", 4000, tenant_id="acme")
    finally:
        reader.close()
    assert SECRET in str(hits) and SECRET in context.text  # the answers do hold the content

    # then the worker logged the tasks it ran (through Celery: both reads' success lines; the
    # reply slot's reads run outside Celery's logging), and none of what they returned
    reads = ("memory.recall.search[", "memory.recall.context[") if transport == "celery" else ()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        log = owner.log_text()
        # the task lines ("name[id] succeeded"), not the names in the startup banner
        if all(line in log for line in reads) and "'claimed':" in log:
            break
        time.sleep(0.2)
    assert "succeeded in" in log
    for line in reads:
        assert line in log, log[-3000:]
    assert SECRET not in log, [line for line in log.splitlines() if SECRET in line]
    # a drain's report is counts only: it stays readable in the log
    assert "'claimed':" in log
