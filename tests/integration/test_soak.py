"""Soak: an agent keeps writing while the write worker is SIGKILLed again and again.

CI runs a short version (300 writes, 2 kills). `make test-soak` (MEMHARNESS_SOAK=1) runs the
full one: 5,000 writes, 8 kills. Either way every write must end stored exactly once: one
row, one finished job, one tier-2 decision and one vector point per memory.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from config import Settings
from memharness.processes import start_beat
from workers.adapters import build_vector_index

pytestmark = [pytest.mark.integration, pytest.mark.soak]

FULL = os.environ.get("MEMHARNESS_SOAK") == "1"
WRITES = 5000 if FULL else 300
KILLS = 8 if FULL else 2
SCOPE = {"tenant_id": "soak", "task_id": "atlas"}
PEOPLE = ["Priya", "Marco", "Lena"]


def test_writes_survive_repeated_worker_kills(client, workers, db, log_dir, settings: Settings):  # type: ignore[no-untyped-def]
    # given a write worker with a short lease, and the relay (maintenance worker + beat)
    env = {"MEMHARNESS_JOB_LEASE_S": "2", "MEMHARNESS_WRITE_BATCH_SIZE": "32"}
    owner = workers("write", env=env)
    workers("maintenance", ("maintenance",), env=env)
    beat = start_beat(env=env, log_dir=log_dir)
    rng = random.Random(11)
    ids = []
    done = threading.Event()

    def agent() -> None:
        for n in range(WRITES):
            topic = rng.choice(["webhooks", "ledger", "auth"])
            state = rng.choice(["in review", "blocked", "done"])
            note = f"Status: ATL-{n} ({topic}) is now {state}; owner {rng.choice(PEOPLE)}."
            ids.append(client.record(note, session_id=f"s{n // 100}", **SCOPE).memory_id)
        done.set()

    writer = threading.Thread(target=agent)
    try:
        # when the agent writes while the worker is killed at random moments and restarted
        writer.start()
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.5))
            owner.kill()
            owner.proc.wait(timeout=10)
            owner = workers(f"write-{kill}", env=env)
        writer.join(timeout=600)
        assert done.is_set()

        # then everything settles, each write exactly once
        counts = client.wait_until_settled(ids, timeout_s=180 if FULL else 90)
    finally:
        beat.stop()
    assert counts == {"stored": WRITES}
    assert db.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0] == WRITES
    per_memory = db.execute(
        "SELECT count(*) FROM write_decisions WHERE tier = 2 GROUP BY memory_id HAVING count(*) > 1"
    ).fetchall()
    assert per_memory == []
    assert db.execute("SELECT count(*) FROM write_decisions WHERE tier = 2").fetchone()[0] == WRITES
    owner.stop()
    index = build_vector_index(settings)
    try:
        assert index.count(f"{settings.collection_prefix}_episodic", "soak") == WRITES
    finally:
        index.close()
