"""The Redis working-memory pool: pushes, the sliding window and its summaries, on real Redis."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from pipelines.read.window import SUMMARY_MAX_TOKENS
from pipelines.records import MemoryType
from workers.adapters.llm_offline import OfflineLLM
from workers.adapters.tokenizer import load_token_counter
from workers.window import (
    TurnRecord,
    WorkingMemoryPool,
    lock_key,
    speaker_of,
    summaries_key,
    turns_key,
)

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
COUNTER = load_token_counter()


def turn(
    n: int, text: str | None = None, *, session: str = "s-1", tenant: str = "acme"
) -> TurnRecord:
    return TurnRecord(
        tenant_id=tenant,
        task_id="billing",
        session_id=session,
        memory_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{session}/{n}"),
        speaker="agent" if n % 2 else "user",
        content=text or f"Turn {n}: we decided to use option {n} for module m{n}.",
        timestamp=T0 + timedelta(minutes=n),
        type=MemoryType.DECISION if n % 3 == 0 else None,
    )


@pytest.fixture
def pool(redis_client: redis.Redis) -> WorkingMemoryPool:
    return WorkingMemoryPool(redis_client, max_turns=200, ttl_s=3600)


def test_pushed_turns_come_back_oldest_first_with_their_speaker(pool, redis_client) -> None:  # type: ignore[no-untyped-def]
    pool.push([turn(1), turn(2)])
    pool.push([turn(3)])

    window = pool.load("acme", "billing", "s-1")

    assert [t.content for t in window.turns] == [turn(n).content for n in (1, 2, 3)]
    assert [t.speaker for t in window.turns] == ["agent", "user", "agent"]
    assert window.turns[2].type is MemoryType.DECISION
    assert window.summaries == ()
    # every key expires: Redis holds only short-lived state
    assert 0 < redis_client.ttl(turns_key("acme", "billing", "s-1")) <= 3600
    assert pool.latest_session("acme", "billing") == "s-1"


def test_a_retried_push_of_the_same_turn_shows_once(pool) -> None:  # type: ignore[no-untyped-def]
    pool.push([turn(1), turn(2)])
    pool.push([turn(1)])

    assert [t.id for t in pool.load("acme", "billing", "s-1").turns] == [
        str(turn(1).memory_id),
        str(turn(2).memory_id),
    ]


def test_the_pool_keeps_at_most_max_turns(redis_client) -> None:  # type: ignore[no-untyped-def]
    small = WorkingMemoryPool(redis_client, max_turns=30, ttl_s=60)
    small.push([turn(n) for n in range(45)])

    turns = small.load("acme", "billing", "s-1").turns
    assert [t.id for t in turns] == [str(turn(n).memory_id) for n in range(15, 45)]


def test_sessions_tasks_and_tenants_do_not_share_a_window(pool) -> None:  # type: ignore[no-untyped-def]
    pool.push([turn(1), turn(2, session="s-2"), turn(3, tenant="other")])

    assert len(pool.load("acme", "billing", "s-1").turns) == 1
    assert len(pool.load("acme", "billing", "s-2").turns) == 1
    assert len(pool.load("other", "billing", "s-1").turns) == 1
    # the latest session of the task is the one last recorded into
    assert pool.latest_session("acme", "billing") == "s-2"


def test_up_to_25_turns_stay_verbatim_with_no_summary(pool) -> None:  # type: ignore[no-untyped-def]
    pool.push([turn(n) for n in range(25)])

    window = pool.advance("acme", "billing", "s-1", OfflineLLM(), COUNTER)

    assert len(window.turns) == 25
    assert window.summaries == ()


def test_past_25_turns_all_but_the_last_20_are_summarised_and_trimmed(pool, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given 26 turns: one past the threshold
    pool.push([turn(n) for n in range(26)])

    # when the window advances
    window = pool.advance("acme", "billing", "s-1", OfflineLLM(), COUNTER)

    # then the first 6 are one summary and the last 20 stay verbatim
    assert [t.id for t in window.turns] == [str(turn(n).memory_id) for n in range(6, 26)]
    [summary] = window.summaries
    assert (summary.turn_count, summary.first_turn_id) == (6, str(turn(0).memory_id))
    assert summary.tokens <= SUMMARY_MAX_TOKENS
    assert "decided" in summary.content
    # and Redis now holds the summary and only the uncovered turns
    assert redis_client.llen(turns_key("acme", "billing", "s-1")) == 20
    assert redis_client.llen(summaries_key("acme", "billing", "s-1")) == 1

    # when nothing new arrives, advancing again changes nothing
    again = pool.advance("acme", "billing", "s-1", OfflineLLM(), COUNTER)
    assert again == window

    # when 6 more turns arrive (26 unsummarised), the 6 oldest of them fold into a second one
    pool.push([turn(n) for n in range(26, 32)])
    later = pool.advance("acme", "billing", "s-1", OfflineLLM(), COUNTER)
    assert len(later.summaries) == 2
    assert later.summaries[1].first_turn_id == str(turn(6).memory_id)
    assert [t.id for t in later.turns] == [str(turn(n).memory_id) for n in range(12, 32)]


def test_long_turns_are_summarised_in_chunks_of_at_most_4000_tokens(pool) -> None:  # type: ignore[no-untyped-def]
    # given 30 turns of ~600 tokens each: the 10 to fold hold ~6,000 tokens
    body = " ".join(
        f"The value of setting key_{i} is {i * 7} and it was decided today." for i in range(40)
    )
    pool.push([turn(n, f"Turn {n}. {body}") for n in range(30)])

    window = pool.advance("acme", "billing", "s-1", OfflineLLM(), COUNTER)

    # then they become more than one summary, each within 500 real tokens
    assert len(window.summaries) >= 2
    assert sum(s.turn_count for s in window.summaries) == 10
    for summary in window.summaries:
        assert COUNTER.count(summary.content) <= SUMMARY_MAX_TOKENS
    assert len(window.turns) == 20


def test_a_reader_that_cannot_take_the_lock_serves_the_turns_verbatim(pool, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given another reader summarising this session
    pool.push([turn(n) for n in range(30)])
    redis_client.set(lock_key("acme", "billing", "s-1"), "someone-else", ex=60)

    window = pool.advance("acme", "billing", "s-1", OfflineLLM(), COUNTER)

    # then nothing is lost and nothing is summarised twice
    assert len(window.turns) == 30
    assert window.summaries == ()
    assert redis_client.llen(summaries_key("acme", "billing", "s-1")) == 0


def test_the_latest_session_is_used_when_none_is_named(pool) -> None:  # type: ignore[no-untyped-def]
    assert pool.advance("acme", "billing", None, OfflineLLM(), COUNTER).session_id is None
    pool.push([turn(1, session="s-9")])

    window = pool.advance("acme", "billing", None, OfflineLLM(), COUNTER)

    assert window.session_id == "s-9"
    assert len(window.turns) == 1


def test_a_push_to_an_unreachable_redis_raises_for_the_caller_to_log() -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    with pytest.raises(redis.ConnectionError):
        WorkingMemoryPool(dead, max_turns=200, ttl_s=60).push([turn(1)])


def test_the_speaker_is_the_callers_metadata_then_the_agent_then_the_user() -> None:
    assert speaker_of({"speaker": "Alice"}, "bot", "u1") == "Alice"
    assert speaker_of({"role": "assistant"}, "bot", "u1") == "assistant"
    assert speaker_of({}, "bot", "u1") == "bot"
    assert speaker_of({}, None, "u1") == "u1"
    assert speaker_of({"speaker": 3}, None, None) == "turn"


def test_rewrite_drops_and_corrects_turns_and_the_summaries_that_may_carry_them(
    pool, redis_client
) -> None:  # type: ignore[no-untyped-def]
    # given 30 turns, 10 of them folded into summaries
    pool.push([turn(n) for n in range(30)])
    pool.advance("acme", "billing", "s-1", OfflineLLM(), COUNTER)
    assert redis_client.llen(summaries_key("acme", "billing", "s-1")) >= 1
    gone, fixed, new_id = turn(12), turn(13), str(uuid.uuid4())

    # when turn 12 is erased and turn 13 corrected
    done = pool.rewrite(
        "acme",
        "billing",
        "s-1",
        remove={str(gone.memory_id)},
        replace={str(fixed.memory_id): (new_id, "Turn 13, corrected: option 99.")},
    )

    # then the window keeps the order of the rest, with the corrected text under the new id
    assert done
    window = pool.load("acme", "billing", "s-1")
    ids = [t.id for t in window.turns]
    assert str(gone.memory_id) not in ids and str(fixed.memory_id) not in ids
    assert ids.index(new_id) == ids.index(str(turn(14).memory_id)) - 1
    assert [t.content for t in window.turns if t.id == new_id] == ["Turn 13, corrected: option 99."]
    # and the summaries, any of which may hold the old text, are gone
    assert window.summaries == ()
    assert 0 < redis_client.ttl(turns_key("acme", "billing", "s-1")) <= 3600


def test_rewrite_waits_for_a_reader_that_is_summarising(pool, redis_client) -> None:  # type: ignore[no-untyped-def]
    pool.push([turn(n) for n in range(3)])
    redis_client.set(lock_key("acme", "billing", "s-1"), "someone-else", ex=60)

    assert not pool.rewrite("acme", "billing", "s-1", remove={str(turn(1).memory_id)}, replace={})
    assert len(pool.load("acme", "billing", "s-1").turns) == 3
