"""A deterministic hashing embedder: the default for tests and the demo.

Feature hashing of word unigrams and bigrams with a signed hash, then L2 normalisation: the
same text always gives the same vector in every process, with no model to download. It is a
lexical embedder (shared words, not shared meaning), so retrieval quality is measured with
MiniLM as well.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

_TOKEN_RE = re.compile(r"[\w][\w.+-]*", re.UNICODE)


def tokenize(text: str) -> list[str]:
    return [token.strip(".-+") for token in _TOKEN_RE.findall(text.casefold()) if token]


class HashingEmbedder:
    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError(f"dim must be at least 8, got {dim}")
        self._dim = dim

    @property
    def version(self) -> str:
        return f"hashing-v1/{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self._dim, (1.0 if (value >> 63) & 1 else -1.0)

    def embed_one(self, text: str) -> np.ndarray:
        vector = np.zeros(self._dim, dtype=np.float32)
        tokens = tokenize(text)
        features = tokens + [f"{a} {b}" for a, b in itertools.pairwise(tokens)]
        for feature in features:
            index, sign = self._bucket(feature)
            # Bigrams weigh half: they sharpen phrase matches without drowning the words.
            vector[index] += sign * (0.5 if " " in feature else 1.0)
        norm = float(np.linalg.norm(vector))
        if norm > 0:
            vector /= norm
        return vector

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(text).tolist() for text in texts]
