"""Task checkpoints: sealed task state, newest first per task, linked to their parents.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE checkpoints (
            id                  uuid PRIMARY KEY,
            -- Insertion order: "newest" must not depend on clocks that tie or step back.
            seq                 bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            tenant_id           text NOT NULL,
            task_id             text NOT NULL,
            -- No foreign key: retention prunes parents, and a corrupted checkpoint's parent
            -- must be reachable from this column because its bytes cannot be trusted.
            parent_id           uuid,
            created_at          timestamptz NOT NULL,
            format_version      integer NOT NULL CHECK (format_version >= 1),
            is_phase_transition boolean NOT NULL DEFAULT false,
            iteration           integer NOT NULL DEFAULT 0 CHECK (iteration >= 0),
            size_bytes          integer NOT NULL CHECK (size_bytes >= 0),
            body                bytea NOT NULL
        );
        -- The body is mostly a zlib stream already; pglz would spend save time for nothing.
        ALTER TABLE checkpoints ALTER COLUMN body SET STORAGE EXTERNAL;
        CREATE INDEX checkpoints_newest_idx ON checkpoints (tenant_id, task_id, seq DESC);
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE checkpoints;")
