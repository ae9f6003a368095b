"""Full-text search of Chinese on the real database: Han runs are indexed as the bigrams of
``pipelines.text.words`` (migration 0005), the query asks for the same bigrams, and a text
without Han characters is indexed and queried exactly as before.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from alembic import command
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from pipelines.read.recall import RecallScope
from pipelines.text.words import CJK_STOPWORDS, PARTICLES, han_bigrams, has_han, raw_tokens
from tests.support.project_history import history
from tests.support.project_history_zh import history_mixed, history_zh
from workers.db import alembic_config, drop_database, migrate, open_pool
from workers.read.sql import PostgresRecall, tsquery_of

NOW = datetime.now(UTC).replace(microsecond=0)
SCOPE = RecallScope(tenant_id="acme", task_id="billing", now=NOW)
START = datetime(2026, 11, 2, tzinfo=UTC)

# Every separator ``pipelines.text.words`` cuts Han runs at: its multi-character stopwords,
# its particles and the single characters it keeps nothing of.
SEPARATORS = sorted(
    {w for w in CJK_STOPWORDS if len(w) > 1}
    | PARTICLES
    | {w for w in CJK_STOPWORDS if len(w) == 1 and not han_bigrams(w)}
)


@pytest.fixture
def pool(db, settings) -> Iterator[ConnectionPool]:  # type: ignore[no-untyped-def]
    opened = open_pool(settings, name="test-search-han")
    yield opened
    opened.close()


def insert(conn: psycopg.Connection[Any], content: str, *, status: str = "stored") -> str:
    key = uuid.uuid5(uuid.NAMESPACE_URL, f"acme/billing/{content}")
    conn.execute(
        "INSERT INTO memories (id, tenant_id, task_id, session_id, ts, content, content_hash, "
        "status) VALUES (%s, 'acme', 'billing', 's-1', %s, %s, %s, %s)",
        (key, NOW - timedelta(hours=1), content, hashlib.sha256(content.encode()).digest(), status),
    )
    return str(key)


def han_lexemes(conn: psycopg.Connection[Any], texts: list[str]) -> list[set[str]]:
    """The Han lexemes the database indexes each text by."""
    rows = conn.execute(
        "SELECT tsvector_to_array(memories_search_vector(t)) "
        "FROM unnest(%s::text[]) WITH ORDINALITY AS x(t, n) ORDER BY n",
        (texts,),
    ).fetchall()
    return [{lexeme for lexeme in row[0] if has_han(lexeme)} for row in rows]


def python_han_tokens(text: str) -> set[str]:
    return {token for token in raw_tokens(text) if has_han(token)}


def test_the_database_cuts_han_runs_where_the_python_side_does(db) -> None:  # type: ignore[no-untyped-def]
    # given every separator between content words, alone, doubled, and random strings of
    # separators, their halves and content characters (where two separators overlap)
    texts = [f"支付{s}模块" for s in SEPARATORS] + SEPARATORS + [s + s for s in SEPARATORS]
    pieces = [*SEPARATORS, *(s[0] for s in SEPARATORS), *(s[-1] for s in SEPARATORS), "支", "付"]
    rng = random.Random(7)
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))) for _ in range(3_000)]

    # when the database indexes them
    indexed = han_lexemes(db, texts)

    # then it holds the bigrams and lone characters the Python side gives, no more, no less
    mismatches = [
        (text, got, python_han_tokens(text))
        for text, got in zip(texts, indexed, strict=True)
        if got != python_han_tokens(text)
    ]
    assert mismatches == []
    assert indexed[0] == {"支付", "模块"}  # 的 between two words: no bigram straddles it


def test_the_project_histories_are_indexed_by_the_python_side_bigrams(db) -> None:  # type: ignore[no-untyped-def]
    texts = [item["content"] for item in history_zh(START) + history_mixed(START)]
    texts += ["认证模块的JWT迁移有什么约束？", "ＪＷＴ迁移（全角）", "v2版本在2027年3月1日上线"]

    indexed = han_lexemes(db, texts)

    for text, got in zip(texts, indexed, strict=True):
        assert got == python_han_tokens(text), text


def test_english_text_is_indexed_exactly_as_before(db) -> None:  # type: ignore[no-untyped-def]
    # given stored rows without a Han character: ASCII, accented Latin, full-width Latin,
    # Greek, Japanese kana and Korean
    texts = [item["content"] for item in history(START)] + [
        "Café crème — naïve résumé, “quoted” ±1.5%",
        "ＡＢＣ full-width letters",
        "Δοκιμή привет",
        "カタカナとひらがな 한국어",
        "path C:\\temp\\x and it's Bob's 'plan'",
    ]
    for text in dict.fromkeys(texts):
        insert(db, text)

    # then each row's vector is to_tsvector('english', content), as migration 0004 stored it
    differing = db.execute(
        "SELECT content FROM memories "
        "WHERE search_tsv IS DISTINCT FROM to_tsvector('english', content)"
    ).fetchall()
    assert differing == []


def test_the_tsquery_of_a_chinese_question_asks_for_the_bigrams_of_its_keywords() -> None:
    assert tsquery_of("认证模块的JWT迁移有什么约束？") == (
        "'认证' | '证模' | '模块' | 'JWT' | '迁移' | '约束'"
    )
    # a bigram two keywords share is asked for once; a one-character keyword stands for itself
    assert tsquery_of("支付模块和认证模块") == "'支付' | '付模' | '模块' | '认证' | '证模'"
    assert tsquery_of("张工") == "'张工'"
    assert tsquery_of("谁负责？是什么？") == "'负责'"
    assert tsquery_of("有什么？") == ""
    # English queries are untouched
    assert tsquery_of("Why did we choose PostgreSQL?") == "'choose' | 'PostgreSQL'"


def test_a_chinese_keyword_query_finds_its_memory(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given the payment owner's memory among build logs and other modules' news
    owner = insert(db, "支付模块负责人是张工，因为他之前做过第三方支付网关的对接。")
    delay = insert(db, "状态：认证模块延期到 2027 年 1 月 15 日，因为安全审计 SEC-12 没有通过。")
    insert(db, "构建日志：npm run build 成功，耗时 42 秒，产物在 dist/ 目录。")
    insert(db, "在分支 feature/pay-3 上跑了集成测试：121 个用例通过。")
    recall = PostgresRecall(pool, versions_from_rows=False)

    # when Chinese questions are asked
    by_owner = recall.search_sparse("支付模块的负责人是谁？", SCOPE, 50)
    by_name = recall.search_sparse("张工", SCOPE, 50)
    by_delay = recall.search_sparse("认证模块什么时候延期的？", SCOPE, 50)
    recent = recall.search_recent("张工负责什么", SCOPE, NOW - timedelta(days=7), 20)

    # then each finds its memory first, and a name finds only the memory naming it
    assert by_owner[0].id == owner
    assert [hit.id for hit in by_name] == [owner]
    assert by_delay[0].id == delay
    assert recent[0].id == owner
    assert by_owner[0].score > 0


def test_mixed_text_matches_on_its_latin_and_its_chinese_part(db, pool) -> None:  # type: ignore[no-untyped-def]
    # given a memory where a Latin word touches a Chinese one, and two that hold one each
    both = insert(db, "JWT迁移要先在测试环境灰度一周。")
    latin = insert(db, "The JWT signing keys rotate every 30 days.")
    chinese = insert(db, "订单记录迁移到新的 payments 表。")
    recall = PostgresRecall(pool, versions_from_rows=False)

    # when each part is asked for alone, then together
    by_latin = {hit.id for hit in recall.search_sparse("JWT", SCOPE, 50)}
    by_chinese = {hit.id for hit in recall.search_sparse("迁移", SCOPE, 50)}
    together = recall.search_sparse("JWT迁移有什么约束？", SCOPE, 50)

    # then the mixed memory answers both, and ranks first when both are asked
    assert by_latin == {both, latin}
    assert by_chinese == {both, chinese}
    assert together[0].id == both
    assert {hit.id for hit in together} == {both, latin, chinese}


def test_the_migration_rewrites_an_existing_databases_chinese_rows_only(migrated) -> None:  # type: ignore[no-untyped-def]
    # given a database at the previous revision with stored English and Chinese rows and a
    # pending Chinese row
    params = conninfo_to_dict(migrated)
    url = make_conninfo(migrated, dbname=f"{params['dbname']}_upgrade")
    drop_database(url)
    migrate(url, "0004")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            english = insert(conn, "We decided to keep invoices in PostgreSQL.")
            chinese = insert(conn, "支付模块负责人是张工。")
            pending = insert(conn, "认证模块的JWT迁移约束", status="pending")
            before = dict(
                conn.execute("SELECT id::text, search_tsv::text FROM memories").fetchall()
            )
        assert before[chinese] == "'支付模块负责人是张工':1"  # one lexeme: nothing matched

        # when it is upgraded
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            after = dict(conn.execute("SELECT id::text, search_tsv::text FROM memories").fetchall())
            # and the pending row is stored afterwards (the drain's UPDATE)
            conn.execute("UPDATE memories SET status = 'stored' WHERE id = %s", (pending,))
            stored = conn.execute(
                "SELECT tsvector_to_array(search_tsv) FROM memories WHERE id = %s", (pending,)
            ).fetchone()

        # then the English row keeps its vector, the Chinese one has bigrams, the pending
        # row got its bigrams from the trigger
        assert after[english] == before[english]
        assert after[chinese] == ("'付模':1 '块负':1 '张工':2 '支付':1 '模块':1 '负责':1 '责人':1")
        assert after[pending] is None
        assert stored is not None and {"jwt", "迁移", "约束", "认证"} <= set(stored[0])

        # and a downgrade gives back the previous revision's vectors
        command.downgrade(alembic_config(url), "0004")
        with psycopg.connect(url, autocommit=True) as conn:
            down = dict(conn.execute("SELECT id::text, search_tsv::text FROM memories").fetchall())
        assert down[english] == before[english]
        assert down[chinese] == before[chinese]
    finally:
        drop_database(url)


def test_a_question_in_codes_terms_also_asks_for_the_words_of_its_identifiers() -> None:
    # fetch_user_by_id is indexed as its words: the camelCase spelling must reach them
    assert tsquery_of("Where is fetchUserById implemented?") == (
        "'fetchUserById' | 'fetch' | 'user' | 'by' | 'id' | 'implemented'"
    )
    assert tsquery_of("What does MAX_UPLOAD_BYTES limit?") == (
        "'MAX_UPLOAD_BYTES' | 'max' | 'upload' | 'bytes' | 'limit'"
    )
    # a PascalCase name is how products and people are spelled: it stays whole
    assert tsquery_of("Why did we choose PostgreSQL?") == "'choose' | 'PostgreSQL'"
    assert tsquery_of("Where does LeBron play?") == "'LeBron' | 'play'"
