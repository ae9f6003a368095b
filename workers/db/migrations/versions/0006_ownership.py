"""Owning memories: corrections as versions, forgetting as tombstones, and their logs.

A correction inserts a new row (``supersedes`` the old id, ``version`` one more) and marks the
old row ``corrected`` with ``corrected_by`` and the reason: reads skip it, history keeps it.
Forgetting empties a row in place (status ``forgotten``: content '', no summary or metadata, a
content hash that no longer says anything about the text) and records the request in
``forget_requests``, which is both the outbox of the cleanup job (lease, attempts, stage) and
the audit log: who asked, what was forgotten, when and why; never the content.
``memory_events`` is the history of a memory: versions, supersessions, re-derivations and
erasures, with times and reasons.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories DROP CONSTRAINT memories_status_check;
        ALTER TABLE memories ADD CONSTRAINT memories_status_check
            CHECK (status IN ('pending', 'stored', 'discarded', 'dead', 'retired', 'evicted',
                              'corrected', 'forgotten'));
        ALTER TABLE memories DROP CONSTRAINT memories_content_check;
        ALTER TABLE memories ADD CONSTRAINT memories_content_check
            CHECK (length(content) > 0 OR status = 'forgotten');
        ALTER TABLE memories
            ADD COLUMN supersedes    uuid,
            ADD COLUMN corrected_by  uuid,
            ADD COLUMN change_reason text,
            ADD COLUMN forgotten_at  timestamptz;
        CREATE INDEX memories_supersedes_idx ON memories (supersedes)
            WHERE supersedes IS NOT NULL;
        CREATE INDEX memories_session_idx ON memories (tenant_id, session_id);

        CREATE TABLE memory_events (
            id         bigserial PRIMARY KEY,
            tenant_id  text NOT NULL,
            subject    text NOT NULL DEFAULT 'memory'
                       CHECK (subject IN ('memory', 'semantic')),
            memory_id  uuid NOT NULL,
            event      text NOT NULL
                       CHECK (event IN ('corrected', 'superseded', 'summary_stale',
                                        'rederived', 'retired', 'forgotten', 'imported')),
            version    integer,
            related_id uuid,
            reason     text,
            actor      text,
            at         timestamptz NOT NULL DEFAULT now(),
            detail     jsonb NOT NULL DEFAULT '{}'
        );
        CREATE INDEX memory_events_memory_idx ON memory_events (memory_id, at);
        CREATE INDEX memory_events_tenant_idx ON memory_events (tenant_id, at);

        CREATE TABLE forget_requests (
            id          uuid PRIMARY KEY,
            tenant_id   text NOT NULL,
            target      text NOT NULL CHECK (target IN ('memory', 'task', 'session', 'tenant')),
            target_id   text NOT NULL,
            reason      text NOT NULL,
            actor       text NOT NULL,
            status      text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'running', 'done', 'dead')),
            attempts    integer NOT NULL DEFAULT 0,
            lease_until timestamptz NOT NULL DEFAULT now(),
            memory_ids  uuid[] NOT NULL DEFAULT '{}',
            stats       jsonb NOT NULL DEFAULT '{}',
            last_error  text,
            created_at  timestamptz NOT NULL DEFAULT now(),
            updated_at  timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz
        );
        CREATE INDEX forget_requests_due_idx ON forget_requests (lease_until)
            WHERE status IN ('pending', 'running');
        CREATE INDEX forget_requests_tenant_idx ON forget_requests (tenant_id, created_at);
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE forget_requests;
        DROP TABLE memory_events;
        DROP INDEX memories_session_idx;
        DROP INDEX memories_supersedes_idx;
        ALTER TABLE memories DROP COLUMN forgotten_at, DROP COLUMN change_reason,
            DROP COLUMN corrected_by, DROP COLUMN supersedes;
        ALTER TABLE memories DROP CONSTRAINT memories_content_check;
        ALTER TABLE memories ADD CONSTRAINT memories_content_check CHECK (length(content) > 0);
        ALTER TABLE memories DROP CONSTRAINT memories_status_check;
        ALTER TABLE memories ADD CONSTRAINT memories_status_check
            CHECK (status IN ('pending', 'stored', 'discarded', 'dead', 'retired', 'evicted'));
        """
    )
