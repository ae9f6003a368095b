"""The link window: a memory's older neighbours in its tenant, by (ts, id).

Linking a memory reads the ``LINK_CANDIDATES`` episodes that precede it in its tenant by
(timestamp, id), stored or corrected (a correction made meanwhile must not change the
window either). Before, it read the tenant's most recent rows at the time of the link
pass, so what a memory was linked to depended on how far the writes had got meanwhile: a
Chinese dependency chain was reached on one run and missed on the next. This index answers
the window with one index range scan per memory.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX memories_link_window_idx ON memories (tenant_id, ts DESC, id DESC) "
        "WHERE status IN ('stored', 'corrected') AND level = 0"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_link_window_idx")
