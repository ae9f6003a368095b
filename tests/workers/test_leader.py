"""Exactly one beat acts (schedules.leader) and the cognition jobs are declared once."""

from __future__ import annotations

import pickle
import time
from datetime import UTC, datetime

from celery.schedules import schedule

from config import Settings
from schedules.declarations import beat_schedule, declarations
from schedules.embedded import build_scheduler
from schedules.leader import LeaderGated, LeaderLock, ZonedCrontab
from workers.app import app

COGNITION_JOBS = {
    "decay-sweep": ("memory.maintenance.decay_sweep", "maintenance"),
    "compression-promotion": ("memory.maintenance.schedule_compression", "maintenance"),
    "quality-sampling": ("memory.quality.sweep", "quality"),
    "nightly-consolidation": ("memory.consolidate.nightly", "consolidate"),
    "cognition-relay": ("memory.maintenance.relay_cognition", "maintenance"),
}


def test_one_lock_holder_at_a_time_and_a_standby_takes_over(redis_client, settings) -> None:  # type: ignore[no-untyped-def]
    # given two beats competing for one short lease
    first = LeaderLock(settings.redis_url, ttl_s=0.6, key="test:leader")
    second = LeaderLock(settings.redis_url, ttl_s=0.6, key="test:leader")

    # then exactly one holds it, and holding it renews it
    assert first.is_leader() is True
    assert second.is_leader() is False
    time.sleep(0.25)
    assert first.is_leader() is True  # renewed past the first lease's end
    time.sleep(0.25)
    assert second.is_leader() is False

    # when the leader stops renewing (it died), the standby takes over after the lease
    time.sleep(0.7)
    assert second.is_leader() is True
    # and the old leader, back, finds it taken
    time.sleep(0.25)
    assert first.is_leader() is False

    # when the leader gives the lease up, the other takes it at its next look
    second.release()
    time.sleep(0.25)
    assert first.is_leader() is True


def test_a_gated_entry_is_never_due_on_a_standby(redis_client, settings) -> None:  # type: ignore[no-untyped-def]
    # given a lease held by another beat
    holder = LeaderLock(settings.redis_url, ttl_s=30, key="test:gated")
    assert holder.is_leader()
    gated = LeaderGated(schedule(5.0), settings.redis_url, 30, key="test:gated", app=app)
    long_ago = datetime(2020, 1, 1, tzinfo=UTC)

    # then an overdue entry is not due here, and the beat looks again within a third of it
    due, next_s = gated.is_due(long_ago)
    assert due is False and next_s <= 10

    # when the lease is released, this beat takes it and the overdue entry is due
    holder.release()
    due, next_s = LeaderGated(
        schedule(5.0), settings.redis_url, 30, key="test:gated-2", app=app
    ).is_due(long_ago)
    assert due is True and next_s <= 10


def test_gated_schedules_survive_beats_schedule_file() -> None:
    # beat pickles its entries into its schedule file
    for entry in beat_schedule(Settings()).values():
        restored = pickle.loads(pickle.dumps(entry["schedule"]))
        assert restored == entry["schedule"]


def test_cognition_jobs_are_declared_once_on_their_queues() -> None:
    jobs = {job.key: job for job in declarations(Settings())}
    for key, (task, queue) in COGNITION_JOBS.items():
        assert (jobs[key].task, jobs[key].queue.value) == (task, queue)
    assert len(jobs) == len(declarations(Settings()))
    schedule_ = beat_schedule(Settings(decay_interval_s=42))
    assert schedule_["decay-sweep"]["schedule"].every_s == 42
    assert schedule_["decay-sweep"]["options"]["queue"] == "maintenance"


def test_nightly_consolidation_is_at_two_in_the_configured_zone() -> None:
    # given the default cron in a zone far from UTC
    settings = Settings(schedule_timezone="Asia/Tokyo")
    entry = beat_schedule(settings)["nightly-consolidation"]["schedule"]
    assert isinstance(entry.inner, ZonedCrontab)
    assert entry.inner.hour == {2} and entry.inner.minute == {0}

    # then beat's next run after 02:00 Tokyo on 2 December is 02:00 Tokyo on 3 December
    last = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
    now = datetime(2026, 12, 1, 17, 30, tzinfo=UTC)
    entry.inner.nowfun = lambda: now
    entry.inner.app = app
    assert now + entry.inner.remaining_estimate(last) == datetime(2026, 12, 2, 17, 0, tzinfo=UTC)

    # and APScheduler, running the same declaration, agrees
    scheduler = build_scheduler(settings, app)
    trigger = scheduler.get_job("nightly-consolidation").trigger
    fire = trigger.get_next_fire_time(None, datetime(2026, 12, 2, 17, 30, tzinfo=UTC))
    assert fire.astimezone(UTC) == datetime(2026, 12, 3, 17, 0, tzinfo=UTC)


def test_settings_keep_a_sweep_step_inside_the_soft_time_limit() -> None:
    import pytest

    with pytest.raises(ValueError, match="sweep_deadline_s"):
        Settings(sweep_deadline_s=200)
    with pytest.raises(ValueError, match="five crontab fields"):
        Settings(consolidate_cron="0 2 * *")
