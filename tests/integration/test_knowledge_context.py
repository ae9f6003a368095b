"""Semantic knowledge in ``MemoryClient.context`` and ``MemoryClient.knowledge``, through the
store's owner, over the real stores, in a 12k-token context, in both languages.

The semantic rows are written as nightly consolidation writes them (``semantic_memories``,
citing the episodes they came from); a real write worker stores the episodes and answers
``memory.recall.context``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memharness import MemoryClient
from pipelines.errors import InvalidInput
from pipelines.read.budget import Partition
from pipelines.records import ID_NAMESPACE
from tests.support import project_history, project_history_zh

pytestmark = pytest.mark.integration

BUDGET = 12_000
START = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)


def record_days(client: MemoryClient, items: list[dict[str, Any]]) -> list[uuid.UUID]:
    receipts = client.record_many(items)
    ids = [r.memory_id for r in receipts if r.status == "accepted"]
    client.wait_until_settled(ids, timeout_s=60)
    return ids


def consolidated(
    db: Any,
    tenant_id: str,
    kind: str,
    content: str,
    sources: list[uuid.UUID],
    *,
    confidence: float,
    conditions: str | None = None,
) -> str:
    """A semantic row as consolidation's apply step writes it."""
    key = uuid.uuid5(ID_NAMESPACE, f"semantic\x1f{tenant_id}\x1ftenant\x1f{kind}\x1f{content}")
    db.execute(
        "INSERT INTO semantic_memories (id, tenant_id, scope, content, confidence, source_ids, "
        "conditions, embedding_version, status, kind, reason, created_at, updated_at) "
        "VALUES (%s, %s, 'tenant', %s, %s, %s, %s, 'hashing', 'active', %s, 'recurred', "
        "now(), now())",
        (key, tenant_id, content, confidence, sources, conditions, kind),
    )
    return str(key)


def sources_of(db: Any, tenant_id: str, needle: str) -> list[uuid.UUID]:
    rows = db.execute(
        "SELECT id FROM memories WHERE tenant_id = %s AND content LIKE %s AND status = 'stored'",
        (tenant_id, f"%{needle}%"),
    ).fetchall()
    return [row[0] for row in rows]


def assert_within_budget(context: Any) -> None:
    assert context.total_tokens <= BUDGET
    assert sum(p.budget_tokens for p in context.partitions) == BUDGET
    for partition in context.partitions:
        assert partition.used_tokens <= partition.budget_tokens, partition.name


def test_chinese_knowledge_reaches_a_12k_context(client, workers, db):  # type: ignore[no-untyped-def]
    # given a week of the Chinese project history, stored by the owner
    workers("write")
    tenant, task = project_history_zh.TENANT, project_history_zh.TASK
    record_days(client, project_history_zh.history_zh(START, days=7))
    # and the preference stated across sessions and the stack, consolidated into knowledge
    preference = consolidated(
        db, tenant, "preference", "周报请用简洁的要点式，先写结论再写细节",
        sources_of(db, tenant, "周报请用简洁的要点式"), confidence=0.86,
    )  # fmt: skip
    stack = consolidated(
        db, tenant, "convention", "本项目统一使用 TypeScript + Node.js + PostgreSQL",
        sources_of(db, tenant, "TypeScript"), confidence=0.7,
    )  # fmt: skip

    # when the agent asks, in Chinese, for the context of a 12k-token step
    context = client.context(
        task,
        "写周报的时候，项目的技术栈和数据库怎么介绍？",
        BUDGET,
        phase="planning",
        tenant_id=tenant,
        system="你是支付项目的助手。",
        task_context=["目标：两周内完成支付和认证的重写。"],
    )

    # then the context fits the 12k budget, partition by partition
    assert_within_budget(context)
    # and both pieces of knowledge are in the retrieved memory, marked as knowledge
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    marked = {item.id: item.knowledge for item in retrieved.items if item.knowledge}
    assert set(marked) == {f"knowledge:{preference}", f"knowledge:{stack}"}
    assert marked[f"knowledge:{preference}"].confidence == pytest.approx(0.86)
    assert "[knowledge: preference, confidence 0.86] 周报请用简洁的要点式" in retrieved.text
    assert (
        "[knowledge: convention, confidence 0.70] 本项目统一使用 TypeScript + Node.js + PostgreSQL"
        in retrieved.text
    )
    # beside the episodes, which an agent and a trace tell apart from them
    assert any(item.knowledge is None for item in retrieved.items)
    assert context.retrieval is not None
    assert context.retrieval.recalled["knowledge"] >= 2
    # and the listing shows the same knowledge with its sources
    listed = client.knowledge(tenant_id=tenant, query="周报")
    assert [view.id for view in listed] == [preference]
    assert listed[0].kind == "preference" and len(listed[0].sources) >= 1
    assert [view.id for view in client.knowledge(tenant_id=tenant, kind="convention")] == [stack]


def test_english_knowledge_reaches_a_12k_context(client, workers, db):  # type: ignore[no-untyped-def]
    # given a week of the English project history and its consolidated knowledge
    workers("write")
    tenant, task = project_history.TENANT, project_history.TASK
    record_days(client, project_history.history(START, days=7))
    brief = consolidated(
        db, tenant, "preference", "Prefers brief answers with the commands first",
        sources_of(db, tenant, "brief answers"), confidence=0.8,
        conditions="when answering how-to questions",
    )  # fmt: skip
    lesson = consolidated(
        db, tenant, "mistake", "Never deploy on Friday: a Friday release broke login",
        sources_of(db, tenant, "never deploy on Friday"), confidence=0.6,
    )  # fmt: skip

    # when the agent asks how to answer a deployment question, in a 12k-token context
    context = client.context(
        task,
        "How should I answer the question about the Friday deploy of the login fix?",
        BUDGET,
        tenant_id=tenant,
        system="You are the auth rewrite agent.",
    )

    # then both rows are in the retrieved memory, marked, with their conditions
    assert_within_budget(context)
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    marked = {item.id: item.knowledge for item in retrieved.items if item.knowledge}
    assert set(marked) == {f"knowledge:{brief}", f"knowledge:{lesson}"}
    assert marked[f"knowledge:{brief}"].conditions == "when answering how-to questions"
    assert (
        "[knowledge: preference, confidence 0.80, when: when answering how-to questions] "
        "Prefers brief answers with the commands first" in retrieved.text
    )
    assert "[knowledge: mistake, confidence 0.60] Never deploy on Friday" in retrieved.text

    # and given the team's report preference and stack as knowledge too
    report = consolidated(
        db, tenant, "preference", "Weekly reports should be concise bullet points",
        [], confidence=0.9,
    )  # fmt: skip
    stack = consolidated(
        db, tenant, "convention", "The stack is TypeScript + Node.js + PostgreSQL",
        [], confidence=0.75,
    )  # fmt: skip
    # when the agent asks about them
    context = client.context(
        task, "Which stack goes in the weekly report, and in what format?", BUDGET,
        tenant_id=tenant,
    )  # fmt: skip
    # then they are the knowledge of this context, and only they
    assert_within_budget(context)
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    assert {item.id for item in retrieved.items if item.knowledge} == {
        f"knowledge:{report}",
        f"knowledge:{stack}",
    }
    assert (
        "[knowledge: preference, confidence 0.90] Weekly reports should be concise bullet points"
        in retrieved.text
    )
    assert (
        "[knowledge: convention, confidence 0.75] The stack is TypeScript + Node.js + PostgreSQL"
        in retrieved.text
    )


def test_a_12k_budget_is_served_and_below_the_floor_is_refused(client, workers):  # type: ignore[no-untyped-def]
    # given the owner and a budget a 16k model leaves for its context
    workers("write")
    context = client.context("billing", "what did we decide?", BUDGET, tenant_id="acme")
    # then it is laid out in proportion to the default layout (128k)
    budgets = {p.name: p.budget_tokens for p in context.partitions}
    assert budgets[Partition.SYSTEM] == 375 and budgets[Partition.TASK_CONTEXT] == 750
    assert sum(budgets.values()) == BUDGET
    # and a budget below the floor is refused before anything is sent
    with pytest.raises(InvalidInput) as err:
        client.context("billing", "what did we decide?", 3_000, tenant_id="acme")
    assert err.value.field == "budget_tokens" and err.value.limit == ">= 4000 tokens"
    with pytest.raises(InvalidInput) as err:
        client.knowledge(tenant_id="acme", limit=0)
    assert err.value.field == "limit" and err.value.limit == "500"
