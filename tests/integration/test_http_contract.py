"""The exact contract of the HTTP API, through a real server: one error shape for every
failure (unparsable bodies, unknown parameters, wrong methods, unreachable services), values
no store can hold refused up front, and keys only in headers, never in the access log."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_http_api import (
    ENDPOINTS,
    TASK,
    Server,
    assert_refused,
    key_for,
    memory,
    session,
    spare_port,
    spawn_server,
    stop_server,
    wait_ready,
)

pytestmark = pytest.mark.integration

# Each an audit finding: FastAPI answered the first two `400 {"detail": ...}` on most routes
# and took the last key of the third.
UNPARSABLE: dict[str, bytes] = {
    "invalid UTF-8": b'{"query": "caf\xe9"}',
    "too deep": b"[" * 100_000 + b"]" * 100_000,
    "a key twice": b'{"query": "billing", "query": "other"}',
    "not JSON": b"query=billing",
    "NaN": b'{"query": "q", "limit": NaN}',
}


@pytest.fixture(scope="module")
def server(migrated, tmp_path_factory) -> Iterator[Server]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("contract")
    main = spawn_server(
        tmp,
        "contract",
        {"MEMHARNESS_API_RATE_LIMIT_PER_S": "0", "MEMHARNESS_API_UNAUTHENTICATED_RATE_PER_S": "0"},
    )
    yield wait_ready(main)
    stop_server(main)


@pytest.fixture
def api(server, db, redis_client) -> Server:  # type: ignore[no-untyped-def]
    return server


def test_an_unparsable_body_is_a_422_naming_body_on_every_route(api: Server, db: Any) -> None:
    with session(api, key_for(db, scopes="admin")) as client:
        for method, path, *_ in ENDPOINTS:
            for what, data in UNPARSABLE.items():
                answer = client.request(
                    method, path, content=data, headers={"content-type": "application/json"}
                )
                assert_refused(answer, 422, "invalid_input", "body")
                assert "detail" not in answer.json(), (path, what)
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_an_unknown_query_parameter_is_refused_by_name(api: Server, db: Any) -> None:
    with session(api, key_for(db)) as client:
        # used to answer 200 with the key's own data, as if the filter had been honoured
        assert_refused(client.get("/v1/memories", params={"tenant_id": "other"}), 422,
                       "invalid_input", "tenant_id")  # fmt: skip
        assert_refused(client.get("/v1/stats", params={"verbose": "1"}), 422, "invalid_input",
                       "verbose")  # fmt: skip
        assert_refused(client.post("/v1/recall", params={"limit": "3"}, json={"query": "q"}),
                       422, "invalid_input", "limit")  # fmt: skip
        assert client.get("/v1/memories", params={"limit": "5"}).status_code == 200


def test_a_wrong_method_is_a_405_that_says_what_is_allowed(api: Server, db: Any) -> None:
    with session(api, key_for(db)) as client:
        answer = client.delete("/v1/stats")
    assert_refused(answer, 405, "method_not_allowed", "method")
    assert answer.headers["allow"] == "GET"
    assert "GET" in answer.json()["message"]
    # a path two routes share names both; /metrics says so before asking for its token
    with session(api, key_for(db)) as client:
        both = client.request("OPTIONS", f"/v1/tasks/{TASK}/checkpoints")
    assert_refused(both, 405, "method_not_allowed", "method")
    assert both.headers["allow"] == "GET, POST"
    with session(api, None) as anonymous:
        metrics = anonymous.request("TRACE", "/metrics")
    assert_refused(metrics, 405, "method_not_allowed", "method")
    assert metrics.headers["allow"] == "GET"


def test_a_forged_cursor_is_a_404_and_a_malformed_one_a_422(api: Server, db: Any) -> None:
    import base64

    forged = base64.urlsafe_b64encode(b'["0", "9999-12-31T23:59:59-12:00", "x"]').decode()
    with session(api, key_for(db)) as client:
        for path in ("/v1/memories", "/v1/semantic"):
            for cursor in ("0", forged.rstrip("=")):
                assert_refused(client.get(path, params={"cursor": cursor}), 404, "not_found",
                               "cursor")  # fmt: skip
            assert_refused(client.get(path, params={"cursor": "a/b="}), 422, "invalid_input",
                           "cursor")  # fmt: skip


def test_a_timestamp_no_store_can_read_back_is_refused_and_nothing_is_written(
    api: Server, db: Any
) -> None:
    # year 10000 once in UTC: PostgreSQL stored it and every read of the tenant failed
    extreme = "9999-12-31T23:59:59-12:00"
    with session(api, key_for(db)) as client:
        one = client.post("/v1/memories", json=memory("We bill in cents.", timestamp=extreme))
        assert_refused(one, 422, "invalid_input", "timestamp")
        batch = client.post("/v1/memories:batch", json={"items": [
            memory("Fine."), memory("Not fine.", timestamp=extreme)]})  # fmt: skip
        assert_refused(batch, 422, "invalid_input", "items[1].timestamp")
        assert_refused(client.get("/v1/memories", params={"since": extreme}), 422,
                       "invalid_input", "since")  # fmt: skip
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_a_key_in_the_url_is_refused_and_never_written_to_the_access_log(
    api: Server, db: Any
) -> None:
    key = key_for(db)
    with session(api, None) as anonymous:
        answer = anonymous.get("/v1/stats", params={"api_key": key})
    assert_refused(answer, 401, "unauthorized", "api_key")
    assert "header" in answer.json()["message"]
    # refused even beside a good header: the key in the URL is already in some log
    with session(api, key) as client:
        assert_refused(client.get("/v1/memories", params={"api_key": key}), 401,
                       "unauthorized", "api_key")  # fmt: skip
        assert client.get("/v1/stats").status_code == 200
    deadline = time.monotonic() + 5
    while "api_key=REDACTED" not in api.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = api.log_text()
    assert "GET /v1/stats?api_key=REDACTED" in log  # the access log ran, blanked
    assert key not in log and key.split("_", 2)[2] not in log


@contextlib.contextmanager
def private_redis(tmp: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A Redis of the test's own on a spare port, nothing kept on disk; never the shared one."""
    port = spare_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(tmp)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                import redis

                redis.Redis(port=port, socket_timeout=0.5).ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


def test_redis_unreachable_is_a_503_with_retry_after(migrated, db: Any, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with private_redis(tmp_path) as (port, redis_proc):
        url = f"redis://127.0.0.1:{port}/0"
        # one server whose gate asks Redis for the rate, one whose routes ask it (the broker)
        limited = spawn_server(tmp_path, "limited", {"MEMHARNESS_REDIS_URL": url})
        unlimited = spawn_server(
            tmp_path,
            "unlimited",
            {"MEMHARNESS_REDIS_URL": url, "MEMHARNESS_API_RATE_LIMIT_PER_S": "0"},
        )
        try:
            wait_ready(limited)
            wait_ready(unlimited)
            key = key_for(db)
            with session(limited, key) as client:
                assert client.get("/v1/stats").status_code == 200

            # when Redis goes away
            redis_proc.terminate()
            redis_proc.wait(timeout=10)

            # then the gate and the routes that need it answer 503 in the one shape
            with session(limited, key) as client:
                for method, path in (("GET", "/v1/stats"), ("POST", "/v1/recall")):
                    payload = {"query": "billing"} if method == "POST" else None
                    answer = client.request(method, path, json=payload)
                    assert_refused(answer, 503, "unavailable", None)
                    assert int(answer.headers["retry-after"]) > 0
                    assert "Redis" in answer.json()["message"]
            with session(unlimited, key) as client:
                answer = client.post("/v1/recall", json={"query": "billing"})
                assert_refused(answer, 503, "unavailable", None)
                assert int(answer.headers["retry-after"]) > 0
                # PostgreSQL alone still serves what needs nothing else
                assert client.get("/v1/memories").status_code == 200
        finally:
            stop_server(limited)
            stop_server(unlimited)
        for server in (limited, unlimited):
            assert "Traceback" not in server.log_text(), server.log_text()[-3000:]


def test_the_openapi_declares_the_contract_answers(api: Server) -> None:
    spec = httpx.get(f"{api.url}/openapi.json", timeout=10).json()
    for path, operations in spec["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            declared = set(operation["responses"])
            assert {"401", "422", "503"} <= declared, (method, path, sorted(declared))
    assert json.dumps(spec)  # the document itself is JSON


def test_a_stored_row_no_datetime_can_hold_breaks_no_read_of_its_tenant(
    api: Server, db: Any
) -> None:
    # given a stored memory and a row beside it holding year 10000 (written by hand)
    import uuid

    from pipelines.records import content_hash

    with session(api, key_for(db)) as client:
        good = client.post("/v1/memories", json=memory("We bill in cents.")).json()["memory_id"]
        bad = uuid.uuid4()
        db.execute(
            "INSERT INTO memories (id, tenant_id, task_id, session_id, ts, content, content_hash,"
            " status) VALUES (%s, 'acme', %s, 's-1', '10000-01-01 11:59:59+00', 'Odd row.', %s,"
            " 'stored')",
            (bad, TASK, content_hash("Odd row.")),
        )

        # then listing (tombstones too), get and export answer, with both rows
        listed = client.get("/v1/memories", params={"status": "any"})
        assert listed.status_code == 200, listed.text
        assert {good, str(bad)} <= {item["id"] for item in listed.json()["items"]}
        got = client.get(f"/v1/memories/{bad}")
        assert got.status_code == 200 and got.json()["timestamp"].startswith("9999-12-31")
        with client.stream("GET", "/v1/export") as streamed:
            lines = [json.loads(line) for line in streamed.iter_lines() if line]
        assert lines[-1]["kind"] == "end"  # the stream was not cut off at the header
        assert {good, str(bad)} <= {line["id"] for line in lines if line["kind"] == "memory"}
