"""Checkpoint sequence numbers per task: ``seq`` counts one task's saves, not the install's.

A global identity let any tenant count every other tenant's saves from the gaps between its
own numbers. Each (tenant, task) now has its own counter in ``checkpoint_sequences``, bumped
by a BEFORE INSERT trigger so that every way a checkpoint row is written (a save, a re-save
that makes an old id the newest again, an import) numbers it the same way. The counter only
grows: retention prunes rows, and a number is never handed out twice within a task, so
"newest" (the highest ``seq``) is still insertion order and never depends on clocks. The
counter row is locked by the upsert, so two saves of one task at once are numbered one after
the other.

Existing rows are renumbered 1..n within their task in their old order, so resume, rollback
and the fall-back to "the next older checkpoint" see the same order as before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE checkpoints ALTER COLUMN seq DROP IDENTITY;
        ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_seq_key;
        DROP INDEX checkpoints_newest_idx;
        UPDATE checkpoints AS c SET seq = r.n
        FROM (
            SELECT id, row_number() OVER (PARTITION BY tenant_id, task_id ORDER BY seq) AS n
            FROM checkpoints
        ) AS r
        WHERE c.id = r.id;
        ALTER TABLE checkpoints
            ADD CONSTRAINT checkpoints_task_seq_key UNIQUE (tenant_id, task_id, seq);

        CREATE TABLE checkpoint_sequences (
            tenant_id text NOT NULL,
            task_id   text NOT NULL,
            last_seq  bigint NOT NULL CHECK (last_seq >= 1),
            PRIMARY KEY (tenant_id, task_id)
        );
        INSERT INTO checkpoint_sequences (tenant_id, task_id, last_seq)
        SELECT tenant_id, task_id, max(seq) FROM checkpoints GROUP BY tenant_id, task_id;

        CREATE FUNCTION checkpoints_next_seq() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO checkpoint_sequences AS s (tenant_id, task_id, last_seq)
            VALUES (NEW.tenant_id, NEW.task_id, 1)
            ON CONFLICT (tenant_id, task_id) DO UPDATE SET last_seq = s.last_seq + 1
            RETURNING last_seq INTO NEW.seq;
            RETURN NEW;
        END;
        $$;
        CREATE TRIGGER checkpoints_next_seq BEFORE INSERT ON checkpoints
            FOR EACH ROW EXECUTE FUNCTION checkpoints_next_seq();
        """
    )


def downgrade() -> None:
    # One global order again: interleave the tasks by their own numbers, which keeps each
    # task's order (all the old schema needs), then resume the identity after the highest.
    op.execute(
        """
        DROP TRIGGER checkpoints_next_seq ON checkpoints;
        DROP FUNCTION checkpoints_next_seq();
        DROP TABLE checkpoint_sequences;
        ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_task_seq_key;
        UPDATE checkpoints AS c SET seq = r.n
        FROM (SELECT id, row_number() OVER (ORDER BY seq, tenant_id, task_id) AS n
              FROM checkpoints) AS r
        WHERE c.id = r.id;
        ALTER TABLE checkpoints ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY;
        SELECT setval(pg_get_serial_sequence('checkpoints', 'seq'),
                      coalesce((SELECT max(seq) FROM checkpoints), 0) + 1, false);
        ALTER TABLE checkpoints ADD CONSTRAINT checkpoints_seq_key UNIQUE (seq);
        CREATE INDEX checkpoints_newest_idx ON checkpoints (tenant_id, task_id, seq DESC);
        """
    )
