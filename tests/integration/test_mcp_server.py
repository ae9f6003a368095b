"""``memharness mcp`` through the MCP SDK's own client, over stdio and over streamable HTTP.

The server runs as a subprocess (``python -m memharness.cli mcp``) with the test settings;
a real write worker owns the embedded vector store and answers recall and context; the
test waits on PostgreSQL for the writes to settle. Nothing stands in for a component.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult

pytestmark = pytest.mark.integration

TENANT = "acme"
TOOLS = {"remember", "recall", "get_context", "checkpoint", "resume", "forget"}
FACT = "We decided to keep the invoices in PostgreSQL because the ledger needs transactions."
OTHER_TENANTS_FACT = "We decided to keep the invoices of globex in a spreadsheet."


def mcp_argv(*extra: str) -> list[str]:
    return [sys.executable, "-m", "memharness.cli", "mcp", "--tenant", TENANT, *extra]


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    return structured


async def settle(client: Any, memory_id: str) -> None:
    """Until the workers have decided on the memory (the receipt came back long before)."""
    ids = [uuid.UUID(memory_id)]
    counts = await anyio.to_thread.run_sync(lambda: client.wait_until_settled(ids, timeout_s=30))
    assert counts == {"stored": 1}


async def remember_then_find(mcp: Client, client: Any) -> None:
    """The scenario both transports run: list, remember, recall, get_context, a bad call,
    forget."""
    # given the server's tools
    listed = await mcp.list_tools()
    assert {tool.name for tool in listed.tools} >= TOOLS

    # when the agent remembers a decision: a receipt at once, the write still queued
    started = time.perf_counter()
    receipt = data(
        await mcp.call_tool(
            "remember",
            {"content": FACT, "task_id": "billing", "type": "decision", "importance": 0.9},
        )
    )
    remember_s = time.perf_counter() - started
    assert receipt["status"] == "accepted"
    assert remember_s < 2.0, remember_s
    # and another tenant has a similar memory, written beside it
    other = client.record(OTHER_TENANTS_FACT, tenant_id="globex", task_id="billing", session_id="s")
    await settle(client, receipt["memory_id"])
    await settle(client, str(other.memory_id))

    # then recall finds it, and only this tenant's memories
    hits = data(await mcp.call_tool("recall", {"query": "where do we keep the invoices?"}))["hits"]
    assert hits[0]["id"] == receipt["memory_id"]
    assert hits[0]["content"] == FACT
    assert all(hit["id"] != str(other.memory_id) for hit in hits)
    stored = client.get(receipt["memory_id"], tenant_id=TENANT)
    assert stored.metadata["importance"] == 0.9

    # and the context of the next step holds it, as text first and as a summary
    result = await mcp.call_tool(
        "get_context",
        {
            "task_id": "billing",
            "query": "Why do we keep the invoices in PostgreSQL?",
            "budget_tokens": 8000,
            "phase": "planning",
        },
    )
    context = data(result)
    assert FACT in result.content[0].text  # type: ignore[union-attr]
    assert FACT in context["text"]
    assert receipt["memory_id"] in context["memory_ids"]
    assert OTHER_TENANTS_FACT not in context["text"]
    assert context["total_tokens"] <= 8000
    assert {p["name"] for p in context["partitions"]} >= {"retrieved_memory", "system"}

    # and a bad call is a tool error the agent can read and fix
    bad = await mcp.call_tool("recall", {"query": "invoices", "limit": 0})
    assert bad.is_error
    assert '"field": "limit"' in bad.content[0].text  # type: ignore[union-attr]
    assert '"limit": ">= 1"' in bad.content[0].text  # type: ignore[union-attr]

    # when the agent forgets the memory: a receipt at once, the copies erased by the workers
    gone = data(
        await mcp.call_tool("forget", {"memory_id": receipt["memory_id"], "reason": "wrong"})
    )
    assert (gone["target"], gone["memories"], gone["already"]) == ("memory", 1, False)
    # then recall no longer finds it, and forgetting again is the same receipt
    hits = data(await mcp.call_tool("recall", {"query": "where do we keep the invoices?"}))["hits"]
    assert all(hit["id"] != receipt["memory_id"] for hit in hits)
    again = data(
        await mcp.call_tool("forget", {"memory_id": receipt["memory_id"], "reason": "wrong"})
    )
    assert (again["request_id"], again["already"]) == (gone["request_id"], True)


async def checkpoint_then_resume(mcp: Client) -> None:
    # given no checkpoint yet: resume says so
    none = data(await mcp.call_tool("resume", {"task_id": "deploy"}))
    assert none["found"] is False and "no checkpoint saved" in none["message"]

    # when the agent saves its state
    state = {
        "phase": "execution",
        "tree": [
            {"id": "root", "title": "deploy the billing service", "status": "running"},
            {"id": "build", "title": "build the image", "status": "done", "parent_id": "root"},
            {"id": "push", "title": "push to the registry", "parent_id": "root"},
        ],
        "current_node_id": "push",
        "variables": {"image": "billing:1.4.2", "attempt": 2},
        "pending_actions": [
            {"action_id": "a1", "node_id": "push", "tool": "shell", "effect": "local"}
        ],
        "iteration": 7,
        "working_memory": {"items": [{"role": "user", "content": "ship it before 18:00"}]},
    }
    saved = data(await mcp.call_tool("checkpoint", {"task_id": "deploy", "state": state}))

    # then resume gives that checkpoint back with the same state
    resumed = data(await mcp.call_tool("resume", {"task_id": "deploy"}))
    assert resumed["found"] is True
    assert resumed["checkpoint_id"] == saved["checkpoint_id"]
    assert resumed["state"]["variables"] == state["variables"]
    assert [node["id"] for node in resumed["state"]["tree"]] == ["root", "build", "push"]
    assert resumed["state"]["completed_node_ids"] == ["build"]
    assert resumed["state"]["current_node_id"] == "push"
    assert resumed["state"]["iteration"] == 7
    assert resumed["state"]["working_memory"]["items"][0]["content"] == "ship it before 18:00"
    # and the resumed state saves again as it is: the same state on the same parent
    again = data(
        await mcp.call_tool("checkpoint", {"task_id": "deploy", "state": resumed["state"]})
    )
    assert uuid.UUID(again["checkpoint_id"])


def run(mcp_client: Client, *scenario: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with mcp_client as mcp:
            for step in scenario:
                await step(mcp)

    anyio.run(main)


def test_remember_recall_context_and_checkpoints_over_stdio(workers, client, log_dir) -> None:  # type: ignore[no-untyped-def]
    workers("write")
    log_path = log_dir / "mcp-stdio.log"
    argv = mcp_argv()
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    with log_path.open("w") as errlog:
        try:
            run(
                Client(stdio_client(params, errlog=errlog), read_timeout_seconds=30),
                lambda mcp: remember_then_find(mcp, client),
                checkpoint_then_resume,
            )
        finally:
            errlog.flush()
            print(log_path.read_text()[-4000:])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"memharness mcp exited early:\n{log_path.read_text()[-4000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"memharness mcp not listening:\n{log_path.read_text()[-4000:]}")


def test_remember_recall_and_context_over_streamable_http(workers, client, log_dir) -> None:  # type: ignore[no-untyped-def]
    workers("write")
    port = _free_port()
    log_path = log_dir / "mcp-http.log"
    with log_path.open("wb") as handle:
        proc = subprocess.Popen(
            mcp_argv("--transport", "http", "--port", str(port)),
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait_for_port(proc, port, log_path)
        run(
            Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=30),
            lambda mcp: remember_then_find(mcp, client),
            checkpoint_then_resume,
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        print(log_path.read_text()[-4000:])
    assert proc.returncode == 0, log_path.read_text()[-4000:]
