"""Links between memories, made on write, and the multi-hop traversal over them.

Three kinds, as the ``memory_links`` table stores them:

* ``entity``: the new memory and an older one name a shared entity (a person, a path, a
  ticket, ``the auth module``); weight is the Jaccard overlap of their entity sets.
  Undirected.
* ``similar``: the vector index scored the pair ≥ 0.75 and both belong to the same task;
  weight is the score. Undirected.
* ``causal``: proposed by the LLM port with a direction (``src`` causes or affects
  ``dst``); weight is the proposer's confidence (:mod:`pipelines.cognition.causal`). The
  offline proposer reads cue phrases:
  "blocked by X", "because of X", "due to X", "caused by X", "waiting on X" make the memory
  naming X the cause; "X delays / blocks / breaks / affects Y" makes the memory naming Y
  the effect.

Chinese text is read with the same three rules: its identifiers name people (张工), modules
(支付模块) and ids; a noun phrase is a head (联调, 迁移, 审计 ...) with the module or the two
characters before it (支付模块联调, 账单迁移); the causal cues are 因为 / 由于 / 依赖 / 等待 /
受…影响 / …所以 (the memory naming X is the cause) and 会影响 / 影响到 / 导致 / 推迟 / 延期 /
阻塞 (the memory naming Y is the effect). A Chinese phrase names many memories in part (every
memory about 支付模块), so it links only to those that match it best. A question in Chinese
(认证模块延期会影响哪些模块？) is read without its question words.

An undirected link is stored once, from the new memory to the old one; traversal reads it
both ways. :func:`traverse` walks hop by hop (one store query per hop, so a database can
answer each hop with one indexed query); :func:`affected_by` answers "what does the delay of
the auth module affect?": the memories that best match the question's entities are the
start, then causal links are followed downstream.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.answers import ask_with_fallback
from pipelines.cognition.causal import (
    CausalBatch,
    CausalProposer,
    OfflineCausal,
    entities_of,
    propose_causal_offline,
    tokens_of,
)
from pipelines.cognition.entities import extract_entities
from pipelines.records import EpisodicMemory
from pipelines.text.words import (
    content_tokens,
    has_han,
    normalise_token,
    raw_tokens,
)

SIMILAR_MIN_SCORE = 0.75
MAX_ENTITY_LINKS = 20
MAX_HOPS = 3


class LinkKind(StrEnum):
    ENTITY = "entity"
    SIMILAR = "similar"
    CAUSAL = "causal"


DIRECTED: frozenset[LinkKind] = frozenset({LinkKind.CAUSAL})


class MemoryLink(BaseModel):
    """A row of ``memory_links``: for a causal link, ``src`` is the cause."""

    model_config = ConfigDict(frozen=True)

    src_id: uuid.UUID
    dst_id: uuid.UUID
    kind: LinkKind
    weight: float = Field(ge=0.0, le=1.0)
    reason: str = ""


class Neighbour(BaseModel):
    """An existing memory the write path found near a new one (vector hit or entity match)."""

    model_config = ConfigDict(frozen=True)

    memory: EpisodicMemory
    score: float | None = None


def entity_links(
    memory: EpisodicMemory,
    others: Sequence[EpisodicMemory],
    *,
    entities: Mapping[uuid.UUID, frozenset[str]] | None = None,
    limit: int = MAX_ENTITY_LINKS,
) -> list[MemoryLink]:
    """Links to memories that share an entity, the largest overlap first."""
    cache = dict(entities or {})
    mine = cache.get(memory.id) or extract_entities(memory.content)
    if not mine:
        return []
    scored: list[tuple[float, str, MemoryLink]] = []
    for other in others:
        if other.id == memory.id or other.tenant_id != memory.tenant_id:
            continue
        theirs = cache.get(other.id)
        if theirs is None:
            theirs = extract_entities(other.content)
        shared = mine & theirs
        if not shared:
            continue
        weight = len(shared) / len(mine | theirs)
        link = MemoryLink(
            src_id=memory.id,
            dst_id=other.id,
            kind=LinkKind.ENTITY,
            weight=round(weight, 4),
            reason="shares " + ", ".join(sorted(shared)[:5]),
        )
        scored.append((-weight, str(other.id), link))
    return [link for _, _, link in sorted(scored)[:limit]]


def similar_links(
    memory: EpisodicMemory,
    hits: Sequence[Neighbour],
    *,
    min_score: float = SIMILAR_MIN_SCORE,
) -> list[MemoryLink]:
    """Links to vector neighbours of the same task scoring at least ``min_score``."""
    links: list[MemoryLink] = []
    for hit in hits:
        other = hit.memory
        if (
            hit.score is None
            or hit.score < min_score
            or other.id == memory.id
            or other.task_id != memory.task_id
            or other.tenant_id != memory.tenant_id
        ):
            continue
        links.append(
            MemoryLink(
                src_id=memory.id,
                dst_id=other.id,
                kind=LinkKind.SIMILAR,
                weight=round(min(1.0, hit.score), 4),
                reason=f"score {hit.score:.3f}, same task",
            )
        )
    return links


def causal_links(
    memory: EpisodicMemory, candidates: Sequence[EpisodicMemory], batch: CausalBatch
) -> list[MemoryLink]:
    """The proposer's edges that touch ``memory`` and a known candidate, as links."""
    known = {c.id for c in candidates if c.tenant_id == memory.tenant_id} - {memory.id}
    links: dict[tuple[uuid.UUID, uuid.UUID], MemoryLink] = {}
    for edge in batch.edges:
        pair = {edge.cause_id, edge.effect_id}
        if memory.id not in pair or not (pair - {memory.id}) <= known or len(pair) != 2:
            continue  # an edge about other memories, or an invented id, is ignored
        key = (edge.cause_id, edge.effect_id)
        if key in links and links[key].weight >= edge.confidence:
            continue
        links[key] = MemoryLink(
            src_id=edge.cause_id,
            dst_id=edge.effect_id,
            kind=LinkKind.CAUSAL,
            weight=edge.confidence,
            reason=edge.reason,
        )
    return list(links.values())


def link_on_write(
    memory: EpisodicMemory,
    *,
    entity_candidates: Sequence[EpisodicMemory],
    vector_hits: Sequence[Neighbour],
    causal: CausalProposer | None = None,
    min_similarity: float = SIMILAR_MIN_SCORE,
) -> list[MemoryLink]:
    """Every link a new memory gets: entities, close neighbours of its task, causes/effects."""
    links = entity_links(memory, entity_candidates)
    links += similar_links(memory, vector_hits, min_score=min_similarity)
    pool = {c.id: c for c in entity_candidates}
    pool.update({h.memory.id: h.memory for h in vector_hits})
    candidates = [c for c in pool.values() if c.id != memory.id]
    if candidates:
        proposer: CausalProposer = causal or OfflineCausal()
        batch, _, _ = ask_with_fallback(
            lambda: proposer.propose_causal(memory, candidates),
            lambda: propose_causal_offline(memory, candidates),
            proposer.name,
        )
        links += causal_links(memory, candidates, batch)
    unique: dict[tuple[uuid.UUID, uuid.UUID, LinkKind], MemoryLink] = {}
    for link in links:
        unique.setdefault((link.src_id, link.dst_id, link.kind), link)
    return list(unique.values())


@runtime_checkable
class LinkStore(Protocol):
    """Read side of ``memory_links``: every link with ``src`` or ``dst`` in ``ids``."""

    def links_touching(self, ids: Sequence[uuid.UUID]) -> Sequence[MemoryLink]: ...


class InMemoryLinks:
    """A LinkStore over a list of links, for tests, benches and the embedded node."""

    def __init__(self, links: Iterable[MemoryLink] = ()) -> None:
        self._by_node: dict[uuid.UUID, list[MemoryLink]] = {}
        self._seen: set[tuple[uuid.UUID, uuid.UUID, LinkKind]] = set()
        self.add(links)

    def add(self, links: Iterable[MemoryLink]) -> None:
        for link in links:
            key = (link.src_id, link.dst_id, link.kind)
            if key in self._seen:
                continue
            self._seen.add(key)
            self._by_node.setdefault(link.src_id, []).append(link)
            if link.dst_id != link.src_id:
                self._by_node.setdefault(link.dst_id, []).append(link)

    def links_touching(self, ids: Sequence[uuid.UUID]) -> list[MemoryLink]:
        out: dict[tuple[uuid.UUID, uuid.UUID, LinkKind], MemoryLink] = {}
        for node in ids:
            for link in self._by_node.get(node, []):
                out[(link.src_id, link.dst_id, link.kind)] = link
        return list(out.values())


class Direction(StrEnum):
    DOWNSTREAM = "downstream"  # cause → effect: what does this affect?
    UPSTREAM = "upstream"  # effect → cause: what caused this?
    BOTH = "both"


class Reached(BaseModel):
    """A memory reached by a traversal, by its best path."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    hops: int
    score: float
    path: tuple[uuid.UUID, ...]
    via: tuple[LinkKind, ...]


def _steps(link: MemoryLink, node: uuid.UUID, direction: Direction) -> list[uuid.UUID]:
    if link.kind not in DIRECTED or direction is Direction.BOTH:
        if link.src_id == node:
            return [link.dst_id]
        return [link.src_id] if link.dst_id == node else []
    if direction is Direction.DOWNSTREAM and link.src_id == node:
        return [link.dst_id]
    if direction is Direction.UPSTREAM and link.dst_id == node:
        return [link.src_id]
    return []


def traverse(
    start: Sequence[uuid.UUID],
    store: LinkStore,
    *,
    direction: Direction = Direction.DOWNSTREAM,
    kinds: frozenset[LinkKind] = frozenset(LinkKind),
    max_hops: int = MAX_HOPS,
    min_weight: float = 0.0,
    limit: int = 100,
) -> list[Reached]:
    """Breadth-first from ``start``; a path's score is the product of its link weights.

    Each memory is reported once, by its best-scoring path among the shortest ones found;
    the start memories themselves are not reported.
    """
    if max_hops < 1:
        return []
    best: dict[uuid.UUID, Reached] = {
        node: Reached(memory_id=node, hops=0, score=1.0, path=(node,), via=()) for node in start
    }
    frontier = list(dict.fromkeys(start))
    for hop in range(1, max_hops + 1):
        if not frontier:
            break
        links = store.links_touching(frontier)
        current = set(frontier)
        reached_now: dict[uuid.UUID, Reached] = {}
        for link in links:
            if link.kind not in kinds or link.weight < min_weight:
                continue
            for node in (link.src_id, link.dst_id):
                if node not in current:
                    continue
                origin = best[node]
                for target in _steps(link, node, direction):
                    if target in best:
                        continue
                    candidate = Reached(
                        memory_id=target,
                        hops=hop,
                        score=origin.score * link.weight,
                        path=(*origin.path, target),
                        via=(*origin.via, link.kind),
                    )
                    known = reached_now.get(target)
                    if known is None or candidate.score > known.score:
                        reached_now[target] = candidate
        best.update(reached_now)
        frontier = sorted(reached_now, key=lambda n: -reached_now[n].score)
    starts = set(start)
    found = [r for r in best.values() if r.memory_id not in starts]
    return sorted(found, key=lambda r: (r.hops, -r.score, str(r.memory_id)))[:limit]


def match_start(
    query: str, memories: Sequence[EpisodicMemory], *, limit: int = 3
) -> list[EpisodicMemory]:
    """The memories a question is about: most shared entities, then most shared words, then
    the most recent (ties never fall to the ids, which differ between tenants holding the
    same history)."""
    if has_han(query):
        query = _QUESTION_ZH_RE.sub(" ", query)
    entities = extract_entities(query)
    words = {t for t in content_tokens(query) if t not in _QUESTION_WORDS}
    scored: list[tuple[int, int, float, str, EpisodicMemory]] = []
    for memory in memories:
        shared_entities = len(entities & entities_of(memory.content))
        shared_words = len(words & tokens_of(memory.content))
        if shared_entities or shared_words >= 2:
            key = (-shared_entities, -shared_words, -memory.timestamp.timestamp(), memory.content)
            scored.append((*key, memory))
    return [item[-1] for item in sorted(scored, key=lambda item: item[:4])[:limit]]


_QUESTION_WORDS = frozenset(
    normalise_token(w) for w in raw_tokens("affect affects affected impact impacts what which")
)
# What a Chinese question asks with rather than about: "会影响哪些模块" asks what is
# affected; the subject before it (认证模块延期) is what the memories must share.
_QUESTION_ZH_RE = re.compile(
    r"会不会|会影响|影响到|影响了|影响|波及|牵连|涉及|拖累|有哪些|哪些|哪个|什么|是否|吗|呢|[？?]"
)


def affected_by(
    query: str,
    memories: Sequence[EpisodicMemory],
    store: LinkStore,
    *,
    max_hops: int = MAX_HOPS,
    start_limit: int = 3,
) -> tuple[list[EpisodicMemory], list[Reached]]:
    """ "What does X affect?": the memories about X, and what their causal links lead to.

    Of the memories matching the question, those that another match already leads to are
    effects, not starts ("the release is blocked by the auth delay" names the auth delay too).
    """
    matched = match_start(query, memories, limit=start_limit)
    causal = frozenset({LinkKind.CAUSAL})
    downstream = {
        m.id: {r.memory_id for r in traverse([m.id], store, kinds=causal, max_hops=max_hops)}
        for m in matched
    }
    roots = [
        m for m in matched if not any(m.id in downstream[o.id] for o in matched if o.id != m.id)
    ] or matched
    reached = traverse(
        [m.id for m in roots],
        store,
        direction=Direction.DOWNSTREAM,
        kinds=causal,
        max_hops=max_hops,
    )
    return roots, reached
