"""Indexes of the read path: a stored tsvector with a scoped GIN index, and the summary
chain's lookup by ``parent_ids``.

- ``search_tsv``: ``to_tsvector('english', content)`` (the read path's text search
  configuration, ``workers.read.sql.TS_CONFIG``), kept by a trigger for stored rows only.
  Not a generated column: a generated column computes it in ``record()``'s INSERT, on the
  synchronous write path, for rows that are still ``pending`` (and may be discarded), at
  ~0.12 µs a character (7 ms for a 64 KiB content). The trigger's ``WHEN`` clause is false
  for a pending insert, so ``record()`` does not call it; the drain's UPDATE to ``stored``
  (and any writer inserting a stored row directly: summaries, bulk loads) computes it.
  Contents never change after the insert; the UPDATE trigger covers it anyway.
- ``memories_search_idx``: GIN over (tenant_id, task_id, search_tsv) for stored rows
  (``btree_gin`` gives GIN the equality operators of text): one index scan yields the task's
  rows that match any query keyword, so sparse recall costs in matches rather than in rows
  of the task (at 100k rows, 2.3 ms instead of 62 ms computing to_tsvector per row). Its
  pending list is kept small (``gin_pending_list_limit``): searches scan all of it.
- ``memories_parent_ids_idx``: GIN over parent_ids of stored summary rows; the read path's
  lookup of a memory's higher-level versions was a scan of the tenant's rows (80 ms at 100k).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- Trusted since PostgreSQL 13: the database owner may create it.
        CREATE EXTENSION IF NOT EXISTS btree_gin;

        ALTER TABLE memories ADD COLUMN search_tsv tsvector;

        CREATE FUNCTION memories_search_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search_tsv := to_tsvector('english'::regconfig, NEW.content);
            RETURN NEW;
        END
        $$;
        CREATE TRIGGER memories_search_tsv_insert
            BEFORE INSERT ON memories FOR EACH ROW
            WHEN (NEW.status = 'stored')
            EXECUTE FUNCTION memories_search_tsv();
        CREATE TRIGGER memories_search_tsv_update
            BEFORE UPDATE ON memories FOR EACH ROW
            WHEN (NEW.status = 'stored'
                  AND (NEW.search_tsv IS NULL OR NEW.content IS DISTINCT FROM OLD.content))
            EXECUTE FUNCTION memories_search_tsv();

        UPDATE memories SET search_tsv = to_tsvector('english'::regconfig, content)
        WHERE status = 'stored';

        -- A small pending list: every search scans the whole of it, and at the default 4 MB
        -- (~10k memories) that added 5.3 ms to each keyword search at 100k rows; 128 kB keeps
        -- it under ~400 entries for +4 µs an insert (fastupdate off: +40 µs).
        CREATE INDEX memories_search_idx ON memories
            USING gin (tenant_id, task_id, search_tsv) WITH (gin_pending_list_limit = 128)
            WHERE status = 'stored';
        CREATE INDEX memories_parent_ids_idx ON memories
            USING gin (parent_ids) WITH (gin_pending_list_limit = 128)
            WHERE level >= 1 AND status = 'stored';
        """
    )


def downgrade() -> None:
    # btree_gin stays: other objects of the database may use it by then.
    op.execute(
        """
        DROP INDEX memories_parent_ids_idx;
        DROP INDEX memories_search_idx;
        DROP TRIGGER memories_search_tsv_update ON memories;
        DROP TRIGGER memories_search_tsv_insert ON memories;
        DROP FUNCTION memories_search_tsv();
        ALTER TABLE memories DROP COLUMN search_tsv;
        """
    )
