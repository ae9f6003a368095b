"""The task decorator refuses what Celery would silently accept."""

from __future__ import annotations

import pytest

from workers.queues import CeleryQueue
from workers.tasking import memharness_task


def test_a_misspelled_option_is_refused() -> None:
    with pytest.raises(TypeError, match="acks_lat"):
        memharness_task("memory.write.example", queue=CeleryQueue.WRITE, acks_lat=True)


def test_a_name_must_carry_its_queue() -> None:
    with pytest.raises(ValueError, match=r"memory\.write\."):
        memharness_task("memory.embed.example", queue=CeleryQueue.WRITE)


def test_a_name_must_be_shaped_like_the_others() -> None:
    with pytest.raises(ValueError, match="verb_noun"):
        memharness_task("WriteThing", queue=CeleryQueue.WRITE)


def test_a_name_cannot_be_declared_twice() -> None:
    from workers.tasks import maintenance  # noqa: F401  (registers the names)

    with pytest.raises(ValueError, match="twice"):
        memharness_task("memory.maintenance.noop", queue=CeleryQueue.MAINTENANCE)
