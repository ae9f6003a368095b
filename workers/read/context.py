"""``context()`` in the process that holds the vector index: bind the recalls, run the pure
pipeline, answer JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from pipelines.errors import InvalidInput
from pipelines.health.signals import mean_rank_shift, utilisation
from pipelines.index.context_vector import fusion_weights, query_context_text
from pipelines.read.assemble import (
    AssembledContext,
    ContextItem,
    ContextSources,
    WorkingVariable,
    build_context,
)
from pipelines.read.budget import Partition
from pipelines.read.focus import decide_focus
from pipelines.read.recall import Recallers, RecallScope
from workers.clients import Clients
from workers.index.completeness import index_degraded
from workers.index.targets import EPISODIC, dense_search_target
from workers.metrics import count_degraded_read, observe_context, recording
from workers.read.request import ContextCall, layout_of
from workers.read.semantic import KnowledgeRecall
from workers.read.sql import versions_from_rows
from workers.read.vectors import VectorRecall

log = logging.getLogger(__name__)


def assemble_for(
    clients: Clients,
    call: ContextCall,
    *,
    now: datetime | None = None,
) -> AssembledContext:
    """Run ``build_context`` for one validated call against the process's clients."""
    started = perf_counter()
    now = now or datetime.now(UTC)
    request = call.request
    timings: dict[str, float] | None = {} if recording() else None

    def sources() -> ContextSources:
        # Called by build_context once PostgreSQL has the literal query's recalls: Redis
        # answers the window's reads meanwhile.
        window_started = perf_counter()
        window = clients.working_memory.advance(
            call.tenant_id,
            request.task_id,
            call.session_id,
            clients.llm_for(call.tenant_id),
            clients.counter,
        )
        if timings is not None:
            timings["window"] = perf_counter() - window_started
        return ContextSources(
            system=call.system,
            task_context=tuple(
                ContextItem(id=f"task:{index}", text=text, must_keep=True)
                for index, text in enumerate(call.task_context)
            ),
            summaries=window.summaries,
            turns=window.turns,
            variables=tuple(WorkingVariable(key=key, value=value) for key, value in call.variables),
            scratch=tuple(
                ContextItem(id=f"scratch:{index}", text=text, timestamp=now)
                for index, text in enumerate(call.scratch)
            ),
        )

    scope = RecallScope(tenant_id=call.tenant_id, task_id=request.task_id, now=now)
    # Episodes and the tenant's knowledge, on one pipelined connection.
    store = KnowledgeRecall(clients.pool, versions_from_rows=versions_from_rows(clients.pool))
    # Offline, the pipeline's rules see more than the port's would (local scores, feedback).
    remote = clients.llm_for(call.tenant_id) if clients.settings.llm_is_remote else None
    # The dense search fuses in the step's context (phase and focus), so the focus is decided
    # here first and handed to build_context (one decision, one LLM call).
    focus = decide_focus(request.query, phase=request.phase, focus=request.focus, llm=remote)
    dense_target = dense_search_target(clients, EPISODIC)
    # Known short (or out for a re-embed run): the context says so; its keyword and temporal
    # recalls read PostgreSQL, which is whole.
    degraded = dense_target is None or index_degraded(clients, EPISODIC)
    dense = VectorRecall(
        clients.vectors,
        clients.embedder,
        clients.episodic_collection if dense_target is not None else None,
        clients.vector_lock,
        fusion=(
            query_context_text(request.phase, [item.kind.value for item in focus.kinds]),
            fusion_weights(request.phase),
        ),
        code_embedder=clients.code_embedder,
    )
    recallers = Recallers(dense=dense, sparse=store, temporal=store, store=store, knowledge=store)
    with store:
        context = build_context(
            request,
            sources,
            scope=scope,
            recallers=recallers,
            counter=clients.counter,
            focus_llm=remote,
            focus=focus,
            rewrite_llm=remote,
            rerank_llm=remote,
            layout=layout_of(clients.settings),
            timings=timings,
        )
    if degraded:
        context = context.model_copy(update={"degraded": True})
        count_degraded_read("context")
    if timings is not None:
        timings["total"] = perf_counter() - started
        observe_assembled(context, timings)
    return context


def observe_assembled(context: AssembledContext, timings: Mapping[str, float]) -> None:
    """The metrics of one context(): stage timings, partition use, the rerank's shift."""
    used = {
        p.name.value: ratio
        for p in context.partitions
        if (ratio := utilisation(p.used_tokens, p.budget_tokens)) is not None
    }
    shift = None
    if context.retrieval is not None:
        shift = mean_rank_shift([c.fused for c in context.retrieval.candidates])
    observe_context(timings, used, shift)


def delivered_memory_ids(context: AssembledContext) -> list[str]:
    """The memories the context actually holds (what an access bump should count): the
    episodes, not the knowledge beside them."""
    return [
        item.id
        for item in context.partition(Partition.RETRIEVED_MEMORY).items
        if item.knowledge is None
    ]


def answer_call(
    clients: Clients,
    call: ContextCall,
    publish_touch: Callable[[str, list[str], datetime], None],
) -> AssembledContext:
    """Assemble one checked call and queue the access bump of what it delivered."""
    now = datetime.now(UTC)
    context = assemble_for(clients, call, now=now)
    ids = delivered_memory_ids(context)
    if ids:
        try:
            publish_touch(call.tenant_id, ids, now)
        except Exception as exc:  # a lost bump must not lose the answer
            log.warning("access bump of %s memories not published: %s", len(ids), exc)
    return context


def context_answer(
    clients: Clients,
    kwargs: Mapping[str, Any],
    publish_touch: Callable[[str, list[str], datetime], None],
) -> dict[str, Any]:
    """The ``memory.recall.context`` task's body: JSON in, JSON out.

    The call was checked where it was made (``check_context_call``); here it is only
    decoded. A message of the wrong shape comes back as ``{"error": InvalidInput.to_json()}``
    (the client raises the same typed error); anything else raises and the task fails.
    """
    try:
        call = ContextCall.from_json(kwargs)
    except InvalidInput as exc:
        return {"error": exc.to_json()}
    return {"context": answer_call(clients, call, publish_touch).model_dump(mode="json")}
