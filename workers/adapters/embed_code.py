"""The code embedder: the text embedder over code read as words.

A code memory's own vector (``CODE_VECTOR``) is the configured embedder's vector of the code
with its identifiers split into the words they are made of (``pipelines.text.code``):
``fetchUserById`` is embedded as "fetchuserbyid fetch user by id", so a question that says
"user" meets it, through the hashing embedder's shared words or a model's shared meaning.
No code model with its weights inside a package installs here without torch (PyPI was
checked: the code-search packages download their models at run time, or search a corpus
of their own instead of embedding one text), so this is the code side of the dual encoder.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.index.vectors import Embedder, embed_queries
from pipelines.text.code import code_text

# Bumped when code_text changes what a snippet is read as.
CODE_READING = "identifiers-v1"


class IdentifierEmbedder:
    def __init__(self, base: Embedder) -> None:
        self._base = base

    @property
    def version(self) -> str:
        return f"code-{CODE_READING}+{self._base.version}"

    @property
    def dim(self) -> int:
        return self._base.dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Code memories, read as words, embedded as stored texts."""
        return self._base.embed([code_text(text) for text in texts])

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Questions, read the same way, embedded as questions."""
        return embed_queries(self._base, [code_text(text) for text in texts])
