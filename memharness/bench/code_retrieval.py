"""``memharness bench code-retrieval``: finding code memories, text path against code path.

The set is ``memharness.bench.code_set`` (how it was made is written there): 36 code memories
among 30 text memories of the same project, 40 questions with gold ids, 25 naming an
identifier and 15 in plain words. Every question runs through the full read pipeline
(``pipelines.read.retrieve.retrieve`` with the offline adapters, as ``bench
retrieval-quality`` runs it) twice, on the same memories and the same embedder:

(text) the text path: content vectors, keyword and temporal recall, the rerank cascade;
(code) the same, plus the code side of the dual encoder: a question that looks like code
       (``pipelines.text.code.looks_like_code``) also searches code memories' code vectors
       (the embedder over the code read as words), fused with the rest.

Also reported, dense alone: the content vectors' top-50 (``dense_text``), and for a
question that looks like code the code vectors' and content vectors' lists fused as the
pipeline fuses them (``dense_code``). Keys: ``code_recall_at_{5,10}_{text,code}``,
``code_mrr_{text,code}``, the same per question style, and the dense figures. Progress goes
to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from memharness.bench.code_set import CODE_MEMORIES, CODE_QUESTIONS, CodeQuestion
from memharness.bench.retrieval_quality import (
    DenseMatrix,
    SparseBM25,
    Tally,
    TemporalWindow,
    ViewStore,
    embed_matrix,
    load_embedder,
    question_metrics,
)
from pipelines.index.vectors import Embedder
from pipelines.read.config import DEFAULT_CONFIG, RRF_K
from pipelines.read.focus import offline_focus
from pipelines.read.recall import MemoryView, Recallers, RecallHit, RecallScope
from pipelines.read.retrieve import retrieve
from pipelines.read.rewrite import offline_rewrite
from pipelines.read.sparse import BM25Index
from pipelines.records import Level
from pipelines.text.code import looks_like_code
from pipelines.write.decide import offline_judge
from workers.adapters.embed_code import IdentifierEmbedder

RANK_DEPTH = 50
START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
# The memories are spread over ten days in the order of the set (one every ~3.6 hours), so
# the temporal recall's week holds most but not all of them, as in a live store.
SPACING = timedelta(hours=3.6)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class CodeMatrix:
    """Code memories' code vectors, brute-force cosine; questions embedded as queries."""

    def __init__(self, embedder: Embedder, ids: list[str], texts: list[str]) -> None:
        self._ids = ids
        self._vectors = embed_matrix(embedder, texts)
        self._queries = DenseMatrix(embedder, ids, self._vectors)

    def search_code(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return self._queries.top(self._queries.scores(text), limit)


class DenseWithCode:
    """The content recaller with the code side beside it (what ``VectorRecall`` is)."""

    def __init__(self, dense: DenseMatrix, code: CodeMatrix) -> None:
        self._dense = dense
        self._code = code

    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return self._dense.search_dense(text, scope, limit)

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        return self._dense.similarity(text, ids, scope)

    def search_code(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return self._code.search_code(text, scope, limit)


def _weighted_rrf(lists: Sequence[tuple[float, Sequence[str]]], k: int = RRF_K) -> list[str]:
    scores: dict[str, float] = {}
    for weight, ranked in lists:
        for rank, key in enumerate(ranked, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return [key for key, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def run(embedder_name: str) -> int:
    started = time.monotonic()
    _log(f"loading embedder {embedder_name}")
    try:
        embedder = load_embedder(embedder_name)
    except (ImportError, ValueError, OSError) as exc:
        message = f"cannot load embedder {embedder_name!r}: {exc}"
        print(f"error: {message}", file=sys.stderr)
        print(json.dumps({"benchmark": "code-retrieval", "error": message}))
        return 2
    code_embedder = IdentifierEmbedder(embedder)
    ids = [memory.id for memory in CODE_MEMORIES]
    texts = [memory.content for memory in CODE_MEMORIES]
    code_rows = [m for m in CODE_MEMORIES if m.modality == "code"]
    dense = DenseMatrix(embedder, ids, embed_matrix(embedder, texts))
    code = CodeMatrix(code_embedder, [m.id for m in code_rows], [m.content for m in code_rows])
    index = BM25Index()
    index.add_many(zip(ids, texts, strict=True))
    timestamps = [START + i * SPACING for i in range(len(CODE_MEMORIES))]
    views = {}
    for memory, when in zip(CODE_MEMORIES, timestamps, strict=True):
        judgement = offline_judge(memory.content, None)
        views[memory.id] = MemoryView(
            id=memory.id,
            content=memory.content,
            timestamp=when,
            type=judgement.type,
            importance=judgement.importance,
            retention=1.0,
            level=Level.L0,
            task_id="shop",
        )
    now = timestamps[-1] + timedelta(hours=1)
    scope = RecallScope(tenant_id="bench", task_id="shop", now=now)
    sparse = SparseBM25(index)
    temporal = TemporalWindow(dense, np.asarray([t.timestamp() for t in timestamps]))
    store = ViewStore(views)
    paths = {
        "text": Recallers(dense=dense, sparse=sparse, temporal=temporal, store=store),
        "code": Recallers(
            dense=DenseWithCode(dense, code), sparse=sparse, temporal=temporal, store=store
        ),
    }
    rankers = ("text", "code", "dense_text", "dense_code")
    tallies = {
        ranker: {style: Tally() for style in ("all", "identifier", "natural")} for ranker in rankers
    }
    classified = 0
    for question in CODE_QUESTIONS:
        ranked = _rank(question, paths, dense, code, scope)
        classified += looks_like_code(question.text)
        for ranker in rankers:
            metrics = question_metrics(ranked[ranker], question.gold)
            tallies[ranker]["all"].add(metrics)
            tallies[ranker][question.style].add(metrics)
    result: dict[str, Any] = {
        "benchmark": "code-retrieval",
        "embedder": embedder_name,
        "embedder_version": embedder.version,
        "code_embedder_version": code_embedder.version,
        "memories": len(CODE_MEMORIES),
        "code_memories": len(code_rows),
        "questions": len(CODE_QUESTIONS),
        "questions_identifier": tallies["text"]["identifier"].count,
        "questions_natural": tallies["text"]["natural"].count,
        "questions_looking_like_code": classified,
    }
    for ranker in rankers:
        for style in ("all", "identifier", "natural"):
            means = tallies[ranker][style].means()
            suffix = ranker if style == "all" else f"{ranker}_{style}"
            for metric in ("recall_at_5", "recall_at_10", "mrr"):
                name = "mrr" if metric == "mrr" else metric
                result[f"code_{name}_{suffix}"] = means[metric]
    result["code_recall_at_10_gain"] = round(
        result["code_recall_at_10_code"] - result["code_recall_at_10_text"], 4
    )
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    _log(
        f"code recall@10 text {result['code_recall_at_10_text']} "
        f"code {result['code_recall_at_10_code']}"
    )
    print(json.dumps(result, sort_keys=True))
    return 0


def _rank(
    question: CodeQuestion,
    paths: dict[str, Recallers],
    dense: DenseMatrix,
    code: CodeMatrix,
    scope: RecallScope,
) -> dict[str, list[str]]:
    """The ranked ids of each ranker for one question."""
    focus = offline_focus(question.text)
    related = paths["text"].sparse.related_terms
    variants = offline_rewrite(question.text, lambda text: related(text, scope, 8))
    ranked: dict[str, list[str]] = {}
    for name, recallers in paths.items():
        result = retrieve(question.text, scope, recallers, focus, variants=variants)
        ranked[name] = [candidate.memory.id for candidate in result.candidates]
    content = [hit.id for hit in dense.search_dense(question.text, scope, RANK_DEPTH)]
    ranked["dense_text"] = content
    if looks_like_code(question.text):
        by_code = [hit.id for hit in code.search_code(question.text, scope, RANK_DEPTH)]
        weights = [(DEFAULT_CONFIG.code_weight, by_code), (1.0, content)]
        ranked["dense_code"] = _weighted_rrf(weights)[:RANK_DEPTH]
    else:
        ranked["dense_code"] = content
    return ranked


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", choices=["hashing", "minilm", "e5"], default="hashing")
    raise SystemExit(run(parser.parse_args().embedder))
