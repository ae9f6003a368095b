"""API keys: each bound to a tenant (and optionally an agent) with scopes.

Only a SHA-256 of the secret is stored; ``prefix`` is the key's public part, shown by
``memharness keys list`` and used to find the row. ``last_used_at`` is written in batches by
each server process, never on the request's own path.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE api_keys (
            id           uuid PRIMARY KEY,
            prefix       text NOT NULL UNIQUE,
            secret_hash  bytea NOT NULL,
            tenant_id    text NOT NULL,
            agent_id     text,
            scopes       text[] NOT NULL
                         CHECK (cardinality(scopes) > 0
                                AND scopes <@ ARRAY['read', 'write', 'admin']::text[]),
            name         text NOT NULL DEFAULT '',
            created_at   timestamptz NOT NULL DEFAULT now(),
            last_used_at timestamptz,
            revoked_at   timestamptz
        );
        CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id);
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE api_keys;")
