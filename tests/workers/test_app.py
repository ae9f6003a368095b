"""The Celery application's contract: JSON only, late acks, limits inside the visibility
timeout, queues declared once, stable task names."""

from __future__ import annotations

import pickle

import pytest
from kombu.exceptions import ContentDisallowed
from kombu.serialization import loads

from config import Settings
from workers.app import app, celery_config
from workers.queues import CeleryQueue, TaskName

# The names are the wire format: renaming one strands every message already queued.
PINNED_TASK_NAMES = {
    "memory.write.drain": "write",
    "memory.maintenance.relay_outbox": "maintenance",
    "memory.maintenance.ping": "maintenance",
    "memory.maintenance.noop": "maintenance",
    "memory.recall.search": "recall",
    # background cognition (workers.cognition.tasks)
    "memory.compress.sweep": "compress",
    "memory.compress.complete_task": "compress",
    "memory.quality.sweep": "quality",
    "memory.maintenance.decay_sweep": "maintenance",
    "memory.maintenance.schedule_compression": "maintenance",
    "memory.maintenance.relay_cognition": "maintenance",
    "memory.consolidate.nightly": "consolidate",
    "memory.consolidate.tenant": "consolidate",
    "memory.embed.drain": "embed",
    "memory.embed.link_memories": "embed",
    "memory.recall.context": "recall",
    "memory.maintenance.touch_memories": "maintenance",
    # index maintenance (workers.index.tasks): the owner's copy and the server-mode copy
    "memory.embed.check_index": "embed",
    "memory.embed.rebuild_index": "embed",
    "memory.embed.compact_index": "embed",
    "memory.embed.reconcile_index": "embed",
    "memory.embed.reembed_step": "embed",
    "memory.embed.restore_index": "embed",
    "memory.embed.settle_ownership": "embed",
    "memory.maintenance.check_index": "maintenance",
    "memory.maintenance.rebuild_index": "maintenance",
    "memory.maintenance.compact_index": "maintenance",
    "memory.maintenance.reconcile_index": "maintenance",
    "memory.maintenance.reembed_step": "maintenance",
    "memory.maintenance.restore_index": "maintenance",
    # operations (workers.health.tasks)
    "memory.quality.golden_queries": "quality",
    "memory.recall.index_counts": "recall",
}


def test_task_names_and_queues_are_pinned() -> None:
    app.loader.import_default_modules()
    from workers.tasking import REGISTERED

    assert {name.value: name.queue.value for name in TaskName} == PINNED_TASK_NAMES
    assert {name: queue.value for name, queue in REGISTERED.items()} == PINNED_TASK_NAMES
    for name, queue in PINNED_TASK_NAMES.items():
        assert app.tasks[name].queue == queue


def test_importing_the_app_module_builds_no_app_until_asked() -> None:
    # given a fresh interpreter
    import subprocess
    import sys

    probe = (
        "import workers.app as m, workers.write.tasks, workers.index.tasks\n"
        "assert m._apps == {}, m._apps\n"
        "assert m.app is m.get_app() and len(m._apps) == 1\n"
    )
    # when the app module and task modules are imported, then nothing is built until `app`
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_only_json_is_accepted() -> None:
    assert app.conf.accept_content == ["json"]
    assert app.conf.task_serializer == "json"
    assert app.conf.result_accept_content == ["json"]
    with pytest.raises(ContentDisallowed):
        loads(
            pickle.dumps({"x": 1}),
            content_type="application/x-python-serialize",
            content_encoding="binary",
            accept=app.conf.accept_content,
        )


def test_late_acks_and_prefetch_one() -> None:
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1


def test_time_limits_sit_well_inside_the_visibility_timeout() -> None:
    visibility = app.conf.broker_transport_options["visibility_timeout"]
    assert app.conf.task_soft_time_limit < app.conf.task_time_limit
    assert app.conf.task_time_limit * 2 <= visibility


def test_settings_refuse_a_time_limit_past_half_the_visibility_timeout() -> None:
    with pytest.raises(ValueError, match="visibility"):
        Settings(task_time_limit_s=2000, broker_visibility_timeout_s=3600)
    with pytest.raises(ValueError, match="soft"):
        Settings(task_soft_time_limit_s=300, task_time_limit_s=300)


def test_every_queue_is_declared_once_and_routed_by_name() -> None:
    config = celery_config(Settings())
    names = [queue.name for queue in config["task_queues"]]  # type: ignore[attr-defined]
    assert sorted(names) == sorted(q.value for q in CeleryQueue)
    assert len(set(names)) == len(names)
    routes = config["task_routes"]
    assert routes["memory.write.*"] == {"queue": "write"}  # type: ignore[index]


def test_task_events_are_on_for_flower() -> None:
    assert app.conf.worker_send_task_events is True
    assert app.conf.task_send_sent_event is True


def test_eager_mode_is_off() -> None:
    assert not app.conf.task_always_eager
