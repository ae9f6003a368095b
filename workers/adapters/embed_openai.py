"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint."""

from __future__ import annotations

from collections.abc import Sequence

import openai

from pipelines.errors import LLMError, TransientLLMError


class OpenAIEmbedder:
    def __init__(self, *, base_url: str, api_key: str, model: str, dim: int, timeout_s: float):
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0
        )
        self._model = model
        self._dim = dim

    @property
    def version(self) -> str:
        return f"openai:{self._model}/{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        try:
            response = self._client.embeddings.create(model=self._model, input=list(texts))
        except (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError) as exc:
            raise TransientLLMError(f"embeddings: {type(exc).__name__}") from exc
        except openai.InternalServerError as exc:
            raise TransientLLMError(f"embeddings: HTTP {exc.status_code}") from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise TransientLLMError(f"embeddings: HTTP {exc.status_code}") from exc
            raise LLMError(f"embeddings refused the request (HTTP {exc.status_code})") from exc
        vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
        for vector in vectors:
            if len(vector) != self._dim:
                raise ValueError(
                    f"embedding model {self._model} returned {len(vector)} dimensions; "
                    f"MEMHARNESS_EMBED_DIM is {self._dim}"
                )
        return vectors
