"""Start and stop the real processes of a node: Celery workers, beat and Flower.

Used by ``make demo`` and by the integration tests' fixtures; each process gets its own
process group so a stop (or a SIGKILL in a crash test) reaches its pool children too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis


@dataclass
class Managed:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_offset: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group: the worker and its pool children."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = 15.0) -> None:
        if not self.alive():
            return
        self.kill(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.proc.wait(timeout=5)

    def log_text(self) -> str:
        """What this process wrote, without earlier runs' lines in the same file."""
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(self.log_offset)
                return handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def _spawn(name: str, argv: Sequence[str], env: Mapping[str, str] | None, log_dir: Path) -> Managed:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    handle = log_path.open("ab")
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.Popen(
        list(argv),
        stdout=handle,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=full_env,
        start_new_session=True,
    )
    handle.close()
    return Managed(name, proc, log_path, offset)


def start_worker(
    name: str,
    queues: Sequence[str],
    *,
    concurrency: int = 1,
    env: Mapping[str, str] | None = None,
    log_dir: Path = Path("var/log"),
    loglevel: str = "INFO",
) -> Managed:
    argv = [
        sys.executable, "-m", "celery", "-A", "workers.app:app", "worker",
        "-Q", ",".join(queues), "-c", str(concurrency), "-n", f"{name}@%h",
        "-E", "--loglevel", loglevel, "--without-gossip", "--without-mingle",
    ]  # fmt: skip
    return _spawn(name, argv, env, log_dir)


def start_beat(*, env: Mapping[str, str] | None = None, log_dir: Path = Path("var/log")) -> Managed:
    schedule = log_dir / "celerybeat-schedule"
    argv = [
        sys.executable, "-m", "celery", "-A", "workers.app:app", "beat",
        "--loglevel", "INFO", "-s", str(schedule),
    ]  # fmt: skip
    return _spawn("beat", argv, env, log_dir)


def spare_port(preferred: int | None = None) -> int:
    """``preferred`` when nothing listens on it, else a loopback port the kernel picks."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred or 0))
        except OSError:
            probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_api(
    port: int, *, env: Mapping[str, str] | None = None, log_dir: Path = Path("var/log")
) -> Managed:
    """``memharness serve`` on the loopback address (the API and the inspector at /ui)."""
    argv = [sys.executable, "-m", "memharness.cli", "serve", "--host", "127.0.0.1",
            "--port", str(port)]  # fmt: skip
    return _spawn("api", argv, env, log_dir)


def wait_for_http(managed: Managed, url: str, *, timeout_s: float = 30.0) -> bool:
    """Whether ``url`` answered (any HTTP status) before ``timeout_s`` or the process died."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and managed.alive():
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(0.25)
    return False


# Passwords shipped as examples or guessed first: a Flower behind one of them is open.
WEAK_FLOWER_PASSWORDS = frozenset(
    {"change-me", "changeme", "admin", "password", "flower", "secret", "celery"}
)
# 12 characters of `secrets.token_urlsafe` are 72 bits: out of reach of guessing over HTTP.
FLOWER_PASSWORD_MIN_CHARS = 12


def check_flower_credentials(basic_auth: str) -> str:
    """``basic_auth`` (``user:password``, or several joined by commas as Flower takes them)
    if every password is strong enough to expose Flower's task arguments behind; raises
    ``ValueError`` naming what is wrong (never the password itself)."""
    pairs = [pair for pair in basic_auth.split(",") if pair]
    if not pairs:
        raise ValueError("Flower needs basic auth: set MEMHARNESS_FLOWER_BASIC_AUTH=user:password")
    for pair in pairs:
        user, sep, password = pair.partition(":")
        if not sep or not user:
            raise ValueError("MEMHARNESS_FLOWER_BASIC_AUTH must be user:password")
        if password.lower() in WEAK_FLOWER_PASSWORDS or password == user:
            raise ValueError(
                f"Flower's password for {user!r} is a default or guessable one: choose another "
                "(for example `openssl rand -hex 12`)"
            )
        if len(password) < FLOWER_PASSWORD_MIN_CHARS:
            raise ValueError(
                f"Flower's password for {user!r} is shorter than "
                f"{FLOWER_PASSWORD_MIN_CHARS} characters"
            )
    return basic_auth


def start_flower(
    *,
    port: int,
    basic_auth: str,
    env: Mapping[str, str] | None = None,
    log_dir: Path = Path("var/log"),
) -> Managed:
    """Flower on 127.0.0.1:``port`` behind ``basic_auth`` (checked first). The credentials go
    in the child's environment (Flower reads ``FLOWER_BASIC_AUTH`` itself), never in its
    argv: a command line is readable by every user of the machine (``ps``, /proc)."""
    argv = [
        sys.executable, "-m", "celery", "-A", "workers.app:app", "flower",
        f"--port={port}", "--address=127.0.0.1",
    ]  # fmt: skip
    secret_env = {**(env or {}), "FLOWER_BASIC_AUTH": check_flower_credentials(basic_auth)}
    return _spawn("flower", argv, secret_env, log_dir)


def wait_for_worker(managed: Managed, *, timeout_s: float = 60.0) -> None:
    """Wait until the worker logs that it is ready (it then consumes from its queues)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not managed.alive():
            raise RuntimeError(f"{managed.name} exited early:\n{managed.log_tail()}")
        if " ready." in managed.log_text():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{managed.name} not ready after {timeout_s}s:\n{managed.log_tail()}")


def broker_ok(redis_url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(redis_url, socket_timeout=1).ping())
    except redis.RedisError:
        return False
