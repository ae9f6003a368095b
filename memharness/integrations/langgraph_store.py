"""``MemharnessStore``: LangGraph's long-term memory store on memory-harness.

Scope. A store is bound to one tenant (``tenant_id``, as an API key is): every namespace
lives inside it and no call can reach another tenant. The namespace is the scope inside the
tenant: an item's indexed text becomes a memory of the task ``lg/<label>/<label>...`` (or
``lg/<sha256>`` when the labels do not make a task id), in a session of its own item, with
``metadata.langgraph_store`` naming the namespace and the key.

Truth. ``get``, ``list_namespaces`` and the filter-only ``search`` read the exact key-value
rows of ``langgraph_items`` (migration 0008). An item's memory is found by ``memory_id``;
a search hit counts only when it is the item's current memory, so a stale version (an
update before its correction, a deleted item before its erasure) is never returned.

Semantic search. ``search(prefix, query=...)`` asks our retrieval pipeline
(``MemoryClient.recall``: the store owner's dense recall with our embedder), per namespace
under the prefix (up to ``RECALL_NAMESPACES_MAX`` of them, else once tenant-wide), and maps
the hits back to the current items under the prefix that pass ``filter``, scored by the
hit. Items the recall did not return (not indexed, not embedded yet, or ranked below the
recall's limit) follow, unscored, newest first, as LangGraph's in-memory store does for
items without vectors. ``index={"fields": [...]}`` says which fields are embedded
(default ``["$"]``, the whole value); ``dims`` and ``embed`` are not used: the embedder is
the workers' (``MEMHARNESS_EMBEDDER``). Without ``index`` nothing is recorded and a query is
ignored, like LangGraph's stores without an index.

Updates and deletes. A changed item's text goes through ``MemoryClient.correct`` (a new
version superseding the old, which is never recalled again) and a deleted or swept item's
memory, or an item no longer indexed, through ``MemoryClient.forget`` (erased everywhere,
by the store's owner). An item whose memory the write decision discarded gets a new memory.

TTL (minutes, LangGraph's semantics): reads refresh live items' expiry unless told not to;
``ttl={"omit_expired": True}`` hides expired items before :meth:`sweep_ttl` deletes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import threading
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from config import Settings, get_settings
from memharness.client import MemoryClient
from memharness.integrations.clients import StoreClient
from memharness.integrations.langgraph_filters import matches, namespace_matches, sql_filter
from pipelines.errors import Conflict, InvalidInput, NotFound
from pipelines.records import check_id
from workers.db import open_pool

log = logging.getLogger(__name__)

__all__ = ["MemharnessStore", "StoreClient", "task_for_namespace"]

KEY_MAX_CHARS = 1024
# One recall per namespace keeps each namespace's own top hits (a tenant-wide top 100 could
# be all one busy namespace); past 8 namespaces the round trips cost more than they win.
RECALL_NAMESPACES_MAX = 8
# Hits that map to nothing (a stale version, another namespace) still take recall slots.
RECALL_SLACK = 10
RECALL_LIMIT_MAX = 100
FORGET_REASON = "deleted from the LangGraph store"
CORRECT_REASON = "updated in the LangGraph store"
ACTOR = "langgraph-store"
# An item going back to a text it held before needs a new key each time that text's memory
# was erased or superseded: each generation costs a round trip, and 8 covers an item deleted
# and put back with the same text 7 times.
KEY_GENERATIONS = 8

_COLUMNS = "namespace, key, value, created_at, updated_at, memory_id, ttl_minutes, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > clock_timestamp())"
_UPSERT = f"""
INSERT INTO langgraph_items AS i
    (tenant_id, namespace, key, value, memory_id, ttl_minutes, expires_at)
VALUES (%(tenant)s, %(namespace)s, %(key)s, %(value)s, %(memory_id)s, %(ttl)s,
        clock_timestamp() + %(ttl)s * interval '1 minute')
ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
    value = EXCLUDED.value, memory_id = EXCLUDED.memory_id,
    ttl_minutes = EXCLUDED.ttl_minutes, expires_at = EXCLUDED.expires_at,
    updated_at = clock_timestamp()
RETURNING {_COLUMNS}"""
_REFRESH = f"""
UPDATE langgraph_items
SET expires_at = clock_timestamp() + ttl_minutes * interval '1 minute'
WHERE tenant_id = %s AND namespace = %s AND key = %s
  AND ttl_minutes IS NOT NULL AND {_LIVE}"""


def task_for_namespace(namespace: Sequence[str]) -> str:
    """The task id an item's memory is recorded under."""
    task = "lg/" + "/".join(namespace)
    try:
        check_id("task_id", task)
        return task
    except InvalidInput:
        digest = hashlib.sha256("\x1f".join(namespace).encode()).hexdigest()[:40]
        return f"lg/{digest}"


def _item_digest(namespace: Sequence[str], key: str) -> str:
    return hashlib.sha256("\x1f".join((*namespace, "", key)).encode()).hexdigest()


class MemharnessStore(BaseStore):
    """A LangGraph ``BaseStore`` on memory-harness, bound to one tenant.

    ``client`` records and recalls the memories (a new ``MemoryClient(settings)`` when not
    given, closed with the store): a ``MemoryClient``, or a ``RemoteMemoryClient`` whose key
    is ``tenant_id``'s (the memories then go through the HTTP API). The rows use their own
    PostgreSQL pool (or ``pool``) from ``settings``, so a store needs the database either way.
    """

    supports_ttl = True

    def __init__(
        self,
        client: StoreClient | None = None,
        *,
        tenant_id: str,
        agent_id: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        settings: Settings | None = None,
        pool: ConnectionPool | None = None,
        recall_timeout_s: float = 10.0,
    ) -> None:
        self.tenant_id = str(check_id("tenant_id", tenant_id))
        self.agent_id = check_id("agent_id", agent_id, required=False)
        self._own_client = client is None
        self._client: StoreClient = client or MemoryClient(settings)
        # A local client's settings are the store's; a remote one holds none of its own.
        if isinstance(self._client, MemoryClient):
            self.settings = self._client.settings
        else:
            self.settings = settings or get_settings()
        self._own_pool = pool is None
        self._pool = pool or open_pool(self.settings, name="memharness-langgraph-store")
        self.ttl_config = ttl
        self.recall_timeout_s = recall_timeout_s
        # This store's puts whose memories may not be indexed yet (read your writes).
        self._unsettled: set[uuid.UUID] = set()
        self._unsettled_lock = threading.Lock()
        self.index_config: IndexConfig | None = None
        self._fields: list[tuple[str, str | list[str]]] = []
        if index is not None:
            self.index_config = index.copy()
            fields = list(index.get("fields") or ["$"])
            self._fields = [(p, p if p == "$" else tokenize_path(p)) for p in fields]

    def close(self) -> None:
        if self._own_pool:
            self._pool.close()
        if self._own_client:
            self._client.close()

    def __enter__(self) -> MemharnessStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the batch ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the ops in order (a get after a put of the same batch sees the put)."""
        results: list[Result] = []
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            else:
                raise InvalidInput("ops", f"unknown operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The same batch in a worker thread (one implementation for both callers)."""
        listed = list(ops)
        return await asyncio.to_thread(self.batch, listed)

    # -- writes ------------------------------------------------------------------------------

    def _put(self, op: PutOp) -> None:
        namespace, key = _check_path(op.namespace, op.key)
        if op.value is None:
            self._delete(namespace, key)
            return
        value = _check_value(op.value)
        ttl = _check_ttl(op.ttl)
        text = self._indexed_text(value, op.index)
        with self._pool.connection() as conn:
            previous = conn.execute(
                "SELECT value, memory_id FROM langgraph_items "
                "WHERE tenant_id = %s AND namespace = %s AND key = %s",
                (self.tenant_id, namespace, key),
            ).fetchone()
        old_text = None
        old_memory: uuid.UUID | None = None
        if previous is not None:
            old_memory = previous[1]
            old_text = self._indexed_text(previous[0], op.index) if old_memory else None
        memory_id = old_memory if text is not None and text == old_text else None
        if text is not None and memory_id is None:
            memory_id = self._remember(namespace, key, text, old_memory)
            if memory_id is not None:
                with self._unsettled_lock:
                    self._unsettled.add(memory_id)
        elif text is None and old_memory is not None:
            self._forget(old_memory)
        with self._pool.connection() as conn:
            conn.execute(
                _UPSERT,
                {
                    "tenant": self.tenant_id,
                    "namespace": namespace,
                    "key": key,
                    "value": Jsonb(value),
                    "memory_id": memory_id,
                    "ttl": ttl,
                },
            )

    def _delete(self, namespace: list[str], key: str) -> None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "DELETE FROM langgraph_items WHERE tenant_id = %s AND namespace = %s "
                "AND key = %s RETURNING memory_id",
                (self.tenant_id, namespace, key),
            ).fetchone()
        if row is not None and row[0] is not None:
            self._forget(row[0])

    def sweep_ttl(self) -> int:
        """Delete the tenant's expired items (and erase their memories); returns how many."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "DELETE FROM langgraph_items WHERE tenant_id = %s "
                "AND expires_at <= clock_timestamp() RETURNING memory_id",
                (self.tenant_id,),
            ).fetchall()
        for (memory_id,) in rows:
            if memory_id is not None:
                self._forget(memory_id)
        return len(rows)

    def _indexed_text(self, value: dict[str, Any], index: Any) -> str | None:
        """The text embedded for ``value``: the store's fields, or the put's own list."""
        if self.index_config is None or index is False:
            return None
        paths = self._fields if index is None else [(p, tokenize_path(p)) for p in index]
        texts: list[str] = []
        for _, path in paths:
            texts.extend(t for t in get_text_at_path(value, path) if t and t.strip())
        if not texts:
            return None
        text = "\n".join(texts)
        limit = self.settings.content_max_bytes
        # The row keeps the whole value; only the recalled text stops at the content limit.
        return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")

    def _remember(
        self, namespace: list[str], key: str, text: str, previous: uuid.UUID | None
    ) -> uuid.UUID | None:
        """Record ``text`` as the item's memory: a new version of ``previous`` when there is
        one to correct, else a new memory. None: the write rules dropped it."""
        if previous is not None:
            try:
                corrected = self._client.correct(
                    previous, text, tenant_id=self.tenant_id, reason=CORRECT_REASON, actor=ACTOR
                )
                return corrected.memory_id
            except (Conflict, NotFound) as exc:
                # Discarded by the write decision, or erased meanwhile: nothing to supersede.
                log.info("memory %s not corrected (%s); recording a new one", previous, exc)
        digest = _item_digest(namespace, key)
        text_digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        metadata: dict[str, Any] = {"langgraph_store": {"namespace": namespace, "key": key}}
        if len(json.dumps(metadata)) > self.settings.metadata_max_bytes // 2:
            metadata = {"langgraph_store": {"item": digest}}
        fields: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "task_id": task_for_namespace(namespace),
            "session_id": f"lg-{digest[:32]}",
            "agent_id": self.agent_id,
            "metadata": metadata,
        }
        # Keys are deterministic, so a put retried after a crash before its row was written
        # records the same memory. A key whose memory was erased or superseded since (the
        # item held this text before) moves to the next generation of the same sequence.
        base = f"lg-store:{digest}:{text_digest}"
        for generation in range(KEY_GENERATIONS):
            key_n = base if generation == 0 else f"{base}:{generation}"
            try:
                receipt = self._client.record(text, idempotency_key=key_n, **fields)
            except InvalidInput as exc:
                if exc.field != "idempotency_key":
                    raise
                continue  # an erased memory holds no content to compare with
            if receipt.status == "dropped":
                return None
            if receipt.status != "duplicate" or self._is_live(receipt.memory_id):
                return receipt.memory_id
        # Past them a retry may record a second copy: an orphan no search returns.
        receipt = self._client.record(text, idempotency_key=f"{base}:{uuid.uuid4()}", **fields)
        return None if receipt.status == "dropped" else receipt.memory_id

    def _is_live(self, memory_id: uuid.UUID) -> bool:
        memory = self._client.get(memory_id, tenant_id=self.tenant_id)
        return memory is not None and str(memory.status) in ("pending", "stored")

    def _forget(self, memory_id: uuid.UUID) -> None:
        # Returns once the rows are tombstones; the owner erases the other copies after.
        with contextlib.suppress(NotFound):  # erased already: nothing left to do
            self._client.forget(
                tenant_id=self.tenant_id, reason=FORGET_REASON, memory_id=memory_id, actor=ACTOR
            )

    # -- reads ---------------------------------------------------------------------------------

    def _omit_expired(self) -> bool:
        return bool((self.ttl_config or {}).get("omit_expired", False))

    def _get(self, op: GetOp) -> Item | None:
        namespace, key = _check_path(op.namespace, op.key)
        sql = (
            f"SELECT {_COLUMNS} FROM langgraph_items "
            "WHERE tenant_id = %s AND namespace = %s AND key = %s"
        )
        if self._omit_expired():
            sql += f" AND {_LIVE}"
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(sql, (self.tenant_id, namespace, key)).fetchone()
            if row is not None and op.refresh_ttl and row["ttl_minutes"] is not None:
                cur.execute(_REFRESH, (self.tenant_id, namespace, key))
        if row is None:
            return None
        return Item(
            namespace=tuple(row["namespace"]),
            key=row["key"],
            value=row["value"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def _candidates(
        self, op: SearchOp, *, memory_ids: Sequence[uuid.UUID] | None = None
    ) -> list[dict[str, Any]]:
        """Items under the prefix passing the filter, newest first (the hits' only, when
        ``memory_ids`` is given)."""
        prefix = list(op.namespace_prefix)
        sql = f"SELECT {_COLUMNS} FROM langgraph_items WHERE tenant_id = %s"
        params: list[Any] = [self.tenant_id]
        if prefix:
            sql += " AND namespace[1:%s] = %s::text[]"
            params += [len(prefix), prefix]
        pushed, exact = sql_filter(op.filter)
        if pushed:
            sql += " AND value @> %s"
            params.append(Jsonb(pushed))
        if memory_ids is not None:
            sql += " AND memory_id = ANY(%s::uuid[])"
            params.append(list(memory_ids))
        if self._omit_expired():
            sql += f" AND {_LIVE}"
        sql += " ORDER BY updated_at DESC, namespace, key"
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(sql, params).fetchall()
        if exact:
            return rows
        return [row for row in rows if matches(row["value"], op.filter or {})]

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit < 0 or op.offset < 0:
            raise InvalidInput("limit", "limit and offset must be 0 or more")
        rows = self._candidates(op)
        scored: list[tuple[float, dict[str, Any]]] = []
        if op.query and self.index_config is not None and rows:
            scores = self._recall_scores(op, rows)
            scored = sorted(
                ((scores[row["memory_id"]], row) for row in rows if row["memory_id"] in scores),
                key=lambda pair: -pair[0],
            )
        seen = {id(row) for _, row in scored}
        ranked: list[tuple[float | None, dict[str, Any]]] = [*scored]
        ranked += [(None, row) for row in rows if id(row) not in seen]
        page = ranked[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            self._refresh(row for _, row in page)
        return [_item(row, score) for score, row in page]

    def _recall_scores(
        self, op: SearchOp, rows: Sequence[dict[str, Any]]
    ) -> dict[uuid.UUID, float]:
        """Best recall score per memory id among ``rows``' current memories."""
        current = {row["memory_id"] for row in rows if row["memory_id"] is not None}
        if not current:
            return {}
        self._settle_own_writes()
        namespaces = sorted({tuple(row["namespace"]) for row in rows if row["memory_id"]})
        limit = min(RECALL_LIMIT_MAX, op.offset + op.limit + RECALL_SLACK)
        tasks: list[str | None] = [task_for_namespace(ns) for ns in namespaces]
        if len(tasks) > RECALL_NAMESPACES_MAX:
            tasks, limit = [None], RECALL_LIMIT_MAX
        scores: dict[uuid.UUID, float] = {}
        for task in dict.fromkeys(tasks):
            hits = self._client.recall(
                op.query or "",
                tenant_id=self.tenant_id,
                task_id=task,
                limit=limit,
                timeout_s=self.recall_timeout_s,
            )
            for hit in hits:
                memory_id = uuid.UUID(hit["id"])
                if memory_id in current:
                    scores[memory_id] = max(float(hit["score"]), scores.get(memory_id, -1e9))
        return scores

    def _settle_own_writes(self) -> None:
        """Read your writes: a semantic search first waits (up to ``recall_timeout_s``) for
        this store's own puts to be stored and indexed. The store owner answers recalls on
        a slot of their own, beside its drains, so a search sent right after a put would
        otherwise meet the index before the put's vector; LangGraph's stores find an item
        put just before. One that takes longer follows unscored, as an item not embedded
        yet does."""
        with self._unsettled_lock:
            pending = list(self._unsettled)
        if not pending:
            return
        try:
            self._client.wait_until_settled(pending, timeout_s=self.recall_timeout_s)
        except TimeoutError as exc:
            log.warning("searching before %s put(s) were indexed: %s", len(pending), exc)
            return
        with self._unsettled_lock:
            self._unsettled.difference_update(pending)

    def _refresh(self, rows: Iterable[dict[str, Any]]) -> None:
        params = [
            (self.tenant_id, row["namespace"], row["key"])
            for row in rows
            if row["ttl_minutes"] is not None
        ]
        if params:
            with self._pool.connection() as conn, conn.cursor() as cur:
                cur.executemany(_REFRESH, params)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        if op.limit < 0 or op.offset < 0:
            raise InvalidInput("limit", "limit and offset must be 0 or more")
        sql = "SELECT DISTINCT namespace FROM langgraph_items WHERE tenant_id = %s"
        params: list[Any] = [self.tenant_id]
        for condition in op.match_conditions or ():
            # A literal prefix narrows the scan; wildcards and suffixes are matched below.
            literal = list(condition.path)
            if condition.match_type == "prefix" and literal and "*" not in literal:
                sql += " AND namespace[1:%s] = %s::text[]"
                params += [len(literal), literal]
        if self._omit_expired():
            sql += f" AND {_LIVE}"
        with self._pool.connection() as conn:
            found = [tuple(row[0]) for row in conn.execute(sql, params).fetchall()]
        conditions = list(op.match_conditions or ())
        names = [ns for ns in found if all(namespace_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            if op.max_depth < 1:
                raise InvalidInput("max_depth", f"must be 1 or more, got {op.max_depth}")
            names = list({ns[: op.max_depth] for ns in names})
        return sorted(names)[op.offset : op.offset + op.limit]


def _check_path(namespace: tuple[str, ...], key: object) -> tuple[list[str], str]:
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if not isinstance(key, str) or not key or len(key) > KEY_MAX_CHARS or "\x00" in key:
        raise InvalidInput(
            "key", f"must be 1-{KEY_MAX_CHARS} characters without NUL", f"{KEY_MAX_CHARS} chars"
        )
    return list(namespace), key


def _check_value(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput("value", f"must be a dict, got {type(value).__name__}")
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput("value", f"is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput("value", "nests deeper than JSON can follow") from None
    if "\\u0000" in encoded:
        raise InvalidInput("value", "holds a NUL character, which PostgreSQL jsonb refuses")
    return value


# A century of minutes: ``now + ttl`` stays far inside PostgreSQL's interval and timestamptz
# ranges (an infinite or 1e12-minute ttl made the INSERT fail with "interval out of range").
TTL_MAX_MINUTES = 100 * 365 * 24 * 60


def _check_ttl(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise InvalidInput("ttl", f"must be a positive number of minutes, got {ttl!r}")
    if not math.isfinite(ttl) or ttl > TTL_MAX_MINUTES:
        raise InvalidInput(
            "ttl", f"must be at most {TTL_MAX_MINUTES} minutes, got {ttl!r}", str(TTL_MAX_MINUTES)
        )
    return float(ttl)


def _item(row: dict[str, Any], score: float | None = None) -> SearchItem:
    created: datetime = row["created_at"]
    updated: datetime = row["updated_at"]
    return SearchItem(
        namespace=tuple(row["namespace"]),
        key=row["key"],
        value=row["value"],
        created_at=created,
        updated_at=updated,
        score=score,
    )
