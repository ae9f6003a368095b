"""``MemoryClient.context``: the read path through the store's owner, over the real stores.

A real write worker (owner of the embedded vector store, consuming write, embed and recall)
stores the memories and answers ``memory.recall.context``; a background worker consuming
``maintenance`` applies the access bumps. PostgreSQL, Redis and the vector store are real.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

import pytest

from memharness import MemoryClient
from pipelines.errors import InvalidInput
from pipelines.read.budget import Partition
from tests.support.openai_stub import serve_stub

pytestmark = pytest.mark.integration

BUDGET = 40_000

CONVERSATION = [
    ("user", "Let's plan the billing rewrite for the invoices service."),
    ("agent", "We decided to keep invoices in PostgreSQL because the ledger needs transactions."),
    ("user", "I prefer small pull requests, one per module, please."),
    ("agent", "The migration script lives in scripts/migrate_invoices.py and runs at 02:00."),
    ("agent", "Status: the payments module is blocked on SEC-12 until the audit finishes."),
    ("user", "Bob will write the rollback plan and share it on Friday."),
    ("agent", "Error: pytest failed in tests/test_ledger.py with a timeout on the lock."),
    ("agent", "Fixed the ledger timeout by raising lock_timeout to 5s in config/db.toml."),
    ("user", "Use Celery with Redis as the broker for the reminder e-mails."),
    ("agent", "The reminder job sends e-mails at 09:00 UTC through the mailer service."),
]


def record_conversation(client, tenant_id: str, task_id: str, session_id: str, turns):  # type: ignore[no-untyped-def]
    start = datetime.now(UTC) - timedelta(hours=2)
    receipts = []
    for index, (speaker, text) in enumerate(turns):
        receipts.append(
            client.record(
                text,
                tenant_id=tenant_id,
                task_id=task_id,
                session_id=session_id,
                timestamp=start + timedelta(minutes=index),
                metadata={"speaker": speaker},
            )
        )
    return receipts


def test_context_is_assembled_by_the_owner_within_every_partition_budget(client, workers, db):
    # given a conversation stored by the owner, and a few more turns than the window keeps
    workers("write")
    workers("background", ("maintenance",))
    filler = [("user", f"Step {n}: checked module m{n} and noted its owner.") for n in range(24)]
    receipts = record_conversation(client, "acme", "billing", "s-1", CONVERSATION + filler)
    client.wait_until_settled([r.memory_id for r in receipts if r.status == "accepted"])

    # when the agent asks for the context of its next step
    context = client.context(
        "billing",
        "Why did we decide to keep invoices in PostgreSQL?",
        BUDGET,
        phase="planning",
        tenant_id="acme",
        system="You are the billing agent.",
        task_context=["Goal: rewrite billing without losing a single invoice."],
        variables={"branch": "billing-rewrite", "attempt": 2},
        scratch=["try the ledger tests again after the migration"],
    )

    # then every partition stays within its own budget and the whole within the request's
    assert context.tokenizer == "deepseek-v4"
    assert context.total_tokens <= BUDGET
    assert sum(p.budget_tokens for p in context.partitions) == BUDGET
    for partition in context.partitions:
        assert partition.used_tokens <= partition.budget_tokens, partition.name
    # and the decision is retrieved, first among the memories
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    decision_id = str(receipts[1].memory_id)
    assert retrieved.items[0].id == decision_id
    assert "ledger needs transactions" in retrieved.text
    # and the focus of a planning question about a decision ranks decisions first
    assert context.focus.top.value == "decisions"
    # and the window holds the last 20 turns verbatim and a summary of the older ones
    recent = context.partition(Partition.RECENT_INTERACTIONS)
    summaries = [item for item in recent.items if item.id.startswith("summary:")]
    verbatim = [item for item in recent.items if not item.id.startswith("summary:")]
    assert len(summaries) == 1
    assert [item.id for item in verbatim] == [str(r.memory_id) for r in receipts[-20:]]
    assert "(summary of 14 turns)" in recent.text
    assert "user: Step 23: checked module m23" in recent.text
    for name, text in [
        (Partition.SYSTEM, "You are the billing agent."),
        (Partition.TASK_CONTEXT, "Goal: rewrite billing"),
        (Partition.WORKING_VARIABLES, "branch = billing-rewrite"),
        (Partition.SCRATCH, "try the ledger tests again"),
    ]:
        assert text in context.partition(name).text
        assert text in context.text

    # and the delivered memories get their access bump off the read path
    delivered = [item.id for item in retrieved.items]
    deadline = time.monotonic() + 20
    while True:
        rows = db.execute(
            "SELECT access_count, last_accessed_at FROM memories WHERE id = ANY(%s::uuid[])",
            (delivered,),
        ).fetchall()
        if all(count == 1 and seen is not None for count, seen in rows):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)
    assert db.execute("SELECT count(*) FROM memories WHERE access_count > 0").fetchone()[0] == len(
        delivered
    )


def test_a_small_budget_evicts_inside_partitions_only(client, workers):
    # given the same memories and forty notes about the migration, more than a small
    # context's retrieved-memory partition holds
    workers("write")
    notes = [
        (
            "agent",
            f"Note {n}: the migration script scripts/migrate_invoices.py moves invoice batch "
            f"{n} and logs to logs/migrate-{n}.txt.",
        )
        for n in range(40)
    ]
    receipts = record_conversation(client, "acme", "billing", "s-1", notes + CONVERSATION)
    client.wait_until_settled([r.memory_id for r in receipts if r.status == "accepted"])

    # when the context has the smallest budget served: every partition scaled to its share
    context = client.context(
        "billing",
        "where does the migration script live?",
        4_000,
        tenant_id="acme",
        system="You are the billing agent.",
        variables={"branch": "billing-rewrite"},
    )

    # then every partition stays within its share and evicts on its own
    assert context.total_tokens <= 4_000
    for partition in context.partitions:
        assert partition.used_tokens <= partition.budget_tokens
    assert "branch = billing-rewrite" in context.text
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    assert retrieved.evicted_ids
    recent = context.partition(Partition.RECENT_INTERACTIONS)
    # the turn being answered (the last one) is kept whatever else goes
    assert recent.items[-1].id == str(receipts[-1].memory_id)


def test_tenant_a_never_sees_tenant_b_over_many_random_queries(client, workers, db):
    # given two tenants with the same task and session names and overlapping vocabulary
    workers("write")
    words = [
        "invoice",
        "ledger",
        "deploy",
        "cluster",
        "migration",
        "postgres",
        "redis",
        "timeout",
        "module",
        "rollback",
        "audit",
        "payments",
        "mailer",
        "schedule",
    ]
    rng = random.Random(20261202)
    receipts = {}
    for tenant in ("tenant-a", "tenant-b"):
        turns = []
        for n in range(30):
            picked = " ".join(rng.sample(words, 4))
            turns.append(("agent", f"{tenant} note {n}: decided on {picked} for step {n}."))
        receipts[tenant] = record_conversation(client, tenant, "shared-task", "s-1", turns)
    client.wait_until_settled([r.memory_id for rs in receipts.values() for r in rs])
    ids_b = {str(r.memory_id) for r in receipts["tenant-b"]}
    ids_a = {str(r.memory_id) for r in receipts["tenant-a"]}

    # when tenant A asks 40 random questions, some naming tenant B outright
    for n in range(40):
        query = " ".join(rng.sample(words, rng.randint(1, 5)))
        if n % 4 == 0:
            query += " tenant-b"
        context = client.context("shared-task", query, 30_000, tenant_id="tenant-a")

        # then nothing of tenant B is in any partition, and A's memories are found
        placed = {item.id for p in context.partitions for item in p.items}
        assert not placed & ids_b, query
        assert "tenant-b note" not in context.text, query
        candidates = {c.memory.id for c in context.retrieval.candidates}
        assert candidates <= ids_a, query
        assert candidates, query


def test_bad_requests_get_clear_errors_before_anything_is_sent(client):
    cases = [
        ({"query": ""}, "query", "empty"),
        ({"query": "   "}, "query", "empty"),
        ({"query": "x" * 20_000}, "query", "16384 bytes"),
        ({"query": "7 " * 4_100}, "query", "4000 tokens"),  # 8 KiB, 8,200 tokens
        ({"query": 42}, "query", "must be text"),
        ({"budget_tokens": "40000"}, "budget_tokens", "must be an integer"),
        ({"budget_tokens": True}, "budget_tokens", "must be an integer"),
        ({"budget_tokens": 3_000}, "budget_tokens", "smallest context is 4000 tokens"),
        ({"budget_tokens": 2_000_000}, "budget_tokens", "largest context"),
        ({"task_id": None}, "task_id", "required"),
        ({"task_id": "has spaces"}, "task_id", "malformed id"),
        ({"phase": "sleeping"}, "phase", "unknown value"),
        ({"focus": ["gossip"]}, "focus", "unknown kind"),
        ({"focus": 3}, "focus", "must be None"),
        ({"tenant_id": ""}, "tenant_id", "malformed id"),
        ({"variables": ["a"]}, "variables", "must be a mapping"),
        ({"task_context": "one string"}, "task_context", "list of texts"),
    ]
    for override, field, words in cases:
        arguments = {
            "task_id": "billing",
            "query": "what did we decide?",
            "budget_tokens": BUDGET,
            "tenant_id": "acme",
        }
        arguments.update(override)
        with pytest.raises(InvalidInput) as caught:
            client.context(**arguments)
        assert caught.value.field == field, override
        assert words in str(caught.value), (override, str(caught.value))


def test_a_message_of_the_wrong_shape_is_answered_with_the_field(client, workers):
    # given a message that did not come from check_context_call (another sender, an older
    # client): the owner decodes what it is sent, it does not check the call's rules again
    workers("write")
    result = client._app.send_task(
        "memory.recall.context",
        kwargs={
            "tenant_id": "acme",
            "task_id": "billing",
            "query": "why?",
            "budget_tokens": "a lot",
        },
        queue="recall",
    )

    # then the owner answers with the typed error instead of failing the task
    answer = result.get(timeout=30)
    assert answer["error"]["field"] == "budget_tokens"
    with pytest.raises(InvalidInput) as caught:
        client._context_from(answer)
    assert caught.value.field == "budget_tokens"
    assert caught.value.to_json() == answer["error"]


def test_a_memory_too_long_for_its_partition_is_replaced_by_its_compressed_version(
    client, workers, db
):
    # given a long decision whose write-time summary (its L1 version) is much shorter
    workers("write")
    reasons = " ".join(
        f"Reason {n}: the ledger service {n} needs transactions across invoices and payments."
        for n in range(150)
    )
    long_text = f"We decided to keep invoices in PostgreSQL. {reasons}"
    [receipt] = record_conversation(client, "acme", "billing", "s-1", [("agent", long_text)])
    client.wait_until_settled([receipt.memory_id])
    summary = db.execute(
        "SELECT summary FROM memories WHERE id = %s", (receipt.memory_id,)
    ).fetchone()[0]
    assert summary and len(summary) < len(long_text) / 3

    # when the retrieved-memory partition cannot hold the original (the smallest context:
    # at most about 1,500 tokens for retrieved memory, focus included; the original takes
    # about 2,400)
    context = client.context(
        "billing", "why PostgreSQL for invoices?", 4_000, tenant_id="acme", session_id="none"
    )

    # then the compressed version stands in for it, inside the partition's budget
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    [placed] = retrieved.items
    assert placed.id == str(receipt.memory_id)
    assert placed.version == 1
    assert retrieved.compressed_ids == (str(receipt.memory_id),)
    assert summary in retrieved.text
    assert reasons not in context.text
    assert retrieved.used_tokens <= retrieved.budget_tokens


def test_a_failed_working_memory_push_never_fails_record(client, db, caplog):
    # given a client whose Redis (working-memory window and drain flag) is not there
    import redis

    client._redis = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)

    # when the agent records a turn
    receipt = client.record(
        "We decided to ship on Friday.", tenant_id="acme", task_id="billing", session_id="s-1"
    )

    # then the write is accepted and durable, its job waits for the relay, the failure logged
    assert receipt.status == "accepted"
    assert db.execute("SELECT status FROM jobs").fetchall() == [("pending",)]
    assert "after-commit Redis round trip failed" in caplog.text


def test_with_a_qdrant_server_the_client_assembles_the_context_itself(client, workers, settings):
    # given memories stored by an owner that has since stopped (the store is free to open)
    owner = workers("write")
    receipts = record_conversation(client, "acme", "billing", "s-1", CONVERSATION)
    client.wait_until_settled([r.memory_id for r in receipts if r.status == "accepted"])
    owner.stop()

    # and a client configured for a Qdrant server; no server runs on these machines, so its
    # index client is the same engine the owner wrote, opened in this process
    from workers.adapters import build_vector_index

    server_settings = settings.model_copy(update={"qdrant_url": "http://127.0.0.1:1"})
    with MemoryClient(server_settings) as server_client:
        server_client._clients.vectors = build_vector_index(settings)

        # when it asks for a context, with no worker consuming the recall queue
        context = server_client.context(
            "billing",
            "Why did we decide to keep invoices in PostgreSQL?",
            BUDGET,
            tenant_id="acme",
        )

    # then it answered in process what the owner would: the decision first, the window
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    assert retrieved.items[0].id == str(receipts[1].memory_id)
    recent = context.partition(Partition.RECENT_INTERACTIONS)
    assert recent.items[-1].id == str(receipts[-1].memory_id)


def test_the_focus_moves_budget_between_partitions(client, workers):
    # given a stored conversation
    workers("write")
    receipts = record_conversation(client, "acme", "billing", "s-1", CONVERSATION)
    client.wait_until_settled([r.memory_id for r in receipts if r.status == "accepted"])

    # when a planning step asks about a decision and a debugging step about what just failed
    planning = client.context(
        "billing", "Why did we decide on PostgreSQL?", BUDGET, "planning", tenant_id="acme"
    )
    debugging = client.context(
        "billing", "What error did we just hit?", BUDGET, "debugging", tenant_id="acme"
    )

    # then the debugging step's window is larger and its retrieved memory smaller
    def budget(context, name):  # type: ignore[no-untyped-def]
        return context.partition(name).budget_tokens

    assert planning.focus.top.value == "decisions"
    assert debugging.focus.top.value == "errors"
    assert budget(debugging, Partition.RECENT_INTERACTIONS) > budget(
        planning, Partition.RECENT_INTERACTIONS
    )
    assert budget(debugging, Partition.RETRIEVED_MEMORY) < budget(
        planning, Partition.RETRIEVED_MEMORY
    )
    # and the fixed partitions never move
    for name in (Partition.SYSTEM, Partition.TASK_CONTEXT, Partition.WORKING_VARIABLES):
        assert budget(debugging, name) == budget(planning, name)
    # and recall is weighted for the step: temporal counts more when debugging
    assert debugging.focus.fusion_weights().temporal > planning.focus.fusion_weights().temporal


def test_with_a_remote_llm_the_owner_asks_it_for_focus_rewrite_and_rerank(client, workers):
    with serve_stub() as stub:
        # given an owner whose LLM is an OpenAI-compatible endpoint (the local stub)
        workers("write", env=stub.worker_env())
        receipts = record_conversation(client, "acme", "billing", "s-1", CONVERSATION)
        client.wait_until_settled([r.memory_id for r in receipts if r.status == "accepted"])

        # when the agent asks for its context
        context = client.context(
            "billing", "Why did we decide to keep invoices in PostgreSQL?", BUDGET, tenant_id="acme"
        )

        # then focus, rewrite and rerank went to the model over HTTP, once each
        assert (stub.count("chat:focus"), stub.count("chat:rewrite")) == (1, 1)
        assert stub.count("chat:rerank") == 1
        assert context.focus.source.startswith("openai:")
        assert context.retrieval is not None
        assert context.retrieval.reranker.startswith("openai:")
        retrieved = context.partition(Partition.RETRIEVED_MEMORY)
        assert retrieved.items[0].id == str(receipts[1].memory_id)
