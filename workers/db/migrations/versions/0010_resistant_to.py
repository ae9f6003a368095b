"""The compressor a compression-resistant mark holds for.

``compression_health.resistant_to`` names the compressor (engine and offline rules version,
``pipelines.cognition.compress.compressor_id``) whose summaries kept failing; a row marked
resistant by another compressor, or before this column (NULL), is compressed normally again.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE compression_health ADD COLUMN resistant_to text")


def downgrade() -> None:
    op.execute("ALTER TABLE compression_health DROP COLUMN resistant_to")
