from __future__ import annotations

import pytest

from config import Settings
from schedules.declarations import PeriodicJob, beat_schedule, declarations
from schedules.embedded import build_scheduler
from workers.app import app
from workers.queues import TaskName


def test_beat_runs_the_outbox_relay_at_the_configured_interval() -> None:
    schedule = beat_schedule(Settings(relay_interval_s=7))
    relay = schedule["outbox-relay"]
    assert relay["task"] == "memory.maintenance.relay_outbox"
    assert relay["schedule"].every_s == 7
    assert relay["options"]["queue"] == "maintenance"


def test_every_declared_task_exists() -> None:
    app.loader.import_default_modules()
    for job in declarations(Settings()):
        assert job.task in app.tasks, job.task


def test_the_embedded_scheduler_runs_the_same_declarations() -> None:
    scheduler = build_scheduler(Settings(), app)
    assert {job.id for job in scheduler.get_jobs()} == {d.key for d in declarations(Settings())}


def test_a_job_needs_exactly_one_trigger() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        PeriodicJob("x", TaskName.NOOP, "d")
