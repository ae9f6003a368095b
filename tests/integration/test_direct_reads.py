"""The direct read path (``workers.read.ask`` -> ``workers.read.reply``) through a real
store-owner worker process: the request on a Redis list, the answer on the caller's own reply
key, no result backend; deadlines kept by the owner, a dead owner a clear timeout, tenants
apart, concurrent callers each with their own answers.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from celery.exceptions import TimeoutError as ResultTimeout

from pipelines.read.budget import Partition
from workers.read.wire import REPLY_PREFIX, REQUESTS_KEY

pytestmark = pytest.mark.integration

BUDGET = 16_000
OWNER_QUEUES = ("write", "embed", "recall")


def _seed(client: Any, tenant: str, marker: str, n: int = 6) -> None:
    receipts = client.record_many(
        [
            {
                "content": f"We decided to move the {marker} ledger to PostgreSQL because it "
                f"needs transactions (ticket {marker.upper()}-{i}).",
                "tenant_id": tenant,
                "task_id": "billing",
                "session_id": f"{tenant}-s1",
            }
            for i in range(n)
        ]
    )
    settled = client.wait_until_settled([r.memory_id for r in receipts], timeout_s=60)
    assert settled == {"stored": n}


def _retrieved(db: Any, context: Any) -> list[str]:
    """``tenant: content`` of each memory the context's retrieved partition holds."""
    ids = [
        item.id
        for item in context.partition(Partition.RETRIEVED_MEMORY).items
        if item.knowledge is None
    ]
    rows = db.execute(
        "SELECT tenant_id, content FROM memories WHERE id::text = ANY(%s)", (ids,)
    ).fetchall()
    assert len(rows) == len(ids)
    return [f"{tenant}: {content}" for tenant, content in rows]


def _wait_for(check: Any, what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_answer_comes_back_on_the_callers_own_key_without_a_result_backend(
    client, workers, redis_client, db
) -> None:  # type: ignore[no-untyped-def]
    # given an owner and a tenant's memories
    workers("write", OWNER_QUEUES)
    _seed(client, "acme", "invoice")
    assert client._reads.direct

    # when the agent asks for its context and recalls
    context = client.context("billing", "What did we decide about the ledger?", BUDGET,
                             tenant_id="acme")  # fmt: skip
    hits = client.recall("invoice ledger", tenant_id="acme")

    # then both came back from the owner, full
    assert any("invoice" in text for text in _retrieved(db, context))
    assert hits and all("invoice" in hit["content"] for hit in hits)
    # and nothing stayed behind: no result in a backend, no reply key, no request
    assert list(redis_client.scan_iter("celery-task-meta-*")) == []
    assert list(redis_client.scan_iter(f"{REPLY_PREFIX}*")) == []
    assert redis_client.llen(REQUESTS_KEY) == 0


def test_with_no_owner_the_call_times_out_clearly(client, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given no store owner at all; when an agent asks with a short timeout
    started = time.monotonic()
    with pytest.raises(ResultTimeout) as raised:
        client.context("billing", "Anything about the ledger?", BUDGET, tenant_id="acme",
                       timeout_s=0.5)  # fmt: skip

    # then the same timeout error as the recall queue's, on time, naming what did not answer
    assert 0.5 <= time.monotonic() - started < 2.5
    assert "memory.recall.context" in str(raised.value) and "store owner" in str(raised.value)


def test_an_owner_that_went_away_gives_a_timeout(client, workers) -> None:  # type: ignore[no-untyped-def]
    # given an owner that answered once
    owner = workers("write", OWNER_QUEUES)
    _seed(client, "acme", "invoice", n=2)
    assert client.recall("invoice ledger", tenant_id="acme")

    # when it stops, then the next call raises the timeout instead of hanging
    owner.stop(timeout_s=20)
    with pytest.raises(ResultTimeout):
        client.recall("invoice ledger", tenant_id="acme", timeout_s=0.5)


def test_a_request_past_its_deadline_is_dropped_not_answered_late(
    client, workers, redis_client
) -> None:  # type: ignore[no-untyped-def]
    # given a call that timed out while no owner ran: its request waits on the list
    with pytest.raises(ResultTimeout):
        client.context("billing", "The ledger?", BUDGET, tenant_id="acme", timeout_s=0.3)
    [waiting] = redis_client.lrange(REQUESTS_KEY, 0, -1)
    stale_reply = json.loads(waiting)["reply"]

    # when an owner starts and a fresh call follows it (the list is served in order)
    owner = workers("write", OWNER_QUEUES)
    context = client.context("billing", "The ledger?", BUDGET, tenant_id="acme")

    # then the fresh call was answered, the stale one dropped: no reply for it, counted, logged
    assert context.partition(Partition.RETRIEVED_MEMORY) is not None
    assert redis_client.exists(stale_reply) == 0
    assert redis_client.hget("memharness:metrics:memory.recall.context", "expired") == b"1"
    assert "dropped a memory.recall.context request: picked up" in owner.log_text()


def test_a_tenant_reads_only_its_own_memories(client, workers, db) -> None:  # type: ignore[no-untyped-def]
    # given two tenants' memories on one owner
    workers("write", OWNER_QUEUES)
    _seed(client, "acme", "invoice")
    _seed(client, "globex", "payroll")

    # when globex asks about what only acme recorded
    context = client.context("billing", "What did we decide about the invoice ledger?", BUDGET,
                             tenant_id="globex")  # fmt: skip
    hits = client.recall("invoice ledger", tenant_id="globex", limit=20)

    # then it gets its own memories, never acme's
    rows = db.execute(
        "SELECT tenant_id, content FROM memories WHERE id::text = ANY(%s)",
        ([hit["id"] for hit in hits],),
    ).fetchall()
    texts = _retrieved(db, context) + [f"{tenant}: {content}" for tenant, content in rows]
    assert texts and all(text.startswith("globex: ") and "invoice" not in text for text in texts), (
        texts
    )


def test_a_forged_request_writes_nowhere_and_a_failure_comes_back_at_once(
    client, workers, redis_client
) -> None:  # type: ignore[no-untyped-def]
    # given an owner
    owner = workers("write", OWNER_QUEUES)
    _wait_for(lambda: client.recall("ledger", tenant_id="acme") is not None, "the owner")

    # when a request names a key that is no reply key (the write queue), and another runs a
    # search with an argument it does not take
    forged = {"task": "memory.recall.search", "kwargs": {"tenant_id": "acme", "query": "x"},
              "reply": "write", "deadline": time.time() + 30}  # fmt: skip
    bad_reply = f"{REPLY_PREFIX}{uuid.uuid4().hex}"
    bad = {"task": "memory.recall.search", "kwargs": {"tenant_id": "acme", "query": "x",
           "bogus": 1}, "reply": bad_reply, "deadline": time.time() + 30}  # fmt: skip
    redis_client.lpush(REQUESTS_KEY, json.dumps(forged), json.dumps(bad))
    popped = redis_client.blpop([bad_reply], timeout=20)

    # then the forged one was refused with nothing written, and the bad one failed at once
    assert redis_client.exists("write") == 0
    assert "reply slot refused a request: reply: 'write' is not a reply key" in owner.log_text()
    assert popped is not None
    failed = json.loads(popped[1])["failed"]
    assert failed["type"] == "TypeError" and "bogus" in failed["message"]


def test_concurrent_callers_each_get_their_own_answer(client, workers, settings, db) -> None:  # type: ignore[no-untyped-def]
    from memharness import MemoryClient

    # given four tenants, each with memories only it holds
    workers("write", OWNER_QUEUES)
    markers = {f"tenant-{i}": word for i, word in enumerate(("amber", "basalt", "cobalt", "dune"))}
    for tenant, word in markers.items():
        _seed(client, tenant, word, n=3)

    # when eight threads over two clients ask at once, each for its own tenant
    answers: dict[str, list[Any]] = {tenant: [] for tenant in markers}
    errors: list[BaseException] = []
    lock = threading.Lock()
    with MemoryClient(settings) as other:

        def ask(agent: Any, tenant: str) -> None:
            try:
                for _ in range(5):
                    context = agent.context("billing", f"What about the {markers[tenant]} ledger?",
                                            BUDGET, tenant_id=tenant)  # fmt: skip
                    with lock:
                        answers[tenant].append(context)
            except BaseException as exc:  # collected: a thread's failure fails the test
                errors.append(exc)

        threads = [
            threading.Thread(target=ask, args=(agent, tenant))
            for agent in (client, other)
            for tenant in markers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)

    # then every call was answered, each with its own tenant's memories only
    assert errors == []
    for tenant, got in answers.items():
        assert len(got) == 10
        for context in got:
            texts = _retrieved(db, context)
            assert texts and all(
                text.startswith(f"{tenant}: ") and markers[tenant] in text for text in texts
            ), (tenant, texts)
