"""Names on the wire, declared once: the queues by kind of work and the task names.

A task's name is ``memory.<queue>.<verb_noun>``: the name is the wire format and says which
queue carries it. Every sender goes through ``workers.publish.publish`` with a ``TaskName``.
"""

from __future__ import annotations

from enum import StrEnum

from config import Settings


class CeleryQueue(StrEnum):
    WRITE = "write"
    EMBED = "embed"
    CONSOLIDATE = "consolidate"
    COMPRESS = "compress"
    QUALITY = "quality"
    MAINTENANCE = "maintenance"
    # The read path of the embedded mode: searches run in the process that owns the store.
    RECALL = "recall"


class TaskName(StrEnum):
    # write
    DRAIN_WRITES = "memory.write.drain"
    RELAY_OUTBOX = "memory.maintenance.relay_outbox"
    # read
    RECALL_SEARCH = "memory.recall.search"
    RECALL_CONTEXT = "memory.recall.context"
    TOUCH_MEMORIES = "memory.maintenance.touch_memories"
    # cognition
    COMPRESS_SWEEP = "memory.compress.sweep"
    COMPLETE_TASK = "memory.compress.complete_task"
    QUALITY_SWEEP = "memory.quality.sweep"
    DECAY_SWEEP = "memory.maintenance.decay_sweep"
    SCHEDULE_COMPRESSION = "memory.maintenance.schedule_compression"
    RELAY_COGNITION = "memory.maintenance.relay_cognition"
    CONSOLIDATE_NIGHTLY = "memory.consolidate.nightly"
    CONSOLIDATE_TENANT = "memory.consolidate.tenant"
    DRAIN_EMBEDDINGS = "memory.embed.drain"
    LINK_MEMORIES = "memory.embed.link_memories"
    # data ownership: corrections and erasures, on the store's owner
    SETTLE_OWNERSHIP = "memory.embed.settle_ownership"
    # index: each job twice, on the store owner's queue and on maintenance (IndexJob)
    OWNER_CHECK_INDEX = "memory.embed.check_index"
    OWNER_REBUILD_INDEX = "memory.embed.rebuild_index"
    OWNER_COMPACT_INDEX = "memory.embed.compact_index"
    OWNER_RECONCILE_INDEX = "memory.embed.reconcile_index"
    OWNER_REEMBED_STEP = "memory.embed.reembed_step"
    OWNER_RESTORE_INDEX = "memory.embed.restore_index"
    SERVER_CHECK_INDEX = "memory.maintenance.check_index"
    SERVER_REBUILD_INDEX = "memory.maintenance.rebuild_index"
    SERVER_COMPACT_INDEX = "memory.maintenance.compact_index"
    SERVER_RECONCILE_INDEX = "memory.maintenance.reconcile_index"
    SERVER_REEMBED_STEP = "memory.maintenance.reembed_step"
    SERVER_RESTORE_INDEX = "memory.maintenance.restore_index"
    # operations: golden queries on quality, index counts on the store's owner
    GOLDEN_QUERIES = "memory.quality.golden_queries"
    INDEX_COUNTS = "memory.recall.index_counts"
    # probes
    PING = "memory.maintenance.ping"
    NOOP = "memory.maintenance.noop"

    @property
    def queue(self) -> CeleryQueue:
        return CeleryQueue(self.value.split(".")[1])


class IndexJob(StrEnum):
    """Index maintenance jobs. In embedded mode only the store's owner may open the store, so
    they run there (``embed`` queue); with a Qdrant server any maintenance worker runs them."""

    CHECK = "check_index"
    REBUILD = "rebuild_index"
    COMPACT = "compact_index"
    RECONCILE = "reconcile_index"
    REEMBED_STEP = "reembed_step"
    # A collection found short of PostgreSQL, restored step by step while reads go on.
    RESTORE = "restore_index"

    def task(self, settings: Settings) -> TaskName:
        """The task of this job in ``settings``' deployment."""
        return TaskName(f"memory.{index_queue(settings).value}.{self.value}")


def index_queue(settings: Settings) -> CeleryQueue:
    """The queue of index maintenance: the owner's in embedded mode, else maintenance."""
    return CeleryQueue.EMBED if settings.store_is_embedded else CeleryQueue.MAINTENANCE


# Queues whose tasks touch the vector index. In embedded mode one process owns the store, so
# exactly one worker consumes all of these.
VECTOR_QUEUES: tuple[CeleryQueue, ...] = (CeleryQueue.WRITE, CeleryQueue.EMBED, CeleryQueue.RECALL)
