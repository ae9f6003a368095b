"""Consolidation, per tenant: episodes → reusable semantic knowledge (L4).

1. **Extract** candidates from episodic memories: preferences, effective patterns, mistakes
   to avoid and project conventions, each with a confidence, its source ids and a scope
   (``user:<id>`` when every source has the same user, else ``tenant``). An LLM adapter
   answers :class:`KnowledgeBatch` JSON; the offline rules (:class:`OfflineKnowledge`) find
   them by cue words, one sentence at a time.
2. **Cluster** the candidates of the run: same kind, scope and stance, embedding similarity
   ≥ 0.85.
3. **Promote**: a preference becomes semantic only when it recurs across tasks (two or more
   task ids) or over time (mentions at least a day apart), or when it matches knowledge
   already in the store; a single mention stays episodic. Patterns, mistakes and
   conventions are promoted from one mention, with the lower confidence of one source.
4. **Dedupe** against the semantic store: similarity ≥ 0.85 with the same stance merges
   (confidence up by noisy-OR, new source ids appended; sources already counted change
   nothing, so a replay is harmless).
5. **Contradictions never overwrite.** When a candidate and a stored item share a topic
   (≥ half of their topic words) but take opposite stances (antonyms such as brief/detailed
   or a negation), and either states a condition ("for architecture questions", "when
   reviewing") that the other does not share, the candidate becomes conditional knowledge
   beside the old item; otherwise it is stored flagged ``needs_confirmation``. The stored
   item is never touched.

Pure: the embedder is a port, the clock an argument; the worker applies the plan.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pipelines.compress import ask_with_fallback, parse_json, split_speaker
from pipelines.ports import Embedder
from pipelines.records import ID_NAMESPACE, EpisodicMemory, MemoryType, SemanticMemory
from pipelines.summarize import split_sentences
from pipelines.text import NEGATIONS, STOPWORDS, fold, normalise_token, raw_tokens, words

MERGE_SIMILARITY = 0.85
TOPIC_OVERLAP = 0.5
# Two mentions this far apart count as a recurrence over time.
RECURRENCE_GAP = timedelta(days=1)
MAX_CONFIDENCE = 0.99
# How many nearest stored items are checked for a contradiction.
CONFLICT_NEIGHBOURS = 32


class KnowledgeKind(StrEnum):
    PREFERENCE = "preference"
    PATTERN = "pattern"
    MISTAKE = "mistake"
    CONVENTION = "convention"


class KnowledgeItem(BaseModel):
    """One piece of knowledge as an extractor states it: the LLM's JSON schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: KnowledgeKind
    statement: str = Field(min_length=3, max_length=1000)
    confidence: float = Field(ge=0.0, le=1.0)
    source_ids: list[uuid.UUID] = Field(min_length=1)
    conditions: str | None = Field(
        None, description="When the knowledge applies, e.g. 'for architecture questions'."
    )


class KnowledgeBatch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[KnowledgeItem]


def parse_knowledge(raw: str) -> KnowledgeBatch:
    """Validate an LLM's ``extract_knowledge`` JSON; raises MalformedLLMOutput."""
    return parse_json(raw, KnowledgeBatch)


@runtime_checkable
class KnowledgeExtractor(Protocol):
    """Stage 1 of consolidation; the lead adds ``extract_knowledge`` to the LLM port."""

    @property
    def name(self) -> str: ...

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch: ...


# -- offline extraction ----------------------------------------------------------------------

_CUES: tuple[tuple[KnowledgeKind, re.Pattern[str]], ...] = (
    (
        KnowledgeKind.MISTAKE,
        re.compile(
            r"\b(?:mistake|lesson\s+learned|never\s+again|(?:don't|do\s+not|never)\s+\w+\s+"
            r"again|should\s+(?:have|not\s+have|n't\s+have)|avoid(?:ed)?\s+\w+ing|broke|"
            r"caused\s+(?:a|an|the)?\s*(?:outage|incident|bug|regression|failure)|"
            r"was\s+(?:a\s+)?wrong|backfired|pitfall|gotcha)\b",
            re.I,
        ),
    ),
    (
        KnowledgeKind.PATTERN,
        re.compile(
            r"\b(?:worked\s+(?:well|great|better)|works\s+(?:well|better)|fixed\s+(?:it\s+)?by|"
            r"the\s+fix\s+(?:is|was)|solved\s+(?:it\s+)?by|what\s+helped|helped\s+(?:a\s+lot|"
            r"to)|the\s+trick\s+(?:is|was)|best\s+practice|effective|speeds?\s+up|sped\s+up)\b",
            re.I,
        ),
    ),
    (
        KnowledgeKind.CONVENTION,
        re.compile(
            r"\b(?:convention|naming|we\s+(?:always\s+)?use|our\s+(?:style|standard|rule)|"
            r"the\s+rule\s+is|in\s+this\s+(?:project|repo|codebase)|must\s+(?:always\s+)?use|"
            r"by\s+default\s+we|we\s+never|is\s+the\s+standard|code\s+style)\b",
            re.I,
        ),
    ),
    (
        KnowledgeKind.PREFERENCE,
        re.compile(
            r"\b(?:prefer(?:s|red|ence)?|i(?:'d|\s+would)\s+rather|i\s+(?:really\s+)?(?:like|"
            r"love|enjoy|hate|dislike)|(?:don't|do\s+not|never)\s+(?:like|want)|"
            r"can't\s+stand|(?:my|our)\s+fav(?:ou)?rite|please\s+(?:always|never|don't|do\s+not"
            r"|keep|use|avoid|be)|always\s+(?:use|want|keep|give)|i\s+want|i'd\s+like)\b",
            re.I,
        ),
    ),
)

_TYPE_KIND = {MemoryType.PREFERENCE: KnowledgeKind.PREFERENCE}
# A sentence needs this much left after its cue words to say something reusable.
_MIN_TOPIC_WORDS = 2


def extract_offline(memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
    """One candidate per sentence whose cue words name a kind (the first kind that matches)."""
    items: list[KnowledgeItem] = []
    for memory in memories:
        _, body = split_speaker(memory.content)
        for sentence in split_sentences(body):
            if sentence.rstrip().endswith("?"):
                continue
            kind = _kind_of(sentence, memory.type)
            if kind is None:
                continue
            if len(_substance(sentence)) < _MIN_TOPIC_WORDS:
                continue
            items.append(
                KnowledgeItem(
                    kind=kind,
                    statement=sentence.strip(),
                    confidence=0.6 if memory.type is None else 0.7,
                    source_ids=[memory.id],
                    conditions=conditions_of(sentence),
                )
            )
    return KnowledgeBatch(items=items)


def _substance(sentence: str) -> set[str]:
    """The words of a sentence beyond its cue words: "I love it." has none."""
    return {t for t in raw_tokens(sentence) if t not in STOPWORDS and t not in _CUE_WORDS}


def _kind_of(sentence: str, memory_type: MemoryType | None) -> KnowledgeKind | None:
    for kind, pattern in _CUES:
        if pattern.search(sentence):
            return kind
    if memory_type in _TYPE_KIND and len(sentence.split()) >= 4:
        return _TYPE_KIND[memory_type]
    return None


class OfflineKnowledge:
    @property
    def name(self) -> str:
        return "offline"

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
        return extract_offline(memories)


# -- stance, topic, conditions -----------------------------------------------------------

# Opposite ends of the axes knowledge most often disagrees on. Side 0 and side 1.
_AXES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "length": (
        words("brief short concise terse succinct minimal compact shorter"),
        words(
            "detailed long verbose thorough extensive elaborate comprehensive in-depth "
            "longer lengthy"
        ),
    ),
    "formality": (frozenset({"formal"}), frozenset({"casual", "informal"})),
    "indentation": (frozenset({"tabs", "tab"}), frozenset({"spaces", "space"})),
    "amount": (frozenset({"more"}), frozenset({"less", "fewer"})),
    "pace": (frozenset({"fast", "quick", "quickly"}), frozenset({"slow", "slowly", "careful"})),
    "timing": (frozenset({"sync", "synchronous"}), frozenset({"async", "asynchronous"})),
}
# Verbs of liking set the polarity of a statement rather than an axis of their own: "I hate
# long answers" and "I prefer brief answers" agree.
_LIKING = frozenset({"like", "love", "enjoy", "prefer", "prefers", "want", "use"})
_DISLIKING = frozenset({"dislike", "hate", "hates", "avoid", "stop"})
_STANCE_WORDS = frozenset().union(*(a | b for a, b in _AXES.values())) | _LIKING | _DISLIKING
_CUE_WORDS = words(
    """please prefer prefers preferred preference rather would i'd like love enjoy want
    favorite favourite always never use uses we our convention naming rule standard must
    should lesson learned mistake again avoid worked works well better fix fixed solved
    helped trick best practice effective"""
)
_CONDITION_RE = re.compile(
    r"\b(?:for|when|during|if|while)\s+((?:the\s+|a\s+|an\s+)?[\w'/-]+(?:\s+[\w'/-]+){0,4}?)"
    r"(?=\s*(?:[,.;!?]|$|\s+(?:and|but|or|so|because|unless|i|we|you|please)\b))",
    re.I,
)
_NOT_CONDITIONS = frozenset({"general", "now", "sure", "fact", "example", "short", "total"})


def conditions_of(statement: str) -> str | None:
    """The first 'for …' / 'when …' / 'in …' phrase that scopes the statement, if any."""
    for match in _CONDITION_RE.finditer(statement):
        phrase = " ".join(match.group(1).split())
        words = [w for w in raw_tokens(phrase) if w not in STOPWORDS]
        if words and not set(words) <= _NOT_CONDITIONS:
            return phrase
    return None


Stance = tuple[int, dict[str, int]]


def stance_of(statement: str) -> Stance:
    """(polarity, {axis: side}) of a statement, sides already flipped by the polarity.

    Polarity is -1 for a negation or a verb of disliking (both: +1 again), so "don't give
    me detailed answers", "I hate long answers" and "I prefer brief answers" all come out
    as ``length: brief``.
    """
    tokens = raw_tokens(statement)
    polarity = -1 if any(t in NEGATIONS for t in tokens) else 1
    if any(t in _DISLIKING for t in tokens):
        polarity = -polarity
    axes: dict[str, int] = {}
    for axis, (low, high) in _AXES.items():
        side = 0 if any(t in low for t in tokens) else (1 if any(t in high for t in tokens) else -1)
        if side >= 0:
            axes[axis] = side if polarity > 0 else 1 - side
    # With an axis the polarity is folded into the sides; it only matters without one.
    return (1 if axes else polarity), axes


def topic_of(statement: str, conditions: str | None) -> frozenset[str]:
    """Content words minus stance, cue and condition words: what the knowledge is about."""
    skip = set(raw_tokens(conditions)) if conditions else set()
    return frozenset(
        normalise_token(t)
        for t in raw_tokens(statement)
        if t not in STOPWORDS
        and t not in NEGATIONS
        and t not in _STANCE_WORDS
        and t not in _CUE_WORDS
        and t not in skip
    )


def opposed(a: Stance, b: Stance) -> bool:
    """Opposite ends of a shared axis; with no axis on either side, opposite polarities."""
    (polarity_a, axes_a), (polarity_b, axes_b) = a, b
    shared = set(axes_a) & set(axes_b)
    if shared:
        return any(axes_a[axis] != axes_b[axis] for axis in shared)
    if not axes_a and not axes_b:
        return polarity_a != polarity_b
    return False


def topic_overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


# -- the plan ----------------------------------------------------------------------------


class Candidate(BaseModel):
    """A knowledge item with what consolidation works out about it."""

    model_config = ConfigDict(frozen=True)

    kind: KnowledgeKind
    statement: str
    confidence: float
    source_ids: tuple[uuid.UUID, ...]
    task_ids: tuple[str, ...]
    first_seen: datetime
    last_seen: datetime
    scope: str
    user_id: str | None
    agent_id: str | None
    conditions: str | None
    polarity: int
    axes: dict[str, int]
    topic: frozenset[str]


class ChangeAction(StrEnum):
    CREATE = "create"
    MERGE = "merge"
    CONDITIONAL = "conditional"
    FLAG = "flag"


class KnowledgeChange(BaseModel):
    """One write to the semantic store; ``semantic`` is the row as it should be afterwards."""

    model_config = ConfigDict(frozen=True)

    action: ChangeAction
    kind: KnowledgeKind
    semantic: SemanticMemory
    status: str = "active"
    added_source_ids: tuple[uuid.UUID, ...] = ()
    conflicts_with: uuid.UUID | None = None
    reason: str


class EpisodicOnly(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: KnowledgeKind
    statement: str
    source_ids: tuple[uuid.UUID, ...]
    reason: str


class ConsolidationPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    tenant_id: str
    extracted_by: str
    memories_seen: int
    candidates: int
    changes: tuple[KnowledgeChange, ...]
    episodic_only: tuple[EpisodicOnly, ...]


class ConsolidationPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    merge_similarity: float = Field(MERGE_SIMILARITY, gt=0, le=1)
    topic_overlap: float = Field(TOPIC_OVERLAP, gt=0, le=1)
    recurrence_gap_s: float = Field(RECURRENCE_GAP.total_seconds(), ge=0)


DEFAULT_CONSOLIDATION = ConsolidationPolicy()


def semantic_id(tenant_id: str, scope: str, kind: KnowledgeKind, statement: str) -> uuid.UUID:
    key = " ".join(fold(statement).split())
    return uuid.uuid5(ID_NAMESPACE, f"semantic\x1f{tenant_id}\x1f{scope}\x1f{kind}\x1f{key}")


def _noisy_or(a: float, b: float) -> float:
    return min(MAX_CONFIDENCE, 1.0 - (1.0 - a) * (1.0 - b))


def _scope(
    kind: KnowledgeKind, memories: Sequence[EpisodicMemory]
) -> tuple[str, str | None, str | None]:
    """Preferences belong to their user; patterns, mistakes and conventions to the tenant."""
    users = {m.user_id for m in memories}
    agents = {m.agent_id for m in memories}
    user = next(iter(users)) if len(users) == 1 else None
    agent = next(iter(agents)) if len(agents) == 1 else None
    if kind is KnowledgeKind.PREFERENCE and user:
        return f"user:{user}", user, agent
    return "tenant", None, agent


def _candidates(
    batch: KnowledgeBatch, by_id: Mapping[uuid.UUID, EpisodicMemory]
) -> list[Candidate]:
    out: list[Candidate] = []
    for item in batch.items:
        sources = [by_id[i] for i in dict.fromkeys(item.source_ids) if i in by_id]
        if not sources:
            continue  # an extractor that cites memories it was not given is ignored
        scope, user, agent = _scope(item.kind, sources)
        polarity, axes = stance_of(item.statement)
        out.append(
            Candidate(
                kind=item.kind,
                statement=item.statement,
                confidence=item.confidence,
                source_ids=tuple(s.id for s in sources),
                task_ids=tuple(sorted({s.task_id for s in sources})),
                first_seen=min(s.timestamp for s in sources),
                last_seen=max(s.timestamp for s in sources),
                scope=scope,
                user_id=user,
                agent_id=agent,
                conditions=item.conditions or conditions_of(item.statement),
                polarity=polarity,
                axes=axes,
                topic=topic_of(item.statement, item.conditions),
            )
        )
    return out


def _unit(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        return matrix.reshape(len(vectors), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = matrix / norms
    return unit


class _Cluster:
    def __init__(self, first: Candidate, vector: np.ndarray) -> None:
        self.members = [first]
        self.vector = vector

    @property
    def head(self) -> Candidate:
        return self.members[0]

    def recurs(self, gap_s: float) -> bool:
        tasks = {t for m in self.members for t in m.task_ids}
        first = min(m.first_seen for m in self.members)
        last = max(m.last_seen for m in self.members)
        return len(tasks) >= 2 or (last - first).total_seconds() >= gap_s

    def sources(self) -> tuple[uuid.UUID, ...]:
        return tuple(dict.fromkeys(s for m in self.members for s in m.source_ids))

    def confidence(self) -> float:
        value = 0.0
        for member in self.members:
            value = _noisy_or(value, member.confidence * 0.8)
        return value


def _same_stance(a: Candidate, b: Candidate) -> bool:
    return not opposed((a.polarity, a.axes), (b.polarity, b.axes))


def consolidate(
    memories: Sequence[EpisodicMemory],
    existing: Sequence[SemanticMemory],
    embedder: Embedder,
    now: datetime,
    extractor: KnowledgeExtractor | None = None,
    *,
    existing_vectors: Mapping[uuid.UUID, Sequence[float]] | None = None,
    policy: ConsolidationPolicy = DEFAULT_CONSOLIDATION,
) -> ConsolidationPlan:
    """The plan of one tenant's consolidation run (see the module docstring)."""
    tenants = {m.tenant_id for m in memories} | {s.tenant_id for s in existing}
    if len(tenants) > 1:
        raise ValueError("consolidation runs per tenant; got " + ", ".join(sorted(tenants)))
    tenant = next(iter(tenants)) if tenants else ""
    engine: KnowledgeExtractor = extractor or OfflineKnowledge()
    offline = OfflineKnowledge()
    batch, extracted_by, _ = ask_with_fallback(
        lambda: engine.extract_knowledge(memories),
        lambda: offline.extract_knowledge(memories),
        engine.name,
    )
    by_id = {m.id: m for m in memories}
    candidates = sorted(_candidates(batch, by_id), key=lambda c: c.first_seen)
    if not candidates:
        return ConsolidationPlan(
            tenant_id=tenant,
            extracted_by=extracted_by,
            memories_seen=len(memories),
            candidates=0,
            changes=(),
            episodic_only=(),
        )
    vectors = _unit(embedder.embed([c.statement for c in candidates]))
    clusters = _cluster(candidates, vectors, policy)
    store = _Store(existing, embedder, existing_vectors)
    changes: list[KnowledgeChange] = []
    waiting: list[EpisodicOnly] = []
    for cluster in clusters:
        change = store.place(cluster, tenant, now, policy)
        if change is None:
            waiting.append(
                EpisodicOnly(
                    kind=cluster.head.kind,
                    statement=cluster.head.statement,
                    source_ids=cluster.sources(),
                    reason="a preference mentioned in one task at one time stays episodic "
                    "until it recurs",
                )
            )
        elif change.action is not ChangeAction.MERGE or change.added_source_ids:
            changes.append(change)
    return ConsolidationPlan(
        tenant_id=tenant,
        extracted_by=extracted_by,
        memories_seen=len(memories),
        candidates=len(candidates),
        changes=tuple(changes),
        episodic_only=tuple(waiting),
    )


def _cluster(
    candidates: Sequence[Candidate], vectors: np.ndarray, policy: ConsolidationPolicy
) -> list[_Cluster]:
    clusters: list[_Cluster] = []
    keys: list[tuple[KnowledgeKind, str]] = []
    heads = np.zeros((0, vectors.shape[1]), dtype=np.float32)
    for candidate, vector in zip(candidates, vectors, strict=True):
        key = (candidate.kind, candidate.scope)
        joined = False
        if len(clusters):
            scores = heads @ vector
            for index in np.argsort(-scores):
                if scores[index] < policy.merge_similarity:
                    break
                cluster = clusters[int(index)]
                if keys[int(index)] == key and _same_stance(cluster.head, candidate):
                    cluster.members.append(candidate)
                    joined = True
                    break
        if not joined:
            clusters.append(_Cluster(candidate, vector))
            keys.append(key)
            heads = np.vstack([heads, vector[None, :]])
    return clusters


class _Store:
    """The tenant's semantic memories as this run sees and changes them."""

    def __init__(
        self,
        existing: Sequence[SemanticMemory],
        embedder: Embedder,
        vectors: Mapping[uuid.UUID, Sequence[float]] | None,
    ) -> None:
        self.rows: list[SemanticMemory] = list(existing)
        missing = [r for r in self.rows if not vectors or r.id not in vectors]
        computed = dict(
            zip(
                (r.id for r in missing),
                embedder.embed([r.content for r in missing]) if missing else [],
                strict=True,
            )
        )
        given = dict(vectors or {})
        self.matrix = (
            _unit([given.get(r.id) or computed[r.id] for r in self.rows])
            if self.rows
            else np.zeros((0, embedder.dim), dtype=np.float32)
        )
        self.stances = [stance_of(r.content) for r in self.rows]
        self.topics = [topic_of(r.content, r.conditions) for r in self.rows]

    def _add(self, row: SemanticMemory, vector: np.ndarray) -> None:
        self.rows.append(row)
        self.matrix = np.vstack([self.matrix, vector[None, :]])
        self.stances.append(stance_of(row.content))
        self.topics.append(topic_of(row.content, row.conditions))

    def _replace(self, index: int, row: SemanticMemory) -> None:
        self.rows[index] = row

    def place(
        self, cluster: _Cluster, tenant: str, now: datetime, policy: ConsolidationPolicy
    ) -> KnowledgeChange | None:
        head = cluster.head
        vector = cluster.vector
        scores = self.matrix @ vector if len(self.rows) else np.zeros(0, dtype=np.float32)
        stance = (head.polarity, head.axes)
        order = np.argsort(-scores)
        # 1. a contradiction with anything in scope is settled first and never overwrites;
        # contradicting statements share their topic words, so they are among the nearest.
        for index in order[:CONFLICT_NEIGHBOURS]:
            row = self.rows[int(index)]
            if row.scope != head.scope and row.scope != "tenant":
                continue
            if topic_overlap(self.topics[int(index)], head.topic) < policy.topic_overlap:
                continue
            if opposed(self.stances[int(index)], stance):
                return self._contradiction(cluster, row, tenant, vector, now)
        # 2. the same knowledge already stored: merge
        for index in order:
            if scores[index] < policy.merge_similarity:
                break
            row = self.rows[int(index)]
            if row.scope == head.scope:
                return self._merge(int(index), row, cluster, now)
        # 3. new knowledge; a preference needs to recur first
        if head.kind is KnowledgeKind.PREFERENCE and not cluster.recurs(policy.recurrence_gap_s):
            return None
        row = self._new_row(cluster, tenant, now, conditions=head.conditions)
        self._add(row, vector)
        return KnowledgeChange(
            action=ChangeAction.CREATE,
            kind=head.kind,
            semantic=row,
            added_source_ids=row.source_memory_ids,
            reason=f"{len(cluster.members)} mention(s) across {len(_tasks(cluster))} task(s)",
        )

    def _new_row(
        self, cluster: _Cluster, tenant: str, now: datetime, *, conditions: str | None
    ) -> SemanticMemory:
        head = cluster.head
        return SemanticMemory(
            id=semantic_id(tenant, head.scope, head.kind, head.statement),
            tenant_id=tenant,
            user_id=head.user_id,
            agent_id=head.agent_id,
            content=head.statement,
            confidence=round(cluster.confidence(), 4),
            source_memory_ids=cluster.sources(),
            scope=head.scope,
            conditions=conditions,
            created_at=now,
            updated_at=now,
        )

    def _merge(
        self, index: int, row: SemanticMemory, cluster: _Cluster, now: datetime
    ) -> KnowledgeChange:
        known = set(row.source_memory_ids)
        added = tuple(s for s in cluster.sources() if s not in known)
        confidence = row.confidence
        for member in cluster.members:
            if any(s not in known for s in member.source_ids):
                confidence = _noisy_or(confidence, member.confidence * 0.8)
        merged = row.model_copy(
            update={
                "confidence": round(confidence, 4),
                "source_memory_ids": row.source_memory_ids + added,
                "updated_at": now if added else row.updated_at,
            }
        )
        self._replace(index, merged)
        return KnowledgeChange(
            action=ChangeAction.MERGE,
            kind=cluster.head.kind,
            semantic=merged,
            added_source_ids=added,
            reason=f"similar to {row.id}; {len(added)} new source(s)",
        )

    def _contradiction(
        self,
        cluster: _Cluster,
        row: SemanticMemory,
        tenant: str,
        vector: np.ndarray,
        now: datetime,
    ) -> KnowledgeChange:
        head = cluster.head
        new_conditions = head.conditions
        old_conditions = row.conditions or conditions_of(row.content)
        conditional = (new_conditions or old_conditions) and fold(new_conditions or "") != fold(
            old_conditions or ""
        )
        created = self._new_row(cluster, tenant, now, conditions=new_conditions)
        existing_ids = {r.id for r in self.rows}
        if created.id in existing_ids:
            # already recorded by an earlier run: a replay changes nothing new
            index = [r.id for r in self.rows].index(created.id)
            return self._merge(index, self.rows[index], cluster, now)
        self._add(created, vector)
        if conditional:
            return KnowledgeChange(
                action=ChangeAction.CONDITIONAL,
                kind=head.kind,
                semantic=created,
                added_source_ids=created.source_memory_ids,
                conflicts_with=row.id,
                reason=(
                    f"opposes {row.id} ({old_conditions or 'no condition'}); holds "
                    f"{new_conditions or 'otherwise'}"
                ),
            )
        return KnowledgeChange(
            action=ChangeAction.FLAG,
            kind=head.kind,
            semantic=created,
            status="needs_confirmation",
            added_source_ids=created.source_memory_ids,
            conflicts_with=row.id,
            reason=f"contradicts {row.id} with no condition to tell them apart",
        )


def _tasks(cluster: _Cluster) -> set[str]:
    return {t for m in cluster.members for t in m.task_ids}


def render_conditional(rows: Iterable[SemanticMemory]) -> str:
    """Conditional knowledge in one line: 'detailed for architecture; brief for status'."""
    parts = []
    for row in rows:
        text = row.content.rstrip(".")
        if row.conditions and fold(row.conditions) not in fold(text):
            text = f"{text} ({row.conditions})"
        parts.append(text)
    return "; ".join(parts)
