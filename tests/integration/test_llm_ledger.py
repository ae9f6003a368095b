"""The token ledger through real worker processes: the workers' ``openai`` adapter talks HTTP
to the local stub (a DeepSeek-like server with a prefix cache), and every call it answers is
in PostgreSQL under the tenant it was made for and its call kind, with the tokens the server
reported; a reasoning model's thinking is never stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from config import Settings
from memharness.stats import collect_stats
from pipelines.state.models import ActionEffect, PendingAction, TaskNode, TaskState
from tests.integration.test_cognition import one, run_sweep
from tests.support.openai_stub import REASONING_MARK, OpenAIStub, serve_stub
from tests.support.project_history import TENANT, history
from workers.ledger import UNATTRIBUTED, read_totals

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=15)
DECISION = "We decided to keep the outbox in PostgreSQL because it commits with the memory."
LONG = " ".join(
    [
        "We reviewed the billing rewrite today.",
        "The team decided to keep invoices in PostgreSQL because the ledger needs transactions.",
        "Alice prefers small pull requests and asked for one per module.",
        "The migration script lives in scripts/migrate_invoices.py and runs nightly at 02:00.",
        "Status: the payments module is blocked on SEC-12 until the audit finishes.",
        "Bob will write the rollback plan and share it with the whole group on Friday.",
        "Lunch was pizza again and nobody complained about it this time around.",
    ]
)
PLAIN = "The office coffee machine was replaced"


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub() as running:
        yield running


def ledger(db: psycopg.Connection[Any]) -> dict[tuple[str, str], Any]:
    return {(row.tenant_id, row.call): row.usage for row in read_totals(db)}


def chat_requests(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [r for r in stub.stats()["requests"] if r["endpoint"] == "chat"]


def words(request: dict[str, Any]) -> int:
    return sum(len(m["content"].split()) for m in request["messages"])


def test_each_tenants_calls_are_in_the_ledger_and_no_thinking_is_stored(
    client, workers, db, stub: OpenAIStub, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given the store's owner whose model is a reasoning model answering only in its thinking
    stub.control("reasoning_only")
    workers("write", ("write", "embed", "recall"), env=stub.worker_env())

    # when acme records a decision, a long note and an unsure one, and globex one decision
    scope = {"task_id": "billing", "session_id": "s-1"}
    acme = [client.record(t, tenant_id="acme", **scope) for t in (DECISION, LONG, PLAIN)]
    globex = [client.record(DECISION, tenant_id="globex", **scope)]
    ids = [r.memory_id for r in (*acme, *globex)]
    assert client.wait_until_settled(ids, timeout_s=60) == {"stored": 4}

    # and acme asks for its context (the owner decides focus, rewrites and reranks)
    client.context("billing", "Why did we keep invoices in PostgreSQL?", 8_000, tenant_id="acme")

    # then every call the stub answered is in the ledger under the tenant it was made for
    usage = ledger(db)
    assert usage[("acme", "judge")].calls == 3
    assert usage[("acme", "deep_judge")].calls == 1  # the unsure one went to tier 3
    assert usage[("acme", "summary")].calls == 1  # the long note
    assert usage[("globex", "judge")].calls == 1
    assert {call for tenant, call in usage if tenant == "acme"} >= {"focus", "rewrite", "rerank"}
    assert {call for tenant, call in usage if tenant == "globex"} == {"judge"}
    assert not any(tenant == UNATTRIBUTED for tenant, _ in usage)
    # with the tokens the server reported: its prompts, its cache hits, the thinking
    requests = chat_requests(stub)
    assert sum(u.calls for u in usage.values()) == len(requests)
    assert sum(u.prompt for u in usage.values()) == sum(words(r) for r in requests)
    assert usage[("acme", "judge")].cached > 0  # the judge's instructions came from the cache
    assert all(0 < u.reasoning <= u.completion for u in usage.values())

    # and the thinking is nowhere in what was stored
    for table in ("memories", "write_decisions", "jobs"):
        rows = db.execute(f"SELECT t::text FROM {table} t").fetchall()
        assert rows and not any(REASONING_MARK in row[0] for row in rows), table

    # and stats show each tenant's calls, tokens and cost
    stats = collect_stats(settings)["llm"]["tenants"]
    assert stats["globex"]["total"]["calls"] == 1
    assert stats["acme"]["total"]["calls"] == sum(
        u.calls for (tenant, _), u in usage.items() if tenant == "acme"
    )
    assert stats["acme"]["total"]["cost_usd"] > 0


def test_background_cognition_and_a_resume_are_billed_to_their_tenant(
    workers, db, stub: OpenAIStub, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given the owner and a background worker with the model, and an agent with it too
    env = stub.worker_env()
    workers("write", ("write", "embed", "recall"), env=env)
    workers("background", ("maintenance", "compress", "quality", "consolidate"), env=env)
    from memharness import MemoryClient

    remote = settings.model_copy(
        update={
            "llm_provider": "openai",
            "llm_base_url": stub.url,
            "llm_api_key": SecretStr(stub.api_key),
        }
    )
    with MemoryClient(remote) as agent:
        # when four days of a project are recorded, linked, compressed and consolidated
        receipts = agent.record_many(history(START, days=4))
        accepted = [r.memory_id for r in receipts if r.status == "accepted"]
        agent.wait_until_settled(accepted, timeout_s=60)
        run_sweep(db, "memory.compress.sweep", "compress", END)
        run_sweep(db, "memory.consolidate.tenant", "consolidate", END, tenant_id=TENANT)
        assert one(db, "SELECT count(*) FROM memories WHERE level = 1") > 0

        # and the agent resumes a task whose last step wrote to the outside world
        state = TaskState(
            tree=(TaskNode(id="n1", title="send the invoice"),),
            current_node_id="n1",
            pending_actions=(
                PendingAction(
                    action_id="a1", node_id="n1", tool="mail", effect=ActionEffect.EXTERNAL_WRITE
                ),
            ),
        )
        agent.checkpoint(TENANT, "invoices", state)
        resumed = agent.resume(TENANT, "invoices")
        assert resumed is not None and resumed.calibrated_by.startswith("openai:")

    # then every kind of call made is the tenant's, none unattributed
    calls = {call for tenant, call in ledger(db) if tenant == TENANT}
    assert {"judge", "annotate", "compress", "knowledge", "causal", "calibrate"} <= calls
    assert {tenant for tenant, _ in ledger(db)} == {TENANT}
    assert sum(u.calls for u in ledger(db).values()) == len(chat_requests(stub))
