"""Sentences and speakers, in English and in Chinese side by side."""

from __future__ import annotations

import pytest

from pipelines.text.sentences import split_sentences, split_speaker


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # English needs whitespace after . ! ? ; Chinese puts none after 。！？；
        (
            "We chose Redis. It is fast! Why? Cost.",
            ["We chose Redis.", "It is fast!", "Why?", "Cost."],
        ),
        (
            "我们选了 Redis。它很快！为什么？成本；下一步",
            ["我们选了 Redis。", "它很快！", "为什么？", "成本；", "下一步"],
        ),
        # a mark with no space after it ends no English sentence
        ("We shipped v1.2 today.Next is v1.3", ["We shipped v1.2 today.Next is v1.3"]),
        # a Latin mark right after a Han character ends a Chinese one; a version does not
        ("版本 v1.2 已发布!下一步是压测", ["版本 v1.2 已发布!", "下一步是压测"]),
        # a run of marks stays with its sentence
        ("Really?! Yes.", ["Really?!", "Yes."]),
        ("真的吗？！是的。", ["真的吗？！", "是的。"]),
        # and so does a closing quote after the mark
        ("他说：“好。”然后走了。", ["他说：“好。”", "然后走了。"]),
        # lines split in both
        ("first line\nsecond line", ["first line", "second line"]),
        ("第一行\n\n第二行", ["第一行", "第二行"]),
        # an English semicolon joins clauses of one sentence
        ("We chose Redis; it is fast.", ["We chose Redis; it is fast."]),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("line", "speaker", "body"),
    [
        ("Alice: we chose Redis", "Alice", "we chose Redis"),
        ("张工：支付模块完成了", "张工", "支付模块完成了"),
        ("Mary Ann Lee: done", "Mary Ann Lee", "done"),
        ("产品经理: 下周上线", "产品经理", "下周上线"),
        ("assistant: ok", "assistant", "ok"),
        ("助手：状态：工单 PAY-3 已完成。", "助手", "状态：工单 PAY-3 已完成。"),
        # a Chinese colon needs no space after it, in either script
        (
            "Agent：Status：ticket PAY-3 moved to done",
            "Agent",
            "Status：ticket PAY-3 moved to done",
        ),
        ("王经理:周报请用要点式", "王经理", "周报请用要点式"),
    ],
)
def test_split_speaker_finds_the_speaker(line: str, speaker: str, body: str) -> None:
    assert split_speaker(line) == (speaker, body)


@pytest.mark.parametrize(
    "line",
    [
        # an ASCII colon with no space after an English name is not a speaker
        "Dana:hi",
        "note that ratio 3:1 holds",
        # one Han character, or more than six, is not a name or a role
        "张：太短",
        "我们今天开会讨论了这个问题：结论如下",
        # nothing after the colon
        "张工：",
    ],
)
def test_split_speaker_leaves_other_lines_whole(line: str) -> None:
    assert split_speaker(line) == (None, line)
