"""recall()'s fusion of the code vectors' answer with the content vectors'."""

from __future__ import annotations

import uuid

from pipelines.index.vectors import VectorHit
from workers.read.search import fuse_code_first, ranked

A, B, C, D = (uuid.UUID(int=n) for n in (1, 2, 3, 4))


def test_the_code_answer_leads_and_each_memory_keeps_its_best_cosine() -> None:
    # given a snippet first by its code vector but fourth by its content vector
    code = [VectorHit(A, 0.49, {}), VectorHit(D, 0.10, {})]
    content = [
        VectorHit(B, 0.47, {}),
        VectorHit(C, 0.34, {}),
        VectorHit(D, 0.14, {}),
        VectorHit(A, 0.04, {}),
    ]

    # when recall() fuses them with the code list weighing 1.5
    fused = fuse_code_first(code, content, 1.5)

    # then the snippet leads, every memory is there once, with its best cosine
    assert [hit.id for hit in fused] == [A, D, B, C]
    assert {hit.id: hit.score for hit in fused} == {A: 0.49, B: 0.47, C: 0.34, D: 0.14}


def test_without_a_code_answer_the_content_order_stands() -> None:
    content = [VectorHit(B, 0.5, {}), VectorHit(A, 0.5, {}), VectorHit(C, 0.7, {})]
    assert [hit.id for hit in ranked(content)] == [C, A, B]  # ties by id
    assert [hit.id for hit in fuse_code_first([], content, 1.5)] == [C, A, B]
