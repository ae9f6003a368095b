"""The HTTP API through a real uvicorn server on a spare port, real PostgreSQL and Redis, and a
real worker where an answer needs the store's owner (recall, context, the drain)."""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from memharness.server.keys import create_key

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STATE = {"phase": "execution", "tree": [{"id": "n1", "title": "Write the parser"}],
         "current_node_id": "n1"}  # fmt: skip
TASK = "billing"


class Server:
    def __init__(self, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = proc
        self.log = log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def spare_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spawn_server(tmp: Path, name: str, env: dict[str, str]) -> Server:
    port = spare_port()
    log = tmp / f"{name}.log"
    with log.open("wb") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memharness.cli", "serve", "--port", str(port)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=ROOT,
            start_new_session=True,
        )
    return Server(port, proc, log)


def wait_ready(server: Server) -> Server:
    proc, name = server.proc, server.log.stem
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server {name} exited:\n{server.log_text()}")
        try:
            # the store's owner is each test's to start: PostgreSQL and Redis are enough here
            answer = httpx.get(f"{server.url}/readyz", timeout=5).json()
            if answer["postgres"] == answer["redis"] == "ok":
                return server
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"server {name} not ready:\n{server.log_text()}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(timeout=5)


@pytest.fixture(scope="module")
def servers(migrated, tmp_path_factory) -> Iterator[dict[str, Server]]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("api")
    main = spawn_server(
        tmp,
        "main",
        {
            "MEMHARNESS_API_RATE_LIMIT_PER_S": "0",
            "MEMHARNESS_API_UNAUTHENTICATED_RATE_PER_S": "0",
            "MEMHARNESS_API_KEY_CACHE_S": "0.5",
        },
    )
    strict = spawn_server(
        tmp,
        "strict",
        {
            "MEMHARNESS_API_RATE_LIMIT_PER_S": "0.5",
            "MEMHARNESS_API_RATE_LIMIT_BURST": "3",
            "MEMHARNESS_API_MAX_BODY_BYTES": "2048",
        },
    )
    wait_ready(main)
    wait_ready(strict)
    yield {"main": main, "strict": strict}
    for server in (main, strict):
        stop_server(server)


@pytest.fixture
def api(servers, db, redis_client) -> Server:  # type: ignore[no-untyped-def]
    return servers["main"]


def key_for(
    db: Any, tenant: str = "acme", scopes: str = "read,write", agent: str | None = None
) -> str:
    text, _ = create_key(db, tenant_id=tenant, scopes=scopes, agent_id=agent)
    return text


def session(server: Server, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def memory(content: str, **extra: Any) -> dict[str, Any]:
    return {"content": content, "task_id": TASK, "session_id": "s-1", **extra}


def assert_refused(response: httpx.Response, status: int, error: str, field: str | None) -> None:
    assert response.status_code == status, response.text
    payload = response.json()
    assert set(payload) >= {"error", "field", "message", "limit"}, payload
    assert (payload["error"], payload["field"]) == (error, field), payload


# Each endpoint: method, path, a good body, the scope it needs, a bad body and the field named.
ENDPOINTS: list[tuple[str, str, Any, str, Any, str]] = [
    ("POST", "/v1/memories", memory("We bill in cents."), "write",
     memory("x", metadata=[1]), "metadata"),
    ("POST", "/v1/memories:batch", {"items": [memory("One."), memory("Two.")]}, "write",
     {"items": [memory("ok"), {"task_id": TASK, "session_id": "s"}]}, "items[1].content"),
    ("POST", "/v1/recall", {"query": "billing"}, "read", {"query": "q", "limit": 0}, "limit"),
    ("POST", "/v1/context", {"task_id": TASK, "query": "what next?", "budget_tokens": 4000},
     "read", {"task_id": TASK, "query": "q", "budget_tokens": -5}, "budget_tokens"),
    ("POST", "/v1/affected-by", {"query": "the parser"}, "read",
     {"query": "q", "max_hops": 11}, "max_hops"),
    ("POST", f"/v1/tasks/{TASK}/checkpoints", {"state": STATE}, "write",
     {"state": {"tree": [{"id": "n1"}]}}, "state.tree[0].title"),
    ("GET", f"/v1/tasks/{TASK}/checkpoints", None, "read", None, ""),
    ("POST", f"/v1/tasks/{TASK}/resume", None, "read", {"tenant": "x"}, "tenant"),
    ("POST", f"/v1/tasks/{TASK}/complete", None, "write", {"task": 1}, "task"),
    ("GET", "/v1/stats", None, "read", None, ""),
    ("POST", f"/v1/memories/{uuid.uuid4()}/correct", {"content": "new", "reason": "fix"},
     "write", {"content": "new", "reason": ""}, "reason"),
    ("GET", f"/v1/memories/{uuid.uuid4()}/history", None, "read", None, ""),
    ("POST", "/v1/forget", {"task_id": "nothing-here", "reason": "test"}, "write",
     {"reason": "no target"}, "target"),
    ("GET", f"/v1/forget/{uuid.uuid4()}", None, "read", None, ""),
    ("GET", "/v1/memories", None, "read", None, ""),
    ("GET", "/v1/semantic", None, "read", None, ""),
    ("GET", "/v1/export", None, "read", None, ""),
]  # fmt: skip


def call(client: httpx.Client, method: str, path: str, payload: Any) -> httpx.Response:
    return (
        client.request(method, path, json=payload)
        if payload is not None
        else client.request(method, path)
    )


def test_every_endpoint_refuses_bad_keys_missing_scopes_other_tenants_and_bad_input(
    api: Server, db: Any
) -> None:
    key = key_for(db)
    reader, writer = key_for(db, scopes="read"), key_for(db, scopes="write")
    revoked_text, revoked = create_key(db, tenant_id="acme", scopes="read,write")
    db.execute("UPDATE api_keys SET revoked_at = now() WHERE id = %s", (revoked.id,))
    wrong = key[:-3] + ("AAA" if not key.endswith("AAA") else "BBB")
    with session(api, key) as good:
        for method, path, payload, scope, bad, field in ENDPOINTS:
            for presented in (None, "Bearer-less", wrong, revoked_text):
                with session(api, presented) as client:
                    assert_refused(call(client, method, path, payload), 401, "unauthorized",
                                   "authorization")  # fmt: skip
            lacking = reader if scope == "write" else writer
            with session(api, lacking) as client:
                assert_refused(call(client, method, path, payload), 403, "forbidden", "scope")
            if method == "POST":
                other = {**(payload or {}), "tenant_id": "globex"}
                assert_refused(good.post(path, json=other), 403, "forbidden", "tenant_id")
                assert_refused(good.post(path, json=bad), 422, "invalid_input", field)
                big = {"content": "x" * 1_100_000}
                assert_refused(good.post(path, json=big), 413, "too_large", "body")

                def chunks() -> Iterator[bytes]:
                    yield b'{"content": "'
                    for _ in range(40):
                        yield b"y" * 32_768
                    yield b'"}'

                # a chunked body declares no length: it is counted as it is read
                assert_refused(good.post(path, content=chunks()), 413, "too_large", "body")
                malformed = good.post(path, content=b"{not json",
                                      headers={"content-type": "application/json"})  # fmt: skip
                assert_refused(malformed, 422, "invalid_input", "body")
    # the rate limit's own answers on the strict server are tested below; here the main
    # server served every call without one
    assert "Authorization" not in api.log_text() and key not in api.log_text()


def test_every_endpoint_answers_its_happy_path(api: Server, db: Any, workers: Any) -> None:
    workers("write")
    key = key_for(db, scopes="read,write")
    with session(api, key) as client:
        first = client.post("/v1/memories", json=memory("We decided to bill in cents because "
                                                         "floats lose money."),
                            headers={"Idempotency-Key": "k-1"})  # fmt: skip
        assert first.status_code == 202, first.text
        receipt = first.json()
        assert receipt["status"] == "accepted"
        replay = client.post("/v1/memories", json=memory("We decided to bill in cents because "
                                                          "floats lose money."),
                             headers={"Idempotency-Key": "k-1"})  # fmt: skip
        assert replay.json() == {
            **receipt,
            "status": "duplicate",
            "reason": replay.json()["reason"],
        }
        reused = client.post("/v1/memories", json=memory("Something else entirely."),
                             headers={"Idempotency-Key": "k-1"})  # fmt: skip
        assert_refused(reused, 422, "invalid_input", "idempotency_key")
        batch = client.post("/v1/memories:batch", json={"items": [
            memory("Status: the parser is blocked on the schema review."),
            memory("The schema review delays the parser, which delays the billing export."),
        ]})  # fmt: skip
        assert batch.status_code == 202 and len(batch.json()["receipts"]) == 2
        ids = [receipt["memory_id"], *(r["memory_id"] for r in batch.json()["receipts"])]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = client.get(f"/v1/memories/{ids[0]}")
            if got.json().get("status") != "pending":
                break
            time.sleep(0.2)
        assert got.status_code == 200 and got.json()["tenant_id"] == "acme"
        assert got.json()["content"].startswith("We decided to bill")

        hits = client.post("/v1/recall", json={"query": "bill in cents", "limit": 3})
        assert hits.status_code == 200, hits.text
        assert any(hit.get("memory_id", hit.get("id")) == ids[0] for hit in hits.json()["hits"])
        context = client.post("/v1/context", json={"task_id": TASK, "query": "How do we bill?",
                                                    "budget_tokens": 4000})  # fmt: skip
        assert context.status_code == 200, context.text
        assert "cents" in context.json()["text"] and context.json()["total_tokens"] <= 4000
        affected = client.post("/v1/affected-by", json={"query": "the schema review"})
        assert affected.status_code == 200 and affected.json()["query"] == "the schema review"

        saved = client.post(f"/v1/tasks/{TASK}/checkpoints", json={"state": STATE})
        assert saved.status_code == 201, saved.text
        later = {**STATE, "iteration": 3}
        newer = client.post(f"/v1/tasks/{TASK}/checkpoints",
                            json={"state": later, "phase_transition": True})  # fmt: skip
        listed = client.get(f"/v1/tasks/{TASK}/checkpoints").json()["checkpoints"]
        assert [c["id"] for c in listed] == [newer.json()["checkpoint_id"],
                                             saved.json()["checkpoint_id"]]  # fmt: skip
        resumed = client.post(f"/v1/tasks/{TASK}/resume")
        assert resumed.status_code == 200 and resumed.json()["resumed"]["state"]["iteration"] == 3
        back = client.post(f"/v1/tasks/{TASK}/checkpoints/{saved.json()['checkpoint_id']}/rollback")
        assert back.status_code == 200
        assert client.post(f"/v1/tasks/{TASK}/resume").json()["resumed"]["state"]["iteration"] == 0
        done = client.post(f"/v1/tasks/{TASK}/complete")
        assert done.status_code == 202 and done.json()["task_id"] == TASK
        stats = client.get("/v1/stats").json()
        assert stats["tenant_id"] == "acme" and stats.get("memories_stored", 0) >= 1

        assert_refused(client.get(f"/v1/memories/{uuid.uuid4()}"), 404, "not_found", "memory_id")
        assert_refused(client.get("/v1/memories/nope"), 422, "invalid_input", "memory_id")
        assert_refused(client.post("/v1/tasks/never/resume"), 404, "not_found", "task_id")
        assert_refused(client.post(f"/v1/tasks/{TASK}/checkpoints/{uuid.uuid4()}/rollback"),
                       404, "not_found", "checkpoint_id")  # fmt: skip


def test_correct_forget_history_list_and_export_over_http(
    api: Server, db: Any, workers: Any
) -> None:
    workers("owner")
    key = key_for(db, tenant="owner-co", scopes="read,write")
    admin = key_for(db, tenant="owner-co", scopes="admin")
    with session(api, key) as client:
        made = client.post("/v1/memories:batch", json={"items": [
            memory("Preference: reports go out as PDF.", type="preference"),
            memory("The nightly export ZEBRAFISH-7 runs at 02:00."),
        ]}).json()["receipts"]  # fmt: skip
        pdf, secret = made[0]["memory_id"], made[1]["memory_id"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = client.get("/v1/memories", params={"task_id": TASK}).json()
            if len(listed["items"]) == 2:
                break
            time.sleep(0.2)
        assert {item["id"] for item in listed["items"]} == {pdf, secret}

        fixed = client.post(f"/v1/memories/{pdf}/correct",
                            json={"content": "Preference: reports go out as HTML.",
                                  "reason": "the user changed their mind"})  # fmt: skip
        assert fixed.status_code == 200, fixed.text
        assert fixed.json()["supersedes"] == pdf and fixed.json()["version"] == 2
        again = client.post(f"/v1/memories/{pdf}/correct",
                            json={"content": "Preference: reports go out as DOCX.",
                                  "reason": "late"})  # fmt: skip
        assert_refused(again, 409, "conflict", "memory_id")
        history = client.get(f"/v1/memories/{pdf}/history").json()
        assert history["current_id"] == fixed.json()["memory_id"]
        assert [v["version"] for v in history["versions"]] == [1, 2]
        current = client.get("/v1/memories", params={"task_id": TASK}).json()["items"]
        assert pdf not in {item["id"] for item in current}

        # a whole-tenant erasure needs the admin scope
        everything = client.post("/v1/forget", json={"whole_tenant": True, "reason": "bye"})
        assert_refused(everything, 403, "forbidden", "scope")
        gone = client.post("/v1/forget", json={"memory_id": secret, "reason": "user asked"})
        assert gone.status_code == 202, gone.text
        request_id = gone.json()["request_id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = client.get(f"/v1/forget/{request_id}").json()
            if state["status"] in ("done", "dead"):
                break
            time.sleep(0.2)
        assert state["status"] == "done", state
        twice = client.post("/v1/forget", json={"memory_id": secret, "reason": "again"})
        assert twice.json()["already"] is True and twice.json()["request_id"] == request_id
        tombstones = client.get("/v1/memories", params={"status": "forgotten"}).json()["items"]
        assert [t["id"] for t in tombstones] == [secret] and tombstones[0]["content"] == ""
        hits = client.post("/v1/recall", json={"query": "ZEBRAFISH-7 nightly export"}).json()
        assert "ZEBRAFISH" not in json.dumps(hits)

        with client.stream("GET", "/v1/export") as streamed:
            assert streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("application/x-ndjson")
            lines = [json.loads(line) for line in streamed.iter_lines() if line]
        assert lines[0]["kind"] == "header" and lines[0]["tenant_id"] == "owner-co"
        assert lines[-1]["kind"] == "end"
        exported = {line["id"] for line in lines if line["kind"] == "memory"}
        assert {pdf, fixed.json()["memory_id"], secret} <= exported
        assert "ZEBRAFISH" not in json.dumps(lines)
        assert_refused(client.get(f"/v1/memories/{uuid.uuid4()}/history"), 404, "not_found",
                       "memory_id")  # fmt: skip
    # another tenant sees none of it, and an unknown id reads the same as a foreign one
    with session(api, key_for(db, tenant="someone-else")) as other:
        absent = str(uuid.uuid4())
        foreign = other.get(f"/v1/memories/{pdf}/history")
        unknown = other.get(f"/v1/memories/{absent}/history")
        assert foreign.status_code == unknown.status_code == 404
        assert foreign.text.replace(pdf, "ID") == unknown.text.replace(absent, "ID")
        assert other.post(f"/v1/memories/{pdf}/correct",
                          json={"content": "x", "reason": "y"}).status_code == 404  # fmt: skip
        assert other.get("/v1/memories").json()["items"] == []
    with session(api, admin) as root:
        erased = root.post("/v1/forget", json={"whole_tenant": True, "reason": "account closed"})
        assert erased.status_code == 202, erased.text


def test_a_key_bound_to_an_agent_records_for_that_agent_only(api: Server, db: Any) -> None:
    key = key_for(db, agent="planner")
    with session(api, key) as client:
        made = client.post("/v1/memories", json=memory("Plan: split the parser."))
        assert made.status_code == 202
        row = db.execute("SELECT agent_id FROM memories WHERE id = %s",
                         (made.json()["memory_id"],)).fetchone()  # fmt: skip
        assert row[0] == "planner"
        other = client.post("/v1/memories", json=memory("I am someone else.", agent_id="coder"))
        assert_refused(other, 403, "forbidden", "agent_id")


def test_a_key_bound_to_an_agent_changes_only_that_agents_memories(
    api: Server, db: Any, workers: Any
) -> None:
    # given: three memories of one tenant, by the planner, the coder and an unbound key
    workers("owner")
    planner = key_for(db, tenant="agents-co", agent="planner")
    coder = key_for(db, tenant="agents-co", agent="coder")
    unbound = key_for(db, tenant="agents-co")
    made = {}
    for name, key in (("planner", planner), ("coder", coder), ("unbound", unbound)):
        with session(api, key) as client:
            sent = client.post("/v1/memories", json=memory(f"Note of the {name}: ship on Friday."))
            assert sent.status_code == 202, sent.text
            made[name] = sent.json()["memory_id"]
    with session(api, unbound) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(client.get("/v1/memories", params={"task_id": TASK}).json()["items"]) == 3:
                break
            time.sleep(0.2)
    absent = str(uuid.uuid4())
    with session(api, planner) as client:
        # when: the planner's key reaches for memories it did not write
        def refusals(target: str) -> list[httpx.Response]:
            return [
                client.post(f"/v1/memories/{target}/correct",
                            json={"content": "Ship on Monday.", "reason": "mine now"}),
                client.post(f"/v1/memories/{target}/undo-correction", json={"reason": "x"}),
                client.get(f"/v1/memories/{target}/history"),
                client.post("/v1/forget", json={"memory_id": target, "reason": "x"}),
            ]  # fmt: skip

        # then: each answers the 404 of an id that does not exist, byte for byte
        unknown = [r.text.replace(absent, "ID") for r in refusals(absent)]
        for target in (made["coder"], made["unbound"]):
            answers = refusals(target)
            assert [r.status_code for r in answers] == [404, 404, 404, 404]
            assert [r.text.replace(target, "ID") for r in answers] == unknown
        # a task or a session holds every agent's memories: not a bound key's to erase
        assert_refused(client.post("/v1/forget", json={"task_id": TASK, "reason": "x"}),
                       403, "forbidden", "agent_id")  # fmt: skip
        assert_refused(client.post("/v1/forget", json={"session_id": "s-1", "reason": "x"}),
                       403, "forbidden", "agent_id")  # fmt: skip
        # reads stay the tenant's: the planner still sees what the coder wrote
        assert client.get(f"/v1/memories/{made['coder']}").status_code == 200
        # and its own memory is its to correct, follow and forget
        fixed = client.post(f"/v1/memories/{made['planner']}/correct",
                            json={"content": "Note of the planner: ship on Monday.",
                                  "reason": "the date moved"})  # fmt: skip
        assert fixed.status_code == 200, fixed.text
        assert client.get(f"/v1/memories/{made['planner']}/history").status_code == 200
        gone = client.post("/v1/forget", json={"memory_id": fixed.json()["memory_id"],
                                               "reason": "done"})  # fmt: skip
        assert gone.status_code == 202, gone.text
    with session(api, unbound) as client:
        # a key bound to no agent acts for the whole tenant
        assert client.get(f"/v1/memories/{made['coder']}/history").status_code == 200
        erased = client.post("/v1/forget", json={"task_id": TASK, "reason": "wrap up"})
        assert erased.status_code == 202, erased.text


def test_the_rate_limit_answers_429_with_retry_after(servers: dict[str, Server], db: Any,
                                                     redis_client: Any) -> None:  # fmt: skip
    strict = servers["strict"]
    with session(strict, key_for(db)) as client:
        answers = [client.get("/v1/stats") for _ in range(5)]
        assert [a.status_code for a in answers[:3]] == [200, 200, 200]
        limited = answers[3]
        assert_refused(limited, 429, "rate_limited", "api_key")
        assert int(limited.headers["retry-after"]) == 2
        assert limited.json()["limit"] == "0.5 requests/s, burst 3"
    with session(strict, key_for(db)) as other_key:
        assert other_key.get("/v1/stats").status_code == 200  # buckets are per key
        # the strict server's smaller body limit
        assert_refused(other_key.post("/v1/memories", json=memory("x" * 3000)), 413,
                       "too_large", "body")  # fmt: skip


def test_ten_thousand_cross_tenant_requests_leak_nothing(api: Server, db: Any) -> None:
    alice, bob = key_for(db, tenant="tenant-a"), key_for(db, tenant="tenant-b")
    secret = "BOB-SECRET"
    with session(api, bob) as client:
        bob_ids = [
            r["memory_id"]
            for r in client.post("/v1/memories:batch", json={"items": [
                {"content": f"{secret} plan {i}", "task_id": "bob-task", "session_id": "s"}
                for i in range(20)]}).json()["receipts"]
        ]  # fmt: skip
        bob_checkpoints = [
            client.post("/v1/tasks/bob-task/checkpoints",
                        json={"state": {**STATE, "iteration": i}}).json()["checkpoint_id"]
            for i in range(3)
        ]  # fmt: skip
    before = db.execute("SELECT count(*) FROM checkpoints").fetchone()[0]

    def pair(rng: random.Random) -> tuple[tuple[str, str, Any], tuple[str, str, Any], str, str]:
        """A request about Bob's thing and the same request about a thing that does not
        exist, with the two ids to blank out before comparing the answers."""
        kind = rng.randrange(6)
        fake = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if kind == 0:
            real = rng.choice(bob_ids)
            return (
                ("GET", f"/v1/memories/{real}", None),
                ("GET", f"/v1/memories/{fake}", None),
                real,
                fake,
            )
        if kind == 1:
            real = rng.choice(bob_checkpoints)
            path = "/v1/tasks/bob-task/checkpoints/{}/rollback"
            return ("POST", path.format(real), None), ("POST", path.format(fake), None), real, fake
        if kind == 2:
            return (
                ("GET", "/v1/tasks/bob-task/checkpoints", None),
                ("GET", f"/v1/tasks/{fake}/checkpoints", None),
                "bob-task",
                fake,
            )
        if kind == 3:
            return (
                ("POST", "/v1/tasks/bob-task/resume", None),
                ("POST", f"/v1/tasks/{fake}/resume", None),
                "bob-task",
                fake,
            )
        if kind == 4:
            body = memory("hi", tenant_id="tenant-b")
            return (
                ("POST", "/v1/memories", body),
                ("POST", "/v1/memories", {**body, "tenant_id": f"t-{fake}"}),
                "",
                "",
            )
        body = {"query": secret, "tenant_id": "tenant-b"}
        return (("POST", "/v1/recall", body),
                ("POST", "/v1/recall", {**body, "tenant_id": f"t-{fake}"}), "", "")  # fmt: skip

    host, port = api.url.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {alice}", "Content-Type": "application/json"}

    def attack(rounds: int, seed: int) -> tuple[int, int, int]:
        """One client thread on its own keep-alive connection (http.client: the cheapest
        Python client, so the server, not the client, is what the run measures)."""
        leaks = differences = sent = 0
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        local = random.Random(seed)
        try:
            for _ in range(rounds):
                about, absent, real, fake = pair(local)
                answers = []
                for method, path, payload in (about, absent):
                    connection.request(method, path, None if payload is None else
                                       json.dumps(payload), headers)  # fmt: skip
                    response = connection.getresponse()
                    answers.append((response.status, response.read().decode()))
                sent += 2
                (status, text), (other_status, other_text) = answers
                if (
                    secret in text
                    or "tenant-b" in text
                    or any(i in text for i in bob_ids if i != real)
                ):
                    leaks += 1
                same = status == other_status and (text.replace(real, "ID") if real else text) == (
                    other_text.replace(fake, "ID") if fake else other_text
                )
                if not same or status not in (200, 403, 404):
                    differences += 1
        finally:
            connection.close()
        return leaks, differences, sent

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(attack, [1_250] * 4, range(4)))
    leaks, differences, sent = (sum(column) for column in zip(*results, strict=True))
    assert sent == 10_000
    assert (leaks, differences) == (0, 0)
    # and nothing of Bob's changed: no rollback reached his task
    assert db.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == before


def test_the_keys_command_creates_lists_and_revokes(
    api: Server, db: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from memharness.cli import main

    def cli(*args: str) -> tuple[int, str, str]:
        code = main(["keys", *args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = cli("create", "--tenant", "acme", "--scopes", "read", "--agent", "bot", "--json")
    assert code == 0
    created = json.loads(out)
    key = created["key"]
    assert created["scopes"] == ["read"] and created["agent_id"] == "bot"
    code, out, _ = cli("list", "--tenant", "acme")
    assert created["prefix"] in out and key.split("_", 2)[2] not in out
    code, _, err = cli("create", "--tenant", "acme", "--scopes", "root")
    assert code == 2 and "scopes" in err
    with session(api, key) as client:
        assert client.get("/v1/stats").status_code == 200
        code, out, _ = cli("revoke", created["prefix"])
        assert code == 0 and "revoked" in out
        time.sleep(0.6)  # the main server trusts a looked-up key for 0.5 s
        assert_refused(client.get("/v1/stats"), 401, "unauthorized", "authorization")
    assert cli("revoke", created["prefix"])[0] == 1
    assert "revoked" in cli("list", "--json")[1]
    # only a hash is stored
    stored = db.execute("SELECT secret_hash FROM api_keys WHERE prefix = %s",
                        (created["prefix"],)).fetchone()[0]  # fmt: skip
    assert key.split("_", 2)[2].encode() not in bytes(stored)
