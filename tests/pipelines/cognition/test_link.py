from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pipelines.cognition.causal import (
    CausalBatch,
    CausalEdge,
    CausalProposer,
    parse_causal,
    propose_causal_offline,
)
from pipelines.cognition.entities import extract_entities
from pipelines.cognition.link import (
    Direction,
    InMemoryLinks,
    LinkKind,
    LinkStore,
    MemoryLink,
    Neighbour,
    affected_by,
    causal_links,
    entity_links,
    link_on_write,
    similar_links,
    traverse,
)
from pipelines.records import EpisodicMemory

T0 = datetime(2024, 2, 5, 9, tzinfo=UTC)


def memory(n: int, text: str, *, task: str = "launch", tenant: str = "acme") -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.UUID(int=n),
        tenant_id=tenant,
        task_id=task,
        session_id="s",
        timestamp=T0 + timedelta(hours=n),
        content=text,
    )


AUTH = memory(1, "The auth module is delayed by three days: the OAuth provider changed tokens.")
RELEASE = memory(2, "The frontend release is blocked by the auth module delay.")
LAUNCH = memory(3, "The marketing launch depends on the frontend release.")
CSS = memory(4, "Priya fixed the CSS of the settings page.")


def u(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


def test_entities_are_names_ids_and_noun_phrases() -> None:
    assert {"auth modul", "oauth provider"} <= extract_entities(AUTH.content)
    assert extract_entities(RELEASE.content) == {"frontend releas", "auth modul"}
    found = extract_entities("agent: Moved ATL-12 to review; see auth/login.py. 3 files, 7 May.")
    assert {"atl-12", "auth/login.py"} <= found
    assert "3" not in found and "7" not in found


def test_entity_links_share_an_entity_within_the_tenant() -> None:
    stranger = memory(9, "The auth module of another company.", tenant="other")
    links = entity_links(RELEASE, [AUTH, LAUNCH, CSS, stranger, RELEASE])
    assert {(link.dst_id, link.kind) for link in links} == {
        (AUTH.id, LinkKind.ENTITY),
        (LAUNCH.id, LinkKind.ENTITY),
    }
    assert all(link.src_id == RELEASE.id and 0 < link.weight <= 1 for link in links)


def test_similar_links_need_the_score_and_the_task() -> None:
    other_task = memory(5, "The frontend release slipped.", task="other")
    hits = [
        Neighbour(memory=LAUNCH, score=0.8),
        Neighbour(memory=CSS, score=0.74),
        Neighbour(memory=other_task, score=0.95),
        Neighbour(memory=RELEASE, score=1.0),  # itself
    ]
    links = similar_links(RELEASE, hits)
    assert [(link.dst_id, link.weight) for link in links] == [(LAUNCH.id, 0.8)]


def test_offline_causal_reads_the_direction_from_the_cue() -> None:
    # "blocked by X": the memory about X is the cause
    edges = propose_causal_offline(RELEASE, [AUTH, CSS]).edges
    assert [(e.cause_id, e.effect_id) for e in edges] == [(AUTH.id, RELEASE.id)]
    # "X delays Y": the new memory is the cause
    cause = memory(6, "The flaky OAuth provider delays the frontend release by a week.")
    edges = propose_causal_offline(cause, [RELEASE, CSS]).edges
    assert [(e.cause_id, e.effect_id) for e in edges] == [(cause.id, RELEASE.id)]
    assert propose_causal_offline(CSS, [AUTH, RELEASE]).edges == []


def test_causal_links_ignore_edges_about_unknown_memories() -> None:
    batch = CausalBatch(
        edges=[
            CausalEdge(cause_id=AUTH.id, effect_id=RELEASE.id, confidence=0.9),
            CausalEdge(cause_id=u(99), effect_id=RELEASE.id, confidence=0.9),  # invented
            CausalEdge(cause_id=AUTH.id, effect_id=CSS.id, confidence=0.9),  # not about it
        ]
    )
    links = causal_links(RELEASE, [AUTH, CSS], batch)
    assert [(link.src_id, link.dst_id, link.kind) for link in links] == [
        (AUTH.id, RELEASE.id, LinkKind.CAUSAL)
    ]


class FixedProposer:
    @property
    def name(self) -> str:
        return "fake-llm"

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch:
        return CausalBatch(
            edges=[
                CausalEdge(cause_id=c.id, effect_id=memory.id, confidence=0.7) for c in candidates
            ]
        )


def test_link_on_write_combines_the_three_kinds() -> None:
    proposer = FixedProposer()
    assert isinstance(proposer, CausalProposer)
    links = link_on_write(
        RELEASE,
        entity_candidates=[AUTH],
        vector_hits=[Neighbour(memory=LAUNCH, score=0.9)],
        causal=proposer,
    )
    kinds = {(link.kind, link.src_id, link.dst_id) for link in links}
    assert kinds == {
        (LinkKind.ENTITY, RELEASE.id, AUTH.id),
        (LinkKind.SIMILAR, RELEASE.id, LAUNCH.id),
        (LinkKind.CAUSAL, AUTH.id, RELEASE.id),
        (LinkKind.CAUSAL, LAUNCH.id, RELEASE.id),
    }


def chain() -> InMemoryLinks:
    # 1 → 2 → 3 → 4 causal, 5 entity-linked to 2, a weak shortcut 1 → 4
    return InMemoryLinks(
        [
            MemoryLink(src_id=u(1), dst_id=u(2), kind=LinkKind.CAUSAL, weight=0.9),
            MemoryLink(src_id=u(2), dst_id=u(3), kind=LinkKind.CAUSAL, weight=0.8),
            MemoryLink(src_id=u(3), dst_id=u(4), kind=LinkKind.CAUSAL, weight=0.5),
            MemoryLink(src_id=u(5), dst_id=u(2), kind=LinkKind.ENTITY, weight=0.4),
            MemoryLink(src_id=u(1), dst_id=u(4), kind=LinkKind.CAUSAL, weight=0.1),
        ]
    )


def test_traverse_downstream_follows_causes_to_effects() -> None:
    store = chain()
    assert isinstance(store, LinkStore)
    causal = frozenset({LinkKind.CAUSAL})
    reached = traverse([u(1)], store, kinds=causal)
    assert [(r.memory_id, r.hops) for r in reached] == [(u(2), 1), (u(4), 1), (u(3), 2)]
    assert reached[2].path == (u(1), u(2), u(3))
    assert abs(reached[2].score - 0.72) < 1e-9
    assert traverse([u(4)], store, kinds=causal) == []  # nothing downstream of an effect


def test_traverse_upstream_and_hop_limit() -> None:
    store = chain()
    causal = frozenset({LinkKind.CAUSAL})
    upstream = traverse([u(3)], store, direction=Direction.UPSTREAM, kinds=causal)
    assert [r.memory_id for r in upstream] == [u(2), u(1)]
    assert [r.memory_id for r in traverse([u(1)], store, kinds=causal, max_hops=1)] == [
        u(2),
        u(4),
    ]
    assert traverse([u(1)], store, max_hops=0) == []


def test_undirected_links_are_walked_both_ways() -> None:
    reached = traverse([u(5)], chain(), max_hops=2)
    assert [(r.memory_id, r.via) for r in reached] == [
        (u(2), (LinkKind.ENTITY,)),
        (u(3), (LinkKind.ENTITY, LinkKind.CAUSAL)),
    ]


def test_what_does_the_delay_of_the_auth_module_affect() -> None:
    # given the memories written one by one with their links
    store = InMemoryLinks()
    written: list[EpisodicMemory] = []
    for m in (AUTH, RELEASE, LAUNCH, CSS):
        store.add(link_on_write(m, entity_candidates=written, vector_hits=[]))
        written.append(m)
    # when the question is asked
    start, reached = affected_by("What does the delay of the auth module affect?", written, store)
    # then it starts at the delay itself and finds the release, then the launch
    assert [m.id for m in start] == [AUTH.id]
    assert [(r.memory_id, r.hops) for r in reached] == [(RELEASE.id, 1), (LAUNCH.id, 2)]


class BrokenProposer:
    @property
    def name(self) -> str:
        return "broken-llm"

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch:
        return parse_causal('{"edges": [{"cause_id": "not-a-uuid"}]}')


def test_a_malformed_causal_answer_falls_back_to_the_offline_rules() -> None:
    links = link_on_write(
        RELEASE, entity_candidates=[AUTH], vector_hits=[], causal=BrokenProposer()
    )
    assert (LinkKind.CAUSAL, AUTH.id, RELEASE.id) in {(k.kind, k.src_id, k.dst_id) for k in links}


def causal_pairs(new: EpisodicMemory, older: list[EpisodicMemory]) -> set[tuple[int, int]]:
    return {(e.cause_id.int, e.effect_id.int) for e in propose_causal_offline(new, older).edges}


def test_an_older_statement_of_a_cause_reaches_the_memory_it_names() -> None:
    # given "the rebuild delays the dashboard" said before anything about the dashboard
    rebuild = memory(20, "The search index rebuild delays the analytics dashboard.")
    dashboard = memory(21, "The analytics dashboard blocks the quarterly review deck.")
    # then the later memory about the dashboard is its effect (rule 3)
    assert causal_pairs(dashboard, [rebuild, CSS]) == {(20, 21)}


def test_the_subject_of_a_new_cause_is_the_effect_of_what_was_said_about_it() -> None:
    # given the retraining said to be held up, and later to push back the campaign
    schema = memory(30, "The data warehouse schema change was pushed back to March.")
    held = memory(31, "The churn model retraining is held up by the data warehouse schema change.")
    pushes = memory(32, "The churn model retraining pushes back the marketing campaign.")
    # then the campaign's memory follows from what was said of the retraining (rule 2)
    assert (31, 32) in causal_pairs(pushes, [schema, held, CSS])
    # and the chain is walked from the schema change to both
    store = InMemoryLinks()
    written: list[EpisodicMemory] = []
    for m in (schema, held, CSS, pushes):
        store.add(link_on_write(m, entity_candidates=written, vector_hits=[]))
        written.append(m)
    _, reached = affected_by("What does the data warehouse schema change affect?", written, store)
    assert [r.memory_id.int for r in reached] == [31, 32]


def test_a_subject_many_memories_name_links_to_none_of_them() -> None:
    # given several memories about the same module, then "the module is delayed, which
    # delays the launch": no single one of them is the news behind it
    about = [
        memory(40, "The billing module moved to the new build server."),
        memory(41, "The billing module got two new endpoints."),
    ]
    late = memory(42, "The billing module delays the launch of the partner portal.")
    assert causal_pairs(late, about) == set()


def test_a_question_is_no_end_of_a_causal_edge() -> None:
    delayed = memory(50, "The SSO integration with Okta slipped by two weeks.")
    asks = memory(51, "Did the SSO integration affect anything else?")
    blocked = memory(52, "The onboarding flow is blocked on the SSO integration.")
    assert causal_pairs(asks, [delayed]) == set()
    assert causal_pairs(blocked, [delayed, asks]) == {(50, 52)}
