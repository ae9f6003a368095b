"""Clients of one worker process, built on first use and never at import time.

Each forked pool process builds its own (a psycopg pool or a Redis connection must never
cross a fork); ``worker_process_init`` warms them and ``worker_process_shutdown`` closes them.
"""

from __future__ import annotations

import gc
import os
from functools import cached_property

import redis
from psycopg_pool import ConnectionPool

from config import Settings, get_settings
from pipelines.ports import LLM, Embedder, VectorIndex
from workers.adapters import build_embedder, build_llm, build_vector_index
from workers.db import open_pool


class WorkerContext:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pid = os.getpid()

    @cached_property
    def pool(self) -> ConnectionPool:
        return open_pool(self.settings, name=f"memharness-worker-{self.pid}")

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(
            self.settings.redis_url, socket_timeout=5, socket_connect_timeout=5
        )

    @cached_property
    def llm(self) -> LLM:
        return build_llm(self.settings)

    @cached_property
    def embedder(self) -> Embedder:
        return build_embedder(self.settings)

    @cached_property
    def vectors(self) -> VectorIndex:
        return build_vector_index(self.settings)

    @property
    def episodic_collection(self) -> str:
        return f"{self.settings.collection_prefix}_episodic"

    def close(self) -> None:
        built = self.__dict__
        if "vectors" in built:
            built["vectors"].close()
        if "pool" in built:
            built["pool"].close()
        if "redis" in built:
            built["redis"].close()
        for name in ("vectors", "pool", "redis", "llm", "embedder"):
            built.pop(name, None)


_context: WorkerContext | None = None

# The cyclic collector's young-generation threshold in a worker process once it is warm.
# Python's default (700 container allocations) runs a collection every few hundred
# objects: a context() call allocates thousands (rows, candidates, partitions) and paid
# ~1 ms a call in collections, with the occasional full one in its p99.
GC_GEN0_THRESHOLD = 10_000


def tune_gc() -> None:
    """Freeze what the process has built so far (modules, clients, tokenizer: never garbage,
    no longer walked by any collection) and raise the young generation's threshold.

    Called once the process is warm; objects built later are collected as usual.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, middle, old)


def get_context() -> WorkerContext:
    global _context
    if _context is None or _context.pid != os.getpid():
        _context = WorkerContext(get_settings())
    return _context


def close_context() -> None:
    global _context
    if _context is not None and _context.pid == os.getpid():
        _context.close()
    _context = None
