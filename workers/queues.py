"""Queues by kind of work, declared once. A task's name starts with ``memory.<queue>.``."""

from __future__ import annotations

from enum import StrEnum


class CeleryQueue(StrEnum):
    WRITE = "write"
    EMBED = "embed"
    CONSOLIDATE = "consolidate"
    COMPRESS = "compress"
    QUALITY = "quality"
    MAINTENANCE = "maintenance"
    # The read path of the embedded mode: searches run in the process that owns the store.
    RECALL = "recall"


# Queues whose tasks touch the vector index. In embedded mode (qdrant-client local mode) one
# process owns the store, so exactly one worker consumes all of these.
VECTOR_QUEUES: tuple[CeleryQueue, ...] = (CeleryQueue.WRITE, CeleryQueue.EMBED, CeleryQueue.RECALL)

# Queues whose tasks run long: prefetch exactly one so a slow batch never sits on messages
# another worker could take.
LONG_QUEUES: tuple[CeleryQueue, ...] = (
    CeleryQueue.WRITE,
    CeleryQueue.EMBED,
    CeleryQueue.CONSOLIDATE,
    CeleryQueue.COMPRESS,
    CeleryQueue.QUALITY,
)
