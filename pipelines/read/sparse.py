"""Keyword recall: a BM25 index in pure Python and numpy, built incrementally.

Dense vectors blur exact tokens (a file name, a version, a person's name) that an agent
often asks about by name; BM25 keeps them. The analyzer is shared with query rewriting so a
query term and a document term meet in the same form: case-folded, light English stemming,
stopwords dropped, identifiers kept whole *and* split into their parts (``nginx.conf`` also
indexes ``nginx`` and ``conf``), CJK text as character bigrams.

Scoring is Okapi BM25 with Lucene's non-negative idf. The index is for one scope (a tenant
and task, or one benchmark conversation); the caller keeps one per scope or passes
``allowed`` to filter.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from pipelines.text.analyzer import analyze, term_counts

# Robertson and Zaragoza's usual values, also Lucene's defaults.
BM25_K1 = 1.2
BM25_B = 0.75


class BM25Index:
    """An incremental BM25 index: ``add`` and ``remove`` at any time, ``search`` any time.

    Postings are python dicts (cheap to update); each term's postings are turned into numpy
    arrays on first use after a change, so a search is a few vectorised adds per query term.
    """

    def __init__(self, *, k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.k1 = k1
        self.b = b
        self._ids: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._lengths: list[int] = []
        self._terms: list[Counter[str]] = []
        self._postings: dict[str, dict[int, int]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._length_array: np.ndarray | None = None
        self._live = 0
        self._total_length = 0

    def __len__(self) -> int:
        return self._live

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._slot

    def add(self, doc_id: str, text: str) -> None:
        """Index ``text`` under ``doc_id``; a second add of the same id replaces the first."""
        if doc_id in self._slot:
            self.remove(doc_id)
        terms = Counter(dict(term_counts(text)))
        slot = len(self._ids)
        self._ids.append(doc_id)
        self._slot[doc_id] = slot
        length = sum(terms.values())
        self._lengths.append(length)
        self._terms.append(terms)
        for term, tf in terms.items():
            self._postings.setdefault(term, {})[slot] = tf
            self._arrays.pop(term, None)
        self._length_array = None
        self._live += 1
        self._total_length += length

    def add_many(self, docs: Iterable[tuple[str, str]]) -> None:
        for doc_id, text in docs:
            self.add(doc_id, text)

    def remove(self, doc_id: str) -> None:
        slot = self._slot.pop(doc_id, None)
        if slot is None:
            return
        for term in self._terms[slot]:
            postings = self._postings.get(term)
            if postings is not None:
                postings.pop(slot, None)
                if not postings:
                    del self._postings[term]
            self._arrays.pop(term, None)
        self._total_length -= self._lengths[slot]
        self._lengths[slot] = 0
        self._terms[slot] = Counter()
        self._ids[slot] = None
        self._length_array = None
        self._live -= 1

    def document_frequency(self, term: str) -> int:
        return len(self._postings.get(term, {}))

    def idf(self, term: str) -> float:
        """Lucene's BM25 idf: never negative, so a very common term still counts a little."""
        return bm25_idf(self.document_frequency(term), self._live)

    def _posting_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        arrays = self._arrays.get(term)
        if arrays is None:
            postings = self._postings.get(term, {})
            slots = np.fromiter(postings.keys(), dtype=np.int64, count=len(postings))
            tfs = np.fromiter(postings.values(), dtype=np.float64, count=len(postings))
            arrays = (slots, tfs)
            self._arrays[term] = arrays
        return arrays

    def score_terms(self, weighted_terms: Mapping[str, float]) -> np.ndarray:
        """BM25 of every slot for query terms with weights (a repeated term weighs more)."""
        scores = np.zeros(len(self._ids), dtype=np.float64)
        if not self._live:
            return scores
        if self._length_array is None:
            self._length_array = np.asarray(self._lengths, dtype=np.float64)
        average = self._total_length / self._live if self._total_length else 1.0
        norms = self.k1 * (1.0 - self.b + self.b * self._length_array / average)
        for term, weight in weighted_terms.items():
            if weight <= 0 or term not in self._postings:
                continue
            slots, tfs = self._posting_arrays(term)
            gain = self.idf(term) * tfs * (self.k1 + 1.0) / (tfs + norms[slots])
            scores[slots] += weight * gain
        return scores

    def search(
        self,
        query: str | Mapping[str, float],
        limit: int = 50,
        allowed: Callable[[str], bool] | None = None,
    ) -> list[tuple[str, float]]:
        """The best ``limit`` documents with a positive score, best first (ties by id)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        weighted = query_weights(query) if isinstance(query, str) else query
        scores = self.score_terms(weighted)
        hits = np.flatnonzero(scores > 0)
        if allowed is not None:
            hits = np.asarray(
                [slot for slot in hits if allowed(self._ids[slot] or "")], dtype=np.int64
            )
        if hits.size == 0:
            return []
        if hits.size > limit:  # keep everything tied with the limit-th score, then sort
            threshold = np.partition(scores[hits], hits.size - limit)[hits.size - limit]
            hits = hits[scores[hits] >= threshold]
        ranked = sorted(
            ((self._ids[slot] or "", float(scores[slot])) for slot in hits),
            key=lambda item: (-item[1], item[0]),
        )
        return ranked[:limit]

    def expansion_terms(
        self, query: str, *, feedback_docs: int = 8, max_terms: int = 8
    ) -> list[tuple[str, float]]:
        """Pseudo-relevance feedback (RM3's term model): terms of the top documents.

        Each term is weighed by its frequency in each feedback document, that document's
        normalised score and its idf; query terms are excluded. Weights sum to 1.
        """
        weighted = query_weights(query)
        top = self.search(weighted, limit=feedback_docs)
        if not top:
            return []
        docs = [(self._terms[self._slot[doc_id]], score) for doc_id, score in top]
        return _term_model(weighted, docs, self.document_frequency, self._live, max_terms)


def feedback_terms(
    query: str,
    ranked: Sequence[tuple[str, float]],
    *,
    feedback_docs: int = 8,
    max_terms: int = 8,
) -> list[tuple[str, float]]:
    """RM3's term model over a first-pass ranking ``ranked`` ((text, score), best first), as
    ``BM25Index.expansion_terms`` computes it over its own ranking: each term of the top
    ``feedback_docs`` texts weighs its frequency there times the text's score relative to the
    best, times its idf over all of ``ranked``; query terms and terms of one text only are
    left out. Weights sum to 1.

    For a caller whose search already ranked the texts (PostgreSQL's full-text search on the
    read path), so that no index is built to rank them again.
    """
    docs = [(dict(term_counts(text)), score) for text, score in ranked]
    top = [(terms, score) for terms, score in docs[:feedback_docs] if score > 0]
    if not top:
        return []
    df: Counter[str] = Counter()
    for terms, _ in docs:
        df.update(terms.keys())
    return _term_model(query_weights(query), top, df.__getitem__, len(docs), max_terms)


def _term_model(
    weighted: Mapping[str, float],
    top: Sequence[tuple[Mapping[str, int], float]],
    df: Callable[[str], int],
    n: int,
    max_terms: int,
) -> list[tuple[str, float]]:
    """RM3's term model over the feedback documents ``top`` ((term counts, score), best
    first), with document frequencies ``df`` over ``n`` documents. Weights sum to 1."""
    best = top[0][1]
    model: dict[str, float] = {}
    for terms, score in top:
        length = sum(terms.values()) or 1
        for term, tf in terms.items():
            if term in weighted or df(term) < 2:
                continue  # a term in one document only cannot associate anything
            model[term] = model.get(term, 0.0) + (tf / length) * (score / best)
    scored = {term: value * bm25_idf(df(term), n) for term, value in model.items()}
    ranked = sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:max_terms]
    total = sum(value for _, value in ranked) or 1.0
    return [(term, value / total) for term, value in ranked]


def bm25_idf(df: int, n: int) -> float:
    """Lucene's BM25 idf of a term in ``df`` of ``n`` documents: never negative."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def query_weights(query: str | Sequence[str]) -> dict[str, float]:
    """Query terms with their counts as weights."""
    terms = analyze(query) if isinstance(query, str) else list(query)
    return {term: float(count) for term, count in Counter(terms).items()}
