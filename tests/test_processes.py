"""Flower's credentials: refused when a default or guessable one, and never on a command line."""

from __future__ import annotations

import base64
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from memharness.processes import check_flower_credentials, start_flower


@pytest.mark.parametrize(
    "credentials",
    ["admin:change-me", "ops:CHANGEME", "ops:password", "operator:operator", "ops:short-pw",
     "no-colon", ":no-user-password-long-enough", "", "ok:a-long-enough-secret,admin:change-me"],
)  # fmt: skip
def test_default_guessable_or_malformed_credentials_are_refused(credentials: str) -> None:
    with pytest.raises(ValueError):
        check_flower_credentials(credentials)


def test_a_refusal_never_shows_the_password() -> None:
    with pytest.raises(ValueError) as refused:
        check_flower_credentials("ops:hunter2x")
    assert "'ops'" in str(refused.value) and "hunter2x" not in str(refused.value)


def test_a_strong_password_passes() -> None:
    assert check_flower_credentials("ops:9f3c1a7e5b2d4c6a") == "ops:9f3c1a7e5b2d4c6a"


def test_start_flower_refuses_the_old_default_before_starting_anything(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="default or guessable"):
        start_flower(port=1, basic_auth="admin:change-me", log_dir=tmp_path)
    assert not (tmp_path / "flower.log").exists()


@pytest.mark.integration
def test_flower_gets_its_credentials_by_environment_not_argv(tmp_path: Path, redis_client) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    password = "s3cret-" + os.urandom(8).hex()
    flower = start_flower(port=port, basic_auth=f"ops:{password}", log_dir=tmp_path)
    try:
        # what `ps` shows of it: the whole command line, with no password in it
        deadline = time.monotonic() + 10
        while "flower" not in (cmdline := Path(f"/proc/{flower.pid}/cmdline").read_text()):
            assert time.monotonic() < deadline, cmdline  # still between fork and exec
            time.sleep(0.05)
        assert "flower" in cmdline and password not in cmdline and "basic" not in cmdline
        url = f"http://127.0.0.1:{port}/api/workers"
        token = base64.b64encode(f"ops:{password}".encode()).decode()
        deadline = time.monotonic() + 30
        while True:
            assert flower.alive(), flower.log_tail()
            try:
                request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
                with urllib.request.urlopen(request, timeout=2) as answer:
                    assert answer.status == 200
                break
            except (urllib.error.URLError, OSError):
                assert time.monotonic() < deadline, flower.log_tail()
                time.sleep(0.3)
        # and the credentials from the environment are the ones Flower enforces
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        assert refused.value.code == 401
        refused.value.close()
    finally:
        flower.stop()
