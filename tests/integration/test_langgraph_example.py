"""examples/langgraph_agent.py, killed with SIGKILL during its fourth step and started again
with the same thread id: it resumes from the checkpoint of step 3, through ``MemharnessSaver``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("langgraph.graph")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "langgraph_agent.py"
STEPS = [f"step_{n}" for n in range(1, 7)]


def _start(thread_id: str, delay_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE),
            "--thread-id",
            thread_id,
            "--tenant-id",
            "acme",
            "--delay-s",
            str(delay_s),
        ],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_killed_mid_run_it_resumes_exactly_from_the_last_checkpoint(db) -> None:  # type: ignore[no-untyped-def]
    # given: a run whose steps take long enough to be killed inside one
    first = _start("incident-42", delay_s=0.6)
    seen: list[str] = []
    deadline = time.monotonic() + 60
    assert first.stdout is not None
    for line in first.stdout:
        seen.append(line.strip())
        # step 4 starts only after step 3's checkpoint committed (durability="sync")
        if line.strip() == "RUN step_4":
            first.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline, seen
    first.wait(timeout=10)
    first.stdout.close()
    assert first.returncode == -signal.SIGKILL
    assert seen[0] == "START thread=incident-42 resume=no"
    assert [line.split()[1] for line in seen if line.startswith("DONE")] == STEPS[:3]

    # when: the same thread starts again
    second = _start("incident-42", delay_s=0.0)
    out, _ = second.communicate(timeout=60)
    lines = [line.strip() for line in out.splitlines() if line.strip()]

    # then: it resumes, runs the interrupted step and the rest once each, none of 1-3
    assert second.returncode == 0, out
    assert lines[0] == "START thread=incident-42 resume=yes"
    assert [line.split()[1] for line in lines if line.startswith("RUN")] == STEPS[3:]
    assert lines[-1] == "FINISHED done=" + ",".join(STEPS)

    # and the thread's checkpoints are ours, with every step's note in the store
    (count,) = db.execute(
        "SELECT count(*) FROM checkpoints c JOIN langgraph_checkpoints l ON l.id = c.id "
        "WHERE l.thread_id = 'incident-42' AND c.tenant_id = 'acme'"
    ).fetchone()
    assert count >= 7
    keys = [
        row[0]
        for row in db.execute(
            "SELECT key FROM langgraph_items WHERE namespace = %s ORDER BY key",
            (["runs", "incident-42"],),
        )
    ]
    assert keys == STEPS

    # a third start finds the thread finished and runs nothing
    third = _start("incident-42", delay_s=0.0)
    out, _ = third.communicate(timeout=60)
    assert "RUN" not in out
    assert out.strip().endswith("(already)")
