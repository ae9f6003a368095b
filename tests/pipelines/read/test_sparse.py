"""The BM25 index and its analyzer."""

from __future__ import annotations

import math

import pytest

from pipelines.read.sparse import BM25_B, BM25_K1, BM25Index, feedback_terms, query_weights
from pipelines.text.analyzer import analyze, strip_suffixes


def test_analyzer_folds_stems_and_drops_stopwords() -> None:
    assert analyze("The Dogs were RUNNING to the parks") == ["dog", "run", "park"]
    assert analyze("What did Caroline's sister paint?") == ["caroline", "sister", "paint"]
    assert analyze("") == []


def test_identifiers_are_kept_whole_and_by_part() -> None:
    terms = analyze("edit config/app.yaml and nginx.conf, set max_retries=5 on port 8080")
    for expected in ["config/app.yaml", "config", "app", "yaml", "nginx.conf", "nginx", "conf",
                     "max_retries", "max", "retry", "5", "8080", "port"]:  # fmt: skip
        assert expected in terms, expected


def test_cjk_is_indexed_as_bigrams() -> None:
    assert analyze("数据库迁移") == ["数据", "据库", "库迁", "迁移"]


def test_stem_leaves_short_and_irregular_words() -> None:
    assert strip_suffixes("bus") == "bus"
    assert strip_suffixes("class") == "class"
    assert strip_suffixes("parties") == "party"
    assert strip_suffixes("planned") == "plan"
    assert strip_suffixes("boxes") == "box"
    assert strip_suffixes("2023") == "2023"


def test_bm25_matches_the_formula() -> None:
    # given three documents of known lengths
    index = BM25Index()
    index.add("a", "apple banana")
    index.add("b", "apple apple cherry date")
    index.add("c", "cherry")
    # when one term is scored
    scores = dict(index.search("apple"))
    # then it is Okapi BM25 with Lucene's idf
    n, df, average = 3, 2, (2 + 4 + 1) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))

    def bm25(tf: int, length: int) -> float:
        return idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average))

    assert scores["a"] == pytest.approx(bm25(1, 2))
    assert scores["b"] == pytest.approx(bm25(2, 4))
    assert "c" not in scores


def test_rare_terms_outrank_common_ones() -> None:
    index = BM25Index()
    index.add_many(
        [
            ("1", "Caroline: the weather is nice"),
            ("2", "Caroline: I adopted a puppy named Oscar"),
            ("3", "Caroline: work was busy"),
            ("4", "Melanie: the kids went swimming"),
        ]
    )
    hits = index.search("Caroline puppy")
    assert hits[0][0] == "2"
    assert {key for key, _ in hits} == {"1", "2", "3"}


def test_adding_updates_statistics_and_readding_replaces() -> None:
    index = BM25Index()
    index.add("x", "alpha beta")
    assert index.document_frequency("alpha") == 1
    before = index.idf("alpha")
    index.add("y", "gamma delta")
    assert index.idf("alpha") > before  # rarer among more documents
    index.add("x", "gamma only")  # same id: the old text is gone
    assert index.document_frequency("alpha") == 0
    assert index.document_frequency("gamma") == 2
    assert len(index) == 2
    assert [key for key, _ in index.search("alpha")] == []


def test_remove_forgets_a_document() -> None:
    index = BM25Index()
    index.add_many([("x", "kafka broker"), ("y", "kafka consumer")])
    index.remove("x")
    index.remove("missing")  # no error
    assert "x" not in index
    assert [key for key, _ in index.search("kafka broker")] == ["y"]
    assert len(index) == 1


def test_search_filters_limits_and_breaks_ties_by_id() -> None:
    index = BM25Index()
    index.add_many([(key, "same words here") for key in ["c", "a", "b"]])
    assert [key for key, _ in index.search("words", limit=2)] == ["a", "b"]
    allowed = [key for key, _ in index.search("words", allowed=lambda key: key != "a")]
    assert allowed == ["b", "c"]
    with pytest.raises(ValueError):
        index.search("words", limit=0)


def test_weighted_query_terms_count_more() -> None:
    index = BM25Index()
    index.add_many([("k", "kafka"), ("r", "redis")])
    hits = index.search({"kafka": 1.0, "redis": 3.0})
    assert hits[0][0] == "r"
    assert query_weights("kafka kafka redis") == {"kafka": 2.0, "redis": 1.0}


def test_expansion_terms_come_from_the_feedback_documents() -> None:
    index = BM25Index()
    index.add_many(
        [
            ("1", "Melanie went camping with the kids at the lake"),
            ("2", "camping trip: tent, lake, marshmallows and kids"),
            ("3", "Caroline joined a painting class"),
            ("4", "the lake was cold but the tent stayed dry"),
        ]
    )
    terms = dict(index.expansion_terms("camping", feedback_docs=2, max_terms=4))
    assert "camp" not in terms  # the query's own term is not an expansion
    assert "lake" in terms and "kid" in terms
    assert sum(terms.values()) == pytest.approx(1.0)
    assert index.expansion_terms("nothing matches this") == []


def test_feedback_over_a_given_ranking_is_the_index_own_expansion() -> None:
    # given texts and the index's own first-pass ranking of them (the rest scored 0)
    texts = {
        "1": "Melanie went camping with the kids at the lake",
        "2": "camping trip: tent, lake, marshmallows and kids",
        "3": "Caroline joined a painting class",
        "4": "the lake was cold but the tent stayed dry",
        "5": "camping again: the kids want a bigger tent",
    }
    index = BM25Index()
    index.add_many(texts.items())
    hits = index.search("camping tent", limit=10)
    rest = [(texts[key], 0.0) for key in texts if key not in dict(hits)]
    ranked = [(texts[key], score) for key, score in hits] + rest

    # when feedback terms are taken from that ranking without the index
    for feedback_docs, max_terms in ((2, 4), (8, 8)):
        expected = index.expansion_terms(
            "camping tent", feedback_docs=feedback_docs, max_terms=max_terms
        )
        got = feedback_terms(
            "camping tent", ranked, feedback_docs=feedback_docs, max_terms=max_terms
        )

        # then they are the same terms with the same weights
        assert [t for t, _ in got] == [t for t, _ in expected]
        assert [w for _, w in got] == pytest.approx([w for _, w in expected])
    assert feedback_terms("camping", []) == []
    assert feedback_terms("camping", [("camping trip", 0.0)]) == []


def test_empty_index_finds_nothing() -> None:
    assert BM25Index().search("anything") == []
