"""Code read as words: identifiers split into the words they are made of, and whether a
question looks like code.

A code memory names things the way code does (``retry_with_backoff``, ``fetchUserById``,
``services/inventory/reserve.py``, ``ParseError::NotANumber``), while a question about it says
"retry", "user", "reserve". :func:`code_text` is what the code vector embeds: every identifier
kept whole *and* split into its words (camelCase, PascalCase and acronyms, snake_case and
SCREAMING_CASE, kebab-case, digits), dotted names, paths and ``::``/``->`` chains kept whole
too, the punctuation between them dropped, and the grammar words of programming languages
(``def``, ``return``, ``const``, ...) left out: every snippet holds them, so they would make
all code look alike. Words of prose and Han text pass through as they are.

:func:`looks_like_code` decides whether a question is asked in code's terms (it names an
identifier, a file, a call or an error code), in which case the read path searches the code
vector first (``pipelines.read.recall``).
"""

from __future__ import annotations

import re

from pipelines.text.memo import memo_texts
from pipelines.text.words import words

# A word of a text: letters, digits, underscores and $ (JavaScript names), or a number.
_WORD_RE = re.compile(r"[^\W\d][\w$]*|\d+")
# A chain of words joined by code's separators: a dotted name, a path, a ``::``/``->``
# chain, a kebab-case name (``s.repo.FindOrder``, ``deploy/nginx/api.conf``).
_CHAIN_RE = re.compile(r"[\w$]+(?:(?:::|->|[./\\:-])[\w$]+)+")
# The words inside one identifier: an acronym before a capitalised word (HTTP of
# HTTPServer), a capitalised or lower-case word, an acronym, a number.
_HUMP_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_SEPARATORS_RE = re.compile(r"[_$]+")

# Grammar words of the common languages (Python, JavaScript/TypeScript, Go, Rust, Java, SQL,
# shell): in nearly every snippet, so they tell no two snippets apart.
CODE_KEYWORDS: frozenset[str] = words(
    """def return class import from export async await const let var function func fn pub
    public private protected static void if else elif for while in try except catch finally
    raise throw throws new self this nil null none true false and or not is as with pass
    break continue package struct impl mut match case switch default lambda yield interface
    extends implements type select where"""
)


def split_identifier(name: str) -> list[str]:
    """The words of one identifier, lower-cased: ``getUserById`` → get user by id,
    ``HTTPServer`` → http server, ``MAX_BATCH`` → max batch, ``TS2345`` → ts 2345. A word
    with no ASCII letter in it (a Han run) comes back as it is."""
    words: list[str] = []
    for chunk in _SEPARATORS_RE.split(name):
        humps = _HUMP_RE.findall(chunk)
        if humps:
            words += [hump.lower() for hump in humps]
        elif chunk:
            words.append(chunk.lower())
    return words


@memo_texts(maxsize=4_096)
def code_terms(text: str) -> tuple[str, ...]:
    """The terms of ``text`` read as code, in order: each chain whole (``s.repo.findorder``),
    then each word of it, a compound word whole and then its words, keywords dropped."""
    terms: list[str] = []
    for span in text.split():
        for chain in _CHAIN_RE.finditer(span):
            terms.append(chain.group().lower())
        for word in _WORD_RE.findall(span):
            parts = split_identifier(word)
            if len(parts) > 1:
                terms.append(word.lower())
            terms += [part for part in parts if part not in CODE_KEYWORDS]
    return tuple(terms)


def code_text(text: str) -> str:
    """What the code vector embeds: :func:`code_terms` as one line of words."""
    return " ".join(code_terms(text))


# -- is a question asked in code's terms? -----------------------------------------------------

_FILE_EXTENSIONS = (
    "py pyi ts tsx js jsx mjs go rs java kt scala rb php c h cc cpp hpp cs swift m sql sh "
    "bash zsh ps1 yml yaml json toml ini cfg conf env xml html css scss md lock proto graphql "
    "gradle tf dockerfile"
)
_CODE_SHAPES = (
    # camelCase, and PascalCase of two words or more (fetchUserById, JwtTokenValidator)
    r"\b[a-z][a-z0-9]*[A-Z]\w*",
    r"\b[A-Z][a-z0-9]+[A-Z]\w*",
    # snake_case and SCREAMING_CASE (refund_reason, MAX_BATCH)
    r"\b[A-Za-z0-9]+_\w+",
    # a call, a member chain or a scope: name(, a::b, a->b, x => y
    r"\b\w+\(",
    r"\w(?:::|->)\w",
    r"=>",
    # a file or a path (api.conf, src/orders/orderTotals.ts, ./run.sh)
    rf"\b[\w-]+\.(?:{'|'.join(_FILE_EXTENSIONS.split())})\b",
    r"\w/[\w.-]+/\w",
    # a compiler or linter code (TS2345, E501), operators and code punctuation
    r"\b[A-Z]{1,4}\d{3,}\b",
    r"==|!=|&&|\|\||[{};]",
    r"\b[A-Z][A-Z0-9]*=\S",
    r"(?:^|\s)--[a-z][\w-]+",
    r"`[^`]+`",
)
_CODE_RE = re.compile("|".join(f"(?:{shape})" for shape in _CODE_SHAPES))


def looks_like_code(query: str) -> bool:
    """Whether ``query`` names code: an identifier (camelCase, PascalCase of two words or
    more, snake_case), a call, a ``::``/``->`` chain, a source file or a path, a compiler
    code, code operators or a backquoted span. Plain words, a ticket id (ATL-12) or one
    capitalised acronym (API) are not code."""
    return _CODE_RE.search(query) is not None
