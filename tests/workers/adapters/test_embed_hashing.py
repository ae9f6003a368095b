"""The hashing embedder: English vectors bit for bit as they always were, Chinese hashed as
character bigrams so that a short Chinese query is close to the memories that contain it."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

import numpy as np
import pytest

from tests.support.project_history import history
from tests.support.project_history_zh import history_mixed, history_zh
from workers.adapters.embed_hashing import HashingEmbedder, tokenize

START = datetime(2026, 11, 2, tzinfo=UTC)

# SHA-256 prefixes of the float32 vectors the embedder gave before Han runs were split; a
# change here changes every stored English vector without a version change.
ENGLISH_DIGESTS: dict[tuple[int, str], str] = {
    (64, "Why did we choose PostgreSQL for the ledger?"): "151bdf7e255b13aebd99e06e8cb934ec",
    (
        64,
        "Ran the integration suite on branch feature/oauth-3: 121 tests passed, 2 were flaky "
        "in tests/test_tokens.py.",
    ): "561688c3542f5c11cc80949f7e6a673c",
    (64, "Café crème, naïve résumé — “quoted” ±1.5%"): "d6c02462f50d61ebc39c29cfdd9f2651",
    (64, "Привет, мир! Δοκιμή"): "e6a9982e47b4355c007dbd775fc34405",
    (64, "カタカナとひらがな 한국어 텍스트"): "a3af4dc409619d82a1b37e0d199c0b24",
    (64, ""): "5341e6b2646979a70e57653007a1f310",
    (64, "v1.2.3 ATL-12 auth/login.py snake_case"): "24efa4979f4cb7ebf74f41cb43d4d46d",
    (384, "Why did we choose PostgreSQL for the ledger?"): "3c14885ff2b668983002cc715da65ae7",
    (384, "Café crème, naïve résumé — “quoted” ±1.5%"): "07e6306055412af6b1b8b349d670e680",
    (384, "v1.2.3 ATL-12 auth/login.py snake_case"): "9332018f129a157c401dc5bef01ddb3f",
}


def _digest(vector: np.ndarray) -> str:
    return hashlib.sha256(vector.tobytes()).hexdigest()[:32]


@pytest.mark.parametrize(("dim", "text"), list(ENGLISH_DIGESTS))
def test_text_without_han_gives_the_same_vector_bit_for_bit(dim: int, text: str) -> None:
    assert _digest(HashingEmbedder(dim).embed_one(text)) == ENGLISH_DIGESTS[(dim, text)]


def test_text_without_han_is_tokenised_as_before() -> None:
    # given the tokeniser the embedder had before Han runs were split
    def before(text: str) -> list[str]:
        return [t.strip(".-+") for t in re.findall(r"[\w][\w.+-]*", text.casefold()) if t]

    # then the project history's English turns tokenise the same
    for item in history(START):
        assert tokenize(item["content"]) == before(item["content"])


def test_han_runs_are_hashed_as_their_bigrams_cut_at_function_words() -> None:
    assert tokenize("支付模块负责人是张工。") == [
        *("支付", "付模", "模块", "块负", "负责", "责人"),
        "张工",  # 是 cuts the run: no 人是 or 是张
    ]
    # Latin words and identifiers touching a run are words of their own
    assert tokenize("JWT迁移 v1.2版本") == ["jwt", "迁移", "v1.2", "版本"]
    # a one-character run stands for itself; a run of function words gives nothing
    assert tokenize("张 的了") == ["张"]


def test_a_short_chinese_query_is_closest_to_the_memory_that_names_it() -> None:
    # given the payment owner's memory among build logs and the project's other turns
    embedder = HashingEmbedder(64)
    owner = "支付模块负责人是张工，因为他之前做过第三方支付网关的对接。"
    others = [
        "构建日志：npm run build 成功，耗时 42 秒，产物在 dist/ 目录。",
        "构建日志：lint 通过，单元测试 312 个全部通过。",
        *(item["content"] for item in history_zh(START) if "张工" not in item["content"]),
    ]

    # when memories are ranked by cosine to the two-character query
    query = embedder.embed_one("张工")
    scores = {text: float(query @ embedder.embed_one(text)) for text in [owner, *others]}
    ranked = sorted(scores, key=lambda text: -scores[text])

    # then the memory naming 张工 comes first, well clear of the rest
    assert ranked[0] == owner
    assert scores[owner] > 0.15
    assert max(scores[text] for text in others) < scores[owner] / 2


def test_mixed_text_shares_features_with_both_languages_queries() -> None:
    embedder = HashingEmbedder(64)
    memory = embedder.embed_one(
        "Payment module 的 owner 定为张工，因为他做过第三方 payment gateway 的对接。"
    )
    unrelated = embedder.embed_one("Billing migration 依赖 payment module 联调完成，目前 blocked。")

    assert float(embedder.embed_one("张工") @ memory) > float(
        embedder.embed_one("张工") @ unrelated
    )
    assert float(embedder.embed_one("gateway 对接") @ memory) > float(
        embedder.embed_one("gateway 对接") @ unrelated
    )


def test_every_turn_of_the_chinese_histories_embeds_to_a_unit_vector() -> None:
    embedder = HashingEmbedder(64)
    for item in history_zh(START) + history_mixed(START):
        vector = embedder.embed_one(item["content"])
        assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)
