"""``bench cognition --limit N --seed S``: a deterministic per-language sample of the labeled
sets, the same items for the rules and the model."""

from __future__ import annotations

import json

import pytest

from memharness.bench.sampling import Sample, take


def test_a_sample_takes_at_most_limit_of_each_language_in_file_order() -> None:
    items = [("en", n) for n in range(10)] + [("zh", n) for n in range(3)]

    chosen = take(items, Sample(limit=4, seed=7), lambda item: item[0])

    assert sum(lang == "en" for lang, _ in chosen) == 4
    assert [item for item in chosen if item[0] == "zh"] == items[10:]  # fewer than the limit
    assert chosen == sorted(chosen, key=items.index)
    # the same seed names the same items; no sample is the whole set
    assert take(items, Sample(limit=4, seed=7), lambda item: item[0]) == chosen
    assert take(items, None, lambda item: item[0]) == items


def test_a_limit_below_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="limit: at least 1 item per language, got 0"):
        Sample(limit=0)


def test_the_bench_samples_write_and_compress_and_says_so(capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.cli import build_parser

    argv = ["bench", "cognition", "--sections", "write,compress,causal", "--limit", "3"]
    args = build_parser().parse_args([*argv, "--seed", "5"])
    assert args.func(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    assert result["sample"] == {"limit_per_language": 3, "seed": 5}
    write = result["sections"]["write"]["offline"]
    assert write["sample"] == result["sample"]
    assert [write["languages"][lang]["turns"] for lang in ("en", "zh")] == [3, 3]
    compress = result["sections"]["compress"]["offline"]
    assert [compress["languages"][lang]["segments"] for lang in ("en", "zh")] == [3, 3]
    assert compress["errors"] == []
    # a section that takes no sample runs its whole set, and is reported unsampled
    assert result["sections"]["causal"]["offline"]["sample"] is None


def test_a_bad_limit_is_a_clear_error_of_the_command(capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.cli import build_parser

    args = build_parser().parse_args(["bench", "cognition", "--limit", "0"])
    assert args.func(args) == 2
    assert "limit: at least 1" in json.loads(capsys.readouterr().out.strip())["error"]
