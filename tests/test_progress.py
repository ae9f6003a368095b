"""Progress on a terminal, silence everywhere else, and a benchmark's JSON line kept last.

The terminal cases run a real ``memharness`` process with its stderr (and, in one case, its
stdout too) on a pseudo-terminal from :mod:`pty`, the way a person's shell would.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from memharness.progress import Progress, progress, progress_enabled

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_MEMHARNESS = [sys.executable, "-m", "memharness.cli"]
# 1,500 generated memories consolidate in about a second here: long enough for a few frames.
_BENCH = [*_MEMHARNESS, "bench", "consolidation", "--memories", "1500", "--batch", "250"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update({"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}, **extra)
    return env


def _run(
    argv: list[str],
    env: dict[str, str],
    *,
    stderr_tty: bool,
    stdout_tty: bool = False,
    on_screen: Callable[[str], None] | None = None,
) -> tuple[str, str, str]:
    """Run ``argv``; returns (what the terminal received, stdout if piped, stderr if piped).
    ``on_screen`` sees the terminal's text so far each time more arrives."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=slave if stdout_tty else subprocess.PIPE,
        stderr=slave if stderr_tty else subprocess.PIPE,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    os.close(slave)
    streams: dict[int, bytearray] = {master: bytearray()}
    if proc.stdout is not None:
        streams[proc.stdout.fileno()] = bytearray()
    if proc.stderr is not None:
        streams[proc.stderr.fileno()] = bytearray()
    open_fds = set(streams)
    deadline = time.monotonic() + 120
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_fds), [], [], 0.5)
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the last holder of the terminal's slave side exited
                chunk = b""
            if chunk:
                streams[fd] += chunk
                if fd == master and on_screen is not None:
                    on_screen(streams[master].decode("utf-8", errors="replace"))
            else:
                open_fds.discard(fd)
        if proc.poll() is not None and not ready:
            break
    assert proc.wait(timeout=30) == 0, streams
    os.close(master)
    out_fd = proc.stdout.fileno() if proc.stdout else None
    err_fd = proc.stderr.fileno() if proc.stderr else None
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()

    def text(fd: int | None) -> str:
        return streams[fd].decode("utf-8", errors="replace") if fd in streams else ""

    return text(master), text(out_fd), text(err_fd)


def test_progress_is_off_in_ci_or_when_asked_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    # given a terminal is not what pytest gives stderr, and CI set or quiet asked
    monkeypatch.setenv("CI", "true")
    assert not progress_enabled()
    monkeypatch.delenv("CI")
    assert not progress_enabled(quiet=True)


def test_disabled_progress_prints_only_its_notes(capsys: pytest.CaptureFixture[str]) -> None:
    with progress("work", total=3) as bar:
        assert not bar.enabled
        bar.advance(2)
        bar.update("halfway", completed=2, total=3)
        bar.note("step one done")
        assert bar.callback() is None
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "step one done\n"
    assert not Progress().enabled


def test_bench_on_a_terminal_draws_progress_and_keeps_json_last() -> None:
    # when stderr is a terminal and stdout is redirected to a file or pipe
    terminal, stdout, _ = _run(_BENCH, _env(), stderr_tty=True)

    # then the terminal got a live bar, and stdout is exactly the JSON line
    assert "consolidating 1500 memories" in terminal
    assert "━" in terminal  # rich's bar
    assert "\x1b[" in terminal
    lines = stdout.splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["memories"] == 1500


def test_bench_with_both_streams_on_a_terminal_ends_with_the_json_line() -> None:
    terminal, _, _ = _run(_BENCH, _env(), stderr_tty=True, stdout_tty=True)

    # the bar is transient: after the erase codes, the last line on screen is the JSON
    tail = terminal.rsplit("\x1b[", 1)[-1]
    last = _ANSI.sub("", "\x1b[" + tail).strip().splitlines()[-1]
    assert json.loads(last)["memories"] == 1500
    assert "━" in terminal


@pytest.mark.parametrize("ci", [True, False])
def test_bench_piped_or_in_ci_prints_plain_step_lines(ci: bool) -> None:
    # given CI set with stderr on a terminal, or no CI with stderr piped
    env = _env(CI="true") if ci else _env()
    terminal, stdout, stderr = _run(_BENCH, env, stderr_tty=ci)
    err = terminal if ci else stderr

    # then stderr carries only the step lines, with no terminal codes and no bar
    assert "\x1b" not in err and "━" not in err
    steps = [line for line in err.splitlines() if line.strip()]
    assert steps[0].startswith("consolidating 1500 memories of 2 tenant(s)")
    assert all(("memories" in line) for line in steps)
    lines = stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["memories"] == 1500


@pytest.mark.integration
def test_reembed_watch_follows_a_run_to_its_end(db, settings) -> None:  # type: ignore[no-untyped-def]
    from psycopg.types.json import Jsonb

    # given a re-embed run in progress, its row as the store owner keeps it
    alias = f"{settings.collection_prefix}_episodic"
    run_id = uuid.uuid4()
    stats = {"alias": alias, "kind": "episodic", "done": 0, "total": 300, "batches": 0}
    db.execute(
        "INSERT INTO cognition_runs (run_id, kind, tenant_id, clock, cursor, stats) "
        "VALUES (%s, 'reembed', NULL, now(), 'embed:', %s)",
        (run_id, Jsonb(stats)),
    )
    steps = [
        ("0/300", "embed:x", {**stats, "done": 120, "batches": 4}, False),
        ("120/300", "verify", {**stats, "done": 300, "batches": 10}, False),
        ("(verify)", "done", {**stats, "done": 300, "batches": 10}, True),
    ]

    def owner_moves_on(screen: str) -> None:
        # the next step of the run once the terminal shows the last one
        if steps and steps[0][0] in _ANSI.sub("", screen):
            _, cursor, new_stats, finished = steps.pop(0)
            db.execute(
                "UPDATE cognition_runs SET cursor = %s, stats = %s, "
                "finished_at = CASE WHEN %s THEN now() END WHERE run_id = %s",
                (cursor, Jsonb(new_stats), finished, run_id),
            )

    # when a person watches it on a terminal
    argv = [*_MEMHARNESS, "reembed", "--watch", "--interval-s", "0.2", "--timeout-s", "90"]
    terminal, stdout, _ = _run(argv, _env(), stderr_tty=True, on_screen=owner_moves_on)

    # then the bar followed the run through its phases, and the JSON status came last
    assert not steps, terminal
    assert f"re-embedding {alias} (embed)" in terminal
    status = json.loads(stdout)
    assert status["episodic"]["run"]["finished"] is True
    assert status["episodic"]["run"]["done"] == 300
