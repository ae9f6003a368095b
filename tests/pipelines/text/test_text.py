"""pipelines.text: the per-text memo's bound."""

from __future__ import annotations

from pipelines.read.recall import content_key
from pipelines.read.rerank import term_set
from pipelines.text.memo import memo_texts


def test_memo_texts_keeps_short_texts_and_computes_long_ones_each_time() -> None:
    calls: list[tuple[str, int]] = []

    @memo_texts(maxsize=8, max_chars=10)
    def shout(text: str, times: int) -> str:
        calls.append((text, times))
        return text.upper() * times

    assert shout("short", 2) == shout("short", 2) == "SHORTSHORT"
    assert shout("short", 3) == "SHORTSHORTSHORT"  # another argument, another entry
    long = "x" * 11
    assert shout(long, 1) == shout(long, 1) == "X" * 11
    assert calls == [("short", 2), ("short", 3), (long, 1), (long, 1)]
    assert shout.__name__ == "shout"


def test_the_read_paths_memos_give_the_same_answer_above_the_bound() -> None:
    text = "We decided: Invoices live in PostgreSQL! " * 200  # past MEMO_MAX_CHARS
    assert (
        content_key(text)
        == content_key(text)
        == " ".join(["we", "decided", "invoices", "live", "in", "postgresql"] * 200)
    )
    assert term_set(text) == term_set("We decided: Invoices live in PostgreSQL!")
