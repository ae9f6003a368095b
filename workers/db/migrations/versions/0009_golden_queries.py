"""Golden queries and their runs.

``golden_queries`` holds each tenant's questions with a known answer (set by the user, or
drawn from the tenant's memories); ``golden_runs`` one row per tenant per run: hit rate,
latencies, the misses, and the index counts seen by the same run (points against PostgreSQL's
live rows), which the health check and the metrics read back.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE golden_queries (
            id          uuid PRIMARY KEY,
            tenant_id   text NOT NULL,
            query       text NOT NULL CHECK (length(query) > 0),
            expected_id uuid NOT NULL,
            source      text NOT NULL CHECK (source IN ('user', 'drawn')),
            created_at  timestamptz NOT NULL DEFAULT now(),
            UNIQUE (tenant_id, id)
        );
        CREATE INDEX golden_queries_tenant_idx ON golden_queries (tenant_id, source);

        CREATE TABLE golden_runs (
            id           bigserial PRIMARY KEY,
            tenant_id    text NOT NULL,
            ran_at       timestamptz NOT NULL DEFAULT now(),
            queries      integer NOT NULL,
            hits         integer NOT NULL,
            hit_ratio    real,
            p50_s        real,
            p95_s        real,
            mrr          real,
            top_k        integer NOT NULL,
            misses       jsonb NOT NULL DEFAULT '[]',
            index_points jsonb,
            live_rows    jsonb
        );
        CREATE INDEX golden_runs_tenant_idx ON golden_runs (tenant_id, ran_at DESC);
        CREATE INDEX golden_runs_ran_at_idx ON golden_runs (ran_at DESC);
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE golden_runs;
        DROP TABLE golden_queries;
        """
    )
