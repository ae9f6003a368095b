"""Code read as words, and the question that looks like code."""

from __future__ import annotations

import pytest

from pipelines.text.code import code_terms, code_text, looks_like_code, split_identifier


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("getUserById", ["get", "user", "by", "id"]),
        ("JwtTokenValidator", ["jwt", "token", "validator"]),
        ("HTTPServer", ["http", "server"]),
        ("parseJSON5", ["parse", "json", "5"]),
        ("retry_with_backoff", ["retry", "with", "backoff"]),
        ("MAX_BATCH", ["max", "batch"]),
        ("__init__", ["init"]),
        ("$scope", ["scope"]),
        ("TS2345", ["ts", "2345"]),
        ("user", ["user"]),
        ("支付模块", ["支付模块"]),
    ],
)
def test_an_identifier_splits_into_its_words(name: str, words: list[str]) -> None:
    assert split_identifier(name) == words


def test_code_is_read_as_its_identifiers_whole_and_split_without_keywords() -> None:
    terms = code_terms("def retry_with_backoff(fn, attempts=5):\n    return fetchUserById(uid)")
    # compound identifiers whole, then their words; keywords (def, return) left out
    assert terms == (
        "retry_with_backoff",
        "retry",
        "backoff",  # "with" is a keyword of Python (and a word of every snippet)
        "attempts",  # so is "fn" (Rust's)
        "5",
        "fetchuserbyid",
        "fetch",
        "user",
        "by",
        "id",
        "uid",
    )


def test_paths_chains_and_scopes_are_kept_whole_and_split() -> None:
    assert code_terms('File "services/inventory/reserve.py"') == (
        "file",
        "services/inventory/reserve.py",
        "services",
        "inventory",
        "reserve",
        "py",
    )
    assert code_terms("ParseError::NotANumber") == (
        "parseerror::notanumber",
        "parseerror",
        "parse",
        "error",
        "notanumber",
        "a",  # "not" is a keyword (Python's)
        "number",
    )
    assert code_terms("s.repo.FindOrder(ctx)")[:2] == ("s.repo.findorder", "s")


def test_prose_and_han_pass_through_as_words() -> None:
    assert code_text("Payment webhook 重试 three times") == "payment webhook 重试 three times"
    assert code_text("") == ""


@pytest.mark.parametrize(
    "query",
    [
        "Which URL does fetchUserById call?",
        "Why did reserve_stock throw?",
        "Which algorithms does JwtTokenValidator accept?",
        "What is MAX_BATCH now?",
        "How do we start deploy/docker-compose.staging.yml?",
        "what proxy timeout is set in api.conf",
        "When does it return ParseError::NotANumber?",
        "what does parse() return",
        "TS2345 in the build",
        "is `amount` ever negative",
        "if (a == b) { return; }",
        "run it with --dry-run",
        "DATABASE_URL=postgres://x",
        "retry_with_backoff 在哪里定义？",
    ],
)
def test_a_question_in_code_terms_looks_like_code(query: str) -> None:
    assert looks_like_code(query)


@pytest.mark.parametrize(
    "query",
    [
        "How many times do we retry a failing call?",
        "What memory limit does the API pod have?",
        "Who owns the payment module?",
        "What happened in ATL-12 last week?",
        "How do we turn a price like $12.50 into cents?",
        "Caroline adopted a puppy named Oscar, didn't she?",
        "What did we decide on 12 May 2024?",
        "支付模块的负责人是谁？",
        "",
    ],
)
def test_a_question_in_plain_words_does_not(query: str) -> None:
    assert not looks_like_code(query)
