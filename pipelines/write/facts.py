"""Whether a turn carries a fact: the one question the write judge, importance and forgetting
share. Pure and fast (no model): it runs on every write and on every decay candidate.

The rule is by elimination, not by length. Chatter is a closed class that can be listed:
acknowledgements (``pipelines.write.filter``), greetings, goodbyes, thanks, congratulations,
reactions ("wow, amazing!"), laughter ("lol", "哈哈", "hhhh", "666"), hesitation and stalling
("hmm let me think", "one sec", "我想想", "稍等"), punctuation and emoji. Statements are an open
class that cannot: "I'm allergic to peanuts.", "Tabs, not spaces.", "Locale: en-GB.",
"我住在北京。", "下周三发版。" have a subject and a verb, a copula, a number or a name, or none
of these and a setting's name and value. So a turn carries a fact unless everything it says
(its speaker aside) is chatter:

* English: every word is a stopword, a filler, a reaction or a word of chatter, once the
  set phrases of small talk ("how are you", "have a great weekend", "see you tomorrow") are
  taken out; a name is chatter only as the addressee of a greeting or thanks ("Thanks,
  Melanie!", "Hey Gina, good to see you!"), and never after a copula ("I'm Priya.").
* Chinese (any line holding a Han character): the line is made only of acknowledgement and
  small-talk pieces, run together in any order ("收到，辛苦了", "哈哈，真有意思", "下班啦，明天见"),
  and of the people it speaks to ("谢谢张工！", "小李早").
* A number or an identifier is never chatter ("ok, port 5433"), except the chat slang 666.
"""

from __future__ import annotations

import re

from pipelines.text.identifiers import PERSON_RE
from pipelines.text.sentences import split_speaker
from pipelines.text.words import FILLERS, REACTIONS, STOPWORDS, fold, has_han, words
from pipelines.write.filter import (
    ACK_PIECES,
    ACKNOWLEDGEMENTS,
    compact_pieces,
    is_acknowledgement,
    made_of,
    normalise_for_ack,
)

# Chinese small talk runs its greetings, thanks and goodbyes together ("辛苦了，明天再聊"):
# a line (its speaker aside) made only of these and acknowledgements says nothing to recall.
# The English phrases are pieces too, for the mixed lines ("辛苦了，talk tomorrow").
SMALL_TALK_PIECES: frozenset[str] = compact_pieces(ACK_PIECES) | words(
    """你好 您好 大家好 早 早上好 早安 上午好 中午好 下午好 晚上好 晚安 再见 拜拜 回头聊
    明天再聊 改天再聊 下次再聊 回聊 回头见 明天见 下次见 待会见 一会见 稍等 稍等一下 等一下
    等我一下 等等 等会 让我想想 我想想 想想 我看看 我看一下 我跟进一下 我跟进 我来跟进 跟进一下
    马上 马上看 我马上看 这就看 有意思 真有意思 太有意思了 哇 哇塞 哈哈哈 嘻嘻 嘿嘿 呵呵 笑死
    笑死我了 哈 哈哈 加油 辛苦辛苦 辛苦大家了 辛苦各位了 各位 大家 在吗 在不在 吃了吗 吃饭了吗
    太感谢了 太感谢 感谢感谢 万分感谢 谢谢啦 谢谢谢谢
    最近怎么样 最近好吗 你好吗 好久不见 周末愉快 节日快乐 新年快乐 生日快乐 恭喜 恭喜恭喜
    太棒了 好棒 真棒 厉害 好厉害 太厉害了 牛 牛啊 真好 真不错 挺好 挺好的 还行 看着还行 不错
    不错不错 你也是 你也一样 彼此彼此 下班啦 下班了 不好意思 抱歉 回复晚了 久等了 没关系
    呃 额 唔 嗯哼 啊 啊这 这个 那个 这个嘛 那个嘛 了 吧 真的 真的吗 是吗 是嘛 真的假的 有道理
    这样啊 这样 原来如此 原来是这样 哦哦 噢噢
    666 6666 hi hello hey bye byebye seeyou talklater talktomorrow seeyoutomorrow goodnight"""
)


def is_small_talk(content: str) -> bool:
    """Chinese (or mixed) small talk: the line after its speaker is only small-talk pieces."""
    _, body = split_speaker(content)
    return made_of(normalise_for_ack(body), SMALL_TALK_PIECES)


# English words of chatter on top of the stopwords, fillers and reactions of
# ``pipelines.text.words``: laughter, stalling, greeting and parting, address.
_CHATTER_WORDS: frozenset[str] = words(
    """lol lmao lmfao rofl haha hahaha hehe heh xd omg omfg ugh meh eh oops whoops yikes
    ikr way much lot bunch ton brb idk dunno hmm hmmm umm uhh uh huh mhm ah ahh oh ohh aww wow whoa
    hey hi hello hiya howdy yo bye goodbye cya ttyl gn gm thanks thank thx ty tysm np congrats
    congratulations cheers welcome sorry pardon excuse mate buddy dude guys folks everyone
    everybody dear
    wait hold sec second moment minute let think thinking give gimme now then anyway also
    too yes no yeah nope sure okay ok okie dokie alright fair enough agreed noted understood
    gotcha roger hilarious funny cute sweet adorable awesome amazing wonderful great nice cool
    good fine lovely neat wild crazy insane hear glad happy thrilled excited proud makes sense
    what's how's that's it's you're we're i'm they're"""
)
_CHATTER_VOCABULARY = STOPWORDS | FILLERS | REACTIONS | _CHATTER_WORDS | ACKNOWLEDGEMENTS

# Set phrases of English small talk, taken out of a line before its words are read; a line
# left with nothing but chatter words said nothing ("Sorry for the late reply!").
_SMALL_TALK_PHRASES_RE = re.compile(
    r"\b(?:how (?:are|r) (?:you|u|ya|things)(?: doing)?|how(?:'s| is) (?:it going|everything|"
    r"life|your (?:day|week|weekend))|what's (?:up|new)|how (?:was|were) your (?:day|week|"
    r"weekend|evening|night|holidays?|trip)|(?:nice|good|great|lovely) (?:to|meeting) "
    r"(?:meet|see|hear from|chat with|talk to|talking to)? ?(?:you|ya)|(?:have|had|enjoy) "
    r"(?:a|your) (?:nice|good|great|lovely|wonderful|fun|safe) (?:day|week|weekend|evening|"
    r"night|time|one|trip|flight)|happy (?:monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|weekend|holidays?|new year|birthday)|long time no see|see (?:you|ya) (?:soon|later|"
    r"tomorrow|around|next time|then|there)|talk (?:soon|later|tomorrow)|take care|"
    r"good (?:morning|afternoon|evening|night|day)|for now|sorry (?:for|about) the "
    r"(?:late|slow|delayed) (?:reply|response|answer)|let me (?:think|see|check)(?: about it)?|"
    r"one (?:sec|second|moment|minute)|hold on|hang on|give me a (?:sec|second|moment|minute)|"
    r"(?:you|same) too|same here|me too|my pleasure|any ?time|got it|no (?:worries|problem)|"
    r"thanks a (?:lot|bunch|ton|million)|thank you (?:so|very) much)\b"
)
# Laughter and hesitation spelled at any length: hahaha, hhhh, hmmmm, ummm, emmm, sooo.
_STRETCHED_RE = re.compile(r"^(?:(?:ha|he|hi)+h?|h{2,}|hm+|u+m+|e+m+|m{2,}|a+h+|o+h+|u+h+|x+d+)$")
# Chat slang for "well done" (六六六): digits that state no number.
_SLANG_NUMBER_RE = re.compile(r"^6{3,}$")
# The words that address someone: a line of these and names greets, thanks or acknowledges
# its addressee ("Gotcha, Jon!", "Noted, Priya.").
_ADDRESSING_WORDS: frozenset[str] = words(
    """hi hello hey hiya howdy yo dear bye goodbye cya thanks thank thx ty congrats
    congratulations cheers welcome sorry good great nice awesome amazing glad proud morning
    night gotcha noted understood roger"""
)
# Verbs after which a name is what is said, not whom it is said to ("I'm Priya").
_NAMING_WORDS: frozenset[str] = words(
    """i'm im is am are was were be been being called named name's it's this's that's"""
)
# Words that make the next one a noun, so a capitalised word after them is a place or a
# thing rather than the person a line speaks to.
_NOUN_INTRODUCERS: frozenset[str] = words(
    """about to in at from with for of on by into onto over under near after before around
    through the a an my your our his her their its this that these those than like visit
    visited visiting"""
)
_WORD_RE = re.compile(r"[^\W_](?:[\w'’.+-]*[^\W_])?")


def _is_chatter_word(token: str) -> bool:
    return token in _CHATTER_VOCABULARY or _STRETCHED_RE.match(token) is not None


def _english_carries_fact(body: str) -> bool:
    found = list(_WORD_RE.finditer(body))
    folded = [fold(match.group()) for match in found]
    remaining = set(_SMALL_TALK_PHRASES_RE.sub(" ", " ".join(folded)).split())
    content = [
        index
        for index, token in enumerate(folded)
        if token in remaining and not _is_chatter_word(token)
    ]
    if not content:
        return False
    # Only names left, each said to someone: a greeting or thanks to its addressee ("Thanks,
    # Melanie!", "Hey Gina, good to see you!"). A name after a copula is what is said ("I'm
    # Priya."); one after a preposition is a place or a thing ("What do you love about
    # Seattle?"); one followed by more words is a subject ("Toby looks happy!").
    addressed = any(token in _ADDRESSING_WORDS for token in folded)
    return not (
        addressed
        and not remaining & _NAMING_WORDS
        and all(_is_addressee(body, found, folded, index) for index in content)
    )


def _is_addressee(body: str, found: list[re.Match[str]], folded: list[str], index: int) -> bool:
    """A capitalised word that ends its clause, with no preposition before it."""
    after = body[found[index].end() :].lstrip()
    return (
        found[index].group()[:1].isupper()
        and (index == 0 or folded[index - 1] not in _NOUN_INTRODUCERS)
        and (not after or not after[0].isalnum())
    )


def carries_fact(content: str) -> bool:
    """Whether a turn states anything to recall: a person's fact, a setting, a choice, a plan,
    an event, a number, a constraint, a question. False only for chatter (the module's rule):
    acknowledgements, small talk, reactions, laughter, stalling, punctuation and emoji."""
    _, body = split_speaker(content)
    norm = normalise_for_ack(body)
    if not norm or is_acknowledgement(norm):
        return False
    if _SLANG_NUMBER_RE.match(norm.replace(" ", "")):
        return False
    if has_han(norm):
        # A person named in the line (张工, 小李) is its addressee when the rest is chatter
        # ("谢谢张工！"); a name alone, or with more said, is a fact ("张工。", "我是小李").
        rest = PERSON_RE.sub(" ", norm)
        return not (rest.strip() and made_of(rest, SMALL_TALK_PIECES))
    return _english_carries_fact(body)
