"""``memharness mcp``: run the MCP server for one tenant.

Exit codes: 0 the transport closed (stdin ended, or the HTTP server was stopped), 2 bad
arguments (no tenant, a malformed id). Nothing is written to stdout but the MCP protocol:
stdio is the transport; logs go to stderr.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING

from config import Settings, get_settings
from pipelines.errors import InvalidInput

if TYPE_CHECKING:
    from memharness.mcp_server.tools import Binding

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mcp`` to the top-level subcommands."""
    p = subparsers.add_parser(
        "mcp",
        help="serve one tenant's memory as MCP tools (stdio, or streamable HTTP at /mcp)",
        description="Serve one tenant's memory as MCP tools: remember, recall, get_context, "
        "checkpoint, resume, forget. Every default comes from MEMHARNESS_MCP_* settings.",
    )
    p.add_argument("--tenant", default=None, help="tenant it acts for (MEMHARNESS_MCP_TENANT_ID)")
    p.add_argument("--agent", default=None, help="agent id stamped on what it records")
    p.add_argument(
        "--session", default=None, help="session of a remember that names none (default: per run)"
    )
    p.add_argument("--transport", choices=["stdio", "http"], default=None)
    p.add_argument("--host", default=None, help="HTTP address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="HTTP port (default 8765)")
    p.set_defaults(func=_cmd_mcp)


def _cmd_mcp(args: argparse.Namespace) -> int:
    return run_mcp(
        get_settings(),
        tenant_id=args.tenant,
        agent_id=args.agent,
        session_id=args.session,
        transport=args.transport,
        host=args.host,
        port=args.port,
    )


def run_mcp(
    settings: Settings,
    *,
    tenant_id: str | None = None,
    agent_id: str | None = None,
    session_id: str | None = None,
    transport: str | None = None,
    host: str | None = None,
    port: int | None = None,
) -> int:
    """Serve until the transport closes. Arguments left None come from ``settings``."""
    from memharness.mcp_server.tools import Binding

    tenant = tenant_id or settings.mcp_tenant_id
    if not tenant:
        print("error: no tenant: pass --tenant or set MEMHARNESS_MCP_TENANT_ID", file=sys.stderr)
        return 2
    try:
        binding = Binding.of(
            tenant,
            agent_id or settings.mcp_agent_id or None,
            session_id or settings.mcp_session_id or None,
            datetime.now(UTC),
        )
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    transport = transport or settings.mcp_transport
    host = host or settings.mcp_host
    port = port or settings.mcp_port
    if transport == "http" and not _is_loopback(host):
        log.warning(
            "MCP over HTTP on %s has no authentication: anyone who reaches it reads and writes "
            "tenant %s; put the API keys or an authenticating proxy in front",
            host,
            binding.tenant_id,
        )
    return _serve(settings, binding, transport, host, port)


def _serve(settings: Settings, binding: Binding, transport: str, host: str, port: int) -> int:
    import anyio

    from memharness.client import MemoryClient
    from memharness.mcp_server.server import build_for, serve_http, serve_stdio

    with MemoryClient(settings) as memory:
        server = build_for(settings, memory, binding)
        if transport == "http":
            log.info("MCP server for tenant %s at http://%s:%s/mcp", binding.tenant_id, host, port)
            # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again for the
            # handler it found: let that be a clean exit, not a death by signal.
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, _exit_cleanly)
            anyio.run(serve_http, server, host, port)
        else:
            anyio.run(serve_stdio, server)
    return 0


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    log.info("MCP server stopped (%s)", signal.Signals(signum).name)
    raise SystemExit(0)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
