"""LangGraph: the store's items, and what a LangGraph checkpoint adds to ours.

``langgraph_items`` holds the store's exact key-value rows (the truth of ``get``); an item's
indexed text is also a memory (``memory_id``), which semantic search recalls.

A LangGraph checkpoint is a row of ``checkpoints`` (our sealed frame: checksum, retention,
parents) plus ``langgraph_checkpoints`` (thread, namespace and the metadata the saver filters
on), which cascades from it, and its pending writes in ``langgraph_writes``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE langgraph_items (
            tenant_id   text NOT NULL,
            namespace   text[] NOT NULL CHECK (cardinality(namespace) >= 1),
            key         text NOT NULL,
            value       jsonb NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            updated_at  timestamptz NOT NULL DEFAULT now(),
            -- The memory holding the item's indexed text (NULL: not indexed, or dropped by
            -- the write rules); a search hit counts only when it names the current one.
            memory_id   uuid,
            ttl_minutes double precision CHECK (ttl_minutes > 0),
            expires_at  timestamptz,
            PRIMARY KEY (tenant_id, namespace, key)
        );
        CREATE INDEX langgraph_items_memory_idx ON langgraph_items (tenant_id, memory_id)
            WHERE memory_id IS NOT NULL;
        CREATE INDEX langgraph_items_updated_idx ON langgraph_items (tenant_id, updated_at DESC);
        CREATE INDEX langgraph_items_expiry_idx ON langgraph_items (expires_at)
            WHERE expires_at IS NOT NULL;

        CREATE TABLE langgraph_checkpoints (
            id            uuid PRIMARY KEY REFERENCES checkpoints (id) ON DELETE CASCADE,
            tenant_id     text NOT NULL,
            thread_id     text NOT NULL,
            checkpoint_ns text NOT NULL DEFAULT '',
            metadata      jsonb NOT NULL DEFAULT '{}'
        );
        CREATE INDEX langgraph_checkpoints_thread_idx
            ON langgraph_checkpoints (tenant_id, thread_id, checkpoint_ns, id DESC);

        -- No foreign key to checkpoints: LangGraph may store a step's writes before the
        -- checkpoint they belong to has committed (its puts run in the background). The
        -- saver deletes the writes of pruned checkpoints itself.
        CREATE TABLE langgraph_writes (
            tenant_id     text NOT NULL,
            thread_id     text NOT NULL,
            checkpoint_ns text NOT NULL DEFAULT '',
            checkpoint_id uuid NOT NULL,
            task_id       text NOT NULL,
            idx           integer NOT NULL,
            channel       text NOT NULL,
            type          text NOT NULL,
            blob          bytea NOT NULL,
            -- SHA-256 of type and blob: a write is checked like a checkpoint frame.
            digest        bytea NOT NULL,
            task_path     text NOT NULL DEFAULT '',
            PRIMARY KEY (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        );
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE langgraph_writes; DROP TABLE langgraph_checkpoints;")
    op.execute("DROP TABLE langgraph_items;")
