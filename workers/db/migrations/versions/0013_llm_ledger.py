"""The token ledger: what every model call cost, by tenant, call and model.

``llm_usage_daily`` holds one row per (tenant, call, model, UTC day), upserted by each call
(``workers.ledger``): ``memharness stats`` reads it by day. ``llm_usage_totals`` holds the same
counts summed over every day, upserted by the same statement, so a metrics scrape reads one
row per series however long the ledger has run (``memharness_llm_tokens_total``). Token
counts are what the provider reported: ``cached_tokens`` is the part of ``prompt_tokens``
served from its context cache, ``reasoning_tokens`` the part of ``completion_tokens`` spent
reasoning.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_COUNTS = """
            calls             bigint NOT NULL DEFAULT 0,
            prompt_tokens     bigint NOT NULL DEFAULT 0,
            completion_tokens bigint NOT NULL DEFAULT 0,
            cached_tokens     bigint NOT NULL DEFAULT 0,
            reasoning_tokens  bigint NOT NULL DEFAULT 0,
            updated_at        timestamptz NOT NULL DEFAULT now(),"""


def upgrade() -> None:
    op.execute(
        f"""
        CREATE TABLE llm_usage_daily (
            tenant_id text NOT NULL,
            call      text NOT NULL,
            model     text NOT NULL,
            day       date NOT NULL,{_COUNTS}
            PRIMARY KEY (tenant_id, call, model, day)
        );
        CREATE INDEX llm_usage_daily_day_idx ON llm_usage_daily (day);
        CREATE TABLE llm_usage_totals (
            tenant_id text NOT NULL,
            call      text NOT NULL,
            model     text NOT NULL,{_COUNTS}
            PRIMARY KEY (tenant_id, call, model)
        );
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE llm_usage_totals; DROP TABLE llm_usage_daily;")
