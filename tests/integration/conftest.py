"""Fixtures that start real Celery worker processes against the real services."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from memharness.processes import Managed, start_worker, wait_for_worker

pytestmark = pytest.mark.integration

WorkerFactory = Callable[..., Managed]


@pytest.fixture
def workers(db, redis_client, qdrant_path, log_dir: Path) -> Iterator[WorkerFactory]:  # type: ignore[no-untyped-def]
    """Start workers with ``workers(name, queues, env=...)``; all are stopped afterwards."""
    started: list[Managed] = []

    def start(
        name: str = "write",
        queues: Sequence[str] = ("write", "embed", "recall"),
        *,
        env: Mapping[str, str] | None = None,
        concurrency: int = 1,
        wait: bool = True,
    ) -> Managed:
        managed = start_worker(
            name, queues, concurrency=concurrency, env=env, log_dir=log_dir, loglevel="INFO"
        )
        started.append(managed)
        if wait:
            wait_for_worker(managed, timeout_s=60)
        return managed

    yield start
    for managed in started:
        managed.stop(timeout_s=10)
    if os.environ.get("MEMHARNESS_TEST_SHOW_LOGS"):
        for managed in started:
            print(f"--- {managed.name} ---\n{managed.log_tail(80)}")


@pytest.fixture
def client(db, redis_client):  # type: ignore[no-untyped-def]
    from config import Settings
    from memharness import MemoryClient

    with MemoryClient(Settings()) as memory_client:
        yield memory_client
