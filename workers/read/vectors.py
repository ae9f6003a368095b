"""The read path's vector side: dense recall through the index port, with the step's context
fused in, and the code vectors of code memories for a question in code's terms.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from pipelines.index.vectors import (
    CODE_VECTOR,
    ContextFusion,
    Embedder,
    VectorIndex,
    embed_queries,
)
from pipelines.read.recall import RecallHit, RecallScope
from workers.metrics import observe_vector_search
from workers.read.sql import Memo


class VectorRecall:
    """Dense recall through the vector port; each query text is embedded once.

    With ``fusion`` (the step's phase and focus as a context string, and the phase's
    weights; ``pipelines.embedding_context``) every search fuses the content vector with the
    context vector; the context string is embedded with the first query texts.
    """

    def __init__(
        self,
        vectors: VectorIndex,
        embedder: Embedder,
        collection: str | None,
        vector_lock: threading.Lock,
        fusion: tuple[str, tuple[float, float]] | None = None,
        code_embedder: Embedder | None = None,
    ) -> None:
        self._vectors = vectors
        self._embedder = embedder
        self._code_embedder = code_embedder
        self._collection = collection
        self._vector_lock = vector_lock
        self._fusion = fusion
        self._memo: Memo[tuple[Any, ...], list[RecallHit]] = Memo()
        # (is a query, text) -> vector: a text asked and the same text stored embed apart.
        self._cache: dict[tuple[bool, str], list[float]] = {}
        self._cache_lock = threading.Lock()

    def _embed(self, texts: Sequence[str], context: str | None = None) -> list[list[float]]:
        """The query vectors of ``texts`` (then that of ``context``, a context string, when
        given), the ones not seen yet embedded in one call per kind: a query as a question
        (``embed_queries``), a context string as the context strings it is compared with
        were written (``embed``). A symmetric embedder gets one call for both."""
        keys = [(True, text) for text in texts]
        if context is not None:
            keys.append((False, context))
        with self._cache_lock:
            missing = [key for key in dict.fromkeys(keys) if key not in self._cache]
        if missing:
            if getattr(self._embedder, "embed_query", None) is None:
                vectors = self._embedder.embed([text for _, text in missing])
            else:
                queries = [text for is_query, text in missing if is_query]
                passages = [text for is_query, text in missing if not is_query]
                asked = iter(embed_queries(self._embedder, queries) if queries else [])
                stored = iter(self._embedder.embed(passages) if passages else [])
                vectors = [next(asked) if is_query else next(stored) for is_query, _ in missing]
            with self._cache_lock:
                self._cache.update(zip(missing, vectors, strict=True))
        with self._cache_lock:
            return [self._cache[key] for key in keys]

    def _context_fusion(self) -> ContextFusion | None:
        if self._fusion is None:
            return None
        context, (content_weight, context_weight) = self._fusion
        return ContextFusion(
            context=self._embed([], context)[0],
            content_weight=content_weight,
            context_weight=context_weight,
        )

    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return self.search_dense_many([text], scope, limit)[0]

    def search_dense_many(
        self, texts: Sequence[str], scope: RecallScope, limit: int
    ) -> list[list[RecallHit]]:
        """``search_dense`` of each text, the ones not searched yet in one batch: the
        embedder gets one call for all of them and the engine one planned batch."""
        collection = self._collection
        if collection is None:
            # A re-embed run is building the current model's vectors: a score against the
            # old ones would mix versions, so dense recall sits out until the alias switch.
            return [[] for _ in texts]
        unique = list(dict.fromkeys(texts))
        futures = self._memo.claim([(scope.tenant_id, scope.task_id, t, limit) for t in unique])
        owned = [text for text, (_, owner) in zip(unique, futures, strict=True) if owner]
        if owned:
            try:
                context = self._fusion[0] if self._fusion is not None else None
                vectors = self._embed(owned, context)[: len(owned)]
                fusion = self._context_fusion()
                # The embedded engine is one shard per collection: searches take turns on
                # it while the PostgreSQL recallers run in parallel.
                with self._vector_lock:
                    searched = time.perf_counter()
                    answers = self._vectors.search_many(
                        collection,
                        vectors,
                        tenant_id=scope.tenant_id,
                        task_id=scope.task_id,
                        limit=limit,
                        fusion=fusion,
                        with_payload=False,
                    )
                    observe_vector_search(time.perf_counter() - searched)
            except Exception as exc:
                for future, owner in futures:
                    if owner:
                        future.set_exception(exc)
                raise
            results = iter(answers)
            for future, owner in futures:
                if owner:
                    hits = next(results)
                    future.set_result([RecallHit(id=str(h.id), score=h.score) for h in hits])
        by_text = {text: future.result() for text, (future, _) in zip(unique, futures, strict=True)}
        return [list(by_text[text]) for text in texts]

    def search_code(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        """Code memories by their code vectors: ``text`` read as code, embedded as a
        question by the code embedder. Nothing when code vectors are off."""
        collection = self._collection
        if collection is None or self._code_embedder is None:
            return []
        vector = embed_queries(self._code_embedder, [text])[0]
        with self._vector_lock:
            searched = time.perf_counter()
            hits = self._vectors.search(
                collection,
                vector,
                tenant_id=scope.tenant_id,
                task_id=scope.task_id,
                limit=limit,
                using=CODE_VECTOR,
                with_payload=False,
            )
            observe_vector_search(time.perf_counter() - searched)
        return [RecallHit(id=str(h.id), score=h.score) for h in hits]

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        """The cosine of ``text`` with the stored content vectors of ``ids``: one search
        restricted to those points, scope included (a point not indexed yet has none)."""
        collection = self._collection
        if collection is None or not ids:
            return {}
        points = [uuid.UUID(key) for key in dict.fromkeys(ids)]
        vector = self._embed([text])[0]
        with self._vector_lock:
            hits = self._vectors.search(
                collection,
                vector,
                tenant_id=scope.tenant_id,
                task_id=scope.task_id,
                limit=len(points),
                with_payload=False,
                ids=points,
            )
        return {str(hit.id): float(hit.score) for hit in hits if math.isfinite(hit.score)}
