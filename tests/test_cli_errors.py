"""A command that cannot reach PostgreSQL or Redis says so in one line, with no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import redis

from config import Settings
from memharness.cli.errors import EXIT_UNREACHABLE, unreachable_line

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memharness.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize("command", [["stats"], ["keys", "list"], ["migrate"]])
def test_postgres_unreachable_is_one_line_naming_it(command: list[str]) -> None:
    # port 1: nothing listens there; the password must never be echoed
    done = run(*command, MEMHARNESS_DATABASE_URL="postgresql://ops:hunter2@127.0.0.1:1/mh")
    assert done.returncode == EXIT_UNREACHABLE, done.stderr
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if "memharness" in line]
    assert lines == [
        f"memharness {command[0]}: PostgreSQL is unreachable at 127.0.0.1:1/mh (connection "
        "refused); start it (`make services`) or point MEMHARNESS_DATABASE_URL at a running one"
    ]


def test_redis_unreachable_names_redis_and_its_address() -> None:
    settings = Settings(redis_url="redis://:pw@10.0.0.9:6390/4")
    try:
        raise RuntimeError("Retry limit exceeded") from redis.ConnectionError(
            "Error 111 connecting to 10.0.0.9:6390. Connection refused."
        )
    except RuntimeError as exc:
        line = unreachable_line("golden", exc, settings)
    assert line == (
        "memharness golden: Redis is unreachable at 10.0.0.9:6390/4 (connection refused); "
        "start it (`make services`) or point MEMHARNESS_REDIS_URL at a running one"
    )


def test_a_missing_database_says_to_migrate() -> None:
    settings = Settings(database_url="postgresql://postgres@db.internal:5433/nothing_here")
    exc = psycopg.OperationalError('FATAL:  database "nothing_here" does not exist')
    assert unreachable_line("stats", exc, settings) == (
        "memharness stats: PostgreSQL at db.internal:5433/nothing_here has no such database: "
        "create it with `memharness migrate`"
    )


def test_any_other_failure_keeps_its_traceback() -> None:
    assert unreachable_line("stats", ValueError("a bug"), Settings()) is None
