"""Conflicts: pairs of memories that may disagree, both kept.

The automatic path of corrections supersedes an older memory only on precise evidence; a pair
with weaker signs (or one the model did not confirm) is recorded here instead, and context()
shows both statements with their dates. ``status``: ``open`` (shown), ``kept`` (a person
undid an automatic supersession of the pair: both hold, nothing to show), ``resolved`` (one
side was corrected or forgotten since). The event log gains ``conflict``, ``restored`` and
``supersession_undone``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memory_conflicts (
            tenant_id   text NOT NULL,
            older_id    uuid NOT NULL,
            newer_id    uuid NOT NULL,
            status      text NOT NULL DEFAULT 'open'
                        CHECK (status IN ('open', 'kept', 'resolved')),
            reason      text NOT NULL,
            actor       text NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            updated_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (older_id, newer_id),
            CHECK (older_id <> newer_id)
        );
        CREATE INDEX memory_conflicts_newer_idx ON memory_conflicts (newer_id);
        CREATE INDEX memory_conflicts_tenant_idx ON memory_conflicts (tenant_id, status);

        ALTER TABLE memory_events DROP CONSTRAINT memory_events_event_check;
        ALTER TABLE memory_events ADD CONSTRAINT memory_events_event_check
            CHECK (event IN ('corrected', 'superseded', 'summary_stale', 'rederived',
                             'retired', 'forgotten', 'imported', 'conflict', 'restored',
                             'supersession_undone'));
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DELETE FROM memory_events
        WHERE event IN ('conflict', 'restored', 'supersession_undone');
        ALTER TABLE memory_events DROP CONSTRAINT memory_events_event_check;
        ALTER TABLE memory_events ADD CONSTRAINT memory_events_event_check
            CHECK (event IN ('corrected', 'superseded', 'summary_stale', 'rederived',
                             'retired', 'forgotten', 'imported'));
        DROP TABLE memory_conflicts;
        """
    )
