"""Full-text search of Chinese: Han runs indexed as the character bigrams of
``pipelines.text.words``.

PostgreSQL's parser reads a run of Han characters (and any Latin letters touching it) as one
word, so ``认证模块的JWT迁移有什么约束`` was one lexeme and no keyword inside it ever matched.
``search_tsv`` becomes ``memories_search_vector(content)``:

- a content without Han characters: ``to_tsvector('english', content)``, exactly as before,
  so English rankings do not move;
- else its NFKC form (the Python side folds with NFKC too), its Han runs cut at the function
  words and particles of ``pipelines.text.words`` and set apart from the Latin words they
  touch (``JWT迁移`` → ``JWT 迁移``), through ``to_tsvector('english', ...)``; each Han phrase
  it finds is then replaced by its bigrams at the phrase's positions, a one-character phrase
  standing for itself: the units ``pipelines.text.words.han_bigrams`` gives and the read
  path's ``tsquery_of`` asks for. The ``english`` configuration leaves Han as it is, on the
  query's side too.

The separator lists are those of ``pipelines.text.words`` as of this revision; the test suite
compares the database's bigrams with Python's on every separator, on random strings of them
and on whole sentences, so a change to the Python lists shows up as a failing test and needs a
new revision.

Cost, on the drain's UPDATE to ``stored`` only (the trigger of migration 0004 does not run for
``record()``'s pending insert): an ASCII content pays one scan for a non-ASCII byte, another
content without Han an NFKC pass; a Chinese one about 1 µs a character (a 290-character turn
0.3-0.4 ms, against 0.04 ms for ``to_tsvector`` alone, on a busy two-core machine). One
regular expression of all the separators cost 3 µs a character (PostgreSQL rebuilds its
automaton at each match), hence the chain of plain replacements; bigrams written one tsvector
entry at a time (``generate_series`` and ``substr``) cost two to three times what writing them
a phrase at a time does. A Han phrase of more than 682 characters with no function word or
punctuation is longer than PostgreSQL's 2,047-byte word and is left out, with a notice.

Only rows holding a Han character are rewritten by the upgrade.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The Han ideographs of ``pipelines.text.words.HAN``: Extension A, the unified block and the
# compatibility block.
_HAN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"

# ``pipelines.text.words`` cuts a run at the leftmost separator, the longest one there. Here
# its multi-character stopwords are replaced one after the other, in an order where of two
# words that can overlap in a text (因为 and 为什么 in 因为什么, 可以 and 以前) the one a
# left-to-right scan meets first goes first; 有没 and 没有 overlap both ways (有没有, 没有没)
# and are cut by one regular expression at their place in the order. Its single-character
# separators (particles, 是, 在, 和, ...) are cut last: 是 inside 是否 belongs to 是否.
_MULTI_SEPARATORS = """
    一下 一个 一些 一点 不是 不过 因为 之前 之后 也是 关于 对于 其他 可以
    所以 但是 你们 其中 另外 只是 可是 可能 咱们 哪个 哪些 因此 大家 她们
    好的 如何 如果 它们 对的 就是 已经 并且 应该 怎么 我们 或者 时候 都是
    还是 还有 正在 虽然 现在 而且 自己 请问 这个 这些 这样 这里 那个 那些
    那样 那里 需要 为什么 于是 他们 以前 以及 以后 有没|没有 然后 什么 是否 是的"""
_SINGLE_SEPARATORS = "么了吗吧呀呢哦啊嘛的着是在和与及或把被给"


def _cut_separators(expression: str) -> str:
    """SQL replacing every separator in the text ``expression`` by a space."""
    for word in _MULTI_SEPARATORS.split():
        if "|" in word:
            expression = f"regexp_replace({expression}, '{word}', ' ', 'g')"
        else:
            expression = f"replace({expression}, '{word}', ' ')"
    spaces = " " * len(_SINGLE_SEPARATORS)
    return f"translate({expression}, '{_SINGLE_SEPARATORS}', '{spaces}')"


# ``op.execute`` reads ``:name`` as a bind parameter: the SQL below holds none.
def upgrade() -> None:
    op.execute(
        f"""
        CREATE FUNCTION memories_search_vector(content text) RETURNS tsvector
        LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
        DECLARE
            folded text;
            phrases tsvector;
        BEGIN
            -- ASCII text holds no Han character even after NFKC: one scan, and an English
            -- row is searched by its content as before.
            IF content !~ '[^\\x01-\\x7f]' THEN
                RETURN to_tsvector('english'::regconfig, content);
            END IF;
            folded := normalize(content, NFKC);
            IF folded !~ '{_HAN}' THEN
                RETURN to_tsvector('english'::regconfig, content);
            END IF;
            phrases := to_tsvector(
                'english'::regconfig,
                regexp_replace({_cut_separators("folded")}, '({_HAN}+)', ' \\1 ', 'g')
            );
            -- Each Han phrase becomes its bigrams, written as one tsvector literal at the
            -- phrase's positions (支付模块 at 3 and 7: 支付, 付模 and 模块 at 3 and 7): a bigram
            -- said twice counts twice in ts_rank, as a word said twice does.
            RETURN ts_delete(
                phrases, ARRAY(SELECT lexeme FROM unnest(phrases) WHERE lexeme ~ '^{_HAN}')
            ) || coalesce((
                SELECT string_agg(
                    '''' || array_to_string(g.bigrams, ''':' || g.at || ' ''') || ''':' || g.at,
                    ' '
                )::tsvector
                FROM (
                    SELECT array_to_string(p.positions, ',') AS at,
                           CASE WHEN length(p.lexeme) = 1 THEN ARRAY[p.lexeme]
                                ELSE ARRAY(SELECT a || b
                                           FROM unnest(ch[1:cardinality(ch) - 1], ch[2:])
                                                AS z(a, b))
                           END AS bigrams
                    FROM unnest(phrases) AS p, string_to_array(p.lexeme, NULL) AS ch
                    WHERE p.lexeme ~ '^{_HAN}'
                ) AS g
            ), ''::tsvector);
        END
        $$;

        CREATE OR REPLACE FUNCTION memories_search_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search_tsv := memories_search_vector(NEW.content);
            RETURN NEW;
        END
        $$;

        UPDATE memories SET search_tsv = memories_search_vector(content)
        WHERE status = 'stored' AND content ~ '[^\\x01-\\x7f]'
          AND normalize(content, NFKC) ~ '{_HAN}';
        """
    )


def downgrade() -> None:
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION memories_search_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search_tsv := to_tsvector('english'::regconfig, NEW.content);
            RETURN NEW;
        END
        $$;

        UPDATE memories SET search_tsv = to_tsvector('english'::regconfig, content)
        WHERE status = 'stored' AND content ~ '[^\\x01-\\x7f]'
          AND normalize(content, NFKC) ~ '{_HAN}';

        DROP FUNCTION memories_search_vector(text);
        """
    )
