"""Foundation: memories, semantic memories, links, the outbox of jobs, write decisions.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memories (
            id                uuid PRIMARY KEY,
            tenant_id         text NOT NULL,
            user_id           text,
            agent_id          text,
            task_id           text NOT NULL,
            session_id        text NOT NULL,
            ts                timestamptz NOT NULL,
            type              text CHECK (type IN ('decision', 'action', 'observation',
                                                   'feedback', 'status_change', 'preference')),
            content           text NOT NULL CHECK (length(content) > 0),
            content_hash      bytea NOT NULL,
            idempotency_key   text,
            summary           text,
            embedding_version text,
            importance        real NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
            access_count      integer NOT NULL DEFAULT 0 CHECK (access_count >= 0),
            last_accessed_at  timestamptz,
            related_ids       uuid[] NOT NULL DEFAULT '{}',
            decay_factor      real NOT NULL DEFAULT 1 CHECK (decay_factor BETWEEN 0 AND 1),
            level             smallint NOT NULL DEFAULT 0 CHECK (level BETWEEN 0 AND 4),
            modality          text NOT NULL DEFAULT 'text' CHECK (modality IN ('text', 'code')),
            metadata          jsonb NOT NULL DEFAULT '{}',
            status            text NOT NULL DEFAULT 'pending'
                              CHECK (status IN ('pending', 'stored', 'discarded', 'dead')),
            status_reason     text,
            created_at        timestamptz NOT NULL DEFAULT now(),
            updated_at        timestamptz NOT NULL DEFAULT now()
        );
        -- An exact repeat inside one (tenant, task, session) is refused by the index itself,
        -- which is race-free where a read-then-write check is not.
        CREATE UNIQUE INDEX memories_repeat_uq
            ON memories (tenant_id, task_id, session_id, content_hash) WHERE level = 0;
        CREATE INDEX memories_scope_ts_idx ON memories (tenant_id, task_id, ts DESC);
        CREATE INDEX memories_status_idx ON memories (status) WHERE status <> 'stored';

        CREATE TABLE semantic_memories (
            id                uuid PRIMARY KEY,
            tenant_id         text NOT NULL,
            user_id           text,
            agent_id          text,
            scope             text NOT NULL DEFAULT 'tenant',
            content           text NOT NULL CHECK (length(content) > 0),
            confidence        real NOT NULL CHECK (confidence BETWEEN 0 AND 1),
            source_ids        uuid[] NOT NULL DEFAULT '{}',
            conditions        text,
            embedding_version text,
            status            text NOT NULL DEFAULT 'active'
                              CHECK (status IN ('active', 'needs_confirmation', 'retired')),
            created_at        timestamptz NOT NULL DEFAULT now(),
            updated_at        timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX semantic_memories_tenant_idx ON semantic_memories (tenant_id, status);

        CREATE TABLE memory_links (
            src_id     uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            dst_id     uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            kind       text NOT NULL CHECK (kind IN ('entity', 'similar', 'causal')),
            weight     real NOT NULL DEFAULT 1,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (src_id, dst_id, kind)
        );
        CREATE INDEX memory_links_dst_idx ON memory_links (dst_id);

        -- The outbox: written in the same transaction as the memory. A job is claimable when
        -- pending and due, or running with an expired lease (its worker died).
        CREATE TABLE jobs (
            id          bigserial PRIMARY KEY,
            kind        text NOT NULL,
            memory_id   uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            status      text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'running', 'done', 'dead')),
            attempts    integer NOT NULL DEFAULT 0,
            lease_until timestamptz NOT NULL DEFAULT now(),
            last_error  text,
            dead_reason text,
            created_at  timestamptz NOT NULL DEFAULT now(),
            updated_at  timestamptz NOT NULL DEFAULT now(),
            UNIQUE (kind, memory_id)
        );
        CREATE INDEX jobs_claimable_idx ON jobs (kind, lease_until)
            WHERE status IN ('pending', 'running');

        -- One row per tier that looked at a write. Tier-1 drops have no memory row, so
        -- memory_id is the id the write would have had (deterministic) and has no FK.
        CREATE TABLE write_decisions (
            id          bigserial PRIMARY KEY,
            memory_id   uuid NOT NULL,
            tenant_id   text NOT NULL,
            tier        smallint NOT NULL CHECK (tier BETWEEN 1 AND 3),
            verdict     text NOT NULL CHECK (verdict IN ('keep', 'drop', 'dead')),
            memory_type text,
            confidence  real,
            reason      text NOT NULL,
            source      text NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            UNIQUE (memory_id, tier)
        );
        CREATE INDEX write_decisions_tenant_idx ON write_decisions (tenant_id, tier, verdict);

        -- Tasks whose retries ran out, with the reason; jobs of the outbox keep theirs in
        -- jobs.dead_reason.
        CREATE TABLE dead_letters (
            id         bigserial PRIMARY KEY,
            task_name  text NOT NULL,
            task_id    text NOT NULL UNIQUE,
            args       jsonb NOT NULL,
            reason     text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE dead_letters;
        DROP TABLE write_decisions;
        DROP TABLE jobs;
        DROP TABLE memory_links;
        DROP TABLE semantic_memories;
        DROP TABLE memories;
        """
    )
