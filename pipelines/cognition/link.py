"""Links between memories, made on write, and the multi-hop traversal over them.

Three kinds, as the ``memory_links`` table stores them:

* ``entity``: the new memory and an older one name a shared entity (a person, a path, a
  ticket, ``the auth module``); weight is the Jaccard overlap of their entity sets.
  Undirected.
* ``similar``: the vector index scored the pair ≥ 0.75 and both belong to the same task;
  weight is the score. Undirected.
* ``causal``: proposed by the LLM port with a direction (``src`` causes or affects
  ``dst``); weight is the proposer's confidence. The offline proposer reads cue phrases:
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

from pipelines.answers import ask_with_fallback, parse_json
from pipelines.cognition.entities import extract_entities
from pipelines.cognition.protocol import compact
from pipelines.records import EpisodicMemory
from pipelines.text.sentences import split_speaker
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


class CausalEdge(BaseModel):
    """One proposed causal relation: the LLM's JSON schema for ``propose_causal``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cause_id: uuid.UUID
    effect_id: uuid.UUID
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field("", max_length=300)


class CausalBatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    edges: list[CausalEdge]


def parse_causal(raw: str) -> CausalBatch:
    """Validate an LLM's ``propose_causal`` JSON; raises MalformedLLMOutput."""
    return parse_json(raw, CausalBatch)


@runtime_checkable
class CausalProposer(Protocol):
    """What causal linking asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch: ...


_PHRASE = r"((?:the\s+)?[\w'/.#-]+(?:\s+[\w'/.#-]+){0,5})"
# The new memory is the effect of what the phrase names.
_EFFECT_OF_RE = re.compile(
    rf"\b(?:blocked\s+(?:by|on)|because\s+of|due\s+to|caused\s+by|waiting\s+(?:on|for)|"
    rf"as\s+a\s+result\s+of|depends\s+on|delayed\s+by|held\s+up\s+by|after)\s+{_PHRASE}",
    re.I,
)
# The new memory is the cause of what the phrase names.
_CAUSE_OF_RE = re.compile(
    rf"\b(?:delays?|delayed|block(?:s|ed)?|breaks?|broke|affects?|affected|pushes\s+back|"
    rf"pushed\s+back|impacts?|impacted|postpones?|postponed|slows?\s+down)"
    rf"(?!\s+(?:by|on)\b)\s+{_PHRASE}",  # "blocked by X" is the passive: X is the cause
    re.I,
)
_PHRASE_END_RE = re.compile(r"[,.;:!?]|\s(?:and|but|so|which|because|until|by)\s", re.I)

# The same in Chinese: X, a run up to a clause mark or a word that ends it (而推迟, 才能).
_PHRASE_ZH = r"([^，。；：！？,;:!?\n]{2,30}?)(?=[，。；：！？,;:!?\n]|而|才|所以|的影响|影响|$)"
_EFFECT_OF_ZH_RE = re.compile(
    rf"(?:因为|由于|受到?|依赖于?|取决于|等待|等着|要等|被|卡在|基于){_PHRASE_ZH}"
)
_CAUSE_OF_ZH_RE = re.compile(
    r"(?:会影响|影响到|影响了|影响|波及|导致了?|造成了?|使得|拖累了?|耽误了?|阻塞了?|拖慢了?|"
    rf"(?:推迟|延期|延误)了?(?![到至为成]))\s*{_PHRASE_ZH}"
)
# "X，所以 Y": the memory saying it is the effect of X, the clause before the connective.
_CONSEQUENCE_ZH_RE = re.compile(r"([^，。；！？,;!?\n]{2,30})[，,]?\s*(?:所以|因此|因而|于是)")


def _phrase_keys(phrase: str) -> tuple[frozenset[str], frozenset[str]]:
    cut = _PHRASE_END_RE.search(phrase)
    phrase = phrase[: cut.start()] if cut else phrase
    return extract_entities(phrase), frozenset(content_tokens(phrase))


def _matches(phrase: tuple[frozenset[str], frozenset[str]], other: EpisodicMemory) -> float:
    entities, tokens = phrase
    other_entities = extract_entities(other.content)
    if entities and entities & other_entities:
        return 0.8
    if tokens:
        other_tokens = set(content_tokens(other.content))
        overlap = len(tokens & other_tokens) / len(tokens)
        if overlap >= 0.5 and len(tokens & other_tokens) >= 2:
            return 0.6
    return 0.0


def _best_matches(
    phrase: tuple[frozenset[str], frozenset[str]], others: Sequence[EpisodicMemory]
) -> list[tuple[EpisodicMemory, float]]:
    """The candidates a Chinese phrase names best, most shared entities then most shared
    words first. As :func:`_matches`, with one more demand: an entity match must be on the
    phrase's most specific entities (支付模块联调, not the 支付模块 inside it), since most
    memories of a project name its modules."""
    entities, tokens = phrase
    specific = {e for e in entities if not any(e != o and e in o for o in entities)}
    scored: list[tuple[tuple[int, int], EpisodicMemory, float]] = []
    for other in others:
        other_entities = extract_entities(other.content)
        other_tokens = set(content_tokens(other.content))
        shared = (len(entities & other_entities), len(tokens & other_tokens))
        if specific & other_entities:
            confidence = 0.8
        elif tokens and shared[1] >= 2 and shared[1] >= 0.5 * len(tokens):
            confidence = 0.6
        else:
            continue
        scored.append((shared, other, confidence))
    if not scored:
        return []
    best = max(shared for shared, _, _ in scored)
    return [(other, confidence) for shared, other, confidence in scored if shared == best]


def propose_causal_offline(
    memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
) -> CausalBatch:
    """Causal edges between ``memory`` and ``candidates`` from cue phrases (module docstring)."""
    edges: dict[tuple[uuid.UUID, uuid.UUID], CausalEdge] = {}
    _, body = split_speaker(memory.content)
    others = [c for c in candidates if c.id != memory.id and c.tenant_id == memory.tenant_id]

    def add(other: EpisodicMemory, confidence: float, memory_is_cause: bool, cue: str) -> None:
        cause, effect = (memory.id, other.id) if memory_is_cause else (other.id, memory.id)
        key = (cause, effect)
        if key not in edges or edges[key].confidence < confidence:
            edges[key] = CausalEdge(
                cause_id=cause,
                effect_id=effect,
                confidence=confidence,
                reason=f"offline cue {cue[:80]!r}",
            )

    for pattern, memory_is_cause in ((_EFFECT_OF_RE, False), (_CAUSE_OF_RE, True)):
        for match in pattern.finditer(body):
            phrase = _phrase_keys(match.group(1))
            for other in others:
                confidence = _matches(phrase, other)
                if confidence > 0:
                    add(other, confidence, memory_is_cause, match.group(0))
    if has_han(body):
        for pattern, memory_is_cause in (
            (_EFFECT_OF_ZH_RE, False),
            (_CONSEQUENCE_ZH_RE, False),
            (_CAUSE_OF_ZH_RE, True),
        ):
            for match in pattern.finditer(body):
                phrase = _phrase_keys(match.group(1))
                # A memory that says the same cue (因为…) again restates this one: no cause.
                fresh = [o for o in others if compact(match.group(0)) not in compact(o.content)]
                for other, confidence in _best_matches(phrase, fresh):
                    add(other, confidence, memory_is_cause, match.group(0))
    return CausalBatch(edges=list(edges.values()))


class OfflineCausal:
    @property
    def name(self) -> str:
        return "offline"

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch:
        return propose_causal_offline(memory, candidates)


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
    """The memories a question is about: most shared entities, then most shared words."""
    if has_han(query):
        query = _QUESTION_ZH_RE.sub(" ", query)
    entities = extract_entities(query)
    words = {t for t in content_tokens(query) if t not in _QUESTION_WORDS}
    scored: list[tuple[int, int, str, EpisodicMemory]] = []
    for memory in memories:
        shared_entities = len(entities & extract_entities(memory.content))
        shared_words = len(words & set(content_tokens(memory.content)))
        if shared_entities or shared_words >= 2:
            scored.append((-shared_entities, -shared_words, str(memory.id), memory))
    return [m for _, _, _, m in sorted(scored)[:limit]]


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
