"""``memharness serve`` and ``memharness keys create|list|revoke``.

Nothing heavy at import: uvicorn and FastAPI come when ``serve`` runs. A key is printed once,
by ``keys create``; nothing else ever shows or logs it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from config import get_settings
from pipelines.errors import InvalidInput

if TYPE_CHECKING:
    import psycopg


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = get_settings()
    host = args.host or settings.api_host
    port = args.port or settings.api_port
    workers = args.workers or settings.api_workers
    options = {
        "host": host,
        "port": port,
        "access_log": settings.api_access_log,
        "log_level": args.log_level,
        # No proxy headers by default: TLS and X-Forwarded-* belong to the deployment's proxy.
        "proxy_headers": False,
        "server_header": False,
        # the C parser and libuv loop (pinned dependencies): h11 and the asyncio loop were a
        # third of an HTTP write's time
        "http": "httptools",
        "loop": "auto" if sys.platform == "win32" else "uvloop",
    }
    if workers > 1:
        uvicorn.run("memharness.server.app:app_from_env", factory=True, workers=workers, **options)
    else:
        from memharness.server.app import create_app

        uvicorn.run(create_app(settings), **options)
    return 0


def _connect() -> psycopg.Connection[Any]:
    import psycopg

    return psycopg.connect(get_settings().database_url, autocommit=True)


def _cmd_keys_create(args: argparse.Namespace) -> int:
    from memharness.server.keys import create_key

    try:
        with _connect() as conn:
            text, record = create_key(
                conn,
                tenant_id=args.tenant,
                scopes=args.scopes,
                agent_id=args.agent,
                name=args.name,
            )
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"key": text, **record.public()}, sort_keys=True))
    else:
        print(text)
        print(
            f"(prefix {record.prefix}, tenant {record.tenant_id}, scopes "
            f"{','.join(sorted(record.scopes))}; shown once: store it now)",
            file=sys.stderr,
        )
    return 0


def _cmd_keys_list(args: argparse.Namespace) -> int:
    from memharness.server.keys import list_keys

    with _connect() as conn:
        records = list_keys(conn, args.tenant)
    if args.json:
        print(json.dumps([record.public() for record in records], sort_keys=True))
        return 0
    print(f"{'prefix':12}  {'tenant':20}  {'agent':12}  {'scopes':17}  {'state':8}  last used")
    for record in records:
        state = "revoked" if record.revoked_at else "live"
        used = record.last_used_at.isoformat(timespec="seconds") if record.last_used_at else "-"
        print(
            f"{record.prefix:12}  {record.tenant_id:20}  {record.agent_id or '-':12}  "
            f"{','.join(sorted(record.scopes)):17}  {state:8}  {used}"
        )
    return 0


def _cmd_keys_revoke(args: argparse.Namespace) -> int:
    from memharness.server.keys import revoke_key

    with _connect() as conn:
        record = revoke_key(conn, args.key)
    if record is None:
        print(f"error: no live key {args.key[:16]!r}", file=sys.stderr)
        return 1
    settings = get_settings()
    print(
        f"revoked {record.prefix} (tenant {record.tenant_id}); servers refuse it within "
        f"{settings.api_key_cache_s:g} s"
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` and ``keys`` to the ``memharness`` command line."""
    p = sub.add_parser("serve", help="the HTTP API (FastAPI + uvicorn; OpenAPI at /docs)")
    p.add_argument("--host", default=None, help="default: MEMHARNESS_API_HOST")
    p.add_argument("--port", type=int, default=None, help="default: MEMHARNESS_API_PORT")
    p.add_argument("--workers", type=int, default=None, help="default: MEMHARNESS_API_WORKERS")
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("keys", help="API keys: create, list, revoke")
    keys = p.add_subparsers(dest="keys_command", required=True)
    k = keys.add_parser("create", help="a new key for a tenant, printed once")
    k.add_argument("--tenant", required=True)
    k.add_argument("--scopes", default="read,write", help="comma-separated: read, write, admin")
    k.add_argument("--agent", default=None, help="bind the key to one agent id")
    k.add_argument("--name", default="", help="a label for `keys list`")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=_cmd_keys_create)
    k = keys.add_parser("list", help="keys and their state (never the secret)")
    k.add_argument("--tenant", default=None)
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=_cmd_keys_list)
    k = keys.add_parser("revoke", help="revoke a key by its prefix (or id)")
    k.add_argument("key", help="the prefix shown by `keys list` (or the whole key)")
    k.set_defaults(func=_cmd_keys_revoke)
