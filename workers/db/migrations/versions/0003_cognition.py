"""Background cognition: summary versions, compression health, quality reports, evictions,
consolidation runs and the state the sweeps need.

Summaries are rows of ``memories`` with level >= 1; ``superseded_by`` points a covered row at
its active summary (set and cleared in the same transaction as the summary's insert or
rollback). Nothing here ever deletes a memory: eviction and rollback are statuses.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories DROP CONSTRAINT memories_status_check;
        ALTER TABLE memories ADD CONSTRAINT memories_status_check
            CHECK (status IN ('pending', 'stored', 'discarded', 'dead', 'retired', 'evicted'));
        ALTER TABLE memories
            ADD COLUMN superseded_by uuid,
            ADD COLUMN parent_ids uuid[] NOT NULL DEFAULT '{}',
            ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version >= 1),
            ADD COLUMN linked_at timestamptz;
        -- The sweeps' scans: live rows of a tenant by level, oldest first.
        CREATE INDEX memories_live_level_idx ON memories (tenant_id, level, ts)
            WHERE status = 'stored' AND superseded_by IS NULL;
        CREATE INDEX memories_superseded_idx ON memories (superseded_by)
            WHERE superseded_by IS NOT NULL;
        CREATE INDEX memories_unlinked_idx ON memories (updated_at)
            WHERE status = 'stored' AND level = 0 AND linked_at IS NULL;

        ALTER TABLE memory_links ADD COLUMN reason text NOT NULL DEFAULT '';
        ALTER TABLE memory_links ADD COLUMN tenant_id text;
        CREATE INDEX memory_links_src_idx ON memory_links (src_id);

        ALTER TABLE semantic_memories
            ADD COLUMN kind text,
            ADD COLUMN conflicts_with uuid,
            ADD COLUMN reason text;

        -- Failures of quality checks per memory; three make it compression-resistant.
        CREATE TABLE compression_health (
            memory_id  uuid PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
            tenant_id  text NOT NULL,
            failures   integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
            resistant  boolean NOT NULL DEFAULT false,
            updated_at timestamptz NOT NULL DEFAULT now()
        );

        -- One quality check per summary version; a rollback is a row with verdict rollback.
        CREATE TABLE quality_reports (
            summary_id        uuid PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
            tenant_id         text NOT NULL,
            run_id            uuid,
            level             smallint NOT NULL,
            version           integer NOT NULL,
            fact_recall       real,
            decision_fidelity real,
            verdict           text NOT NULL CHECK (verdict IN ('keep', 'rollback')),
            reason            text NOT NULL,
            report            jsonb NOT NULL,
            checked_at        timestamptz NOT NULL
        );
        CREATE INDEX quality_reports_tenant_idx ON quality_reports (tenant_id, verdict);

        -- The log of final evictions by the decay model.
        CREATE TABLE evictions (
            memory_id  uuid PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
            tenant_id  text NOT NULL,
            run_id     uuid,
            evicted_at timestamptz NOT NULL,
            record     jsonb NOT NULL
        );

        -- One row per sweep run (decay, compress, quality, consolidate, link): its cursor
        -- while it runs, its figures when it is done.
        CREATE TABLE cognition_runs (
            run_id      uuid PRIMARY KEY,
            kind        text NOT NULL,
            tenant_id   text,
            clock       timestamptz NOT NULL,
            cursor      text,
            stats       jsonb NOT NULL DEFAULT '{}',
            started_at  timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz
        );
        CREATE INDEX cognition_runs_kind_idx ON cognition_runs (kind, started_at DESC);

        -- Knowledge that stays episodic until it recurs (one mention in one task).
        CREATE TABLE consolidation_waiting (
            tenant_id  text NOT NULL,
            statement  text NOT NULL,
            kind       text NOT NULL,
            source_ids uuid[] NOT NULL,
            reason     text NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, kind, statement)
        );
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE consolidation_waiting;
        DROP TABLE cognition_runs;
        DROP TABLE evictions;
        DROP TABLE quality_reports;
        DROP TABLE compression_health;
        ALTER TABLE semantic_memories DROP COLUMN reason, DROP COLUMN conflicts_with,
            DROP COLUMN kind;
        DROP INDEX memory_links_src_idx;
        ALTER TABLE memory_links DROP COLUMN tenant_id, DROP COLUMN reason;
        DROP INDEX memories_unlinked_idx;
        DROP INDEX memories_superseded_idx;
        DROP INDEX memories_live_level_idx;
        ALTER TABLE memories DROP COLUMN linked_at, DROP COLUMN version,
            DROP COLUMN parent_ids, DROP COLUMN superseded_by;
        ALTER TABLE memories DROP CONSTRAINT memories_status_check;
        ALTER TABLE memories ADD CONSTRAINT memories_status_check
            CHECK (status IN ('pending', 'stored', 'discarded', 'dead'));
        """
    )
