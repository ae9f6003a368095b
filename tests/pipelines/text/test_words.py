"""Words of both languages: Han runs as bigrams, counts that mean the same in both."""

from __future__ import annotations

from pipelines.text.words import content_tokens, han_bigrams, raw_tokens, word_count


def test_a_text_without_han_is_tokenised_as_before() -> None:
    assert raw_tokens("We chose Redis (v7.2) for auth/login.py, ATL-12.") == [
        "we",
        "chose",
        "redis",
        "v7.2",
        "for",
        "auth/login.py",
        "atl-12",
    ]


def test_a_han_run_becomes_its_bigrams_and_latin_inside_it_stays_a_word() -> None:
    assert raw_tokens("认证模块的JWT迁移") == ["认证", "证模", "模块", "jwt", "迁移"]
    assert raw_tokens("支付模块负责人是张工") == [
        "支付",
        "付模",
        "模块",
        "块负",
        "负责",
        "责人",
        "张工",
    ]


def test_a_run_is_cut_at_its_function_words_before_it_becomes_bigrams() -> None:
    # 块的 and 的支 straddle the particle 的; 们已 and 经决 straddle 我们 and 已经
    assert han_bigrams("模块的支付") == ["模块", "支付"]
    assert han_bigrams("我们已经决定") == ["决定"]
    assert han_bigrams("张") == ["张"]


def test_function_words_are_stopwords_in_both_languages() -> None:
    assert content_tokens("我们已经决定采用Redis") == ["决定", "定采", "采用", "redis"]
    assert content_tokens("We have decided") == ["decid"]


def test_word_counts_mean_the_same_in_both_languages() -> None:
    english = "The payment owner is Zhang, because he integrated the third-party gateway before."
    chinese = "支付模块负责人是张工，因为他之前做过第三方支付网关的对接。"
    assert word_count(english) == 12
    # 27 Han characters at 1.5 characters a word
    assert word_count(chinese) == 18
    assert word_count("收到，谢谢") == 3
    # five Han characters are four words, beside two Latin ones
    assert word_count("部署 v2.1 到 staging 环境") == 6
