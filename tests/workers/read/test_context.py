"""The read service's PostgreSQL ports and the context task's body, on the real database.

Rows are inserted as the write worker leaves them (``status = 'stored'``); the recallers must
keep every query inside the tenant and task it is given, in SQL.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from pipelines.read.recall import RecallScope
from pipelines.records import Level
from workers.adapters.tokenizer import load_token_counter
from workers.db import open_pool
from workers.read import sql as read_sql
from workers.read.request import check_context_call, layout_of
from workers.read.sql import PostgresRecall, tsquery_of
from workers.read.touch import touch_memories

NOW = datetime.now(UTC).replace(microsecond=0)
SCOPE = RecallScope(tenant_id="acme", task_id="billing", now=NOW)
COUNTER = load_token_counter()


@pytest.fixture
def pool(db, settings) -> Iterator[ConnectionPool]:  # type: ignore[no-untyped-def]
    opened = open_pool(settings, name="test-read-service")
    yield opened
    opened.close()


def insert(
    conn: psycopg.Connection[Any],
    content: str,
    *,
    tenant: str = "acme",
    task: str = "billing",
    age: timedelta = timedelta(hours=1),
    status: str = "stored",
    summary: str | None = None,
    memory_type: str | None = "decision",
) -> str:
    key = uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{task}/{content}")
    conn.execute(
        "INSERT INTO memories (id, tenant_id, task_id, session_id, ts, type, content, "
        "content_hash, status, summary, importance) "
        "VALUES (%s, %s, %s, 's-1', %s, %s, %s, %s, %s, %s, 0.7)",
        (
            key,
            tenant,
            task,
            NOW - age,
            memory_type,
            content,
            hashlib.sha256(content.encode()).digest(),
            status,
            summary,
        ),
    )
    return str(key)


def test_the_tsquery_is_an_or_of_quoted_keywords() -> None:
    assert tsquery_of("Why did we choose PostgreSQL?") == "'choose' | 'PostgreSQL'"
    assert tsquery_of("what is it?") == ""
    assert tsquery_of("it's Bob's 'plan'") == "'Bob' | 'plan'"
    assert "\\" not in tsquery_of("path C:\\temp\\x")


def test_sparse_recall_ranks_keyword_matches_inside_the_scope_only(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given the same words in three scopes and one pending row
    mine = insert(db, "We decided to keep invoices in PostgreSQL for the ledger.")
    other_word = insert(db, "The mailer sends reminders at nine.")
    insert(db, "Invoices in PostgreSQL for the ledger, tenant B.", tenant="other")
    insert(db, "Invoices in PostgreSQL for the ledger, another task.", task="payroll")
    insert(db, "Invoices in PostgreSQL, not stored yet.", status="pending")
    recall = PostgresRecall(pool, versions_from_rows=False)

    hits = recall.search_sparse("where do invoices live? PostgreSQL", SCOPE, 50)

    assert [hit.id for hit in hits] == [mine]
    assert hits[0].score > 0
    assert other_word not in {hit.id for hit in hits}
    # a tenant-wide scope (no task) still never crosses tenants
    wide = RecallScope(tenant_id="acme", task_id=None, now=NOW)
    assert len(recall.search_sparse("invoices PostgreSQL ledger", wide, 50)) == 2
    assert recall.search_sparse("what is it?", SCOPE, 50) == []


def test_related_terms_come_from_the_top_keyword_hits(db, pool) -> None:  # type: ignore[no-untyped-def]
    for n in range(4):
        insert(db, f"Invoice batch {n} failed on the ledger lock timeout.")
    insert(db, "Invoice export to the warehouse finished.")
    recall = PostgresRecall(pool, versions_from_rows=False)

    terms = recall.related_terms("invoice", SCOPE, 8)

    assert "ledger" in terms
    assert "invoice" not in terms


def test_temporal_recall_reads_the_last_seven_days_of_the_task(db, pool) -> None:  # type: ignore[no-untyped-def]
    recent = insert(db, "Deployed the invoices service to eu-west-1.", age=timedelta(days=1))
    newest = insert(db, "Checked the mailer logs.", age=timedelta(minutes=5))
    insert(db, "Deployed the invoices service long ago.", age=timedelta(days=9))
    insert(db, "Deployed tenant B's invoices.", tenant="other", age=timedelta(hours=2))
    recall = PostgresRecall(pool, versions_from_rows=False)
    since = NOW - timedelta(days=7)

    ranked = recall.search_recent("deployed invoices", SCOPE, since, 20)
    assert [hit.id for hit in ranked] == [recent, newest]
    # with no keyword, the newest first
    newest_first = recall.search_recent("what is it?", SCOPE, since, 20)
    assert [hit.id for hit in newest_first] == [newest, recent]
    assert len(recall.search_recent("deployed", SCOPE, since, 1)) == 1


def test_temporal_recall_ranks_only_the_newest_rows_of_a_full_window(  # type: ignore[no-untyped-def]
    db, pool, monkeypatch
) -> None:
    # given a week holding more rows than the leg reads, the best match the oldest of them
    monkeypatch.setattr(read_sql, "RECENT_SCAN", 3)
    oldest = insert(db, "Deployed the invoices service to eu-west-1.", age=timedelta(days=3))
    newer = [
        insert(db, f"Checked the mailer logs, pass {n}.", age=timedelta(hours=n))
        for n in range(1, 4)
    ]
    matching_new = insert(db, "Deployed the mailer.", age=timedelta(minutes=5))
    recall = PostgresRecall(pool, versions_from_rows=False)
    since = NOW - timedelta(days=7)

    # when the temporal leg ranks the window, it reads the newest three only
    ranked = [hit.id for hit in recall.search_recent("deployed invoices", SCOPE, since, 2)]
    assert oldest not in ranked
    assert ranked == [matching_new, newer[0]]
    # and a limit above the scan bound still gets that many rows
    assert len(recall.search_recent("deployed invoices", SCOPE, since, 5)) == 5


def test_queued_searches_answer_as_direct_ones_on_one_connection_given_back(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given memories in two scopes, and a recaller that queues its searches
    mine = [insert(db, f"Deployed the invoices service, step {n}.") for n in range(3)]
    insert(db, "Deployed tenant B's invoices.", tenant="other")
    since = NOW - timedelta(days=7)
    direct = PostgresRecall(pool, versions_from_rows=False)
    expected_sparse = direct.search_sparse("deployed invoices", SCOPE, 50)
    expected_recent = direct.search_recent("deployed invoices", SCOPE, since, 20)
    before = pool.get_stats()["pool_available"]

    with PostgresRecall(pool, versions_from_rows=False) as queued:
        # when both searches are sent ahead, then asked (the keyword one twice, as the
        # rewrite's feedback and the literal variant do), and a row is read on the way
        queued.queue_sparse("deployed invoices", SCOPE, 50)
        queued.queue_recent("deployed invoices", SCOPE, since, 20)
        queued.queue_sparse("deployed invoices", SCOPE, 50)  # a second send is a no-op
        views = queued.fetch(mine[:1], SCOPE)
        sparse = queued.search_sparse("deployed invoices", SCOPE, 50)
        recent = queued.search_recent("deployed invoices", SCOPE, since, 20)
        again = queued.search_sparse("deployed invoices", SCOPE, 50)
        # then the request held one connection for all of it
        assert pool.get_stats()["pool_available"] == before - 1

    # then the answers are the direct ones, inside the scope, and the connection is back
    assert [view.id for view in views] == mine[:1]
    assert sparse == again == expected_sparse
    assert {hit.id for hit in sparse} == set(mine)
    assert recent == expected_recent
    assert pool.get_stats()["pool_available"] == before


def test_a_queued_search_never_read_is_dropped_and_the_connection_reused(db, pool) -> None:  # type: ignore[no-untyped-def]
    insert(db, "Deployed the invoices service.")
    for _ in range(3 * pool.max_size):
        with PostgresRecall(pool, versions_from_rows=False) as queued:
            queued.queue_sparse("deployed invoices", SCOPE, 50)
            queued.queue_recent("deployed", SCOPE, NOW - timedelta(days=7), 20)
    # every connection came back usable, out of pipeline mode
    with pool.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    with PostgresRecall(pool, versions_from_rows=False) as recall:
        assert len(recall.search_sparse("deployed invoices", SCOPE, 50)) == 1


def test_a_failing_queued_search_raises_on_its_read_and_gives_the_connection_back(db, pool) -> None:  # type: ignore[no-untyped-def]
    from workers.read import sql as read_sql

    before = pool.get_stats()["pool_available"]
    recall = PostgresRecall(pool, versions_from_rows=False)
    original = read_sql.SPARSE_SQL
    read_sql.SPARSE_SQL = original.replace("memories m", "no_such_table m")
    try:
        with recall, pytest.raises(psycopg.errors.UndefinedTable):
            recall.queue_sparse("deployed invoices", SCOPE, 50)
            recall.search_sparse("deployed invoices", SCOPE, 50)
    finally:
        read_sql.SPARSE_SQL = original
    assert pool.get_stats()["pool_available"] == before
    with PostgresRecall(pool, versions_from_rows=False) as fresh:
        assert fresh.search_sparse("deployed invoices", SCOPE, 50) == []


def test_fetch_reads_back_only_the_scope_with_compressed_versions(db, pool) -> None:  # type: ignore[no-untyped-def]
    long = "We decided to keep invoices in PostgreSQL because the ledger needs transactions. " * 3
    mine = insert(db, long, summary="Invoices stay in PostgreSQL: the ledger needs transactions.")
    theirs = insert(db, "Tenant B's decision.", tenant="other")
    columns = {
        row[0]
        for row in db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'memories'"
        ).fetchall()
    }
    has_rows = "parent_ids" in columns
    if has_rows:  # a level-2 summary row over this memory (migration 0003)
        db.execute(
            "INSERT INTO memories (id, tenant_id, task_id, session_id, ts, content, "
            "content_hash, status, level, parent_ids) VALUES (%s, 'acme', 'billing', 's-1', "
            "%s, 'Billing phase: PostgreSQL chosen.', '\\x00', 'stored', 2, ARRAY[%s]::uuid[])",
            (uuid.uuid4(), NOW, mine),
        )
    recall = PostgresRecall(pool, versions_from_rows=has_rows)

    views = recall.fetch([mine, theirs, str(uuid.uuid4())], SCOPE)

    [view] = views
    assert view.id == mine
    assert view.importance == pytest.approx(0.7)
    assert view.versions[0].level is Level.L1
    assert view.versions[0].content.startswith("Invoices stay in PostgreSQL")
    if has_rows:
        assert [v.level for v in view.versions] == [Level.L1, Level.L2]


def test_an_access_bump_counts_once_even_when_replayed(db, pool) -> None:  # type: ignore[no-untyped-def]
    a = insert(db, "first memory about invoices")
    b = insert(db, "second memory about invoices")
    theirs = insert(db, "tenant B memory", tenant="other")
    at = NOW

    assert touch_memories(pool, "acme", [a, b, theirs], at) == 2
    # a replay of the same message changes nothing
    assert touch_memories(pool, "acme", [a, b], at) == 0
    # a later read counts again; an older one delivered late counts but keeps the newer time
    assert touch_memories(pool, "acme", [a], at + timedelta(seconds=5)) == 1
    assert touch_memories(pool, "acme", [a], at - timedelta(seconds=5)) == 1
    rows = dict(
        db.execute(
            "SELECT id::text, access_count FROM memories WHERE id = ANY(%s::uuid[])",
            ([a, b, theirs],),
        ).fetchall()
    )
    assert rows == {a: 3, b: 1, theirs: 0}
    last = db.execute("SELECT last_accessed_at FROM memories WHERE id = %s", (a,)).fetchone()[0]
    assert last == at + timedelta(seconds=5)


def test_the_partition_budgets_come_from_settings(settings) -> None:  # type: ignore[no-untyped-def]
    custom = settings.model_copy(update={"context_retrieved_tokens": 48_000})
    layout = layout_of(custom)
    assert layout.fixed_tokens == 24_000
    assert layout.default_total_tokens == 4_000 + 8_000 + 48_000 + 64_000 + 12_000 + 8_000

    call = check_context_call(
        tenant_id="acme",
        task_id="billing",
        query="  why   PostgreSQL? ",
        budget_tokens=30_000,
        focus=["decisions", "facts"],
        variables={"attempt": 2, "branch": "main"},
        counter=COUNTER,
        layout=layout,
        content_max_bytes=1000,
    )
    wire = call.to_json()
    assert wire["query"] == "why PostgreSQL?"
    assert wire["focus"] == ["decisions", "facts"]
    assert wire["variables"] == {"attempt": "2", "branch": "main"}


class RecordingIndex:
    """A vector port that records each search and answers with no hits."""

    def __init__(self) -> None:
        self.searches: list[dict[str, Any]] = []

    def search(self, collection: str, vector: Any, **kwargs: Any) -> list[Any]:
        self.searches.append({"collection": collection, **kwargs})
        return []

    def search_many(self, collection: str, vectors: Any, **kwargs: Any) -> list[list[Any]]:
        return [self.search(collection, vector, **kwargs) for vector in vectors]


def test_dense_recall_fuses_the_steps_context_with_the_phases_weights(pool) -> None:  # type: ignore[no-untyped-def]
    import threading

    from pipelines.index.context_vector import fusion_weights, query_context_text
    from pipelines.records import TaskPhase
    from workers.adapters.embed_hashing import HashingEmbedder
    from workers.read.vectors import VectorRecall

    embedder = HashingEmbedder()
    index = RecordingIndex()
    context = query_context_text(TaskPhase.DEBUGGING, ["errors", "recent_activity"])
    recall = VectorRecall(
        index,  # type: ignore[arg-type]
        embedder,
        "memharness_episodic",
        threading.Lock(),
        fusion=(context, fusion_weights(TaskPhase.DEBUGGING)),
    )

    recall.search_dense("why did the ledger test fail?", SCOPE, 50)
    recall.search_dense("ledger test fail", SCOPE, 50)
    recall.search_dense("ledger test fail", SCOPE, 50)  # answered by the first identical search

    assert len(index.searches) == 2
    for search in index.searches:
        fusion = search["fusion"]
        assert fusion.context == embedder.embed([context])[0]
        assert (fusion.content_weight, fusion.context_weight) == (0.6, 0.4)
        assert (search["tenant_id"], search["task_id"], search["limit"]) == ("acme", "billing", 50)


def test_the_variants_dense_searches_go_to_the_engine_as_one_batch() -> None:
    import threading

    from workers.adapters.embed_hashing import HashingEmbedder
    from workers.read.vectors import VectorRecall

    class BatchCounting(RecordingIndex):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[int] = []

        def search_many(self, collection: str, vectors: Any, **kwargs: Any) -> list[list[Any]]:
            self.batches.append(len(vectors))
            return super().search_many(collection, vectors, **kwargs)

    index = BatchCounting()
    recall = VectorRecall(index, HashingEmbedder(), "memharness_episodic", threading.Lock())  # type: ignore[arg-type]

    # when three variants (two of them the same text) are searched, then one more time
    answers = recall.search_dense_many(["ledger fail", "ledger", "ledger fail"], SCOPE, 50)
    recall.search_dense_many(["ledger", "ledger test"], SCOPE, 50)

    # then each distinct text was searched once: one batch of two, then one of the new text
    assert answers == [[], [], []]
    assert index.batches == [2, 1]


def test_similarity_reads_the_stored_vectors_of_the_ids_inside_the_scope(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import threading

    import numpy as np

    from pipelines.index.vectors import VectorPoint
    from workers.adapters.embed_hashing import HashingEmbedder
    from workers.adapters.vector_edge import EdgeIndex
    from workers.read.vectors import VectorRecall

    embedder = HashingEmbedder(dim=64)
    index = EdgeIndex(tmp_path / "edge")
    try:
        index.ensure_collection("mh_episodic", embedder.dim)
        texts = {
            ("acme", "billing"): ["invoices stay in PostgreSQL", "ledger export runs nightly"],
            ("acme", "other"): ["invoices of another task"],
            ("globex", "billing"): ["invoices of another tenant"],
        }
        ids: dict[str, str] = {}
        points = []
        for (tenant, task), contents in texts.items():
            for content in contents:
                key = uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{task}/{content}")
                ids[content] = str(key)
                points.append(
                    VectorPoint(
                        id=key,
                        vector=embedder.embed([content])[0],
                        payload={"tenant_id": tenant, "task_id": task, "level": 0, "ts": 0.0},
                    )
                )
        index.upsert("mh_episodic", points)
        recall = VectorRecall(index, embedder, "mh_episodic", threading.Lock())

        # when the cosines of every id, and one unknown id, are asked in acme/billing
        scores = recall.similarity(
            "where do invoices live?", [*ids.values(), str(uuid.uuid4())], SCOPE
        )

        # then only the scope's memories are scored, each with its stored vector's cosine
        mine = texts[("acme", "billing")]
        assert set(scores) == {ids[content] for content in mine}
        query = np.asarray(embedder.embed(["where do invoices live?"])[0])
        for content in mine:
            expected = float(np.asarray(embedder.embed([content])[0]) @ query)
            assert scores[ids[content]] == pytest.approx(expected, abs=1e-5)
        assert recall.similarity("anything", [], SCOPE) == {}
    finally:
        index.close()


def test_a_second_read_of_the_same_rows_asks_only_for_the_new_ones(db, pool) -> None:  # type: ignore[no-untyped-def]
    mine = insert(db, "Invoices stay in PostgreSQL.")
    other = insert(db, "Ledger export runs nightly.")
    theirs = insert(db, "tenant B memory", tenant="other")
    recall = PostgresRecall(pool, versions_from_rows=False)
    missing = str(uuid.uuid4())

    # when rows are read, then again with one more id, inside the scope
    first = recall.fetch([mine, theirs, missing], SCOPE)
    with psycopg.connect(db.info.dsn, autocommit=True) as conn:
        conn.execute("UPDATE memories SET content = 'changed' WHERE id = %s", (mine,))
    second = recall.fetch([missing, other, mine, theirs], SCOPE)

    # then the second answer reuses the first read (one request sees one version of a row),
    # reads the new id, and the other tenant's row is never an answer
    assert [v.id for v in first] == [mine]
    assert [v.id for v in second] == [other, mine]
    assert second[1].content == "Invoices stay in PostgreSQL."
    # and another scope on the same recaller reads its own rows
    assert recall.fetch([theirs], RecallScope(tenant_id="other", task_id="billing", now=NOW))


def test_a_summary_no_shorter_than_its_live_sources_is_left_to_them(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given two turns, a summary about as long as both, and a summary much shorter
    a = insert(db, "We ship the invoices service on Friday after the load test passes.")
    b = insert(db, "The load test runs on Thursday night against the staging cluster.")
    copy_id, short_id = uuid.uuid4(), uuid.uuid4()
    for row_id, text in (
        (copy_id, "Ship invoices service Friday after load test passes. Load test Thursday "
                  "night against staging cluster."),
        (short_id, "Invoices ship Friday."),
    ):  # fmt: skip
        db.execute(
            "INSERT INTO memories (id, tenant_id, task_id, session_id, ts, content, "
            "content_hash, status, level, parent_ids) VALUES (%s, 'acme', 'billing', 's-1', "
            "%s, %s, '\\x00', 'stored', 1, ARRAY[%s, %s]::uuid[])",
            (row_id, NOW, text, a, b),
        )
    ids = [a, b, str(copy_id), str(short_id)]

    # when both sources are stored, the near-copy is not read; the short summary is
    with PostgresRecall(pool, versions_from_rows=True) as recall:
        assert {v.id for v in recall.fetch(ids, SCOPE)} == {a, b, str(short_id)}
    # and once a source is evicted, the near-copy carries what it said and is read again
    db.execute("UPDATE memories SET status = 'evicted' WHERE id = %s", (b,))
    with PostgresRecall(pool, versions_from_rows=True) as recall:
        assert {v.id for v in recall.fetch(ids, SCOPE)} == {a, str(copy_id), str(short_id)}
