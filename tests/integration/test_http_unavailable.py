"""PostgreSQL going away under a running API server: every keyed route answers 503 with
Retry-After within the pool's wait (``db_pool_timeout_s``), never a 500 and never a hang.
The PostgreSQL stopped is one of the test's own (initdb on a spare port), never the shared one.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memharness.server.keys import create_key
from tests.integration.test_http_api import (
    assert_refused,
    memory,
    session,
    spare_port,
    spawn_server,
    stop_server,
    wait_ready,
)

pytestmark = pytest.mark.integration

POOL_TIMEOUT_S = 2.0
# The pool's wait, then a reply over loopback on two loaded cores.
ANSWER_WITHIN_S = POOL_TIMEOUT_S + 4.0


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def private_postgres() -> Iterator[tuple[str, Path]]:
    """A PostgreSQL cluster of the test's own: its URL and its data directory."""
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        pytest.skip("initdb and pg_ctl are needed for a private PostgreSQL")
    root = Path(tempfile.mkdtemp(prefix="memharness-pg-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data, port = root / "data", spare_port()
    subprocess.run(
        _as_postgres(["initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]),
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        _as_postgres(["pg_ctl", "-D", str(data), "-o", options, "-l", str(root / "log"),
                      "-w", "start"]),
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/memharness_down", data
    finally:
        subprocess.run(
            _as_postgres(["pg_ctl", "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def stop_postgres(data: Path) -> None:
    subprocess.run(
        _as_postgres(["pg_ctl", "-D", str(data), "-m", "immediate", "stop"]),
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def test_postgres_unreachable_is_a_503_with_retry_after_within_the_pool_wait(
    redis_client: Any, tmp_path: Path
) -> None:
    from workers.db import migrate

    with private_postgres() as (url, data):
        # given a server on a PostgreSQL of its own, and a key it has already seen
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            key, _ = create_key(conn, tenant_id="acme", scopes="read,write")
        server = spawn_server(
            tmp_path,
            "pg-down",
            {
                "MEMHARNESS_DATABASE_URL": url,
                "MEMHARNESS_DB_POOL_TIMEOUT_S": str(POOL_TIMEOUT_S),
                "MEMHARNESS_API_RATE_LIMIT_PER_S": "0",
            },
        )
        try:
            wait_ready(server)
            with session(server, key) as client:
                assert client.get("/v1/stats").status_code == 200

                # when PostgreSQL goes away
                stop_postgres(data)

                # then the gate (a key not cached), the sync and the async routes answer 503
                # with Retry-After, each within the pool's wait
                for method, path, payload in (
                    ("GET", "/v1/stats", None),
                    ("GET", "/v1/memories", None),
                    ("POST", "/v1/memories", memory("We bill in cents.")),
                    ("GET", "/v1/stats", None),
                ):
                    started = time.monotonic()
                    answer = client.request(method, path, json=payload)
                    elapsed = time.monotonic() - started
                    assert_refused(answer, 503, "unavailable", None)
                    assert int(answer.headers["retry-after"]) > 0, answer.headers
                    assert "PostgreSQL" in answer.json()["message"], answer.text
                    assert elapsed < ANSWER_WITHIN_S, (method, path, elapsed)
        finally:
            stop_server(server)
        assert "Traceback" not in server.log_text(), server.log_text()[-3000:]
