"""``/readyz`` of a real server: ready on a fresh install once the store's owner runs, and
503 naming what went away when its Redis (a redis-server of the test's own) or its
PostgreSQL (reached through a TCP relay the test cuts) is unreachable. The shared services
are never stopped."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.integration.test_http_api import spare_port, spawn_server, stop_server, wait_ready

pytestmark = pytest.mark.integration


class Relay:
    """A TCP relay to ``target``: ``cut()`` closes the listener and every relayed connection,
    as a PostgreSQL that went away would look to the server."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def readyz(server: Any) -> httpx.Response:
    return httpx.get(f"{server.url}/readyz", timeout=10)


def wait_for(server: Any, status: int, timeout_s: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        answer = readyz(server)
        if answer.status_code == status or time.monotonic() > deadline:
            return answer
        time.sleep(0.3)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = spare_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
    yield f"redis://127.0.0.1:{port}/0", proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=5)


def test_a_fresh_install_is_ready_once_the_store_owner_runs(
    db: Any, workers: Any, tmp_path: Path
) -> None:
    # given: a freshly migrated database, no golden run, no fact recall sampled, no owner
    assert db.execute("SELECT count(*) FROM golden_runs").fetchone()[0] == 0
    server = wait_ready(spawn_server(tmp_path, "fresh", {}))
    try:
        waiting = readyz(server)
        assert waiting.status_code == 503
        assert waiting.json()["postgres"] == waiting.json()["redis"] == "ok"
        assert "recall queue" in waiting.json()["store_owner"]
        # when: the owner starts
        workers("owner")
        # then: ready, and nothing about quality in the answer
        ready = wait_for(server, 200)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {
            "status": "ready", "postgres": "ok", "redis": "ok", "store_owner": "ok"
        }  # fmt: skip
    finally:
        stop_server(server)


def test_redis_going_away_makes_the_server_unready(
    db: Any, workers: Any, tmp_path: Path, private_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, redis_proc = private_redis
    env = {"MEMHARNESS_REDIS_URL": url}
    workers("owner", env=env)
    server = wait_ready(spawn_server(tmp_path, "redis", env))
    try:
        assert wait_for(server, 200).status_code == 200
        redis_proc.kill()
        redis_proc.wait(timeout=5)
        gone = wait_for(server, 503)
        assert gone.status_code == 503, gone.text
        assert gone.json()["postgres"] == "ok"
        assert gone.json()["redis"] != "ok"
        assert gone.json()["store_owner"] != "ok"
        # and nothing else crashed: the process still answers its liveness probe
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    finally:
        stop_server(server)


def test_postgres_going_away_makes_the_server_unready(
    db: Any, workers: Any, tmp_path: Path, settings: Any
) -> None:
    params = conninfo_to_dict(settings.database_url)
    relay = Relay((str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)))
    through_relay = make_conninfo(settings.database_url, host="127.0.0.1", port=relay.port)
    workers("owner")
    server = wait_ready(spawn_server(tmp_path, "pg", {"MEMHARNESS_DATABASE_URL": through_relay}))
    try:
        assert wait_for(server, 200).status_code == 200
        relay.cut()
        gone = wait_for(server, 503)
        assert gone.status_code == 503, gone.text
        assert gone.json()["postgres"] != "ok"
        assert gone.json()["redis"] == "ok"
    finally:
        relay.cut()
        stop_server(server)
