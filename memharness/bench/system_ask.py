"""The asking half of ``memharness bench system-quality``: every question through recall()
and context() of the system, and through the pure pipeline's assembly of the same turns;
the figures of each question (strict, credited and checked recall@10, what the context
delivered) added to the run's tallies.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from memharness.bench.retrieval_quality import CATEGORIES, Conversation, Tally
from memharness.bench.system_store import Cover, credit
from memharness.progress import Progress

BUDGET_TOKENS = 4000
K = 10


@dataclass
class Asked:
    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    hit_ids: set[str] = field(default_factory=set)
    summaries_returned: int = 0
    # How many level-0 turns each summary in a top 10 covers: the weight of its credit.
    summary_cover_sizes: list[int] = field(default_factory=list)
    knowledge_in_context: int = 0
    context_tokens: list[int] = field(default_factory=list)
    partition_tokens: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    pure_context_tokens: list[int] = field(default_factory=list)
    # What the retrieved-memory partition held: items, how many were summaries, the tokens
    # the summaries took, what it evicted, and the pure pipeline's item count.
    retrieved_items: list[int] = field(default_factory=list)
    retrieved_summaries: list[int] = field(default_factory=list)
    retrieved_summary_tokens: list[int] = field(default_factory=list)
    retrieved_evicted: list[int] = field(default_factory=list)
    retrieved_budget: list[int] = field(default_factory=list)
    pure_retrieved_items: list[int] = field(default_factory=list)
    pure_partition_tokens: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    ask_seconds: list[float] = field(default_factory=list)


def ask_questions(
    client: Any, tenant: str, conversation: Conversation, cover: Cover, pure: Any,
    counter: Any, layout: Any, asked: Asked, bar: Progress,
) -> None:  # fmt: skip
    from pipelines.read.assemble import ContextSources, build_context
    from pipelines.read.budget import Partition
    from pipelines.read.request import ContextRequest

    for question in conversation.questions:
        category = CATEGORIES[question.category]
        started = time.monotonic()
        recalled = [hit["id"] for hit in client.recall(question.text, tenant_id=tenant, limit=K)]
        # Asked again for three times K, for the first K raw turns with summaries set aside
        # (a separate call: a deeper search of the graph index may order the top K otherwise).
        recalled_deep = [
            hit["id"] for hit in client.recall(question.text, tenant_id=tenant, limit=3 * K)
        ]
        context = client.context(
            conversation.sample_id, question.text, BUDGET_TOKENS, tenant_id=tenant
        )
        asked.ask_seconds.append(time.monotonic() - started)
        ranked = [c.memory.id for c in context.retrieval.candidates] if context.retrieval else []
        retrieved = context.partition(Partition.RETRIEVED_MEMORY)
        delivered = [item.id for item in retrieved.items if item.knowledge is None]
        asked.knowledge_in_context += sum(1 for item in retrieved.items if item.knowledge)
        summary_items = [item for item in retrieved.items if cover.level_of.get(item.id, 0) >= 1]
        asked.retrieved_items.append(len(retrieved.items))
        asked.retrieved_summaries.append(len(summary_items))
        asked.retrieved_summary_tokens.append(sum(item.tokens for item in summary_items))
        asked.retrieved_evicted.append(len(retrieved.evicted_ids))
        asked.retrieved_budget.append(retrieved.budget_tokens)
        asked.context_tokens.append(context.total_tokens)
        for part in context.partitions:
            asked.partition_tokens[part.name.value].append(part.used_tokens)
        figures: dict[str, float] = {}
        for name, ids in (("recall", recalled), ("context", ranked[:K])):
            strict, credited, kept = credit(ids, cover, question.gold)
            figures[f"{name}_strict"] = strict
            figures[f"{name}_credit"] = credited
            figures[f"{name}_credit_kept"] = kept
            asked.hit_ids.update(ids)
            summaries = [i for i in ids if cover.level_of.get(i, 0) >= 1]
            asked.summaries_returned += len(summaries)
            asked.summary_cover_sizes.extend(len(cover.covers.get(i, ())) for i in summaries)
        # The same rankings with the summaries set aside: what the gap to the pure pipeline
        # owes to summaries taking slots, and what it owes to everything else.
        for name, deep in (("recall", recalled_deep), ("context", ranked)):
            raw = [i for i in deep if cover.level_of.get(i, 0) == 0][:K]
            figures[f"{name}_raw_only"] = credit(raw, cover, question.gold)[0]
        strict, credited, kept = credit(delivered, cover, question.gold)
        figures["in_context_strict"], figures["in_context_credit"] = strict, credited
        figures["in_context_credit_kept"] = kept

        # The pure pipeline's assembled context of the same question, nothing but long-term
        # memory to lay out (no window: the pure bench holds none).
        result = build_context(
            ContextRequest(
                task_id=conversation.sample_id, query=question.text, budget_tokens=BUDGET_TOKENS
            ),
            ContextSources(),
            scope=pure.scope,
            recallers=pure.ports,
            counter=counter,
            layout=layout,
        )
        asked.pure_context_tokens.append(result.total_tokens)
        for part in result.partitions:
            asked.pure_partition_tokens[part.name.value].append(part.used_tokens)
        pure_ids = [item.id for item in result.partition(Partition.RETRIEVED_MEMORY).items]
        asked.pure_retrieved_items.append(len(pure_ids))
        figures["pure_in_context"] = len(question.gold.intersection(pure_ids)) / len(question.gold)
        asked.tallies["all"].add(figures)
        asked.tallies[category].add(figures)
        bar.advance()
