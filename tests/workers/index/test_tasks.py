"""Index maintenance tasks: pinned names, the owner's queue in embedded mode, the
maintenance queue with a server, the schedules, and the task bodies called directly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from config import Settings
from schedules.declarations import declarations
from workers.app import app
from workers.clients import close_clients, get_clients
from workers.index.tasks import TASKS
from workers.queues import VECTOR_QUEUES, CeleryQueue, IndexJob, index_queue

owner_check_index_task = TASKS[IndexJob.CHECK, "owner"]
owner_compact_index_task = TASKS[IndexJob.COMPACT, "owner"]
owner_rebuild_index_task = TASKS[IndexJob.REBUILD, "owner"]
owner_reconcile_index_task = TASKS[IndexJob.RECONCILE, "owner"]

# The names are the wire format: renaming one strands every message already queued.
PINNED = {
    "memory.embed.check_index": "embed",
    "memory.embed.rebuild_index": "embed",
    "memory.embed.compact_index": "embed",
    "memory.embed.reconcile_index": "embed",
    "memory.embed.restore_index": "embed",
    "memory.maintenance.check_index": "maintenance",
    "memory.maintenance.rebuild_index": "maintenance",
    "memory.maintenance.compact_index": "maintenance",
    "memory.maintenance.reconcile_index": "maintenance",
    "memory.maintenance.restore_index": "maintenance",
}


def test_index_task_names_and_queues_are_pinned() -> None:
    app.loader.import_default_modules()
    for name, queue in PINNED.items():
        assert app.tasks[name].queue == queue


def test_the_long_jobs_get_half_the_visibility_timeout_when_they_run() -> None:
    # given the app's copy of a generated task; when its limits are read
    task = app.tasks["memory.embed.rebuild_index"]
    visibility = get_clients().settings.broker_visibility_timeout_s
    # then they come from the settings at run time, inside the broker's visibility timeout
    assert task.time_limit == visibility // 2
    assert task.soft_time_limit < task.time_limit


@pytest.mark.parametrize("url", ["", "http://qdrant:6333"])
def test_each_job_has_one_task_per_deployment(url: str) -> None:
    settings = Settings(qdrant_url=url)
    for job in IndexJob:
        assert job.task(settings).queue is index_queue(settings)


def test_embedded_maintenance_goes_to_a_queue_the_store_owner_consumes() -> None:
    assert index_queue(Settings(qdrant_url="")) is CeleryQueue.EMBED
    assert CeleryQueue.EMBED in VECTOR_QUEUES
    assert index_queue(Settings(qdrant_url="http://qdrant:6333")) is CeleryQueue.MAINTENANCE


@pytest.mark.parametrize(("url", "queue"), [("", "embed"), ("http://qdrant:6333", "maintenance")])
def test_the_schedules_publish_index_jobs_to_that_queue(url: str, queue: str) -> None:
    settings = Settings(qdrant_url=url)
    jobs = {job.key: job for job in declarations(settings)}
    assert jobs["index-check"].task == f"memory.{queue}.check_index"
    assert jobs["index-check"].every_s == settings.index_check_interval_s
    assert jobs["index-compaction"].cron == settings.index_compaction_cron
    assert jobs["index-reconcile"].task == f"memory.{queue}.reconcile_index"
    for key in ("index-check", "index-compaction", "index-reconcile"):
        assert jobs[key].queue.value == queue


@pytest.fixture
def owner(db, redis_client, qdrant_path) -> Iterator[None]:  # type: ignore[no-untyped-def]
    close_clients()
    yield
    close_clients()


def test_the_task_bodies_run_in_the_owner(owner, db) -> None:  # type: ignore[no-untyped-def]
    # given an episodic collection with one point and nothing semantic
    ctx = get_clients()
    from workers.index.targets import EPISODIC, index_spec

    spec = index_spec(ctx.settings, EPISODIC)
    ctx.vectors.ensure_collection(spec.alias, ctx.embedder.dim, spec.params)

    # when each body runs
    checked = owner_check_index_task()
    reconciled = owner_reconcile_index_task(["episodic"])
    compacted = owner_compact_index_task(["episodic"])
    rebuilt = owner_rebuild_index_task("episodic")

    # then each reports on the collections it touched
    assert checked["episodic"]["points"] == 0
    semantic = dict(checked["semantic"])
    completeness = semantic.pop("completeness")
    assert semantic == {"collection": "memharness_semantic", "exists": False}
    # and the check measured each collection against PostgreSQL: nothing live, nothing short
    assert (completeness["live"], completeness["missing"]) == (0, 0)
    assert not completeness["restore_started"]
    assert reconciled["episodic"]["live"] == 0
    assert compacted["episodic"]["collection"] == spec.alias
    assert rebuilt["new"] == f"{spec.alias}__g2"
    with pytest.raises(ValueError, match="unknown collection kinds"):
        owner_reconcile_index_task(["nonsense"])
