"""The tenant's semantic knowledge on the real database: recalled for a query on the
request's pipelined connection, and listed for ``MemoryClient.knowledge``, in both
languages and never across tenants."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from pipelines.errors import InvalidInput
from pipelines.read.assemble import ContextSources, assemble_context
from pipelines.read.budget import Partition
from pipelines.read.focus import InfoKind, directive_from_kinds
from pipelines.read.recall import Candidate, KnowledgeView, MemoryView, RecallScope
from pipelines.read.request import ContextRequest
from pipelines.read.retrieve import KnowledgeCandidate, RetrievalResult
from pipelines.read.rewrite import offline_rewrite
from workers.adapters.tokenizer import load_token_counter
from workers.db import open_pool
from workers.read.context import delivered_memory_ids
from workers.read.semantic import (
    KNOWLEDGE_LIST_MAX,
    KnowledgeRecall,
    check_knowledge_call,
    list_knowledge,
    needles_regex,
)

NOW = datetime.now(UTC).replace(microsecond=0)
SCOPE = RecallScope(tenant_id="acme", task_id="billing", now=NOW)
COUNTER = load_token_counter()


@pytest.fixture
def pool(db, settings) -> Iterator[ConnectionPool]:  # type: ignore[no-untyped-def]
    opened = open_pool(settings, name="test-read-semantic")
    yield opened
    opened.close()


def insert(
    conn: psycopg.Connection[Any],
    content: str,
    *,
    tenant: str = "acme",
    kind: str = "preference",
    confidence: float = 0.8,
    status: str = "active",
    conditions: str | None = None,
    sources: int = 3,
    age: timedelta = timedelta(days=1),
) -> str:
    key = uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{kind}/{content}")
    source_ids = [uuid.uuid5(key, str(n)) for n in range(sources)]
    conn.execute(
        "INSERT INTO semantic_memories (id, tenant_id, scope, content, confidence, "
        "source_ids, conditions, status, kind, created_at, updated_at) "
        "VALUES (%s, %s, 'tenant', %s, %s, %s, %s, %s, %s, %s, %s)",
        (key, tenant, content, confidence, source_ids, conditions, status, kind,
         NOW - age, NOW - age),
    )  # fmt: skip
    return str(key)


# -- recall for a query ------------------------------------------------------------------


def test_knowledge_is_recalled_by_its_terms_in_the_tenant_only(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given the tenant's knowledge in both languages, another tenant's, and a retired row
    pref_zh = insert(db, "周报请用简洁的要点式，先写结论再写细节", confidence=0.9)
    stack_zh = insert(db, "本项目统一使用 TypeScript + Node.js + PostgreSQL", kind="convention")
    pref_en = insert(db, "Weekly reports should be concise bullet points")
    flagged = insert(db, "周报要写得详细", status="needs_confirmation", confidence=0.5)
    insert(db, "周报请用简洁的要点式，先写结论再写细节", tenant="globex")
    insert(db, "周报用表格", status="retired")
    with KnowledgeRecall(pool, versions_from_rows=True) as store:
        # when a Chinese question about the weekly report is asked
        zh = store.search_knowledge("周报应该用什么格式？", SCOPE, 32)
        # and an English one, whose words the row holds in other forms
        en = store.search_knowledge("How should the weekly report look?", SCOPE, 32)
        stack = store.search_knowledge("我们项目用的数据库是什么？", SCOPE, 32)
    # then the tenant's live rows holding its terms come back, flagged ones included
    assert {view.id for view in zh} == {pref_zh, flagged}
    assert [view.id for view in en] == [pref_en]
    assert [view.id for view in stack] == [stack_zh]
    # with what the context shows of them
    [pref] = [view for view in zh if view.id == pref_zh]
    assert pref.kind == "preference" and pref.confidence == pytest.approx(0.9)
    assert pref.status == "active" and len(pref.sources) == 3
    assert pref.updated_at == NOW - timedelta(days=1)
    assert {view.status for view in zh} == {"active", "needs_confirmation"}


def test_the_most_confident_matches_come_first_conditions_included(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given rows holding terms of the query, one only in its conditions, and one holding none
    sure = insert(db, "Reports go out on Friday", confidence=0.99)
    unsure = insert(db, "Weekly reports in the release channel", confidence=0.4)
    conditional = insert(db, "Answer briefly", conditions="for weekly status questions")
    insert(db, "Deploys need two approvals", confidence=0.95)
    with KnowledgeRecall(pool, versions_from_rows=True) as store:
        views = store.search_knowledge("weekly report for the release", SCOPE, 32)
        limited = store.search_knowledge("weekly report for the release", SCOPE, 2)
    # then the matching rows come, the most confident first, at most the limit
    assert [view.id for view in views] == [sure, conditional, unsure]
    assert [view.id for view in limited] == [sure, conditional]


def test_a_queued_search_is_answered_on_the_pipelined_connection(db, pool, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # given the tenant's preference, and a request that sent its searches ahead
    key = insert(db, "周报请用简洁的要点式")
    with KnowledgeRecall(pool, versions_from_rows=True) as store:
        store.queue_sparse("周报应该用什么格式？", SCOPE, 50)
        store.queue_knowledge("周报应该用什么格式？", SCOPE, 32)
        store.queue_knowledge("周报应该用什么格式？", SCOPE, 32)  # sent once

        # when its answer is read, no statement of its own may run
        def no_statement() -> None:
            raise AssertionError("the knowledge search ran a statement of its own")

        monkeypatch.setattr(store, "_connection", no_statement)
        first = store.search_knowledge("周报应该用什么格式？", SCOPE, 32)
        again = store.search_knowledge("周报应该用什么格式？", SCOPE, 32)
        assert store.search_sparse("周报应该用什么格式？", SCOPE, 50) == []
    # then the queued answer is the search's, read once
    assert [view.id for view in first] == [view.id for view in again] == [key]


def test_a_query_without_terms_asks_nothing(db, pool, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    insert(db, "Weekly reports should be concise")
    with KnowledgeRecall(pool, versions_from_rows=True) as store:
        monkeypatch.setattr(store, "_connection", lambda: pytest.fail("asked the store"))
        store.queue_knowledge("what is it?", SCOPE, 32)
        assert store.search_knowledge("what is it?", SCOPE, 32) == []


@pytest.mark.parametrize(
    ("needles", "matching", "other"),
    [
        (["snake_cas"], "Column names are snake_case", "Column names are snakeXcase"),
        (["c++"], "We write the agent in C++", "We write the agent in c"),
        (["v1.2"], "Pinned to v1.2 of the SDK", "Pinned to v102 of the SDK"),
        (["100%", "(a|b)"], "Coverage must stay at 100%", "Coverage must stay at 1000"),
        (["周报", "格式"], "周报请用简洁的要点式", "月报请用表格"),
    ],
)
def test_each_needle_is_matched_literally(  # type: ignore[no-untyped-def]
    db, needles: list[str], matching: str, other: str
) -> None:
    # given the needles as the store looks for them
    pattern = needles_regex(needles)
    # then PostgreSQL finds the text holding one of them, case aside, and not the other
    found = db.execute(
        "SELECT %(a)s ~* %(p)s, upper(%(a)s) ~* %(p)s, %(b)s ~* %(p)s",
        {"a": matching, "b": other, "p": pattern},
    ).fetchone()
    assert found == (True, True, False)


def test_an_access_bump_counts_the_episodes_not_the_knowledge() -> None:
    # given a context holding an episode and a knowledge row
    episode = MemoryView(id=str(uuid.uuid4()), content="Priya owns payments", timestamp=NOW)
    known = KnowledgeCandidate(
        knowledge=KnowledgeView(
            id=str(uuid.uuid4()),
            content="Payments are owned by Priya",
            confidence=0.7,
            updated_at=NOW,
        ),
        relevance=1.0,
        priority=2.0,
    )
    retrieval = RetrievalResult(
        candidates=(Candidate(memory=episode, priority=1.0),),
        variants=offline_rewrite("who owns payments?"),
        focus=directive_from_kinds([InfoKind.FACTS], []),
        depth=1,
        reranker="offline",
        recalled={},
        knowledge=(known,),
    )
    context = assemble_context(
        ContextRequest(task_id="billing", query="who owns payments?", budget_tokens=128_000),
        ContextSources(),
        counter=COUNTER,
        focus=retrieval.focus,
        now=NOW,
        retrieval=retrieval,
    )
    # then both are delivered, and only the episode is bumped
    assert len(context.partition(Partition.RETRIEVED_MEMORY).items) == 2
    assert delivered_memory_ids(context) == [episode.id]


# -- the listing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "field", "words", "limit"),
    [
        ({"tenant_id": ""}, "tenant_id", "malformed id", "128 chars"),
        ({"tenant_id": None}, "tenant_id", "required", None),
        ({"kind": "rumour"}, "kind", "unknown value", None),
        ({"query": ""}, "query", "empty", None),
        ({"query": "x" * 20_000}, "query", "16384 bytes", "16384 bytes"),
        ({"limit": 0}, "limit", "between 1 and 500", "500"),
        ({"limit": KNOWLEDGE_LIST_MAX + 1}, "limit", "between 1 and 500", "500"),
        ({"limit": True}, "limit", "must be an integer", None),
        ({"limit": "50"}, "limit", "must be an integer", None),
    ],
)
def test_bad_listing_arguments_name_the_field_and_the_limit(
    arguments: dict[str, object], field: str, words: str, limit: str | None
) -> None:
    call: dict[str, object] = {"tenant_id": "acme", **arguments}
    with pytest.raises(InvalidInput) as err:
        check_knowledge_call(**call)
    assert err.value.field == field
    assert words in str(err.value)
    assert err.value.limit == limit


def test_the_listing_is_the_most_confident_first_or_the_most_relevant(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given the tenant's knowledge of several kinds, in both languages, and another tenant's
    pref_zh = insert(db, "周报请用简洁的要点式，先写结论再写细节", confidence=0.9)
    stack = insert(db, "本项目统一使用 TypeScript + Node.js + PostgreSQL", kind="convention",
                   confidence=0.95)  # fmt: skip
    pref_en = insert(db, "Weekly reports should be concise bullet points", confidence=0.6)
    lesson = insert(db, "Never deploy on a Friday", kind="mistake", confidence=0.7)
    insert(db, "Retired advice about reports", status="retired", confidence=0.99)
    insert(db, "Globex likes long reports", tenant="globex", confidence=0.99)
    # when the tenant's knowledge is listed
    everything = list_knowledge(pool, check_knowledge_call(tenant_id="acme"))
    # then its live rows come, the most confident first
    assert [view.id for view in everything] == [stack, pref_zh, lesson, pref_en]
    # and a kind keeps that kind, a limit that many
    preferences = list_knowledge(pool, check_knowledge_call(tenant_id="acme", kind="preference"))
    assert [view.id for view in preferences] == [pref_zh, pref_en]
    top = list_knowledge(pool, check_knowledge_call(tenant_id="acme", limit=1))
    assert [view.id for view in top] == [stack]
    # and a query keeps the rows saying some of it, in either language
    zh = list_knowledge(pool, check_knowledge_call(tenant_id="acme", query="周报的格式"))
    assert [view.id for view in zh] == [pref_zh]
    en = list_knowledge(pool, check_knowledge_call(tenant_id="acme", query="weekly reports"))
    assert [view.id for view in en] == [pref_en]
    mixed = list_knowledge(
        pool, check_knowledge_call(tenant_id="acme", query="PostgreSQL 周报", kind="convention")
    )
    assert [view.id for view in mixed] == [stack]
    # and each row carries what the caller reads of it
    [row] = zh
    assert (row.kind, row.status, row.conditions) == ("preference", "active", None)
    assert row.confidence == pytest.approx(0.9) and len(row.sources) == 3
