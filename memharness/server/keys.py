"""API keys: ``mh_<prefix>_<secret>``, bound to one tenant (and optionally one agent), with
scopes. Only a SHA-256 of the secret is stored: the secret is 32 random bytes, so a fast hash
is as safe as a slow one (nothing to brute-force), and checking a key costs microseconds.
The prefix is public: ``keys list`` shows it and the server finds the row by it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pipelines.errors import InvalidInput
from pipelines.records import check_id

KEY_TAG = "mh"
PREFIX_BYTES = 6  # 12 hex characters: 2^48 prefixes, no collision among a tenant's keys
SECRET_BYTES = 32  # 256 bits: a sha256 of it cannot be reversed by guessing


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


@dataclass(frozen=True)
class ParsedKey:
    prefix: str
    secret: str


@dataclass(frozen=True)
class KeyRecord:
    """One row of ``api_keys``, as the server checks it."""

    id: uuid.UUID
    prefix: str
    secret_hash: bytes
    tenant_id: str
    agent_id: str | None
    scopes: frozenset[Scope]
    name: str
    created_at: datetime | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or Scope.ADMIN in self.scopes

    def public(self) -> dict[str, Any]:
        """What ``keys list`` shows: never the hash."""
        return {
            "id": str(self.id),
            "prefix": self.prefix,
            "tenant_id": self.tenant_id,
            "agent_id": self.agent_id,
            "scopes": sorted(scope.value for scope in self.scopes),
            "name": self.name,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def new_key() -> tuple[str, ParsedKey]:
    """A fresh key: the full text (shown once) and its parts."""
    prefix = secrets.token_hex(PREFIX_BYTES)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    return f"{KEY_TAG}_{prefix}_{secret}", ParsedKey(prefix, secret)


def parse_key(text: str) -> ParsedKey | None:
    """The parts of a presented key, or None when it is not shaped like one of ours."""
    tag, _, rest = text.partition("_")
    prefix, _, secret = rest.partition("_")
    if tag != KEY_TAG or len(prefix) != PREFIX_BYTES * 2 or not secret or len(secret) > 128:
        return None
    if any(c not in "0123456789abcdef" for c in prefix):
        return None
    return ParsedKey(prefix, secret)


def secret_matches(record: KeyRecord, secret: str) -> bool:
    return hmac.compare_digest(record.secret_hash, hash_secret(secret))


def parse_scopes(value: str | Iterable[str]) -> frozenset[Scope]:
    names = value.split(",") if isinstance(value, str) else list(value)
    scopes: set[Scope] = set()
    for name in names:
        name = name.strip()
        if not name:
            continue
        try:
            scopes.add(Scope(name))
        except ValueError:
            allowed = ", ".join(scope.value for scope in Scope)
            raise InvalidInput("scopes", f"unknown scope {name!r}; expected: {allowed}") from None
    if not scopes:
        raise InvalidInput("scopes", "at least one scope is required")
    return frozenset(scopes)


# -- rows --------------------------------------------------------------------------------------

COLUMNS = (
    "id, prefix, secret_hash, tenant_id, agent_id, scopes, name, created_at, last_used_at, "
    "revoked_at"
)
SELECT_BY_PREFIX = f"SELECT {COLUMNS} FROM api_keys WHERE prefix = %s"
INSERT_KEY = (
    "INSERT INTO api_keys (id, prefix, secret_hash, tenant_id, agent_id, scopes, name) "
    f"VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {COLUMNS}"
)
REVOKE_KEY = (
    "UPDATE api_keys SET revoked_at = now() WHERE (prefix = %s OR id::text = %s) "
    f"AND revoked_at IS NULL RETURNING {COLUMNS}"
)
# Touches are batched by each server process; greatest() keeps a late flush from moving
# the time backwards.
TOUCH_KEYS = (
    "UPDATE api_keys SET last_used_at = greatest(coalesce(last_used_at, %s), %s) "
    "WHERE id = ANY(%s::uuid[])"
)


def record_from_row(row: tuple[Any, ...]) -> KeyRecord:
    return KeyRecord(
        id=row[0],
        prefix=row[1],
        secret_hash=bytes(row[2]),
        tenant_id=row[3],
        agent_id=row[4],
        scopes=frozenset(Scope(scope) for scope in row[5] if scope in Scope.__members__.values()),
        name=row[6],
        created_at=row[7],
        last_used_at=row[8],
        revoked_at=row[9],
    )


def create_key(
    conn: Any,
    *,
    tenant_id: str,
    scopes: str | Iterable[str],
    agent_id: str | None = None,
    name: str = "",
) -> tuple[str, KeyRecord]:
    """Insert a key on a psycopg (sync) connection; returns the full key (shown once)."""
    tenant = check_id("tenant_id", tenant_id)
    agent = check_id("agent_id", agent_id, required=False)
    granted = parse_scopes(scopes)
    text, parsed = new_key()
    row = conn.execute(
        INSERT_KEY,
        (
            uuid.uuid4(),
            parsed.prefix,
            hash_secret(parsed.secret),
            tenant,
            agent,
            sorted(scope.value for scope in granted),
            name,
        ),
    ).fetchone()
    return text, record_from_row(row)


def list_keys(conn: Any, tenant_id: str | None = None) -> list[KeyRecord]:
    where = "WHERE tenant_id = %s" if tenant_id else ""
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM api_keys {where} ORDER BY created_at, prefix",
        (tenant_id,) if tenant_id else (),
    ).fetchall()
    return [record_from_row(row) for row in rows]


def revoke_key(conn: Any, prefix_or_id: str) -> KeyRecord | None:
    """Revoke by prefix (or id); None when no live key has it."""
    text = prefix_or_id.strip()
    parsed = parse_key(text)
    if parsed is not None:  # the whole key was pasted: its prefix names it
        text = parsed.prefix
    row = conn.execute(REVOKE_KEY, (text, text)).fetchone()
    return None if row is None else record_from_row(row)
