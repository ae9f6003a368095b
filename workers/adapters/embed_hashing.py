"""A deterministic hashing embedder: the default for tests and the demo.

Feature hashing of word unigrams and bigrams with a signed hash, then L2 normalisation: the
same text always gives the same vector in every process, with no model to download. It is a
lexical embedder (shared words, not shared meaning), so retrieval quality is measured with
MiniLM as well.

Chinese has no spaces: a run of Han characters is hashed as its character bigrams, cut at
function words, a lone character standing for itself (``pipelines.text.words.han_bigrams``),
so a two-character query such as 张工 shares a feature with every memory that names 张工. A
text without Han characters gives exactly the vector it always did.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from pipelines.text.words import HAN, han_bigrams

_TOKEN_RE = re.compile(r"[\w][\w.+-]*", re.UNICODE)
_HAN_RUN_RE = re.compile(f"[{HAN}]+")


def tokenize(text: str) -> list[str]:
    """Words and identifiers, case-folded; Han runs as their bigrams (``jwt迁移`` → jwt 迁移)."""
    tokens = [token.strip(".-+") for token in _TOKEN_RE.findall(text.casefold()) if token]
    if not _HAN_RUN_RE.search(text):
        return tokens
    out: list[str] = []
    for token in tokens:
        if not _HAN_RUN_RE.search(token):
            out.append(token)
            continue
        start = 0
        for run in _HAN_RUN_RE.finditer(token):
            out += tokenize(token[start : run.start()])
            out += han_bigrams(run.group())
            start = run.end()
        out += tokenize(token[start:])
    return out


class HashingEmbedder:
    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError(f"dim must be at least 8, got {dim}")
        self._dim = dim

    @property
    def version(self) -> str:
        # v2: Han runs hash as their bigrams (v1 hashed a whole run as one word). Only Chinese
        # vectors changed, but a store written by v1 holds them too, and only a new version
        # starts the re-embed run that replaces them; for English rows it is one cheap pass
        # that writes the same vectors again.
        return f"hashing-v2/{self._dim}"

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
