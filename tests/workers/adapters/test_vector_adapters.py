"""The vector port's contract, run against both adapters on real engines: qdrant-edge-py (the
embedded default) and qdrant-client in local mode (the server adapter's code path)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pipelines.index.vectors import (
    CODE_VECTOR,
    CONTEXT_VECTOR,
    CollectionParams,
    ContextFusion,
    VectorIndex,
    VectorPoint,
)
from workers.adapters.vector_edge import ALIAS_FILE, EdgeIndex
from workers.adapters.vector_qdrant import QdrantIndex

DIM = 16
ALIAS = "mh_episodic"


def _open(engine: str, path: Path) -> VectorIndex:
    if engine == "edge":
        return EdgeIndex(path)
    return QdrantIndex(path=path)


@pytest.fixture(params=["edge", "local"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def index(engine: str, tmp_path: Path) -> Iterator[VectorIndex]:
    store = _open(engine, tmp_path / "store")
    yield store
    store.close()


def _unit(rng: np.random.Generator) -> list[float]:
    v = rng.standard_normal(DIM)
    return [float(x) for x in v / np.linalg.norm(v)]


def _points(n: int, tenant: str, seed: int, **payload: object) -> list[VectorPoint]:
    rng = np.random.default_rng(seed)
    return [
        VectorPoint(
            id=uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{seed}/{i}"),
            vector=_unit(rng),
            context=_unit(rng),
            payload={"tenant_id": tenant, "task_id": f"t{i % 2}", "level": 0, "ts": float(i)}
            | payload,
        )
        for i in range(n)
    ]


def test_a_collection_is_created_behind_its_alias(index: VectorIndex) -> None:
    # when the write path ensures its collection
    index.ensure_collection(ALIAS, DIM)

    # then generation 1 exists and the alias reaches it
    assert index.resolve(ALIAS) == f"{ALIAS}__g1"
    assert index.collections() == [f"{ALIAS}__g1"]
    assert index.resolve("nothing") is None
    assert index.count("nothing") == 0
    assert index.search("nothing", [1.0] * DIM, tenant_id="a") == []


def test_a_vector_size_change_is_refused(index: VectorIndex) -> None:
    index.ensure_collection(ALIAS, DIM)
    with pytest.raises(ValueError, match="re-embed"):
        index.ensure_collection(ALIAS, DIM * 2)


def test_search_stays_inside_the_tenant_and_task(index: VectorIndex) -> None:
    # given two tenants' points in one collection
    index.ensure_collection(ALIAS, DIM)
    a, b = _points(20, "a", 1), _points(20, "b", 2)
    index.upsert(ALIAS, a + b)

    # when tenant a searches with b's own vector
    hits = index.search(ALIAS, b[0].vector, tenant_id="a", limit=50)

    # then only a's points come back, and a task filter narrows them
    assert {h.payload["tenant_id"] for h in hits} == {"a"}
    assert len(hits) == 20
    task_hits = index.search(ALIAS, a[0].vector, tenant_id="a", task_id="t0", limit=50)
    assert {h.payload["task_id"] for h in task_hits} == {"t0"}
    assert task_hits[0].id == a[0].id
    assert index.count(ALIAS, "a") == 20
    assert index.count(ALIAS) == 40
    recent = index.search(ALIAS, a[0].vector, tenant_id="a", since_ts=15.0, limit=50)
    assert sorted(h.payload["ts"] for h in recent) == [15.0, 16.0, 17.0, 18.0, 19.0]


def test_a_search_without_payload_ranks_the_same(index: VectorIndex) -> None:
    # given two tenants' points
    index.ensure_collection(ALIAS, DIM)
    a, b = _points(20, "a", 1), _points(20, "b", 2)
    index.upsert(ALIAS, a + b)

    # when the same search runs with and without payloads
    full = index.search(ALIAS, a[3].vector, tenant_id="a", limit=10)
    bare = index.search(ALIAS, a[3].vector, tenant_id="a", limit=10, with_payload=False)

    # then ids and scores agree, the scope still holds, and no payload came back
    assert [(h.id, round(h.score, 5)) for h in bare] == [(h.id, round(h.score, 5)) for h in full]
    assert {h.id for h in bare} <= {p.id for p in a}
    assert all(h.payload == {} for h in bare)


def test_a_batch_of_searches_answers_each_as_its_own_search(index: VectorIndex) -> None:
    # given two tenants' points
    index.ensure_collection(ALIAS, DIM)
    a, b = _points(20, "a", 1), _points(20, "b", 2)
    index.upsert(ALIAS, a + b)
    fusion = ContextFusion(context=a[5].context or [], content_weight=0.6, context_weight=0.4)
    queries = [a[0].vector, b[1].vector, a[9].vector]

    # when three searches go in one batch, plain and fused
    for options in ({}, {"fusion": fusion}):
        batch = index.search_many(ALIAS, queries, tenant_id="a", task_id="t0", limit=5, **options)

        # then each answer is the single search's answer, in order, inside the scope
        single = [
            index.search(ALIAS, q, tenant_id="a", task_id="t0", limit=5, **options) for q in queries
        ]
        assert [[(h.id, round(h.score, 5)) for h in hits] for hits in batch] == [
            [(h.id, round(h.score, 5)) for h in hits] for hits in single
        ]
        assert all(h.payload["tenant_id"] == "a" for hits in batch for h in hits)
    assert index.search_many(ALIAS, [], tenant_id="a") == []
    assert index.search_many("nothing", queries, tenant_id="a") == [[], [], []]


def test_a_search_restricted_to_ids_scores_exactly_those_inside_the_scope(
    index: VectorIndex,
) -> None:
    # given two tenants' points
    index.ensure_collection(ALIAS, DIM)
    a, b = _points(20, "a", 1), _points(20, "b", 2)
    index.upsert(ALIAS, a + b)
    wanted = [a[2].id, a[4].id, a[7].id, b[3].id, uuid.uuid4()]

    # when tenant a asks for the cosines of some ids, one of them b's and one unknown
    hits = index.search(ALIAS, a[4].vector, tenant_id="a", limit=10, ids=wanted)

    # then only a's known ids come back, each with its cosine to the query
    assert {h.id for h in hits} == {a[2].id, a[4].id, a[7].id}
    by_id = {p.id: p for p in a}
    query = np.asarray(a[4].vector)
    for hit in hits:
        assert hit.score == pytest.approx(float(np.asarray(by_id[hit.id].vector) @ query), abs=1e-5)
    assert index.search(ALIAS, a[4].vector, tenant_id="a", ids=[]) == []


def test_the_context_vector_is_searched_alone_or_fused(index: VectorIndex) -> None:
    # given points whose content and context vectors differ
    index.ensure_collection(ALIAS, DIM)
    points = _points(30, "a", 3)
    index.upsert(ALIAS, points)
    target = points[7]

    # when the context vector alone is searched, its owner comes first
    by_context = index.search(ALIAS, target.context or [], tenant_id="a", using=CONTEXT_VECTOR)
    assert by_context[0].id == target.id

    # and a fused search that matches one point on content and another on context ranks
    # the context match first when context carries the weight, the content match otherwise
    other = points[11]
    content_led = index.search(
        ALIAS,
        target.vector,
        tenant_id="a",
        fusion=ContextFusion(context=other.context or [], content_weight=0.9, context_weight=0.1),
    )
    context_led = index.search(
        ALIAS,
        target.vector,
        tenant_id="a",
        fusion=ContextFusion(context=other.context or [], content_weight=0.1, context_weight=0.9),
    )
    assert content_led[0].id == target.id
    assert context_led[0].id == other.id


def test_a_fused_score_is_the_weighted_sum_of_both_cosines(index: VectorIndex) -> None:
    # given points with content and context vectors, fewer than a fused search reads
    index.ensure_collection(ALIAS, DIM)
    points = _points(24, "a", 5)
    index.upsert(ALIAS, points)
    rng = np.random.default_rng(9)
    query, context = _unit(rng), _unit(rng)
    fusion = ContextFusion(context=context, content_weight=0.7, context_weight=0.3)

    # when fused searches run alone and in a batch
    single = index.search(ALIAS, query, tenant_id="a", limit=8, fusion=fusion)
    [batched, _] = index.search_many(
        ALIAS, [query, points[0].vector], tenant_id="a", limit=8, fusion=fusion
    )

    # then each is the top 8 by 0.7·cos(content) + 0.3·cos(context), scores included
    expected = sorted(
        (
            (
                0.7 * float(np.dot(p.vector, query))
                + 0.3 * float(np.dot(p.context or [0.0] * DIM, context)),
                p.id,
            )
            for p in points
        ),
        reverse=True,
    )[:8]
    for hits in (single, batched):
        assert [h.id for h in hits] == [key for _, key in expected]
        assert [h.score for h in hits] == pytest.approx([score for score, _ in expected], abs=1e-5)


def test_a_point_without_context_is_still_found(index: VectorIndex) -> None:
    index.ensure_collection(ALIAS, DIM)
    point = VectorPoint(
        id=uuid.uuid4(), vector=[1.0] + [0.0] * (DIM - 1), payload={"tenant_id": "a"}
    )
    index.upsert(ALIAS, [point])
    assert [h.id for h in index.search(ALIAS, point.vector, tenant_id="a")] == [point.id]
    assert index.retrieve(ALIAS, [point.id])[0].context is None


def test_deletes_of_existing_points_count_towards_the_rebuild_rule(index: VectorIndex) -> None:
    index.ensure_collection(ALIAS, DIM)
    points = _points(20, "a", 4)
    index.upsert(ALIAS, points)

    # when four existing points and two unknown ids are deleted
    index.delete(ALIAS, [p.id for p in points[:4]] + [uuid.uuid4(), uuid.uuid4()])

    # then four count as deleted: 4 of 20 ever held
    stats = index.stats(ALIAS)
    assert (stats.name, stats.points, stats.deleted) == (f"{ALIAS}__g1", 16, 4)
    assert stats.deleted_ratio == pytest.approx(0.2)


def test_ids_scroll_in_pages_and_points_come_back_whole(index: VectorIndex) -> None:
    index.ensure_collection(ALIAS, DIM)
    points = _points(25, "a", 5)
    index.upsert(ALIAS, points)

    seen: list[uuid.UUID] = []
    offset: uuid.UUID | None = None
    pages = 0
    while True:
        ids, offset = index.scroll_ids(ALIAS, offset, 10)
        seen += ids
        pages += 1
        if offset is None:
            break
    assert pages == 3
    assert sorted(seen) == sorted(p.id for p in points)
    assert len(set(seen)) == 25

    back = {p.id: p for p in index.retrieve(ALIAS, [points[0].id, points[1].id, uuid.uuid4()])}
    assert set(back) == {points[0].id, points[1].id}
    assert back[points[0].id].vector == pytest.approx(points[0].vector, abs=1e-6)
    assert back[points[0].id].context == pytest.approx(points[0].context, abs=1e-6)
    assert back[points[0].id].payload == points[0].payload


def test_an_alias_switch_is_one_call_and_survives_a_reopen(engine: str, tmp_path: Path) -> None:
    # given generation 1 with points and an empty generation 2
    index = _open(engine, tmp_path / "store")
    index.ensure_collection(ALIAS, DIM)
    index.upsert(ALIAS, _points(5, "a", 6))
    index.create_collection(f"{ALIAS}__g2", DIM, CollectionParams())
    index.upsert(f"{ALIAS}__g2", _points(3, "a", 7))

    # when the alias switches
    previous = index.switch_alias(ALIAS, f"{ALIAS}__g2")

    # then readers see generation 2, and the old one can be dropped (but not the live one)
    assert previous == f"{ALIAS}__g1"
    assert index.count(ALIAS) == 3
    with pytest.raises(ValueError, match="behind an alias"):
        index.drop_collection(f"{ALIAS}__g2")
    index.drop_collection(f"{ALIAS}__g1")
    assert index.collections() == [f"{ALIAS}__g2"]
    index.close()

    # and a new process (the next owner) finds the same mapping
    reopened = _open(engine, tmp_path / "store")
    try:
        assert reopened.resolve(ALIAS) == f"{ALIAS}__g2"
        assert reopened.count(ALIAS) == 3
    finally:
        reopened.close()


def test_edge_collections_carry_their_hnsw_and_quantization_params(tmp_path: Path) -> None:
    index = EdgeIndex(tmp_path)
    params = CollectionParams(hnsw_m=32, hnsw_ef_construct=400, search_ef=64, pq="x16")
    index.create_collection("mh_semantic__g1", DIM, params)
    index.switch_alias("mh_semantic", "mh_semantic__g1")
    index.upsert("mh_semantic", _points(10, "a", 8))
    index.optimize("mh_semantic")
    index.close()

    config = json.loads((tmp_path / "mh_semantic__g1" / "edge_config.json").read_text())
    assert config["hnsw_config"]["m"] == 32
    assert config["hnsw_config"]["ef_construct"] == 400
    assert config["quantization_config"] == {"product": {"compression": "x16"}}
    assert set(config["vectors"]) == {"content", "context", "code"}
    state = json.loads((tmp_path / ALIAS_FILE).read_text())
    assert state["aliases"] == {"mh_semantic": "mh_semantic__g1"}
    assert state["search_ef"] == {"mh_semantic__g1": 64}
    reopened = EdgeIndex(tmp_path)
    try:
        assert reopened.count("mh_semantic") == 10
    finally:
        reopened.close()


def test_edge_search_threads_apply_on_create_and_on_every_load(tmp_path: Path) -> None:
    # given a quantized collection built with two search threads
    index = EdgeIndex(tmp_path, search_threads=2)
    params = CollectionParams(hnsw_m=32, hnsw_ef_construct=400, search_ef=64, pq="x16")
    index.create_collection("mh_semantic__g1", DIM, params)
    index.switch_alias("mh_semantic", "mh_semantic__g1")
    index.upsert("mh_semantic", _points(10, "a", 8))
    index.close()
    config_file = tmp_path / "mh_semantic__g1" / "edge_config.json"
    assert json.loads(config_file.read_text())["max_search_threads"] == 2

    # when the store is opened again with one search thread and searched
    reopened = EdgeIndex(tmp_path, search_threads=1)
    try:
        hits = reopened.search("mh_semantic", _points(1, "a", 8)[0].vector, tenant_id="a")
        assert len(hits) == 10
    finally:
        reopened.close()

    # then the engine took the new setting and kept everything the collection was built with
    config = json.loads(config_file.read_text())
    assert config["max_search_threads"] == 1
    assert config["hnsw_config"]["m"] == 32
    assert config["quantization_config"] == {"product": {"compression": "x16"}}
    assert {name: spec["size"] for name, spec in config["vectors"].items()} == {
        "content": DIM,
        "context": DIM,
        "code": DIM,
    }
    with pytest.raises(ValueError, match="search_threads"):
        EdgeIndex(tmp_path, search_threads=0)


def test_a_missing_collection_cannot_take_an_alias(index: VectorIndex) -> None:
    with pytest.raises(LookupError):
        index.switch_alias("x", "missing")


def test_an_edge_store_from_before_aliases_is_moved_behind_one(tmp_path: Path) -> None:
    # given a store whose collection carries the alias's own name, with points
    index = EdgeIndex(tmp_path)
    index.create_collection(ALIAS, DIM, CollectionParams())
    index.upsert(ALIAS, _points(4, "a", 9))
    assert index.resolve(ALIAS) == ALIAS

    # when a rebuilt generation takes the name as an alias
    index.create_collection(f"{ALIAS}__g1", DIM, CollectionParams())
    index.upsert(f"{ALIAS}__g1", _points(4, "a", 9))
    previous = index.switch_alias(ALIAS, f"{ALIAS}__g1")

    # then the old collection became generation 0, for the caller to drop
    assert previous == f"{ALIAS}__g0"
    assert index.resolve(ALIAS) == f"{ALIAS}__g1"
    assert index.count(f"{ALIAS}__g0") == 4
    index.drop_collection(f"{ALIAS}__g0")
    assert index.collections() == [f"{ALIAS}__g1"]
    assert index.count(ALIAS) == 4
    index.close()


def test_ids_that_share_a_joined_form_stay_apart(index: VectorIndex) -> None:
    # given two scopes whose tenant and task joined by a separator would read the same
    index.ensure_collection(ALIAS, DIM)
    rng = np.random.default_rng(4)
    mine = VectorPoint(
        id=uuid.uuid4(), vector=_unit(rng), payload={"tenant_id": "a", "task_id": "b/c"}
    )
    theirs = VectorPoint(
        id=uuid.uuid4(), vector=_unit(rng), payload={"tenant_id": "a/b", "task_id": "c"}
    )
    index.upsert(ALIAS, [mine, theirs])

    # when each scope searches with the other's vector
    hits = index.search(ALIAS, theirs.vector, tenant_id="a", task_id="b/c", limit=10)
    other = index.search(ALIAS, mine.vector, tenant_id="a/b", task_id="c", limit=10)

    # then each finds only its own point, whose payload is what was written
    assert [h.id for h in hits] == [mine.id]
    assert [h.id for h in other] == [theirs.id]
    assert hits[0].payload == {"tenant_id": "a", "task_id": "b/c"}
    assert index.retrieve(ALIAS, [mine.id])[0].payload == mine.payload


def test_an_edge_collection_from_before_the_scope_field_still_searches_by_task(
    tmp_path: Path,
) -> None:
    # given a collection whose state does not list it as scoped (built by an older version)
    store = EdgeIndex(tmp_path / "store")
    store.ensure_collection(ALIAS, DIM)
    points = _points(20, "a", 1)
    store.upsert(ALIAS, points)
    store.close()
    state_path = tmp_path / "store" / ALIAS_FILE
    state = json.loads(state_path.read_text())
    assert state["scoped"] == [f"{ALIAS}__g1"]
    state["scoped"] = []
    state_path.write_text(json.dumps(state))

    # when it is reopened and searched inside a task
    reopened = EdgeIndex(tmp_path / "store")
    try:
        hits = reopened.search(ALIAS, points[0].vector, tenant_id="a", task_id="t0", limit=50)
        # then the tenant and task conditions still scope it
        assert {h.payload["task_id"] for h in hits} == {"t0"}
        assert len(hits) == 10 and hits[0].id == points[0].id
    finally:
        reopened.close()


# -- code vectors -------------------------------------------------------------------------------


def _code_points(n: int, seed: int) -> list[VectorPoint]:
    """Points with content, context and (for the even ones) code vectors."""
    rng = np.random.default_rng(seed)
    return [
        VectorPoint(
            id=uuid.uuid5(uuid.NAMESPACE_URL, f"code/{seed}/{i}"),
            vector=_unit(rng),
            context=_unit(rng),
            code=_unit(rng) if i % 2 == 0 else None,
            payload={
                "tenant_id": "a",
                "task_id": "t",
                "modality": "code" if i % 2 == 0 else "text",
            },
        )
        for i in range(n)
    ]


def test_the_code_vector_is_searched_alone_and_comes_back_whole(index: VectorIndex) -> None:
    # given code memories (with a code vector) among text memories (without one)
    index.ensure_collection(ALIAS, DIM)
    points = _code_points(10, 11)
    index.upsert(ALIAS, points)
    target = points[4]
    assert target.code is not None

    # when the code vector is searched with a code memory's code vector
    hits = index.search(ALIAS, target.code, tenant_id="a", limit=10, using=CODE_VECTOR)

    # then only code memories answer, that one first with cosine 1
    assert hits[0].id == target.id
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert {h.id for h in hits} == {p.id for p in points if p.code is not None}
    # and the content search is unchanged by it
    assert index.search(ALIAS, target.vector, tenant_id="a", limit=1)[0].id == target.id
    # and a point comes back with all three vectors, a text memory without a code vector
    back = {p.id: p for p in index.retrieve(ALIAS, [target.id, points[1].id])}
    assert back[target.id].code == pytest.approx(target.code, abs=1e-6)
    assert back[target.id].context == pytest.approx(target.context, abs=1e-6)
    assert back[points[1].id].code is None


def test_deleting_a_point_deletes_every_vector_of_it(index: VectorIndex) -> None:
    # given a code memory with content, context and code vectors
    index.ensure_collection(ALIAS, DIM)
    points = _code_points(6, 12)
    index.upsert(ALIAS, points)
    gone = points[2]
    assert gone.code is not None and gone.context is not None

    # when it is deleted (what forgetting it does in every generation)
    index.delete(ALIAS, [gone.id])

    # then no vector of it answers any search, and nothing of it can be retrieved
    for using, vector in (
        ("content", gone.vector),
        (CONTEXT_VECTOR, gone.context),
        (CODE_VECTOR, gone.code),
    ):
        hits = index.search(ALIAS, vector, tenant_id="a", limit=10, using=using)
        assert gone.id not in {h.id for h in hits}
        assert hits  # the other points still answer
    assert index.retrieve(ALIAS, [gone.id]) == []


def test_an_edge_store_from_before_code_vectors_gains_one(tmp_path: Path) -> None:
    # given a shard built with content and context vectors only, behind the alias
    import qdrant_edge as qe

    root = tmp_path / "store"
    root.mkdir()
    vector = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
    old = qe.EdgeShard.create(
        str(root / f"{ALIAS}__g1"),
        qe.EdgeConfig(vectors={"content": vector, CONTEXT_VECTOR: vector}),
    )
    old.close()
    (root / ALIAS_FILE).write_text(json.dumps({"aliases": {ALIAS: f"{ALIAS}__g1"}}))

    # when the owner opens it and a code memory is written
    store = EdgeIndex(root)
    try:
        store.ensure_collection(ALIAS, DIM)
        points = _code_points(4, 13)
        store.upsert(ALIAS, points)

        # then the code vector exists and answers
        code = points[0].code
        assert code is not None
        hits = store.search(ALIAS, code, tenant_id="a", limit=4, using=CODE_VECTOR)
        assert hits[0].id == points[0].id
    finally:
        store.close()
    config = json.loads((root / f"{ALIAS}__g1" / "edge_config.json").read_text())
    assert set(config["vectors"]) == {"content", CONTEXT_VECTOR, CODE_VECTOR}


def test_a_qdrant_collection_without_a_code_vector_takes_code_points_without_it(
    tmp_path: Path,
) -> None:
    # given a collection built before code vectors (Qdrant cannot add a named vector later)
    from qdrant_client import models

    store = QdrantIndex(path=tmp_path / "store")
    try:
        vector = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
        store._client.create_collection(
            f"{ALIAS}__g1", vectors_config={"content": vector, CONTEXT_VECTOR: vector}
        )
        store.switch_alias(ALIAS, f"{ALIAS}__g1")
        store.ensure_collection(ALIAS, DIM)

        # when code memories are written and the code vector searched
        points = _code_points(4, 14)
        store.upsert(ALIAS, points)
        code = points[0].code
        assert code is not None

        # then they are stored with their content and context, and the code search is empty
        assert store.count(ALIAS) == 4
        assert store.search(ALIAS, code, tenant_id="a", using=CODE_VECTOR) == []
        assert store.search(ALIAS, points[0].vector, tenant_id="a", limit=1)[0].id == points[0].id
        assert store.retrieve(ALIAS, [points[0].id])[0].code is None
    finally:
        store.close()
