"""The OpenAI-compatible embeddings adapter over real HTTP, against the local stub server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from config import Settings
from pipelines.errors import LLMError, TransientLLMError
from pipelines.index.vectors import Embedder
from tests.support.openai_stub import OpenAIStub, serve_stub
from workers.adapters import build_embedder
from workers.adapters.embed_hashing import HashingEmbedder

TEXTS = ["the outbox commits with the memory", "deploy target is eu-west-1", "tabs, not spaces"]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub(embed_dim=64) as running:
        yield running


def make_embedder(stub: OpenAIStub, **overrides: object) -> Embedder:
    fields: dict[str, object] = {
        "embedder": "openai",
        "embed_base_url": stub.url,
        "embed_api_key": stub.api_key,
        "embed_model": "stub-embedding",
        "embed_dim": 64,
        "llm_timeout_s": 5.0,
    }
    fields.update(overrides)
    return build_embedder(Settings(**fields))  # type: ignore[arg-type]


def test_embeds_every_text_in_order_with_the_configured_size(stub: OpenAIStub) -> None:
    embedder = make_embedder(stub)

    vectors = embedder.embed(TEXTS)

    # the stub embeds with the hashing embedder, so each vector is known exactly (float32)
    expected = HashingEmbedder(64).embed(TEXTS)
    assert len(vectors) == len(TEXTS)
    for got, want in zip(vectors, expected, strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    assert embedder.version == "openai:stub-embedding/64"
    assert embedder.dim == 64
    # one request for the whole batch, in the client's default wire format
    [request] = stub.stats()["requests"]
    assert (request["inputs"], request["encoding_format"]) == (3, "base64")


def test_vectors_are_matched_to_texts_by_index_not_position(stub: OpenAIStub) -> None:
    # given an endpoint that lists the embeddings in reverse order
    stub.control(embed_reversed=True)

    vectors = make_embedder(stub).embed(TEXTS)

    expected = HashingEmbedder(64).embed(TEXTS)
    for got, want in zip(vectors, expected, strict=True):
        assert got == pytest.approx(want, abs=1e-6)


def test_a_model_of_another_size_is_refused_naming_the_setting(stub: OpenAIStub) -> None:
    # given a model answering 32 dimensions where the settings say 64
    stub.control(embed_dim=32)

    with pytest.raises(ValueError, match=r"returned 32 dimensions; MEMHARNESS_EMBED_DIM is 64"):
        make_embedder(stub).embed(TEXTS)


@pytest.mark.parametrize(("mode", "message"), [("http500", "HTTP 500"), ("http429", "RateLimit")])
def test_server_errors_and_rate_limits_are_transient(
    stub: OpenAIStub, mode: str, message: str
) -> None:
    stub.control(mode)

    with pytest.raises(TransientLLMError, match=message):
        make_embedder(stub).embed(TEXTS)
    assert stub.count("embeddings") == 1


def test_a_slow_endpoint_times_out_as_a_transient_error(stub: OpenAIStub) -> None:
    stub.control("slow", delay_s=5.0)

    with pytest.raises(TransientLLMError, match="APITimeoutError"):
        make_embedder(stub, llm_timeout_s=0.3).embed(TEXTS)


@pytest.mark.parametrize("status", [400, 401])
def test_a_refused_request_is_a_permanent_error(stub: OpenAIStub, status: int) -> None:
    stub.control(f"http{status}")

    with pytest.raises(LLMError, match=f"HTTP {status}") as caught:
        make_embedder(stub).embed(TEXTS)
    assert not isinstance(caught.value, TransientLLMError)
