"""Task checkpoints in the real PostgreSQL: saves, retention, rollback, corrupted fall-backs,
the CLI, the calibration through the OpenAI-compatible adapter, and an agent process that is
SIGKILLed mid-task and resumes exactly where its last checkpoint left it."""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memharness.bench.checkpoint import sample_state
from memharness.cli.checkpoints import register
from pipelines.errors import CheckpointFormatError, InvalidInput, MalformedLLMOutput
from pipelines.state.models import ActionEffect, NodeKind, PendingAction, TaskState
from tests.support import checkpoint_agent as agent
from workers.adapters.llm_offline import OfflineLLM
from workers.adapters.llm_openai import OpenAILLM
from workers.db import open_pool
from workers.state.service import (
    CheckpointNotFound,
    CheckpointService,
    NoUsableCheckpoint,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TENANT, TASK = "acme", "billing-port"


@pytest.fixture
def pool(db, settings):  # type: ignore[no-untyped-def]
    pool = open_pool(settings, name="checkpoint-tests")
    yield pool
    pool.close()


@pytest.fixture
def service(pool) -> CheckpointService:  # type: ignore[no-untyped-def]
    return CheckpointService(pool, OfflineLLM(), keep_last=5)


def states(count: int) -> list[TaskState]:
    """Distinct, realistic states: the scripted agent after 0, 1, 2 ... finished steps."""
    return [agent.expected_state(steps) for steps in range(count)]


def body_of(db, checkpoint_id: uuid.UUID) -> bytes:  # type: ignore[no-untyped-def]
    row = db.execute("SELECT body FROM checkpoints WHERE id = %s", (checkpoint_id,)).fetchone()
    return bytes(row[0])


# -- storage ---------------------------------------------------------------------------------


def test_a_50_kb_checkpoint_round_trips_through_postgres(service, db) -> None:  # type: ignore[no-untyped-def]
    state = sample_state()

    checkpoint_id = service.checkpoint(TENANT, TASK, state)
    result = service.resume(TENANT, TASK)

    assert result is not None
    assert result.checkpoint.checkpoint_id == checkpoint_id
    assert result.checkpoint.state == state
    assert result.checkpoint.state.working_memory == state.working_memory
    assert result.fell_back_from == ()
    [row] = service.list(TENANT, TASK)
    assert row.id == checkpoint_id
    assert row.format_version == 2
    assert row.iteration == state.iteration
    assert 40_000 < row.size_bytes < 60_000
    assert row.size_bytes == len(body_of(db, checkpoint_id))


def test_nothing_saved_means_nothing_to_resume(service) -> None:  # type: ignore[no-untyped-def]
    assert service.resume(TENANT, "never-started") is None


def test_checkpoints_are_scoped_by_tenant_and_task(service) -> None:  # type: ignore[no-untyped-def]
    first, second = states(2)
    service.checkpoint("acme", TASK, first)
    service.checkpoint("globex", TASK, second)

    acme = service.resume("acme", TASK)
    globex = service.resume("globex", TASK)
    assert acme is not None and globex is not None
    assert acme.checkpoint.state == first
    assert globex.checkpoint.state == second
    with pytest.raises(InvalidInput, match="tenant_id"):
        service.checkpoint("bad tenant id", TASK, first)


def test_each_save_links_to_the_previous_one(service, pool) -> None:  # type: ignore[no-untyped-def]
    ids = [service.checkpoint(TENANT, TASK, state) for state in states(4)]
    rows = {row.id: row for row in service.list(TENANT, TASK)}
    assert [rows[i].parent_id for i in ids] == [None, *ids[:-1]]
    # a new process (a new service) continues the chain from the database
    fresh = CheckpointService(pool, OfflineLLM())
    later = fresh.checkpoint(TENANT, TASK, agent.expected_state(4))
    assert fresh.show(TENANT, TASK, later).parent_id == ids[-1]


def test_the_same_state_saved_on_the_same_parent_is_one_row(pool) -> None:  # type: ignore[no-untyped-def]
    saver = CheckpointService(pool, OfflineLLM())
    first, second = states(2)
    base = saver.checkpoint(TENANT, TASK, first)
    saved = saver.checkpoint(TENANT, TASK, second)

    # a retry whose first attempt committed but never answered: the caller's head was
    # not advanced, so the retry saves the same state on the same parent
    retry = CheckpointService(pool, OfflineLLM())
    retry._set_head(TENANT, TASK, base)

    assert retry.checkpoint(TENANT, TASK, second) == saved
    assert [row.id for row in saver.list(TENANT, TASK)] == [saved, base]


def test_retention_keeps_the_last_n_and_every_phase_transition(pool) -> None:  # type: ignore[no-untyped-def]
    service = CheckpointService(pool, OfflineLLM(), keep_last=3)
    ids = [
        service.checkpoint(TENANT, TASK, state, phase_transition=index in (2, 6))
        for index, state in enumerate(states(12))
    ]

    kept = [row.id for row in service.list(TENANT, TASK)]
    assert kept == [ids[11], ids[10], ids[9], ids[6], ids[2]]
    assert all(report.ok for report in service.verify(TENANT, TASK))


def test_sequence_numbers_count_one_tasks_saves_only(service, pool) -> None:  # type: ignore[no-untyped-def]
    # given: two tenants saving the same task name, interleaved, and a second task
    mine = [service.checkpoint(TENANT, TASK, state) for state in states(2)]
    theirs = [service.checkpoint("globex", TASK, state) for state in states(3)]
    mine.append(service.checkpoint(TENANT, TASK, agent.expected_state(2)))
    other_task = service.checkpoint(TENANT, "another-task", agent.expected_state(0))

    # then: each task numbers its own saves 1, 2, 3: nobody else's saves leave gaps
    assert [row.seq for row in service.list(TENANT, TASK)] == [3, 2, 1]
    assert [row.id for row in service.list(TENANT, TASK)] == mine[::-1]
    assert [row.seq for row in service.list("globex", TASK)] == [3, 2, 1]
    assert [row.id for row in service.list("globex", TASK)] == theirs[::-1]
    assert [row.seq for row in service.list(TENANT, "another-task")] == [1]
    assert service.list(TENANT, "another-task")[0].id == other_task
    # a rollback is the task's next save, and the newest
    head = service.rollback(TENANT, TASK, mine[0])
    assert service.list(TENANT, TASK)[0].seq == 4
    resumed = service.resume(TENANT, TASK)
    assert resumed is not None and resumed.checkpoint.checkpoint_id == head


def test_concurrent_saves_of_one_task_get_distinct_numbers(pool) -> None:  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    saved = states(8)

    def save(index: int) -> uuid.UUID:
        # separate services: separate heads, as separate agent processes would have
        return CheckpointService(pool, OfflineLLM(), keep_last=50).checkpoint(
            TENANT, TASK, saved[index]
        )

    with ThreadPoolExecutor(max_workers=4) as executor:
        ids = list(executor.map(save, range(len(saved))))
    rows = CheckpointService(pool, OfflineLLM()).list(TENANT, TASK)
    assert sorted(row.seq for row in rows) == list(range(1, len(saved) + 1))
    assert {row.id for row in rows} == set(ids)


def test_forgetting_a_task_starts_its_numbers_again(client, db) -> None:  # type: ignore[no-untyped-def]
    for state in states(3):
        client.checkpoint(TENANT, TASK, state)
    # the workers' erasure of a task, its checkpoint step:
    from workers.own.forget import ForgetTarget, _erase_checkpoints

    with db.transaction():
        assert _erase_checkpoints(db, TENANT, ForgetTarget.TASK, TASK) == 3
    assert db.execute("SELECT count(*) FROM checkpoint_sequences").fetchone()[0] == 0
    client.checkpoint(TENANT, TASK, agent.expected_state(0))
    assert [row.seq for row in client.checkpoints.list(TENANT, TASK)] == [1]


def test_the_migration_numbers_existing_checkpoints_per_task(settings) -> None:  # type: ignore[no-untyped-def]
    import psycopg
    from psycopg.conninfo import make_conninfo

    from workers.db import drop_database, migrate

    url = make_conninfo(settings.database_url, dbname=f"memharness_seq_{os.getpid()}")
    drop_database(url)
    try:
        # given: checkpoints written under the global counter, two tenants interleaved
        migrate(url, "0013")
        with psycopg.connect(url, autocommit=True) as conn:
            for tenant in ("acme", "globex", "acme", "acme", "globex"):
                conn.execute(
                    "INSERT INTO checkpoints (id, tenant_id, task_id, created_at, format_version,"
                    " size_bytes, body) VALUES (%s, %s, 't', now(), 1, 1, 'x')",
                    (uuid.uuid4(), tenant),
                )
            before = conn.execute("SELECT id FROM checkpoints ORDER BY seq").fetchall()
        # when: upgraded
        migrate(url, "head")
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT id, tenant_id, seq FROM checkpoints ORDER BY tenant_id, seq"
            ).fetchall()
            # then: 1..n per task, in the old order, and the next save follows on
            assert [(r[1], r[2]) for r in rows] == [
                ("acme", 1), ("acme", 2), ("acme", 3), ("globex", 1), ("globex", 2)
            ]  # fmt: skip
            order = [r[0] for r in before]
            acme = [r[0] for r in rows if r[1] == "acme"]
            assert acme == [i for i in order if i in set(acme)]
            row = conn.execute(
                "INSERT INTO checkpoints (id, tenant_id, task_id, created_at, format_version,"
                " size_bytes, body) VALUES (%s, 'globex', 't', now(), 1, 1, 'x') RETURNING seq",
                (uuid.uuid4(),),
            ).fetchone()
            assert row is not None and row[0] == 3
        # and back down: one global order that keeps each task's
        from alembic import command

        from workers.db import alembic_config

        command.downgrade(alembic_config(url), "0013")
        with psycopg.connect(url, autocommit=True) as conn:
            seqs = conn.execute(
                "SELECT tenant_id, seq FROM checkpoints ORDER BY tenant_id, seq"
            ).fetchall()
            assert len({s for _, s in seqs}) == 6
            for tenant in ("acme", "globex"):
                mine = [s for t, s in seqs if t == tenant]
                assert mine == sorted(mine)
            conn.execute(
                "INSERT INTO checkpoints (id, tenant_id, task_id, created_at, format_version,"
                " size_bytes, body) VALUES (%s, 'acme', 't', now(), 1, 1, 'x')",
                (uuid.uuid4(),),
            )
    finally:
        drop_database(url)


# -- rollback --------------------------------------------------------------------------------


def test_rollback_restores_an_earlier_state_exactly(service, db) -> None:  # type: ignore[no-untyped-def]
    saved = states(4)  # with the rollback's own row, exactly the five the service keeps
    ids = [service.checkpoint(TENANT, TASK, state) for state in saved]

    head = service.rollback(TENANT, TASK, ids[1])

    result = service.resume(TENANT, TASK)
    assert result is not None
    assert result.checkpoint.checkpoint_id == head
    assert result.checkpoint.parent_id == ids[1]
    assert result.checkpoint.state == saved[1]
    assert result.checkpoint.state.working_memory == saved[1].working_memory
    assert result.checkpoint.state.model_dump_json() == saved[1].model_dump_json()
    # nothing was deleted: the abandoned branch is still there to inspect
    assert {row.id for row in service.list(TENANT, TASK)} >= set(ids)
    # the agent carries on from the rolled-back state
    after = service.checkpoint(TENANT, TASK, agent.work_on(saved[1], 1))
    assert service.show(TENANT, TASK, after).parent_id == head


def test_rollback_is_idempotent_and_refuses_what_it_cannot_restore(service, db) -> None:  # type: ignore[no-untyped-def]
    ids = [service.checkpoint(TENANT, TASK, state) for state in states(3)]

    first = service.rollback(TENANT, TASK, ids[0])
    assert service.rollback(TENANT, TASK, ids[0]) == first
    assert service.rollback(TENANT, TASK, first) == first
    assert len(service.list(TENANT, TASK)) == 4

    with pytest.raises(CheckpointNotFound, match="pruned by retention"):
        service.rollback(TENANT, TASK, uuid.uuid4())
    with pytest.raises(CheckpointNotFound):
        service.rollback("globex", TASK, ids[1])  # another tenant's view
    db.execute(
        "UPDATE checkpoints SET body = set_byte(body, 200, get_byte(body, 200) # 4) WHERE id = %s",
        (ids[1],),
    )
    with pytest.raises(CheckpointFormatError, match="checksum mismatch"):
        service.rollback(TENANT, TASK, ids[1])


# -- corrupted checkpoints -------------------------------------------------------------------


def test_a_corrupted_newest_falls_back_to_its_parent_and_says_so(service, db) -> None:  # type: ignore[no-untyped-def]
    saved = states(3)
    ids = [service.checkpoint(TENANT, TASK, state) for state in saved]
    # given one flipped bit in the newest checkpoint's stored bytes
    db.execute(
        "UPDATE checkpoints SET body = set_byte(body, 500, get_byte(body, 500) # 16) WHERE id = %s",
        (ids[2],),
    )

    result = service.resume(TENANT, TASK)

    assert result is not None
    assert result.checkpoint.checkpoint_id == ids[1]
    assert result.checkpoint.state == saved[1]
    [fallback] = result.fell_back_from
    assert fallback.checkpoint_id == ids[2]
    assert "checksum mismatch" in fallback.reason
    reports = {report.checkpoint_id: report for report in service.verify(TENANT, TASK)}
    assert reports[ids[2]].error_kind == "checksum"
    assert reports[ids[1]].ok and reports[ids[0]].ok

    # and the next save grows from the good checkpoint, so the next resume needs no fall-back
    later = service.checkpoint(TENANT, TASK, agent.work_on(saved[1], 1))
    assert service.show(TENANT, TASK, later).parent_id == ids[1]
    again = service.resume(TENANT, TASK)
    assert again is not None and again.fell_back_from == ()


def test_a_pruned_parent_falls_back_to_the_next_older_checkpoint(service, db) -> None:  # type: ignore[no-untyped-def]
    saved = states(4)
    ids = [service.checkpoint(TENANT, TASK, state) for state in saved]
    # the newest is truncated and its parent is gone
    db.execute("UPDATE checkpoints SET body = substr(body, 1, 100) WHERE id = %s", (ids[3],))
    db.execute("DELETE FROM checkpoints WHERE id = %s", (ids[2],))

    result = service.resume(TENANT, TASK)

    assert result is not None
    assert result.checkpoint.checkpoint_id == ids[1]
    assert [f.checkpoint_id for f in result.fell_back_from] == [ids[3]]
    assert "truncated" in result.fell_back_from[0].reason


def test_when_every_checkpoint_is_corrupted_the_resume_says_why(service, db) -> None:  # type: ignore[no-untyped-def]
    ids = [service.checkpoint(TENANT, TASK, state) for state in states(2)]
    db.execute("UPDATE checkpoints SET body = '\\x00000001'::bytea")

    with pytest.raises(NoUsableCheckpoint) as caught:
        service.resume(TENANT, TASK)
    assert [f.checkpoint_id for f in caught.value.fallbacks] == ids[::-1]
    assert "header alone is 76 bytes" in str(caught.value)


def test_a_row_holding_another_tasks_checkpoint_is_refused(service, db) -> None:  # type: ignore[no-untyped-def]
    other = service.checkpoint(TENANT, "other-task", agent.expected_state(3))
    mine = service.checkpoint(TENANT, TASK, agent.expected_state(1))
    db.execute(
        "UPDATE checkpoints SET body = (SELECT body FROM checkpoints WHERE id = %s) WHERE id = %s",
        (other, mine),
    )
    with pytest.raises(CheckpointFormatError, match="holds checkpoint") as caught:
        service.show(TENANT, TASK, mine)
    assert caught.value.kind == "mismatch"


# -- calibration on resume -------------------------------------------------------------------


def test_a_resume_verifies_pending_outside_actions_first(pool) -> None:  # type: ignore[no-untyped-def]
    # given a checkpoint whose pending action publishes a report, resumed two hours later
    now = [datetime(2026, 12, 1, 12, 0, tzinfo=UTC)]
    service = CheckpointService(pool, OfflineLLM(), clock=lambda: now[0])
    state = agent.expected_state(4)  # the pending action of step 4 is external
    read = PendingAction(
        action_id="act-read",
        node_id=agent.step_id(6),
        tool="fetch_prices",
        effect=ActionEffect.EXTERNAL_READ,
    )
    state = state.with_changes(pending_actions=(*state.pending_actions, read))
    service.checkpoint(TENANT, TASK, state)
    now[0] += timedelta(hours=2)

    result = service.resume(TENANT, TASK)

    assert result is not None
    assert result.elapsed_s == 7200
    assert result.calibrated_by == "offline"
    assert result.checkpoint.state == state  # what was saved, untouched
    verify = [n.id for n in result.state.tree if n.kind is NodeKind.VERIFICATION]
    assert verify == ["verify:act-04", "verify:act-read"]
    ids = [n.id for n in result.state.tree]
    assert ids.index("verify:act-04") + 1 == ids.index(agent.step_id(4))
    assert ids.index("verify:act-read") + 1 == ids.index(agent.step_id(6))
    assert result.state.current_node_id == "verify:act-04"


class _ChatStub(ThreadingHTTPServer):
    """The smallest OpenAI-compatible chat endpoint: answers every call with ``reply``."""

    daemon_threads = True
    reply: tuple[int, str] = (200, "{}")
    calls: list[dict[str, Any]]


class _ChatHandler(BaseHTTPRequestHandler):
    server: _ChatStub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.calls.append(body)
        status, content = self.server.reply
        if status != 200:
            payload = {"error": {"message": "scripted", "type": "server_error", "code": None}}
        else:
            payload = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def chat_stub() -> Iterator[_ChatStub]:
    server = _ChatStub(("127.0.0.1", 0), _ChatHandler)
    server.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def remote_llm(chat_stub: _ChatStub) -> Iterator[OpenAILLM]:
    host, port = chat_stub.server_address[:2]
    llm = OpenAILLM(
        base_url=f"http://{host!s}:{port}/v1",
        api_key="test-key",
        model_fast="fast-model",
        model_deep="deep-model",
        timeout_s=5,
    )
    yield llm
    llm._client.close()


def test_the_remote_model_calibrates_a_resume(pool, chat_stub, remote_llm) -> None:  # type: ignore[no-untyped-def]
    service = CheckpointService(pool, remote_llm)
    service.checkpoint(TENANT, TASK, agent.expected_state(4))
    chat_stub.reply = (
        200,
        json.dumps(
            {
                "needs_verification": True,
                "reason": "the report may be out already",
                "checks": [{"action_id": "act-04", "reason": "look for the published report"}],
            }
        ),
    )

    result = service.resume(TENANT, TASK)

    assert result is not None
    assert result.calibrated_by == "openai:fast-model"
    assert result.state.node("verify:act-04").note == "look for the published report"
    facts = json.loads(chat_stub.calls[-1]["messages"][1]["content"])
    assert facts["pending_actions"][0]["effect"] == "external_write"


@pytest.mark.parametrize(
    "answer",
    [
        "not json at all",
        json.dumps({"needs_verification": True, "reason": "x", "checks": []}),
        json.dumps({"needs_verification": "maybe", "reason": "x"}),
        json.dumps(
            {
                "needs_verification": True,
                "reason": "x",
                "checks": [{"action_id": "invented", "reason": "y"}],
            }
        ),
    ],
)
def test_a_malformed_calibration_is_refused_by_the_adapter(chat_stub, remote_llm, answer) -> None:  # type: ignore[no-untyped-def]
    checkpoint, _ = agent_checkpoint(4)
    chat_stub.reply = (200, answer)
    with pytest.raises(MalformedLLMOutput):
        remote_llm.calibrate_resume(checkpoint, 10.0)


def agent_checkpoint(steps: int) -> tuple[Any, bytes]:
    from pipelines.state.codec import new_checkpoint

    return new_checkpoint(
        TENANT, TASK, agent.expected_state(steps), parent_id=None, created_at=datetime.now(UTC)
    )


def test_a_resume_does_not_wait_for_a_failing_model(pool, chat_stub, remote_llm) -> None:  # type: ignore[no-untyped-def]
    service = CheckpointService(pool, remote_llm)
    service.checkpoint(TENANT, TASK, agent.expected_state(4))
    chat_stub.reply = (500, "")

    result = service.resume(TENANT, TASK)

    assert result is not None
    assert result.calibrated_by.startswith("offline (fallback: LLM server error")
    assert [n.id for n in result.state.tree if n.kind is NodeKind.VERIFICATION] == ["verify:act-04"]


# -- the CLI ---------------------------------------------------------------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="memharness")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def test_the_cli_lists_shows_and_verifies(service, db, capsys) -> None:  # type: ignore[no-untyped-def]
    ids = [service.checkpoint(TENANT, TASK, state) for state in states(3)]
    scope = ["--tenant", TENANT, "--task", TASK]

    assert run_cli(["checkpoints", "list", *scope]) == 0
    listing = capsys.readouterr().out
    assert [line.split()[0] for line in listing.splitlines()[1:]] == [str(i) for i in ids[::-1]]

    assert run_cli(["checkpoints", "list", *scope, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["parent_id"] == str(ids[1])

    assert run_cli(["checkpoints", "show", *scope, "--id", str(ids[1])]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert TaskState.model_validate(shown["state"]) == agent.expected_state(1)

    assert run_cli(["checkpoints", "verify", *scope]) == 0
    assert "3 sound, 0 corrupted" in capsys.readouterr().out

    db.execute("UPDATE checkpoints SET body = substr(body, 1, 300) WHERE id = %s", (ids[2],))
    assert run_cli(["checkpoints", "verify", *scope]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT  {ids[2]}  truncated" in out
    assert "2 sound, 1 corrupted" in out
    assert run_cli(["checkpoints", "show", *scope, "--id", str(ids[2])]) == 1
    assert "unreadable (truncated)" in capsys.readouterr().err
    assert run_cli(["checkpoints", "show", *scope, "--id", str(uuid.uuid4())]) == 2
    assert run_cli(["checkpoints", "show", *scope, "--id", "nope"]) == 2
    assert "is not a UUID" in capsys.readouterr().err


# -- the crash ---------------------------------------------------------------------------------


def start_agent(mode: str, task: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.checkpoint_agent", mode, "--tenant", TENANT,
         "--task", task, *extra],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def read_events(proc: subprocess.Popen[str]) -> queue.Queue[dict[str, Any] | None]:
    """Parsed stdout lines as they come; None at EOF."""
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                events.put(json.loads(line))
        events.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return events


def wait_for(
    events: queue.Queue[dict[str, Any] | None],
    done: Callable[[dict[str, Any]], bool],
    seen: list[dict[str, Any]],
    timeout_s: float,
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        event = events.get(timeout=max(0.0, deadline - time.monotonic()))
        if event is None:
            raise AssertionError(f"the agent exited before the condition held: {seen[-3:]}")
        seen.append(event)
        if done(event):
            return


def test_an_agent_killed_mid_task_resumes_exactly_from_its_last_checkpoint(service, db) -> None:  # type: ignore[no-untyped-def]
    task = "crash-test"
    # given an agent that has checkpointed nine nodes and is working on the tenth, whose
    # pending action publishes a report (unless the kill lands a step late)
    proc = start_agent("run", task, "--step-delay-s", "0.1")
    events = read_events(proc)
    seen: list[dict[str, Any]] = []
    try:
        wait_for(
            events,
            lambda e: e["event"] == "checkpoint" and e["steps_done"] >= 9,
            seen,
            timeout_s=60,
        )
        # when it is SIGKILLed, with no chance to clean up
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    while (event := events.get(timeout=10)) is not None:
        seen.append(event)
    assert proc.stderr is not None
    proc.stderr.close()
    assert not any(e["event"] == "finished" for e in seen), "killed too late to test anything"
    reported = max(e["steps_done"] for e in seen if e["event"] == "checkpoint")

    # then a new process resumes from the last committed checkpoint, exactly
    resumed = subprocess.run(
        [sys.executable, "-m", "tests.support.checkpoint_agent", "resume", "--tenant", TENANT,
         "--task", task],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lines = [json.loads(line) for line in resumed.stdout.splitlines()]
    [start] = [e for e in lines if e["event"] == "resumed"]
    steps = start["steps_done"]
    # a checkpoint commits before it is reported: at most one more than was reported
    assert reported <= steps <= reported + 1
    assert steps < agent.STEPS
    expected = agent.expected_state(steps)
    restored = TaskState.model_validate(start["state"])
    assert restored.tree == expected.tree
    assert restored.variables == expected.variables
    assert restored == expected
    assert restored.working_memory == expected.working_memory
    assert start["fell_back_from"] == []
    # the pending action of a publishing step is verified before it is repeated
    pending = expected.pending_actions[0]
    if pending.effect is ActionEffect.EXTERNAL_WRITE:
        assert start["verification_nodes"] == [f"verify:{pending.action_id}"]
        assert start["current_node_id"] == f"verify:{pending.action_id}"
    else:
        assert start["verification_nodes"] == []
        assert start["current_node_id"] == agent.step_id(steps)

    # and finishing from there ends exactly where an uninterrupted run ends
    [finish] = [e for e in lines if e["event"] == "finished"]
    final = TaskState.model_validate(finish["state"])
    complete = agent.expected_state(agent.STEPS)
    assert tuple(n for n in final.tree if n.kind is NodeKind.STEP) == complete.tree
    assert final.variables == complete.variables
    assert final.working_memory == complete.working_memory
    newest = service.resume(TENANT, task)
    assert newest is not None
    assert newest.checkpoint.state == final
