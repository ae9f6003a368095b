"""Words compared across texts: stopword lists, folding, tokens, a light stemmer, number
words. Compression, quality sampling, consolidation and linking compare what texts say in
these terms. Pure and deterministic.

Chinese has no spaces: a run of Han characters becomes its character bigrams
(``支付模块`` → ``支付 付模 模块``), the unit PostgreSQL's and most search engines' CJK
analyzers use, so two texts that share a word share its bigram whatever surrounds it.
Bigrams that hold a grammatical particle (的, 了, 吗, ...) are never content and are not
emitted; common function words (我们, 因为, 已经, ...) are stopwords. A text with no Han
character is tokenised exactly as before.
"""

from __future__ import annotations

import math
import re
import unicodedata


def words(text: str) -> frozenset[str]:
    """A word list written as one string, the way stopword lists read best."""
    return frozenset(text.split())


_ENGLISH_STOPWORDS: frozenset[str] = words(
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

# Han ideographs: CJK Extension A, the unified block and the compatibility block.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_RE = re.compile(f"[{HAN}]")
_HAN_RUN_RE = re.compile(f"[{HAN}]+")

# Particles: a bigram holding one of these straddles a word boundary (模块的 → 块的, 的支).
PARTICLES = frozenset("的了吗呢吧啊呀嘛哦么着")

# Chinese function words, as bigrams (and a few single characters for one-character runs).
CJK_STOPWORDS: frozenset[str] = words(
    """我们 你们 他们 她们 它们 咱们 大家 自己 这个 那个 这些 那些 这样 那样 这里 那里
    一个 一些 一下 一点 就是 还是 也是 都是 不是 只是 但是 而且 并且 或者 以及 如果 然后
    因为 所以 因此 于是 虽然 不过 可是 已经 正在 可以 可能 应该 需要 没有 什么 怎么 为什么
    哪些 哪个 如何 是否 有没 现在 时候 之后 之前 以后 以前 关于 对于 其中 其他 另外 还有
    请问 一下 好的 是的 对的 我 你 他 她 它 是 在 有 和 与 及 或 也 就 都 而 被 把 让 给
    对 从 向 于 之 其 这 那 个 很 还 又 再 不 没 会 要 能 吗 呢 吧 啊 的 了 着 过"""
)

STOPWORDS: frozenset[str] = _ENGLISH_STOPWORDS | CJK_STOPWORDS

NEGATIONS: frozenset[str] = words(
    "no not nor never none nobody nothing neither without don't doesn't didn't isn't aren't "
    "wasn't weren't won't wouldn't can't cannot couldn't shouldn't haven't hasn't hadn't "
    "mustn't 不 没 没有 别 不要 不用 不会 不能 未 无 非 勿"
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


def has_han(text: str) -> bool:
    return _HAN_RE.search(text) is not None


# Single characters that are function words wherever they stand between content words
# (是, 在, 和, ...). Others (对, 会, 要, 不, 过) start content words too (对接, 会议, 需要,
# 不同, 过程) and are left inside the run.
# Every character a run is cut at, particles included: the one list the keyword rules, the
# telegraphic compressor and the name detector cut or stop at too.
HAN_SEPARATOR_CHARS: frozenset[str] = PARTICLES | frozenset("是在和与及或把被给")
# The multi-character function words a run is cut at, longest first (为什么 before 什么).
HAN_SEPARATOR_WORDS: tuple[str, ...] = tuple(
    sorted((w for w in CJK_STOPWORDS if len(w) > 1), key=len, reverse=True)
)

_SEPARATOR_RE = re.compile(
    "|".join([*map(re.escape, HAN_SEPARATOR_WORDS), f"[{''.join(sorted(HAN_SEPARATOR_CHARS))}]"])
)


def han_bigrams(run: str) -> list[str]:
    """The bigrams of a run of Han characters, cut first at its function words and particles
    (``我们已经决定采用`` → ``决定 定采 采用``); a lone character stands for itself."""
    bigrams: list[str] = []
    for part in _SEPARATOR_RE.split(run):
        if len(part) == 1:
            bigrams.append(part)
        else:
            bigrams += [part[i : i + 2] for i in range(len(part) - 1)]
    return bigrams


def raw_tokens(text: str) -> list[str]:
    """Words, numbers and identifiers (``auth/login.py``, ``ATL-12``, ``v1.2``), folded; Han
    runs as their bigrams (``JWT迁移`` → ``jwt 迁移``)."""
    folded = fold(text)
    found = _TOKEN_RE.findall(folded)
    if not _HAN_RE.search(folded):
        return found
    tokens: list[str] = []
    for token in found:
        if not _HAN_RE.search(token):
            tokens.append(token)
            continue
        start = 0
        for run in _HAN_RUN_RE.finditer(token):
            tokens += _TOKEN_RE.findall(token[start : run.start()])
            tokens += han_bigrams(run.group())
            start = run.end()
        tokens += _TOKEN_RE.findall(token[start:])
    return tokens


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


# Chinese words average about 1.5 characters (two-character words dominate, one-character
# function words are frequent): a run of Han characters counts as that many words, so a
# ratio or a "too thin" threshold means the same in both languages.
HAN_CHARS_PER_WORD = 1.5


def word_count(text: str) -> int:
    """Words of ``text``: whitespace-separated words, a Han run as its characters / 1.5."""
    if not _HAN_RE.search(text):
        return len(text.split())
    han = len(_HAN_RE.findall(text))
    rest = _HAN_RUN_RE.sub(" ", text)
    # Chinese punctuation separates nothing by whitespace: count only words with a letter
    # or digit in them, so "，" or "。" left between runs adds no word.
    latin = sum(1 for word in rest.split() if any(ch.isalnum() for ch in word))
    return latin + math.ceil(han / HAN_CHARS_PER_WORD)


def is_number(token: str) -> bool:
    return token.replace(".", "", 1).replace(",", "").isdigit()
