"""``Clients``: the clients one process holds, built on first use and never at import time.

A worker process, the agent's ``MemoryClient`` (its pool and Redis; in server mode also the
read path's index, embedder and model) and a benchmark all hold one. Each forked pool process
builds its own (a psycopg pool or a Redis connection must never cross a fork);
``worker_process_init`` warms them and ``worker_process_shutdown`` closes them.
"""

from __future__ import annotations

import gc
import os
import threading
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar, overload

import redis
from psycopg_pool import ConnectionPool

from config import Settings, get_settings
from workers.db import open_pool

if TYPE_CHECKING:
    from pipelines.index.vectors import Embedder, VectorIndex
    from pipelines.read.tokens import TokenCounter
    from workers.ledger import BillableLLM
    from workers.window import WorkingMemoryPool


T = TypeVar("T")


class built_once(cached_property[T]):
    """``cached_property`` built under the instance's lock: the store owner's read slot and
    its Celery slot may both ask first, and a second engine opening the same store would
    fail (one owner per store). Python 3.12 dropped ``cached_property``'s own lock."""

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> built_once[T]: ...
    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> T: ...
    def __get__(self, instance: object | None, owner: type[Any] | None = None) -> Any:
        if instance is None:
            return self
        cached = instance.__dict__
        if self.attrname in cached:
            return cached[self.attrname]
        with instance._build_lock:  # type: ignore[attr-defined]
            return super().__get__(instance, owner)


class Clients:
    def __init__(
        self,
        settings: Settings,
        *,
        name: str = "memharness-worker",
        redis_timeout_s: float = 5.0,
    ) -> None:
        self.settings = settings
        self.pid = os.getpid()
        self.name = name
        self.redis_timeout_s = redis_timeout_s
        # Searches of one process through the embedded engine are serialised on this lock.
        self.vector_lock = threading.Lock()
        self._build_lock = threading.RLock()

    @built_once
    def pool(self) -> ConnectionPool:
        return open_pool(self.settings, name=f"{self.name}-{self.pid}")

    @built_once
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(
            self.settings.redis_url,
            socket_timeout=self.redis_timeout_s,
            socket_connect_timeout=self.redis_timeout_s,
        )

    @built_once
    def llm(self) -> BillableLLM:
        """The cognitive engine, unbound: a call through it is recorded as unattributed;
        calls made for a tenant go through ``llm_for``."""
        from workers.adapters import build_llm
        from workers.ledger import PostgresLedger

        return build_llm(self.settings, ledger=PostgresLedger(lambda: self.pool))

    def llm_for(self, tenant_id: str) -> BillableLLM:
        """The cognitive engine with its calls recorded under ``tenant_id`` in the ledger."""
        return self.llm.billed_to(tenant_id)

    @built_once
    def embedder(self) -> Embedder:
        from workers.adapters import build_embedder

        return build_embedder(self.settings)

    @built_once
    def code_embedder(self) -> Embedder | None:
        """The code vector's embedder (the text embedder over code read as words), None
        when code vectors are off."""
        from workers.adapters import build_code_embedder

        return build_code_embedder(self.settings, self.embedder)

    @built_once
    def vectors(self) -> VectorIndex:
        from workers.adapters import build_vector_index

        return build_vector_index(self.settings)

    @built_once
    def counter(self) -> TokenCounter:
        """The token counter of budgets (loads the tokenizer: about half a second)."""
        from workers.adapters.tokenizer import load_token_counter

        return load_token_counter(self.settings.tokenizer)

    @built_once
    def working_memory(self) -> WorkingMemoryPool:
        from workers.window import WorkingMemoryPool

        return WorkingMemoryPool(
            self.redis,
            max_turns=self.settings.working_memory_max_turns,
            ttl_s=self.settings.working_memory_ttl_s,
        )

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
        for name in (
            "vectors",
            "pool",
            "redis",
            "llm",
            "embedder",
            "code_embedder",
            "working_memory",
        ):
            built.pop(name, None)


_clients: Clients | None = None

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


def get_clients() -> Clients:
    """This process's clients (a forked child builds its own)."""
    global _clients
    if _clients is None or _clients.pid != os.getpid():
        _clients = Clients(get_settings())
    return _clients


def close_clients() -> None:
    global _clients
    if _clients is not None and _clients.pid == os.getpid():
        _clients.close()
    _clients = None
