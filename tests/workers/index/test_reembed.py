"""Re-embedding after an embedding model change, against the real PostgreSQL, Redis and the
embedded engine: the task bodies called directly, the write path during the run, replays."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config import Settings, get_settings
from memharness.client import MemoryClient
from pipelines.index.vectors import CollectionParams
from workers.adapters.vector_edge import EdgeIndex
from workers.adapters.vector_qdrant import QdrantIndex
from workers.clients import Clients, close_clients, get_clients
from workers.index.maintenance import reconcile_indexes
from workers.index.points import index_ids
from workers.index.reembed import reembed_status, start_reembed
from workers.index.targets import EPISODIC, LOCK_KEY, IndexBusy, dense_search_target
from workers.index.tasks import TASKS
from workers.queues import IndexJob
from workers.write.drain import drain_writes

owner_check_index_task = TASKS[IndexJob.CHECK, "owner"]
owner_reembed_step_task = TASKS[IndexJob.REEMBED_STEP, "owner"]

TOPICS = ("ledger", "outbox", "helm", "canary", "printer", "stapler", "cohort", "dosage")


def _items(tenant: str, n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "content": f"We decided to move the {TOPICS[i % 8]} {TOPICS[(i + 3) % 8]} work, "
            f"ticket {tenant.upper()}-{tag}-{i}.",
            "tenant_id": tenant,
            "task_id": f"{tenant}-task",
            "session_id": "s-1",
            "type": "decision",
        }
        for i in range(n)
    ]


def _record(settings: Settings, items: list[dict[str, Any]]) -> list[uuid.UUID]:
    with MemoryClient(settings) as client:
        receipts = client.record_many(items)
    ctx = get_clients()
    while drain_writes(ctx).more:
        pass
    return [r.memory_id for r in receipts]


def _use_embedder(monkeypatch: pytest.MonkeyPatch, **env: str) -> Clients:
    """Restart the owner's context under another configuration (as a redeploy does)."""
    close_clients()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    return get_clients()


@pytest.fixture
def owner(db, redis_client, qdrant_path, monkeypatch) -> Iterator[None]:  # type: ignore[no-untyped-def]
    close_clients()
    get_settings.cache_clear()
    yield
    close_clients()
    monkeypatch.undo()
    get_settings.cache_clear()


def _live(db) -> dict[uuid.UUID, str | None]:  # type: ignore[no-untyped-def]
    return dict(
        db.execute("SELECT id, embedding_version FROM memories WHERE status = 'stored'").fetchall()
    )


def test_a_model_change_re_embeds_everything_into_a_new_generation(owner, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # given 25 memories embedded by the 64-d hashing embedder
    ctx = get_clients()
    first = _record(ctx.settings, _items("acme", 15, "a") + _items("globex", 10, "a"))
    alias = ctx.episodic_collection
    old = ctx.vectors.resolve(alias)
    assert old == f"{alias}__g1"
    assert ctx.vectors.embedding_version(alias) == "hashing-v2/64"
    assert set(_live(db).values()) == {"hashing-v2/64"}

    # when the owner restarts with a 96-d embedder, batches of 10 and short steps
    ctx = _use_embedder(
        monkeypatch,
        MEMHARNESS_EMBED_DIM="96",
        MEMHARNESS_INDEX_BATCH_SIZE="10",
        MEMHARNESS_SWEEP_DEADLINE_S="0.001",
    )
    assert ctx.embedder.version == "hashing-v2/96"
    # then dense search is off until the new generation is complete
    assert dense_search_target(ctx, EPISODIC) is None
    assert reembed_status(ctx, [EPISODIC])[EPISODIC]["state"] == "due"

    # when the periodic check notices, it starts the run
    checked = owner_check_index_task(["episodic"])["episodic"]["reembed"]
    assert checked["phase"] == "embed" and checked["done"] == 0 and checked["total"] == 25
    target = checked["target"]
    assert target == f"{alias}__g2"
    assert ctx.vectors.embedding_version(target) == "hashing-v2/96"
    run_id, cursor = checked["run_id"], "embed:"
    # and a second check during the run starts nothing new
    assert owner_check_index_task(["episodic"])["episodic"]["reembed"]["run_id"] == run_id

    # when the steps run one by one, and a write lands after the first one
    steps: list[tuple[str, dict[str, Any]]] = []
    written: list[uuid.UUID] = []
    while True:
        outcome = owner_reembed_step_task("episodic", run_id, cursor)
        steps.append((cursor, outcome))
        if not written:
            written = _record(ctx.settings, _items("acme", 2, "during"))
            # then the write went to the generation being built, with the new model
            points = ctx.vectors.retrieve(target, written)
            assert {len(p.vector) for p in points} == {96} and len(points) == 2
            assert ctx.vectors.retrieve(old, written) == []
            assert {_live(db)[i] for i in written} == {"hashing-v2/96"}
        if outcome["finished"]:
            break
        assert dense_search_target(ctx, EPISODIC) is None
        assert reembed_status(ctx, [EPISODIC])[EPISODIC]["state"] == "running"
        assert outcome["requeue"] is True
        cursor = outcome["cursor"]
        assert len(steps) < 20

    # then the run went through three embed steps (batches of 10), the index and the verify
    phases = [c.partition(":")[0] for c, _ in steps]
    assert phases == ["embed", "embed", "embed", "index", "verify"]
    done = steps[-1][1]
    assert done["phase"] == "done" and done["requeue"] is False
    assert done["done"] >= 25 and done["total"] == 27 and done["percent"] == 100.0
    assert done["stats"]["verified_points"] == 27
    # and every live memory is in the new generation, with the new version, behind the alias
    assert ctx.vectors.resolve(alias) == target
    assert old not in ctx.vectors.collections()
    live = _live(db)
    assert set(live) == set(first) | set(written)
    assert set(live.values()) == {"hashing-v2/96"}
    assert index_ids(ctx.vectors, alias, 100) == set(live)
    points = ctx.vectors.retrieve(alias, sorted(live))
    assert {len(p.vector) for p in points} == {96}
    assert {len(p.context or []) for p in points} == {96}
    assert {p.payload["embedding_version"] for p in points} == {"hashing-v2/96"}
    assert dense_search_target(ctx, EPISODIC) == alias
    status = reembed_status(ctx, [EPISODIC])[EPISODIC]
    assert status["state"] == "current" and status["run"]["finished"] is True
    # and a search scores new vectors only
    query = ctx.embedder.embed(["ledger outbox work"])[0]
    assert ctx.vectors.search(alias, query, tenant_id="acme", limit=3)

    # when a step is replayed (its message delivered again), or the check runs again
    row_before = db.execute(
        "SELECT cursor, stats, finished_at FROM cognition_runs WHERE run_id = %s", (run_id,)
    ).fetchone()
    replayed = owner_reembed_step_task("episodic", run_id, steps[1][0])
    rechecked = owner_check_index_task(["episodic"])["episodic"]
    # then nothing changes
    assert replayed["replayed"] is True and replayed["requeue"] is False
    assert "reembed" not in rechecked
    assert ctx.vectors.resolve(alias) == target
    assert ctx.vectors.count(alias) == 27
    assert (
        db.execute(
            "SELECT cursor, stats, finished_at FROM cognition_runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        == row_before
    )
    assert db.execute("SELECT count(*) FROM cognition_runs").fetchone()[0] == 1


def test_the_first_write_after_the_change_starts_the_run_and_maintenance_waits(
    owner, db, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # given memories of one model, then the same size with another version string
    ctx = get_clients()
    _record(ctx.settings, _items("acme", 4, "a"))
    alias = ctx.episodic_collection
    ctx.vectors.set_embedding_version(alias, "other-model/64")
    assert dense_search_target(ctx, EPISODIC) is None

    # when a write comes first
    written = _record(ctx.settings, _items("acme", 1, "b"))

    # then it started the run and its vector is in the new generation only
    status = reembed_status(ctx, [EPISODIC])[EPISODIC]
    assert status["state"] == "running" and status["version"] == "other-model/64"
    target = status["run"]["target"]
    assert [p.id for p in ctx.vectors.retrieve(target, written)] == written
    assert ctx.vectors.retrieve(alias, written) == []
    # and reconciliation and the rebuild rule leave the old generation alone meanwhile
    assert "skipped" in reconcile_indexes(ctx, [EPISODIC])[EPISODIC]
    assert ctx.vectors.count(alias) == 4
    # and one job at a time holds the collection
    ctx.redis.set(LOCK_KEY.format(alias=alias), "someone-else")
    with pytest.raises(IndexBusy):
        start_reembed(ctx, EPISODIC)
    busy = owner_reembed_step_task("episodic", status["run"]["run_id"], "embed:")
    assert busy["requeue"] is False and "skipped" in busy
    ctx.redis.delete(LOCK_KEY.format(alias=alias))

    # when the model changes again mid-run
    ctx = _use_embedder(monkeypatch, MEMHARNESS_EMBED_DIM="80")
    checked = owner_check_index_task(["episodic"])["episodic"]["reembed"]

    # then the unfinished run is abandoned with its generation, and a new one starts
    assert checked["run_id"] != status["run"]["run_id"]
    assert target not in ctx.vectors.collections()
    assert ctx.vectors.embedding_version(checked["target"]) == "hashing-v2/80"
    abandoned = db.execute(
        "SELECT stats->>'abandoned', finished_at IS NOT NULL FROM cognition_runs WHERE run_id = %s",
        (uuid.UUID(status["run"]["run_id"]),),
    ).fetchone()
    assert abandoned == ("the embedder is now hashing-v2/80", True)
    assert dense_search_target(ctx, EPISODIC, max_age_s=60) is None
    # and driven to the end it verifies 5 points
    cursor = "embed:"
    for _ in range(10):
        outcome = owner_reembed_step_task("episodic", checked["run_id"], cursor)
        if outcome["finished"]:
            break
        cursor = outcome["cursor"]
    assert outcome["finished"] and outcome["stats"]["verified_points"] == 5
    assert ctx.vectors.resolve(alias) == checked["target"]
    assert set(_live(db).values()) == {"hashing-v2/80"}
    # and a reader that accepts a young answer notices the switch that much later
    assert dense_search_target(ctx, EPISODIC, max_age_s=60) is None
    assert dense_search_target(ctx, EPISODIC) == alias
    assert dense_search_target(ctx, EPISODIC, max_age_s=60) == alias


def test_a_store_from_before_versions_infers_its_version(owner, db) -> None:  # type: ignore[no-untyped-def]
    # given a generation with no recorded version, rows embedded by the current model
    ctx = get_clients()
    _record(ctx.settings, _items("acme", 3, "a"))
    alias = ctx.episodic_collection
    physical = ctx.vectors.resolve(alias)
    assert physical is not None
    ctx.vectors.close()
    state_file = Path(ctx.settings.qdrant_path) / "aliases.json"

    state = json.loads(state_file.read_text())
    state.pop("embedding_version")
    state_file.write_text(json.dumps(state))
    close_clients()
    ctx = get_clients()
    assert ctx.vectors.embedding_version(alias) is None

    # then readers see the current version (PostgreSQL agrees) and the check records it
    assert dense_search_target(ctx, EPISODIC) == alias
    checked = owner_check_index_task(["episodic"])["episodic"]
    assert "reembed" not in checked
    assert ctx.vectors.embedding_version(alias) == "hashing-v2/64"

    # given rows that PostgreSQL says another model embedded
    ctx.vectors.close()
    state = json.loads(state_file.read_text())
    state.pop("embedding_version")
    state_file.write_text(json.dumps(state))
    close_clients()
    ctx = get_clients()
    db.execute("UPDATE memories SET embedding_version = 'old-model/64'")
    # then a re-embed is due
    assert dense_search_target(ctx, EPISODIC) is None
    assert owner_check_index_task(["episodic"])["episodic"]["reembed"]["from_version"] == (
        "old-model/64"
    )


@pytest.mark.parametrize("engine", ["edge", "qdrant-local"])
def test_the_adapters_record_each_generation_s_embedding_version(engine: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    def open_index() -> EdgeIndex | QdrantIndex:
        if engine == "edge":
            return EdgeIndex(tmp_path / "edge")
        return QdrantIndex(path=tmp_path / "local")

    index = open_index()
    index.ensure_collection("mh_episodic", 16, CollectionParams(), "model-a/16")
    index.create_collection("mh_episodic__g2", 24, CollectionParams(), "model-b/24")
    index.create_collection("mh_episodic__g3", 24, CollectionParams())
    assert index.embedding_version("mh_episodic") == "model-a/16"
    assert index.embedding_version("mh_episodic__g1") == "model-a/16"
    assert index.embedding_version("mh_episodic__g2") == "model-b/24"
    assert index.embedding_version("mh_episodic__g3") is None
    assert index.embedding_version("nothing") is None
    index.set_embedding_version("mh_episodic__g3", "model-c/24")
    index.switch_alias("mh_episodic", "mh_episodic__g2")
    assert index.embedding_version("mh_episodic") == "model-b/24"
    index.close()

    # and the versions outlive the process
    index = open_index()
    assert index.embedding_version("mh_episodic") == "model-b/24"
    assert index.embedding_version("mh_episodic__g3") == "model-c/24"
    index.drop_collection("mh_episodic__g1")
    assert index.embedding_version("mh_episodic__g1") is None
    with pytest.raises(LookupError):
        index.set_embedding_version("mh_episodic__g1", "model-a/16")
    index.close()
