"""Index maintenance bodies against the real PostgreSQL, Redis and the embedded engine:
reconciliation, the rebuild rule, a rebuild under concurrent queries, tenant isolation."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator

import pytest

from config import Settings
from memharness.client import MemoryClient
from pipelines.index.context_vector import fusion_weights, query_context_text
from pipelines.index.vectors import ContextFusion, VectorPoint
from pipelines.records import TaskPhase
from workers.clients import Clients
from workers.index.maintenance import (
    check_indexes,
    compact_indexes,
    rebuild_index,
    reconcile_indexes,
)
from workers.index.targets import (
    EPISODIC,
    LOCK_KEY,
    SEMANTIC,
    alias_name,
    collection_params,
    next_generation,
)
from workers.write.drain import drain_writes

TENANTS = ("acme", "globex", "initech", "umbrella")
TOPICS = {
    "acme": ["ledger", "postgres", "invoice", "billing", "outbox", "migration"],
    "globex": ["kubernetes", "helm", "ingress", "autoscaler", "canary", "rollout"],
    "initech": ["tps", "report", "cover", "sheet", "printer", "stapler"],
    "umbrella": ["vaccine", "trial", "cohort", "dosage", "protocol", "lab"],
}
VERBS = ["We decided to move", "Status: blocked on", "I prefer to review", "Fixed the bug in"]


def _note(tenant: str, rng: random.Random, i: int) -> str:
    a, b = rng.sample(TOPICS[tenant], 2)
    return f"{rng.choice(VERBS)} the {a} {b} work, item {tenant.upper()}-{i} for sprint {i % 7}."


@pytest.fixture
def ctx(db, redis_client, qdrant_path, settings: Settings) -> Iterator[Clients]:  # type: ignore[no-untyped-def]
    context = Clients(settings)
    yield context
    context.close()


def _seed(ctx: Clients, per_tenant: int, tenants: tuple[str, ...] = TENANTS) -> list[str]:
    """Record memories through the real write path and drain them into the index."""
    rng = random.Random(7)
    items = [
        {
            "content": _note(tenant, rng, i),
            "tenant_id": tenant,
            "task_id": f"{tenant}-task-{i % 3}",
            "session_id": "s-1",
            "type": "decision",
        }
        for tenant in tenants
        for i in range(per_tenant)
    ]
    with MemoryClient(ctx.settings) as client:
        receipts = client.record_many(items)
    while drain_writes(ctx).more:
        pass
    return [str(r.memory_id) for r in receipts]


def _stored(db, tenant: str | None = None) -> int:  # type: ignore[no-untyped-def]
    if tenant is None:
        return int(
            db.execute("SELECT count(*) FROM memories WHERE status = 'stored'").fetchone()[0]
        )
    return int(
        db.execute(
            "SELECT count(*) FROM memories WHERE status = 'stored' AND tenant_id = %s", (tenant,)
        ).fetchone()[0]
    )


def test_the_write_path_stores_a_content_and_a_context_vector(ctx, db) -> None:  # type: ignore[no-untyped-def]
    ids = _seed(ctx, 3, ("acme",))
    alias = ctx.episodic_collection

    points = ctx.vectors.retrieve(alias, [uuid.UUID(i) for i in ids])

    assert len(points) == 3
    for point in points:
        assert point.context is not None
        assert len(point.context) == len(point.vector) == ctx.embedder.dim
        assert point.context != point.vector
    assert ctx.vectors.resolve(alias) == f"{alias}__g1"


def test_the_reconciler_makes_the_index_equal_to_postgresql(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given 40 stored memories, 5 of them lost from the index, 3 orphan points, and one
    # write in flight (its vector upserted, its row still pending)
    ids = [uuid.UUID(i) for i in _seed(ctx, 10)]
    alias = ctx.episodic_collection
    ctx.vectors.delete(alias, ids[:5])
    template = ctx.vectors.retrieve(alias, [ids[10]])[0]
    orphans = [uuid.uuid4() for _ in range(3)]
    ctx.vectors.upsert(alias, [template.model_copy(update={"id": orphan}) for orphan in orphans])
    with MemoryClient(ctx.settings) as client:
        pending = client.record(
            "We decided to keep the outbox relay at fifteen seconds.",
            tenant_id="acme",
            task_id="acme-task-0",
            session_id="s-2",
        ).memory_id
    ctx.vectors.upsert(alias, [template.model_copy(update={"id": pending})])

    # when the reconciler runs
    report = reconcile_indexes(ctx, [EPISODIC])[EPISODIC]

    # then the lost ones are back, the orphans gone, the in-flight write untouched
    assert (report["missing"], report["embedded"], report["orphans"]) == (5, 5, 3)
    assert ctx.vectors.count(alias) == 40 + 1
    assert len(ctx.vectors.retrieve(alias, ids[:5])) == 5
    assert ctx.vectors.retrieve(alias, orphans) == []
    assert len(ctx.vectors.retrieve(alias, [pending])) == 1
    # and a second run finds nothing to do
    again = reconcile_indexes(ctx, [EPISODIC])[EPISODIC]
    assert (again["missing"], again["orphans"]) == (0, 0)


def test_the_reconciler_indexes_semantic_memories(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given two live semantic memories and a retired one in PostgreSQL, none indexed
    rows = [
        (uuid.uuid4(), "acme", "The ledger uses PostgreSQL 15.", "active"),
        (uuid.uuid4(), "acme", "Reviews happen on Tuesdays.", "needs_confirmation"),
        (uuid.uuid4(), "acme", "The old ledger used MySQL.", "retired"),
    ]
    for memory_id, tenant, content, status in rows:
        db.execute(
            "INSERT INTO semantic_memories (id, tenant_id, content, confidence, status) "
            "VALUES (%s, %s, %s, 0.9, %s)",
            (memory_id, tenant, content, status),
        )

    report = reconcile_indexes(ctx, [SEMANTIC])[SEMANTIC]

    alias = alias_name(ctx.settings, SEMANTIC)
    assert report["embedded"] == 2
    assert ctx.vectors.count(alias) == 2
    hits = ctx.vectors.search(
        alias, ctx.embedder.embed(["ledger PostgreSQL"])[0], tenant_id="acme", limit=5
    )
    assert hits[0].id == rows[0][0]
    assert hits[0].payload["level"] == 4


def test_the_rebuild_rule_waits_for_ten_percent_deleted(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given 40 memories of which 3 were forgotten (7.5 %)
    ids = [uuid.UUID(i) for i in _seed(ctx, 10)]
    alias = ctx.episodic_collection
    db.execute("UPDATE memories SET status = 'discarded' WHERE id = ANY(%s)", (ids[:3],))
    ctx.vectors.delete(alias, ids[:3])

    # when the check runs, nothing is rebuilt
    first = check_indexes(ctx, [EPISODIC])[EPISODIC]
    assert "rebuild" not in first
    assert first["optimize_s"] >= 0  # the optimizer pass that indexes grown segments
    assert first["deleted"] == 3

    # and once a fifth is gone (5 of 40 = 12.5 %) the next check rebuilds
    db.execute("UPDATE memories SET status = 'discarded' WHERE id = ANY(%s)", (ids[3:5],))
    ctx.vectors.delete(alias, ids[3:5])
    second = check_indexes(ctx, [EPISODIC])[EPISODIC]

    # then generation 2 holds exactly PostgreSQL's 35 and the old generation is gone
    rebuild = second["rebuild"]
    assert (rebuild["old"], rebuild["new"]) == (f"{alias}__g1", f"{alias}__g2")
    assert rebuild["verified_points"] == 35 == _stored(db)
    assert ctx.vectors.resolve(alias) == f"{alias}__g2"
    assert ctx.vectors.collections() == [f"{alias}__g2"]
    assert ctx.vectors.stats(alias).deleted == 0
    assert check_indexes(ctx, [EPISODIC])[EPISODIC].get("rebuild") is None


def test_queries_during_a_rebuild_never_fail_and_never_come_back_empty(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given four tenants' memories
    _seed(ctx, 60)
    alias = ctx.episodic_collection
    rng = random.Random(11)
    queries = [(t, " ".join(rng.sample(TOPICS[t], 2))) for t in TENANTS for _ in range(5)]
    vectors = {q: ctx.embedder.embed([q[1]])[0] for q in queries}
    done = threading.Event()
    problems: list[str] = []
    answered = [0]

    def query_loop(seed: int) -> None:
        local = random.Random(seed)
        while not done.is_set():
            tenant, text = local.choice(queries)
            try:
                hits = ctx.vectors.search(alias, vectors[(tenant, text)], tenant_id=tenant)
            except Exception as exc:  # the failure itself is what the test reports
                problems.append(f"{type(exc).__name__}: {exc}")
                continue
            if not hits:
                problems.append(f"empty answer for {tenant}")
            if any(h.payload["tenant_id"] != tenant for h in hits):
                problems.append(f"{tenant} saw another tenant's memory")
            answered[0] += 1

    readers = [threading.Thread(target=query_loop, args=(seed,)) for seed in range(3)]
    for reader in readers:
        reader.start()

    # when the collection is rebuilt twice while they query
    try:
        first = rebuild_index(ctx, EPISODIC)
        second = rebuild_index(ctx, EPISODIC)
    finally:
        done.set()
        for reader in readers:
            reader.join(timeout=60)

    # then every query was answered, with the tenant's own memories, and the index is whole
    assert problems == []
    assert answered[0] > 0
    assert second.old == first.new == f"{alias}__g2"
    assert ctx.vectors.resolve(alias) == f"{alias}__g3"
    assert ctx.vectors.count(alias) == _stored(db) == 240


def test_tenant_a_never_sees_tenant_b_over_many_random_queries(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given four tenants whose memories share the same phrasing and vocabulary slots
    _seed(ctx, 50)
    alias = ctx.episodic_collection
    owner = {
        str(row[0]): row[1] for row in db.execute("SELECT id, tenant_id FROM memories").fetchall()
    }
    rng = random.Random(2026)
    every_word = [w for words in TOPICS.values() for w in words]

    # when 400 random queries run: any tenant, any vocabulary (often another tenant's),
    # with or without a task filter, plain or fused with a phase's context
    seen = 0
    for _ in range(400):
        tenant = rng.choice(TENANTS)
        text = " ".join(rng.sample(every_word, 3))
        task = rng.choice([None, f"{tenant}-task-{rng.randrange(3)}", "globex-task-1"])
        phase = rng.choice([None, *TaskPhase])
        vector = ctx.embedder.embed([text])[0]
        fusion = None
        if phase is not None:
            content_w, context_w = fusion_weights(phase)
            context = ctx.embedder.embed([query_context_text(phase, ["decisions"])])[0]
            fusion = ContextFusion(
                context=context, content_weight=content_w, context_weight=context_w
            )
        hits = ctx.vectors.search(
            alias, vector, tenant_id=tenant, task_id=task, limit=20, fusion=fusion
        )

        # then every hit belongs to the querying tenant, by payload and by PostgreSQL
        for hit in hits:
            assert hit.payload["tenant_id"] == tenant
            assert owner[str(hit.id)] == tenant
        if task is None or task.startswith(tenant):
            assert hits, (tenant, text, task)
        seen += len(hits)
    assert seen > 400 * 5


def test_weekly_compaction_runs_the_optimizer(ctx, db) -> None:  # type: ignore[no-untyped-def]
    ids = [uuid.UUID(i) for i in _seed(ctx, 10)]
    ctx.vectors.delete(ctx.episodic_collection, ids[:10])

    report = compact_indexes(ctx, [EPISODIC, SEMANTIC])

    assert report[EPISODIC]["collection"] == ctx.episodic_collection
    assert report[EPISODIC]["segments_after"] >= 1
    assert SEMANTIC not in report  # never created: nothing to compact
    assert ctx.vectors.count(ctx.episodic_collection) == 30


def test_maintenance_of_a_busy_collection_is_skipped(ctx, db) -> None:  # type: ignore[no-untyped-def]
    _seed(ctx, 2, ("acme",))
    ctx.redis.set(LOCK_KEY.format(alias=ctx.episodic_collection), "someone-else", ex=60)

    report = reconcile_indexes(ctx, [EPISODIC])

    assert "already running" in report[EPISODIC]["skipped"]
    assert ctx.redis.get(LOCK_KEY.format(alias=ctx.episodic_collection)) == b"someone-else"


def test_collection_params_come_from_the_settings() -> None:
    settings = Settings(vector_episodic_pq="x16", vector_semantic_hnsw_m=48)
    episodic = collection_params(settings, EPISODIC)
    semantic = collection_params(settings, SEMANTIC)
    assert (episodic.hnsw_m, episodic.hnsw_ef_construct, episodic.search_ef) == (16, 200, 128)
    assert episodic.pq == "x16"
    assert (semantic.hnsw_m, semantic.hnsw_ef_construct, semantic.search_ef) == (48, 400, 128)
    assert semantic.pq is None
    assert collection_params(Settings(), EPISODIC).pq is None


def test_generations_count_up_past_leftovers() -> None:
    assert next_generation("m_episodic", None, []) == "m_episodic__g1"
    assert next_generation("m_episodic", "m_episodic__g2", ["m_episodic__g2"]) == "m_episodic__g3"
    leftovers = ["m_episodic__g2", "m_episodic__g5", "m_semantic__g9"]
    assert next_generation("m_episodic", "m_episodic__g2", leftovers) == "m_episodic__g6"


def test_points_written_before_context_vectors_still_upsert(ctx) -> None:  # type: ignore[no-untyped-def]
    alias = ctx.episodic_collection
    ctx.vectors.ensure_collection(alias, ctx.embedder.dim)
    point = VectorPoint(
        id=uuid.uuid4(), vector=ctx.embedder.embed(["x"])[0], payload={"tenant_id": "acme"}
    )
    ctx.vectors.upsert(alias, [point])
    assert ctx.vectors.count(alias, "acme") == 1


def test_the_check_rebuilds_a_serving_collection_whose_graph_would_be_built_in_place(
    db, redis_client, qdrant_path, migrated, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    import psycopg

    from memharness.bench.retrieval_latency import (
        copy_memories,
        index_memories,
        synthetic_memories,
    )

    # given 7,500 memories of 384-d vectors indexed, none of their graph built: optimizing
    # the serving collection in place would hold the owner's every thread (its reads) while
    # it builds (past the engine's threshold of 10,000 KB of one vector's data)
    ctx = Clients(settings.model_copy(update={"embed_dim": 384}))
    rows = synthetic_memories(7_500, datetime.now(UTC))
    with psycopg.connect(migrated, autocommit=True) as conn, conn.transaction():
        copy_memories(conn, rows, ctx.embedder.version)
    alias = ctx.episodic_collection
    ctx.vectors.ensure_collection(
        alias, ctx.embedder.dim, collection_params(ctx.settings, EPISODIC), ctx.embedder.version
    )
    index_memories(ctx.vectors, alias, ctx.embedder, rows)
    assert ctx.vectors.optimize_would_stall(alias)
    old = ctx.vectors.resolve(alias)

    # when the index check runs
    report = check_indexes(ctx, [EPISODIC])

    # then it built a new generation off the serving path and switched to it
    assert report[EPISODIC]["rebuild"]["old"] == old
    assert report[EPISODIC]["rebuild"]["verified_points"] == 7_500
    assert ctx.vectors.resolve(alias) == report[EPISODIC]["rebuild"]["new"] != old
    assert not ctx.vectors.optimize_would_stall(alias)
    ctx.close()
