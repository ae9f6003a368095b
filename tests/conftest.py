"""Test setup: real PostgreSQL and Redis, isolated per test session.

Each pytest process gets its own database (``memharness_test_<pid>``, dropped at the end), its
own Redis database number (``MEMHARNESS_TEST_REDIS_DB``, default 15, flushed per test) and its
own qdrant local-mode directory, so parallel runs never see each other's state. The settings
go into the environment before anything builds the Celery app, and worker processes started
by the fixtures inherit them.

A missing service fails the run under CI (``CI`` set) and skips the tests that need it when
run by hand (dramatiq's ``check_redis`` habit).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_TMP = Path(tempfile.mkdtemp(prefix="memharness-tests-"))
_PG_BASE = os.environ.get("MEMHARNESS_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
_REDIS_BASE = os.environ.get("MEMHARNESS_TEST_REDIS", "redis://127.0.0.1:6379")
REDIS_DB = int(os.environ.get("MEMHARNESS_TEST_REDIS_DB", "15"))
TEST_ENV: dict[str, str] = {
    "MEMHARNESS_DATABASE_URL": f"{_PG_BASE}/memharness_test_{os.getpid()}",
    "MEMHARNESS_REDIS_URL": f"{_REDIS_BASE}/{REDIS_DB}",
    "MEMHARNESS_QDRANT_PATH": str(_TMP / "qdrant"),
    "MEMHARNESS_QDRANT_URL": "",
    "MEMHARNESS_LLM_PROVIDER": "offline",
    "MEMHARNESS_EMBEDDER": "hashing",
    "MEMHARNESS_EMBED_DIM": "64",
    "MEMHARNESS_RELAY_INTERVAL_S": "1",
    "MEMHARNESS_JOB_RETRY_BASE_S": "0.2",
}
os.environ.update(TEST_ENV)


def _service_problem() -> str | None:
    import psycopg
    import redis

    try:
        with psycopg.connect(f"{_PG_BASE}/postgres", connect_timeout=3):
            pass
    except psycopg.OperationalError as exc:
        return f"PostgreSQL unreachable at {_PG_BASE}: {exc}"
    try:
        redis.Redis.from_url(TEST_ENV["MEMHARNESS_REDIS_URL"], socket_timeout=3).ping()
    except redis.RedisError as exc:
        return f"Redis unreachable at {_REDIS_BASE}: {exc}"
    return None


_problem: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _problem
    _problem = _service_problem()
    if _problem and os.environ.get("CI"):
        raise pytest.UsageError(f"CI needs the real services: {_problem}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A real model costs minutes of both cores and an optional build: its tests run only when
    # the marker expression names them (`make test-model`), never in `make test`.
    if "model" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="drives a real local model: run with `make test-model`")
    for item in items:
        if item.get_closest_marker("model") is not None:
            item.add_marker(skip)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _problem is None:
        from workers.db import drop_database

        try:
            drop_database(TEST_ENV["MEMHARNESS_DATABASE_URL"])
        except Exception as exc:  # the run's result matters more than the cleanup
            print(f"could not drop the test database: {exc}")
    shutil.rmtree(_TMP, ignore_errors=True)


def require_services() -> None:
    if _problem:
        pytest.skip(_problem)


@pytest.fixture(scope="session")
def settings():  # type: ignore[no-untyped-def]
    from config import Settings

    return Settings()


@pytest.fixture(scope="session")
def migrated(settings):  # type: ignore[no-untyped-def]
    require_services()
    from workers.db import migrate

    migrate(settings.database_url)
    return settings.database_url


@pytest.fixture
def db(migrated):  # type: ignore[no-untyped-def]
    """A clean schema for each test: a psycopg autocommit connection to the test database."""
    import psycopg

    with psycopg.connect(migrated, autocommit=True) as conn:
        existing = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
        names = [t for t in existing if t != "alembic_version"]
        if names:
            conn.execute(f"TRUNCATE {', '.join(names)} RESTART IDENTITY CASCADE")
        yield conn


@pytest.fixture
def redis_client(settings):  # type: ignore[no-untyped-def]
    require_services()
    import redis

    client = redis.Redis.from_url(settings.redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def qdrant_path(settings) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """The local-mode store's directory, emptied for each test."""
    path = Path(settings.qdrant_path)
    shutil.rmtree(path, ignore_errors=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path
