"""The search analyzer: the index terms of a text, in order, repeats kept.

Keyword recall (BM25, the keyword feedback of PostgreSQL's hits) and query rewriting share it,
so a query term and a document term meet in the same form: case-folded, light English
stemming, stopwords dropped, identifiers kept whole *and* split into their parts
(``nginx.conf`` also indexes ``nginx`` and ``conf``), CJK text as character bigrams (Han
runs cut at their function words first, as the full-text index cuts them).

Its stopword list and suffix stripper are not those of ``pipelines.text.words``: they serve
ranking, where chat fillers ("yeah", "gonna", "lots") should weigh nothing, while the fact
comparisons of compression keep them as words. The retrieval benchmarks' figures rest on this
list as it is.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from functools import lru_cache

from pipelines.text.memo import memo_texts
from pipelines.text.words import CJK_STOPWORDS, han_bigrams, has_han

# A small English list (function words and question words): content words stay.
_SEARCH_STOPWORD_TEXT = """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have
    haven't having he he'd he'll he's her here here's hers herself him himself his how how's i
    i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
    myself no nor not of off on once only or other ought our ours ourselves out over own same
    shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this
    those through to too under until up very was wasn't we we'd we'll we're we've were weren't
    what what's when when's where where's which while who who's whom why why's will with won't
    would wouldn't you you'd you'll you're you've your yours yourself yourselves also just
    really oh yeah yes hey hi hello thanks thank okay ok so well like get got gonna wanna
    lot lots much many thing things something anything"""
SEARCH_STOPWORDS: frozenset[str] = frozenset(_SEARCH_STOPWORD_TEXT.split())

_WORD_RE = re.compile(r"[^\W_][\w'./:@+-]*[^\W_]|[^\W_]", re.UNICODE)
_PART_RE = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# Runs of one script at a time: Han apart from kana and hangul.
_CJK_RUN_RE = re.compile(
    r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[\u3040-\u30ff]+|[\uac00-\ud7af]+"
)


def strip_suffixes(word: str) -> str:
    """A light suffix stripper (plural, -ing, -ed, -ly): conflates forms, rarely overreaches."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("ness", ""), ("ingly", ""),
                         ("edly", ""), ("ing", ""), ("ed", ""), ("ly", ""), ("es", ""),
                         ("s", "")):  # fmt: skip
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            if suffix == "es" and not word.endswith(("shes", "ches", "xes", "zes", "oes")):
                continue
            base = word[: len(word) - len(suffix)] + keep
            if suffix in {"ing", "ed"} and len(base) >= 4 and base[-1] == base[-2]:
                base = base[:-1]  # running -> run, planned -> plan
            return base
    return word


def _cjk_terms(token: str) -> tuple[str, ...]:
    """A token holding CJK: Han runs as ``pipelines.text.words``' bigrams (cut at function
    words, as PostgreSQL's index cuts them), other CJK runs (kana, hangul) as plain bigrams,
    and the Latin pieces between them (``jwt`` of ``jwt迁移``) as words of their own."""
    terms: list[str] = []
    start = 0
    for run in _CJK_RUN_RE.finditer(token):
        for piece in _WORD_RE.findall(token[start : run.start()]):
            terms += _token_terms(piece)
        text = run.group()
        if has_han(text):
            terms += [t for t in han_bigrams(text) if t not in CJK_STOPWORDS]
        elif len(text) == 1:
            terms.append(text)
        else:
            terms += [a + b for a, b in itertools.pairwise(text)]
        start = run.end()
    for piece in _WORD_RE.findall(token[start:]):
        terms += _token_terms(piece)
    return tuple(terms)


def analyze(text: str) -> list[str]:
    """The index terms of ``text``, in order, repeats kept (they are term frequencies)."""
    return list(itertools.chain.from_iterable(map(_token_terms, _WORD_RE.findall(text.casefold()))))


@lru_cache(maxsize=65_536)
def _token_terms(raw: str) -> tuple[str, ...]:
    """The terms of one casefolded word-like token, memoised: a vocabulary repeats far more
    than texts do (Zipf), so most tokens of a new text were analysed before."""
    token = raw.strip("'.:-+")
    if not token:
        return ()
    if _CJK_RE.search(token):
        return _cjk_terms(token)
    if token.endswith("'s"):
        token = token[:-2]
    parts = _PART_RE.findall(token)
    if len(parts) > 1:  # an identifier: index it whole and by its parts
        return (token, *(strip_suffixes(part) for part in parts if part not in SEARCH_STOPWORDS))
    if token not in SEARCH_STOPWORDS and token.replace("'", "") not in SEARCH_STOPWORDS:
        return (strip_suffixes(token.replace("'", "")),)
    return ()


@memo_texts(maxsize=16_384)
def term_counts(text: str) -> tuple[tuple[str, int], ...]:
    """``analyze``'s terms of ``text`` with their frequencies, memoised: the read path
    indexes the same memories for its keyword feedback step after step."""
    return tuple(Counter(analyze(text)).items())
