"""The task decorator refuses what Celery would silently accept."""

from __future__ import annotations

import pytest

from workers.queues import TaskName
from workers.tasking import memharness_task


def test_a_misspelled_option_is_refused() -> None:
    with pytest.raises(TypeError, match="acks_lat"):
        memharness_task(TaskName.NOOP, acks_lat=True)


def test_a_name_must_come_from_the_enum() -> None:
    # Names are the wire format: a bare string would bypass the one list of them.
    with pytest.raises(TypeError, match="TaskName"):
        memharness_task("memory.write.example")  # type: ignore[arg-type]


def test_a_name_cannot_be_declared_twice() -> None:
    from workers import probes  # noqa: F401  (registers the names)

    with pytest.raises(ValueError, match="twice"):
        memharness_task(TaskName.NOOP)


def test_every_name_says_its_queue() -> None:
    for name in TaskName:
        assert name.value.startswith(f"memory.{name.queue.value}."), name
