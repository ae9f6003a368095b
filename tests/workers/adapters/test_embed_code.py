"""The code embedder: the text embedder over code read as words."""

from __future__ import annotations

import numpy as np

from config import Settings
from pipelines.index.vectors import Embedder, embed_queries
from pipelines.text.code import code_text
from workers.adapters import build_code_embedder
from workers.adapters.embed_code import IdentifierEmbedder
from workers.adapters.embed_hashing import HashingEmbedder

SNIPPET = """export async function fetchUserById(userId: string): Promise<User> {
  const res = await httpClient.get(`/api/v2/users/${userId}`);
  return UserSchema.parse(res.data);
}"""
OTHER = """func NewRedisCache(addr string, ttl time.Duration) *RedisCache {
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 20})
	return &RedisCache{client: client, ttl: ttl}
}"""


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_it_is_built_over_the_text_embedder_unless_off() -> None:
    base = HashingEmbedder(64)
    code = build_code_embedder(Settings(), base)
    assert isinstance(code, IdentifierEmbedder)
    assert isinstance(code, Embedder)
    assert code.dim == 64
    # a new text embedder or a new reading of code is a new version of the code vectors
    assert code.version == "code-identifiers-v1+hashing-v2/64"
    assert build_code_embedder(Settings(code_embedder="off"), base) is None


def test_a_question_in_words_meets_the_code_it_is_about() -> None:
    # given the hashing embedder, which reads fetchUserById as one word
    base = HashingEmbedder(384)
    code = IdentifierEmbedder(base)
    question = "Which function fetches a user by id?"

    # when the question is scored against the snippet through each encoder
    as_text = _cos(base.embed([question])[0], base.embed([SNIPPET])[0])
    as_code = _cos(embed_queries(code, [question])[0], code.embed([SNIPPET])[0])

    # then the code reading shares the question's words (user, id; fetch by its stem
    # through the words it shares); the plain reading shares almost none
    assert as_code > as_text + 0.1
    # and it still tells the snippet apart from other code
    assert as_code > _cos(embed_queries(code, [question])[0], code.embed([OTHER])[0]) + 0.1


def test_an_identifier_in_the_question_matches_it_whole() -> None:
    code = IdentifierEmbedder(HashingEmbedder(384))
    question = embed_queries(code, ["What PoolSize does NewRedisCache configure?"])[0]
    snippets = code.embed([SNIPPET, OTHER])
    assert _cos(question, snippets[1]) > _cos(question, snippets[0]) + 0.2


def test_vectors_are_the_base_embedders_vectors_of_the_code_read_as_words() -> None:
    base = HashingEmbedder(64)
    code = IdentifierEmbedder(base)
    words = code_text(SNIPPET)
    assert "fetchuserbyid fetch user by id" in words
    assert code.embed([SNIPPET]) == base.embed([words])
    assert code.embed_query([SNIPPET]) == base.embed([words])  # hashing: one form for both
