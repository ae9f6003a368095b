"""Nothing is lost when a worker or the broker dies, and nothing is done twice.

The broker test kills its own Redis on a spare port; the shared services are left alone.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from config import Settings
from memharness.client import MemoryClient
from memharness.processes import Managed, start_beat
from tests.support.openai_stub import OpenAIStub, serve_stub
from workers.adapters import build_vector_index
from workers.app import create_app
from workers.probes import PING_KEY

pytestmark = pytest.mark.integration

SCOPE = {"tenant_id": "acme", "task_id": "billing-rewrite", "session_id": "s-1"}
NOTES = [
    "We decided to keep the outbox in PostgreSQL because it commits with the memory.",
    "We decided to pin Python 3.11 because the PDF library has no 3.12 wheels.",
    "We decided to split the ledger export into batches of 10,000 rows because of timeouts.",
]


def wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def count_points(settings: Settings) -> int:
    index = build_vector_index(settings)
    try:
        return index.count(f"{settings.collection_prefix}_episodic")
    finally:
        index.close()


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub() as running:
        yield running


@pytest.fixture
def beat(log_dir: Path):  # type: ignore[no-untyped-def]
    started: list[Managed] = []

    def start(env: dict[str, str] | None = None) -> Managed:
        managed = start_beat(env=env, log_dir=log_dir)
        started.append(managed)
        return managed

    yield start
    for managed in started:
        managed.stop(timeout_s=10)


def test_a_worker_killed_mid_task_is_finished_exactly_once_after_a_restart(
    client, workers, beat, stub: OpenAIStub, db, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given three writes recorded while no write worker runs (so that the first drain claims
    # all three in one batch: a worker already up could claim the first one alone), a model
    # that answers slowly, and the relay running
    env = stub.worker_env(job_lease_s=3, llm_timeout_s=30)
    stub.control("slow", delay_s=2.0)
    ids = [client.record(note, **SCOPE).memory_id for note in NOTES]
    workers("maintenance", ("maintenance",), env=env)
    beat(env)

    # when a write worker starts and is SIGKILLed while the model is thinking
    first = workers("write", env=env)
    wait_for(lambda: stub.count("chat") >= 1, 30, "the drain to call the model")
    first.kill()
    first.proc.wait(timeout=10)

    # then the jobs are stranded mid-flight: claimed, not finished
    jobs = db.execute("SELECT status, attempts FROM jobs").fetchall()
    assert jobs == [("running", 1)] * 3
    assert db.execute("SELECT DISTINCT status FROM memories").fetchall() == [("pending",)]

    # when a new worker starts and the model is healthy again
    stub.control("ok")
    judged_before = stub.count("chat:judge")
    workers("write-2", env=env)
    counts = client.wait_until_settled(ids, timeout_s=60)

    # then every write is stored once: second attempts, one judgement each, one point each
    assert counts == {"stored": 3}
    assert db.execute("SELECT status, attempts FROM jobs").fetchall() == [("done", 2)] * 3
    assert stub.count("chat:judge") - judged_before == 3
    per_memory = db.execute(
        "SELECT memory_id, count(*) FROM write_decisions WHERE tier = 2 GROUP BY 1"
    ).fetchall()
    assert sorted(n for _, n in per_memory) == [1, 1, 1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A Redis of this test's own, on a spare port, that may be shut down at will."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (scripts/services.sh installs it)"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        wait_for(lambda: _pings(client), 10, f"redis on port {self.port}")

    def shutdown_nosave(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=2)
        # The server closes the connection as it goes down.
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=True)
        assert self.proc is not None
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def test_a_broker_lost_between_commit_and_processing_loses_nothing(
    workers, beat, private_redis: PrivateRedis, db, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given an agent whose writes are committed and published, with no worker running yet
    env = {"MEMHARNESS_REDIS_URL": private_redis.url}
    broker_settings = settings.model_copy(update={"redis_url": private_redis.url})
    with MemoryClient(broker_settings) as client:
        before = [
            client.record(f"Status: ATL-{n} is now in review, owner Priya.", **SCOPE).memory_id
            for n in range(20)
        ]
        queued = redis.Redis.from_url(private_redis.url).llen("write")
        assert queued >= 1

        # when Redis dies without saving, the queued drain messages die with it
        private_redis.shutdown_nosave()

        # and the agent keeps writing while the broker is down: commits still succeed
        during = [
            client.record(f"Status: ATL-{n} moved to done by Marco.", **SCOPE)
            for n in range(100, 105)
        ]
        assert {receipt.status for receipt in during} == {"accepted"}

        # when Redis comes back empty and the workers and beat start
        private_redis.start()
        assert redis.Redis.from_url(private_redis.url).llen("write") == 0
        workers("write", env=env)
        workers("maintenance", ("maintenance",), env=env)
        beat(env)

        # then the relay re-publishes from the outbox and every write is stored
        ids = before + [receipt.memory_id for receipt in during]
        assert client.wait_until_settled(ids, timeout_s=60) == {"stored": 25}
    assert db.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0] == 25


def test_a_pickled_message_is_refused_by_the_worker(workers, redis_client, settings) -> None:  # type: ignore[no-untyped-def]
    # given a maintenance worker
    worker = workers("maintenance", ("maintenance",))
    app = create_app(settings)
    pickled, plain = f"p-{uuid.uuid4().hex}", f"j-{uuid.uuid4().hex}"

    # when a pickled task is sent, then a JSON one
    app.send_task("memory.maintenance.ping", args=[pickled], serializer="pickle")
    app.send_task("memory.maintenance.ping", args=[plain])
    wait_for(lambda: redis_client.exists(PING_KEY.format(marker=plain)), 30, "the JSON ping")

    # then only the JSON task ran, and the worker says why it refused the other
    assert not redis_client.exists(PING_KEY.format(marker=pickled))
    log = worker.log_text()
    assert "untrusted content" in log or "ContentDisallowed" in log


def test_bad_inputs_get_clear_errors_and_leave_no_row(client, db) -> None:  # type: ignore[no-untyped-def]
    from pipelines.errors import InvalidInput

    bad = [
        ({"content": "x" * 70_000}, "content", "65536"),
        ({"content": b"\xff\xfe broken"}, "content", "UTF-8"),
        ({"content": 12345}, "content", "int"),
        ({"content": "fine", "type": "opinion"}, "type", "decision"),
        ({"content": "fine", "metadata": {"k": "v" * 10_000}}, "metadata", "8192"),
        ({"content": "fine", "task_id": "has spaces"}, "task_id", "malformed"),
    ]
    for fields, field, detail in bad:
        kwargs = {**SCOPE, **fields}
        content = kwargs.pop("content")
        with pytest.raises(InvalidInput) as info:
            client.record(content, **kwargs)
        assert info.value.field == field
        assert detail in str(info.value)

    # one bad item in a batch writes nothing of the batch
    with pytest.raises(InvalidInput) as info:
        client.record_many([{"content": "We chose Redis.", **SCOPE}, {"content": "", **SCOPE}])
    assert info.value.field == "items[1].content"
    for table in ("memories", "jobs", "write_decisions"):
        assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table


def test_record_many_writes_a_batch_in_one_round_trip(client, workers, db) -> None:  # type: ignore[no-untyped-def]
    workers("write")
    items = [{"content": note, **SCOPE} for note in NOTES] + [{"content": "ok", **SCOPE}]
    receipts = client.record_many(items + items[:1])
    assert [r.status for r in receipts] == ["accepted"] * 3 + ["dropped", "duplicate"]
    assert receipts[4].memory_id == receipts[0].memory_id
    assert client.wait_until_settled([r.memory_id for r in receipts[:3]]) == {"stored": 3}
