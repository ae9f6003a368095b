"""API keys: their shape, their hash, their scopes."""

from __future__ import annotations

import uuid

import pytest

from memharness.server.keys import (
    KeyRecord,
    Scope,
    hash_secret,
    new_key,
    parse_key,
    parse_scopes,
    secret_matches,
)
from pipelines.errors import InvalidInput


def record_for(secret: str, scopes: frozenset[Scope]) -> KeyRecord:
    return KeyRecord(uuid.uuid4(), "0" * 12, hash_secret(secret), "acme", None, scopes, "")


def test_a_new_key_parses_back_into_its_parts() -> None:
    for _ in range(50):  # token_urlsafe may put "_" or "-" in the secret
        text, parts = new_key()
        assert text.startswith("mh_") and len(text) >= 3 + 12 + 1 + 43
        assert parse_key(text) == parts


def test_keys_of_another_shape_are_not_ours() -> None:
    _, parts = new_key()
    for bad in ["", "mh_", "sk_" + parts.prefix + "_" + parts.secret, f"mh_{parts.prefix}_",
                f"mh_{parts.prefix.upper()}_{parts.secret}", f"mh_short_{parts.secret}",
                f"mh_{parts.prefix}_{'x' * 200}"]:  # fmt: skip
        assert parse_key(bad) is None, bad


def test_only_the_hash_is_kept_and_only_the_right_secret_matches() -> None:
    _, parts = new_key()
    record = record_for(parts.secret, frozenset({Scope.READ}))
    assert parts.secret.encode() not in record.secret_hash
    assert len(record.secret_hash) == 32
    assert secret_matches(record, parts.secret)
    assert not secret_matches(record, parts.secret[:-1] + ("A" if parts.secret[-1] != "A" else "B"))
    assert "secret_hash" not in record.public() and parts.secret not in str(record.public())


def test_admin_holds_every_scope_and_the_others_only_their_own() -> None:
    assert record_for("s", frozenset({Scope.ADMIN})).allows(Scope.WRITE)
    reader = record_for("s", frozenset({Scope.READ}))
    assert reader.allows(Scope.READ) and not reader.allows(Scope.WRITE)
    assert not reader.allows(Scope.ADMIN)


def test_scopes_are_checked_by_name() -> None:
    assert parse_scopes("read, write") == {Scope.READ, Scope.WRITE}
    assert parse_scopes(["admin"]) == {Scope.ADMIN}
    with pytest.raises(InvalidInput) as bad:
        parse_scopes("read,delete")
    assert bad.value.field == "scopes" and "delete" in bad.value.message
    with pytest.raises(InvalidInput):
        parse_scopes(" , ")
