"""Flower as an operator sees it: real workers, Flower behind basic auth, headless Chromium.

The pages are rendered by the browser (Flower fills its tables with XHRs after the load
event), so what is asserted is what a person would read; the screenshots land in var/.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from memharness.browser import find_chromium, render
from memharness.processes import Managed, start_flower
from workers.probes import PING_KEY
from workers.publish import publish
from workers.queues import TaskName

pytestmark = pytest.mark.integration

VAR = Path(__file__).resolve().parents[2] / "var"
CREDENTIALS = "operator:flower-test-password"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_flower(flower: Managed, port: int, timeout_s: float = 30) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/workers")
    request.add_header("Authorization", "Basic " + base64.b64encode(CREDENTIALS.encode()).decode())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert flower.alive(), flower.log_tail()
        try:
            with urllib.request.urlopen(request, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise TimeoutError(f"Flower did not answer on {port}:\n{flower.log_tail()}")


def _flower_task_names(port: int) -> set[str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/tasks")
    request.add_header("Authorization", "Basic " + base64.b64encode(CREDENTIALS.encode()).decode())
    with urllib.request.urlopen(request, timeout=5) as response:
        tasks = json.loads(response.read())
    return {str(task.get("name")) for task in tasks.values()}


def _wait_until_flower_sees_events(flower: Managed, port: int, timeout_s: float = 60) -> None:
    """Flower answers HTTP before its event receiver listens: a ping task that Flower then
    lists says the events of what follows will reach it (on a loaded machine the first
    pings can go by unseen, so one is sent every few seconds)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        publish(TaskName.PING, marker=uuid.uuid4().hex)
        for _ in range(10):
            assert flower.alive(), flower.log_tail()
            if TaskName.PING.value in _flower_task_names(port):
                return
            time.sleep(0.3)
    raise TimeoutError(f"Flower saw no task events in {timeout_s} s:\n{flower.log_tail()}")


@pytest.fixture
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        message = "chromium is not installed (scripts/services.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


def test_flower_shows_workers_and_tasks_in_a_browser(  # type: ignore[no-untyped-def]
    workers, client, redis_client, log_dir: Path, chromium: str
) -> None:
    # given a write worker, a background worker and Flower with basic auth
    writer = workers("writer", ["write", "embed", "recall"])
    background = workers("background", ["maintenance", "consolidate", "compress", "quality"])
    port = _free_port()
    flower = start_flower(port=port, basic_auth=CREDENTIALS, log_dir=log_dir)
    try:
        _wait_for_flower(flower, port)
        _wait_until_flower_sees_events(flower, port)
        # when the workers do some work while Flower listens to their events
        receipts = [
            client.record(
                f"deploy step {i}: migrated the billing ledger table to the new schema",
                tenant_id="flower",
                task_id="deploy",
                session_id="s1",
            )
            for i in range(5)
        ]
        accepted = [r.memory_id for r in receipts if r.status == "accepted"]
        assert accepted
        assert "pending" not in client.wait_until_settled(accepted, timeout_s=60)
        marker = uuid.uuid4().hex
        publish(TaskName.PING, marker=marker)
        deadline = time.monotonic() + 30
        while not redis_client.exists(PING_KEY.format(marker=marker)):
            assert time.monotonic() < deadline, background.log_tail()
            time.sleep(0.1)
        host = socket.gethostname()
        names = [f"{writer.name}@{host}", f"{background.name}@{host}"]
        base = f"http://127.0.0.1:{port}"

        # then without credentials the browser gets 401 (headless, nobody types a password,
        # so it cancels the challenge) and no worker is shown
        refused = render(f"{base}/workers", chromium=chromium, log_path=log_dir / "chromium.log")
        assert refused.status == 401
        assert refused.error == "net::ERR_INVALID_AUTH_CREDENTIALS"
        assert not any(refused.shows(name) for name in names)

        # and with them the workers page lists both workers, rendered by the browser
        page = render(
            f"{base}/workers",
            basic_auth=CREDENTIALS,
            wait_for=names,
            screenshot=VAR / "flower-workers.png",
            chromium=chromium,
            log_path=log_dir / "chromium.log",
        )
        assert (page.status, page.error) == (200, None)
        for name in names:
            assert page.shows(name), page.text
        assert page.shows("Online workers")

        # and the tasks page names the tasks the workers ran
        tasks = [TaskName.DRAIN_WRITES.value, TaskName.PING.value]
        page = render(
            f"{base}/tasks",
            basic_auth=CREDENTIALS,
            wait_for=tasks,
            screenshot=VAR / "flower-tasks.png",
            chromium=chromium,
            log_path=log_dir / "chromium.log",
        )
        assert page.status == 200
        for task in tasks:
            assert page.shows(task), page.text
        for shot in ("flower-workers.png", "flower-tasks.png"):
            assert (VAR / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        flower.stop()
