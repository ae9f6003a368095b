"""The memory inspector (``/ui``) through a real ``memharness serve``, real PostgreSQL and
Redis, and a real worker process: each page shows real data, an action changes what the next
page shows, another tenant's key sees nothing, a read key cannot act. The browser test renders
the pages in headless Chromium (the project's CDP driver) and saves the docs' screenshots."""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memharness.browser import find_chromium, render
from memharness.server.keys import revoke_key
from memharness.server.ui.session import COOKIE, csrf_token
from pipelines.own.contradict import Supersession
from tests.integration.test_http_api import (
    Server,
    key_for,
    spawn_server,
    stop_server,
    wait_ready,
)
from tests.integration.test_knowledge_context import consolidated
from workers.own.correct import apply_supersessions

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
TENANT = "inspect-co"
TASK = "billing"


@pytest.fixture(scope="module")
def server(migrated, tmp_path_factory) -> Iterator[Server]:  # type: ignore[no-untyped-def]
    started = spawn_server(
        tmp_path_factory.mktemp("inspector"),
        "inspector",
        {"MEMHARNESS_API_RATE_LIMIT_PER_S": "0", "MEMHARNESS_API_KEY_CACHE_S": "0.5"},
    )
    wait_ready(started)
    yield started
    stop_server(started)


@contextlib.contextmanager
def browser(server: Server, key: str | None = None) -> Iterator[httpx.Client]:
    """A client that behaves as a browser does here: cookies kept, no Authorization header,
    signed in through the form when given a key."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        if key is not None:
            signed = client.post("/ui/login", data={"key": key})
            assert signed.status_code == 303 and signed.headers["location"] == "/ui", signed.text
            cookie = signed.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def record(server: Server, key: str, items: list[dict[str, Any]]) -> list[str]:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as api:
        made = api.post("/v1/memories:batch", json={"items": items})
        assert made.status_code == 202, made.text
        ids = [r["memory_id"] for r in made.json()["receipts"]]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = {api.get(f"/v1/memories/{i}").json().get("status") for i in ids}
            if "pending" not in states:
                return ids
            time.sleep(0.2)
    raise TimeoutError(f"memories still pending: {ids}")


def memory(content: str, session: str = "s-1", **extra: Any) -> dict[str, Any]:
    return {"content": content, "task_id": TASK, "session_id": session, **extra}


def test_the_pages_show_real_data_and_the_actions_change_them(
    server: Server, db: Any, workers: Any
) -> None:
    # given a worker, a tenant with memories in two sessions, and its write and read keys
    workers("owner")
    writer = key_for(db, tenant=TENANT, scopes="read,write")
    reader = key_for(db, tenant=TENANT, scopes="read")
    pdf, secret, cents = record(server, writer, [
        memory("Preference: reports go out as PDF.", type="preference"),
        memory("The nightly export ZEBRAFISH-7 runs at 02:00.", session="s-2"),
        memory("We decided to bill in cents because floats lose money.", type="decision"),
    ])  # fmt: skip

    with browser(server) as anonymous:
        # then without a key every page sends the browser to the sign-in form
        assert anonymous.get("/ui").headers["location"] == "/ui/login"
        assert anonymous.get("/ui/login").status_code == 200
        refused = anonymous.post("/ui/login", data={"key": "mh_000000000000_nope"})
        assert refused.status_code == 401 and "not a live API key" in refused.text
        assert anonymous.post(f"/ui/memories/{pdf}/forget", data={"reason": "x"}).status_code == 401

    with browser(server, writer) as person:
        # the timeline lists the memories by task and session, with level, status and version
        timeline = person.get("/ui")
        assert timeline.status_code == 200, timeline.text
        assert timeline.headers["cache-control"] == "no-store"
        for words in ("Task <a", "Session s-1", "Session s-2", "reports go out as PDF",
                      "ZEBRAFISH-7", "bill in cents", pdf[:8], "L0", "stored"):  # fmt: skip
            assert words in timeline.text, words
        assert "ZEBRAFISH" not in person.get("/ui", params={"task_id": "another"}).text

        # one memory's page shows its history
        page = person.get(f"/ui/memories/{pdf}")
        assert page.status_code == 200 and "written" in page.text
        assert "reports go out as PDF" in page.text and "Correct" in page.text
        token = csrf_of(page.text)

        # an action without the page's CSRF token is refused, and changes nothing
        forged = person.post(f"/ui/memories/{pdf}/correct",
                             data={"content": "x", "reason": "y", "csrf": "0" * 64})  # fmt: skip
        assert forged.status_code == 403 and "CSRF" in forged.text

        # when a person corrects a memory through the form
        fixed = person.post(f"/ui/memories/{pdf}/correct", data={
            "content": "Preference: reports go out as HTML.", "reason": "the user changed "
            "their mind", "csrf": token})  # fmt: skip
        assert fixed.status_code == 303, fixed.text
        new_id = fixed.headers["location"].split("/")[-1].split("?")[0]
        assert new_id != pdf
        # then the new version's page shows both versions and the reason
        after = person.get(fixed.headers["location"])
        assert (
            "reports go out as HTML" in after.text and "the user changed their mind" in after.text
        )
        assert "Done: corrected" in after.text
        old = person.get(f"/ui/memories/{pdf}").text
        assert "corrected" in old and new_id[:8] in old

        # when it forgets a memory
        gone = person.post(f"/ui/memories/{secret}/forget",
                           data={"reason": "the user asked", "csrf": token})  # fmt: skip
        assert gone.status_code == 303, gone.text
        # then its page and the timeline no longer show what it said
        tomb = person.get(f"/ui/memories/{secret}").text
        assert "ZEBRAFISH" not in tomb and "forgotten" in tomb and "the user asked" in tomb
        assert "ZEBRAFISH" not in person.get("/ui").text

        # the other pages answer from real data
        # knowledge as nightly consolidation writes it, citing the episode it came from
        rule = "Money amounts are stored in cents."
        sources = [uuid.UUID(cents)]
        consolidated(
            db,
            TENANT,
            "convention",
            rule,
            sources,
            confidence=0.9,
            conditions="in the billing code",
        )
        knowledge = person.get("/ui/knowledge").text
        for words in ("Money amounts are stored in cents.", "in the billing code", "convention",
                      "0.90", f"/ui/memories/{cents}"):  # fmt: skip
            assert words in knowledge, words
        assert "cited by semantic knowledge" in person.get(f"/ui/memories/{cents}").text
        replay = person.get("/ui/context", params={"task_id": TASK, "query": "How do we bill?",
                                                   "budget_tokens": "4000"})  # fmt: skip
        assert replay.status_code == 200, replay.text
        assert "retrieved_memory" in replay.text and "bill in cents" in replay.text
        assert "recalled by" in replay.text and "original" in replay.text
        health = person.get("/ui/health")
        assert health.status_code == 200 and "Queues" in health.text
        assert "golden hit rate" in health.text
        assert person.get(f"/ui/memories/{uuid.uuid4()}").status_code == 404
        assert person.get("/ui/memories/not-an-id").status_code == 404

    # a read key sees the pages but cannot act: no forms, and a 403 on a posted action
    with browser(server, reader) as looker:
        page = looker.get(f"/ui/memories/{cents}")
        assert page.status_code == 200 and "bill in cents" in page.text
        assert 'name="csrf"' not in page.text
        refused = looker.post(f"/ui/memories/{cents}/forget",
                              data={"reason": "no", "csrf": csrf_token(reader)})  # fmt: skip
        assert refused.status_code == 403 and "write scope" in refused.text
        assert "bill in cents" in looker.get(f"/ui/memories/{cents}").text
        # and once the key is revoked its cookie opens nothing (after the key cache's 0.5 s)
        assert revoke_key(db, reader) is not None
        time.sleep(0.7)
        assert looker.get("/ui").headers["location"] == "/ui/login"

    # a key of another tenant sees nothing of this one, and a foreign id reads as an unknown one
    stranger_key = key_for(db, tenant="someone-else", scopes="admin")
    with browser(server, stranger_key) as stranger:
        assert "bill in cents" not in stranger.get("/ui").text
        assert "No memories" in stranger.get("/ui").text
        foreign, unknown = str(cents), str(uuid.uuid4())
        a, b = stranger.get(f"/ui/memories/{foreign}"), stranger.get(f"/ui/memories/{unknown}")
        assert a.status_code == b.status_code == 404 and a.text == b.text
        acted = stranger.post(f"/ui/memories/{cents}/forget",
                              data={"reason": "x", "csrf": csrf_token(stranger_key)})  # fmt: skip
        assert acted.status_code == 404
        assert "bill in cents" not in stranger.get("/ui/conflicts").text
        assert "Money amounts" not in stranger.get("/ui/knowledge").text
        replay = stranger.get("/ui/context", params={"task_id": TASK, "query": "How do we bill?",
                                                     "budget_tokens": "4000"})  # fmt: skip
        assert replay.status_code == 200 and "cents" not in replay.text
    with browser(server, writer) as person:
        assert "bill in cents" in person.get(f"/ui/memories/{cents}").text


def test_an_automatic_correction_is_listed_and_undone(
    server: Server, db: Any, workers: Any
) -> None:
    # given two memories and an automatic supersession the link pass would have applied
    workers("owner")
    writer = key_for(db, tenant=TENANT, scopes="read,write")
    old, new = record(server, writer, [
        memory("The API base URL is https://api.example.com/v1.", type="observation"),
        memory("The API base URL is now https://api.example.com/v2.", type="observation"),
    ])  # fmt: skip
    found = Supersession(
        old_id=uuid.UUID(old), new_id=uuid.UUID(new), reason="the same setting, a newer value"
    )
    applied = apply_supersessions(db, [found])
    assert applied["superseded"] == 1
    with browser(server, writer) as person:
        listed = person.get("/ui/conflicts")
        assert "automatic correction" in listed.text and "applied" in listed.text
        assert "the same setting, a newer value" in listed.text
        # when the person presses Undo
        undone = person.post(f"/ui/memories/{old}/undo",
                             data={"csrf": csrf_of(listed.text), "back": "conflicts"})  # fmt: skip
        assert undone.status_code == 303 and undone.headers["location"].startswith("/ui/conflicts")
        # then the pair lists as undone and the older memory is stored again
        again = person.get("/ui/conflicts").text
        assert "undone" in again and 'action="/ui/memories/' + old + '/undo"' not in again
        assert "restored" in person.get(f"/ui/memories/{old}").text
    assert db.execute("SELECT status FROM memories WHERE id = %s", (old,)).fetchone()[0] == "stored"


@pytest.fixture
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        message = "chromium is not installed (scripts/services.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


def test_the_inspector_renders_in_headless_chromium(
    server: Server, db: Any, workers: Any, log_dir: Path, chromium: str
) -> None:
    # given a tenant with a few linked memories
    workers("owner")
    writer = key_for(db, tenant=TENANT, scopes="read,write")
    ids = record(server, writer, [
        memory("The auth module is delayed by two weeks.", type="status_change"),
        memory("The auth module delay blocks the billing export.", type="status_change"),
        memory("The billing export delay pushes back the invoice release.", type="status_change"),
        memory("We decided to bill in cents because floats lose money.", type="decision"),
        memory("Preference: reports go out as PDF.", session="s-2", type="preference"),
    ])  # fmt: skip
    cookie = {COOKIE: writer}
    log = log_dir / "chromium.log"

    # when a person opens the timeline and a memory's page in the browser
    timeline = render(f"{server.url}/ui", cookies=cookie, wait_for=["Timeline"],
                      screenshot=IMG / "inspector-timeline.png", chromium=chromium,
                      log_path=log)  # fmt: skip
    # then the browser shows the memories by task and session
    assert (timeline.status, timeline.error) == (200, None), timeline.text
    for words in ("Task billing", "Session s-1", "Session s-2", "The auth module is delayed",
                  "reports go out as PDF"):  # fmt: skip
        assert timeline.shows(words), timeline.text
    page = render(f"{server.url}/ui/memories/{ids[1]}", cookies=cookie, wait_for=["History"],
                  screenshot=IMG / "inspector-memory.png", chromium=chromium,
                  log_path=log)  # fmt: skip
    assert page.status == 200 and page.shows("blocks the billing export"), page.text
    assert page.shows("Versions") and page.shows("written") and page.shows("Forget")
    replay = render(f"{server.url}/ui/context?task_id={TASK}&query=what+does+the+auth+delay"
                    "+affect%3F&budget_tokens=4000", cookies=cookie, wait_for=["why chosen"],
                    screenshot=IMG / "inspector-context.png", chromium=chromium,
                    log_path=log)  # fmt: skip
    assert replay.status == 200 and replay.shows("recalled by"), replay.text
    health = render(f"{server.url}/ui/health", cookies=cookie, wait_for=["Queues"],
                    screenshot=IMG / "inspector-health.png", chromium=chromium,
                    log_path=log)  # fmt: skip
    assert health.status == 200 and health.shows("golden hit rate"), health.text
    # and without the cookie the browser lands on the sign-in form
    anonymous = render(f"{server.url}/ui", chromium=chromium, log_path=log)
    assert anonymous.shows("Sign in") and not anonymous.shows("auth module")
    shots = ("timeline", "memory", "context", "health")
    for shot in (f"inspector-{name}.png" for name in shots):
        assert (IMG / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot
