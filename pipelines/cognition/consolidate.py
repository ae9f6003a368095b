"""Consolidation, per tenant: episodes → reusable semantic knowledge (L4).

1. **Extract** candidates from episodic memories: preferences, effective patterns, mistakes
   to avoid, project conventions, owners and the stack, each with a confidence, its source
   ids and a scope (``user:<id>`` for a preference when every source has the same user, else
   ``tenant``). An LLM adapter answers :class:`KnowledgeBatch` JSON; the offline rules
   (:class:`OfflineKnowledge`) find them by cue words, one sentence at a time, and never in
   summaries, reports, chatter, questions or hypotheticals.
2. **Cluster** the candidates of the run: same kind, scope and stance, and either embedding
   similarity ≥ 0.85 or a restatement in other words (:func:`restates`: more than half of the
   smaller topic shared and at least two words, or the same side of a stance axis and a
   shared topic word), so that a wish said on three days in three wordings is one item whose
   sources hold every mention. Owners and stacks join only when they name the same people
   and technologies (:func:`value_words`): "billing is now owned by Omar" is not "Dana owns
   billing" said again.
3. **Promote**: a preference becomes semantic only when it recurs across tasks (two or more
   task ids) or over time (mentions at least a day apart), or when it matches knowledge
   already in the store; a single mention stays episodic. Patterns, mistakes, conventions,
   owners and stacks are promoted from one mention, with the lower confidence of one source.
4. **Dedupe** against the semantic store: similarity ≥ 0.85 with the same stance (and for
   owners and stacks the same names) merges (confidence up by noisy-OR, new source ids
   appended; sources already counted change nothing, so a replay is harmless).
5. **Contradictions never overwrite.** When a candidate and a stored item share a topic
   (≥ half of their topic words) but take opposite stances (antonyms such as brief/detailed
   or a negation), and either states a condition ("for architecture questions", "when
   reviewing") that the other does not share, the candidate becomes conditional knowledge
   beside the old item; otherwise it is stored flagged ``needs_confirmation``. The stored
   item is never touched.

Chinese goes through the same steps: the extractor's Chinese cues, the embedder's similarity
(the hashing embedder hashes Han text as character bigrams, so restated Chinese knowledge
scores as restated English does), and the Chinese stance, topic and conditions of
:mod:`pipelines.cognition.stance` (遇到架构问题时 is a condition, 简洁 and 详细 opposite ends).

Pure: the embedder is a port, the clock an argument; the worker applies the plan.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pipelines.answers import ask_with_fallback
from pipelines.cognition.knowledge import (
    KnowledgeBatch,
    KnowledgeExtractor,
    KnowledgeKind,
    OfflineKnowledge,
    knowledge_sources,
)
from pipelines.cognition.stance import (
    conditions_of,
    opposed,
    stance_by_clause,
    topic_of,
    topic_overlap,
)
from pipelines.index.vectors import Embedder
from pipelines.records import ID_NAMESPACE, EpisodicMemory, SemanticMemory
from pipelines.text.identifiers import PERSON_RE
from pipelines.text.words import STOPWORDS, fold

MERGE_SIMILARITY = 0.85
TOPIC_OVERLAP = 0.5
# A restatement in other words rarely reaches MERGE_SIMILARITY with a lexical embedder
# ("Please don't use emojis in commit messages" / "I really dislike emojis in commits" score
# ~0.5 with the hashing embedder), so candidates of the same kind, scope and stance also join
# on their topic words (``restates``): when they share more than half of the smaller topic and
# at least two words (2 of 3 and 3 of 4 join; "commit messages in English" / "code comments
# in English", 2 of 4, are two wishes and do not), or when they take the same side of the
# same stance axis (brief, formal, tabs) and share a topic word ("short answers with bullet
# points" / "keep your replies brief, a few bullets").
RESTATEMENT_OVERLAP = 0.6
RESTATEMENT_SHARED_WORDS = 2
# Two mentions this far apart count as a recurrence over time.
RECURRENCE_GAP = timedelta(days=1)
MAX_CONFIDENCE = 0.99
# How many nearest stored items are checked for a contradiction.
CONFLICT_NEIGHBOURS = 32


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
    restatement_overlap: float = Field(RESTATEMENT_OVERLAP, gt=0, le=1)
    restatement_shared_words: int = Field(RESTATEMENT_SHARED_WORDS, ge=1)
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
        polarity, axes = stance_by_clause(item.statement)
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


# Owners and stacks are the same knowledge only when they name the same people and
# technologies: "Dana owns billing" and "billing is now owned by Omar" share every topic word
# but one, and that word is the knowledge.
_VALUE_KINDS = frozenset({KnowledgeKind.OWNER, KnowledgeKind.STACK})
_NAME_RE = re.compile(r"\b[A-Z](?:[\w.+#-]*[\w+#])?")


def value_words(statement: str) -> frozenset[str]:
    """The names a statement gives: capitalised Latin words (Dana, PostgreSQL, K8s) and the
    Chinese people of ``PERSON_RE`` (小王, 张工); a stopword that opens a sentence is none."""
    names = {fold(m.group()) for m in _NAME_RE.finditer(statement)}
    names = {n for n in names if n not in STOPWORDS}
    names |= {m.group() for m in PERSON_RE.finditer(statement)}
    return frozenset(names)


def same_value(kind: KnowledgeKind, a: str, b: str) -> bool:
    """Whether two statements of ``kind`` may be one item: always, except owners and stacks
    that name different people or technologies."""
    return kind not in _VALUE_KINDS or value_words(a) == value_words(b)


def restates(a: Candidate, b: Candidate, policy: ConsolidationPolicy) -> bool:
    """The explicit join of restatements (see ``RESTATEMENT_SHARED_WORDS``): the same kind,
    scope, stance and conditions, and the same topic, or the same side of a stance axis and a
    topic word in common. Owners and stacks never join this way: the statement that reassigns
    an owner or replaces a technology shares every topic word but the name that matters."""
    if (a.kind, a.scope) != (b.kind, b.scope) or a.kind in _VALUE_KINDS:
        return False
    if not _same_stance(a, b) or fold(a.conditions or "") != fold(b.conditions or ""):
        return False  # a wish for some situations is not the same wish said again
    shared = a.topic & b.topic
    if not shared:
        return False
    if a.axes and a.axes == b.axes:
        return True
    return (
        len(shared) >= policy.restatement_shared_words
        and topic_overlap(a.topic, b.topic) >= policy.restatement_overlap
    )


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
    # A model sees only what the rules may read: no summary, report or chatter is a source,
    # and a model that cites one is ignored like any memory it was not given.
    readable = knowledge_sources(memories)
    if readable:
        batch, extracted_by, _ = ask_with_fallback(
            lambda: engine.extract_knowledge(readable),
            lambda: offline.extract_knowledge(readable),
            engine.name,
        )
    else:
        batch, extracted_by = KnowledgeBatch(items=[]), engine.name
    by_id = {m.id: m for m in readable}
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
    # the clusters a restatement may join: the same kind and scope
    by_key: dict[tuple[KnowledgeKind, str], list[_Cluster]] = {}
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
                if (
                    keys[int(index)] == key
                    and _same_stance(cluster.head, candidate)
                    and same_value(candidate.kind, cluster.head.statement, candidate.statement)
                ):
                    cluster.members.append(candidate)
                    joined = True
                    break
        if not joined and candidate.kind not in _VALUE_KINDS:
            for cluster in by_key.get(key, ()):
                if any(restates(member, candidate, policy) for member in cluster.members):
                    cluster.members.append(candidate)
                    joined = True
                    break
        if not joined:
            clusters.append(_Cluster(candidate, vector))
            by_key.setdefault(key, []).append(clusters[-1])
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
        self.stances = [stance_by_clause(r.content) for r in self.rows]
        self.topics = [topic_of(r.content, r.conditions) for r in self.rows]

    def _add(self, row: SemanticMemory, vector: np.ndarray) -> None:
        self.rows.append(row)
        self.matrix = np.vstack([self.matrix, vector[None, :]])
        self.stances.append(stance_by_clause(row.content))
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
            if row.scope == head.scope and same_value(head.kind, head.statement, row.content):
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
