"""Words compared across texts: stopword lists, folding, tokens, a light stemmer, number
words. Compression, quality sampling, consolidation and linking compare what texts say in
these terms. Pure and deterministic.
"""

from __future__ import annotations

import re
import unicodedata


def words(text: str) -> frozenset[str]:
    """A word list written as one string, the way stopword lists read best."""
    return frozenset(text.split())


STOPWORDS: frozenset[str] = words(
    """a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have
    haven't having he he'd he'll he's her here here's hers herself him himself his how how's
    i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
    myself no nor not of off on once only or other ought our ours ourselves out over own same
    shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this
    those through to too under until up very was wasn't we we'd we'll we're we've were
    weren't what what's when when's where where's which while who who's whom why why's will
    with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
    just also yes yeah yep likely since"""
)

NEGATIONS: frozenset[str] = words(
    "no not nor never none nobody nothing neither without don't doesn't didn't isn't aren't "
    "wasn't weren't won't wouldn't can't cannot couldn't shouldn't haven't hasn't hadn't "
    "mustn't"
)

# Words a telegraphic summary drops on top of the stopwords: interjections, intensifiers,
# hedges and discourse markers. They colour a sentence but state no fact.
FILLERS: frozenset[str] = words(
    """hey hi hello oh ooh wow whoa yay haha hahaha lol omg hmm um uh ah aw aww yeah yep yup
    okay ok well anyway anyways btw really truly totally super pretty quite kinda sorta
    actually basically literally definitely absolutely seriously honestly certainly surely
    simply especially particularly extremely incredibly awfully bit thing things stuff
    something anything everything"""
)

# Reactions and politeness: a sentence made only of these (plus stopwords) is chatter.
REACTIONS: frozenset[str] = words(
    """thanks thank thx appreciate appreciated welcome congrats congratulations glad happy
    sorry great good nice cool awesome amazing wonderful fantastic fabulous incredible
    inspiring inspired lovely sweet beautiful brilliant excellent perfect impressive proud
    excited exciting fun interesting glad hear heard sound sounds seem seems look looks
    feel feels feeling felt mean means meant sure agree agreed true totally right love
    loved care take hope hoping wish wishing luck chat talk talking catch later soon bye
    see seeing know knew glad cheers keep going doing done stay same"""
)

_SMALL_NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
NUMBER_WORDS: dict[str, str] = {
    word: str(value) for value, word in enumerate(_SMALL_NUMBERS.split(" "))
}


_TOKEN_RE = re.compile(r"[^\W_](?:[\w'’]*[^\W_]|)(?:[./:_-][^\W_][\w'’]*)*", re.UNICODE)
_ORDINAL_RE = re.compile(r"^(\d+)(?:st|nd|rd|th)$")


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace("’", "'")


def raw_tokens(text: str) -> list[str]:
    """Words, numbers and identifiers (``auth/login.py``, ``ATL-12``, ``v1.2``), folded."""
    return _TOKEN_RE.findall(fold(text))


def stem(token: str) -> str:
    """A light, symmetric stemmer: plurals, -ing, -ed, a final e; good enough to compare."""
    if token.endswith("'s"):
        token = token[:-2]
    if len(token) <= 3 or not token.isalpha():
        return token
    for suffix, replacement in (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh")):
        if token.endswith(suffix):
            token = token[: -len(suffix)] + replacement
            break
    else:
        if token.endswith("s") and not token.endswith(("ss", "us", "is")):
            token = token[:-1]
    for suffix in ("ing", "ed"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 3:
            token = token[: -len(suffix)]
            if len(token) >= 3 and token[-1] == token[-2] and token[-1] not in "lsz":
                token = token[:-1]
            break
    if len(token) >= 4 and token.endswith("e"):
        token = token[:-1]
    return token


def normalise_token(token: str) -> str:
    """Number words and ordinals become digits; words are stemmed."""
    if token in NUMBER_WORDS:
        return NUMBER_WORDS[token]
    match = _ORDINAL_RE.match(token)
    if match:
        return match.group(1)
    return stem(token)


def content_tokens(text: str) -> list[str]:
    """Normalised tokens of ``text`` minus stopwords, in order."""
    return [normalise_token(t) for t in raw_tokens(text) if t not in STOPWORDS]


def word_count(text: str) -> int:
    return len(text.split())


def is_number(token: str) -> bool:
    return token.replace(".", "", 1).replace(",", "").isdigit()
