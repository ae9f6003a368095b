"""The MCP server: one :class:`~memharness.MemoryClient`, one tenant, six tools.

Each tool's parameters carry a JSON schema and a description an agent can act on; each
answer is structured (an output schema) and readable (a text block). A bad call is a tool
error (``isError``) whose text is a JSON object naming the field and the limit, the same
object the HTTP API answers with: the agent can fix its call. Nothing a caller sends crashes
the server; an unexpected failure is the SDK's generic tool error, logged here.
"""

# No ``from __future__ import annotations``: the SDK reads the tools' annotations at
# registration, and those of a closure must be objects, not strings naming its locals.
import json
import logging
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from memharness.mcp_server.tools import (
    Binding,
    CheckpointSaved,
    ContextAnswer,
    ForgetAnswer,
    MemoryTools,
    RecallAnswer,
    Receipt,
    ResumeAnswer,
    invalid_from_validation,
)
from pipelines.errors import Conflict, InvalidInput, NotFound
from pipelines.own.versions import REASON_MAX_CHARS
from pipelines.read.budget import MAX_BUDGET_TOKENS
from pipelines.records import MemoryType, TaskPhase
from pipelines.state.models import TaskState

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from config import Settings
    from memharness.client import MemoryClient

log = logging.getLogger(__name__)

SERVER_NAME = "memory-harness"
HTTP_PATH = "/mcp"

INSTRUCTIONS = """\
Long-term memory and resumable task state for tenant {tenant}.
- remember: record what happened (a decision, an action, an observation, feedback). It returns
  a receipt at once; the memory becomes searchable a moment later, when the workers have
  stored it.
- get_context: before a step, the context of that step within a token budget (recent turns,
  relevant memories, knowledge), as text to put in your prompt.
- recall: a plain search of the stored memories.
- checkpoint / resume: save where you are in a task (its TaskState) and continue from the
  newest good checkpoint after a restart.
- forget: erase a memory for good.
A bad call answers with an error naming the field and the limit: fix that argument and retry.
"""


def error_payload(exc: BaseException) -> dict[str, str | None] | None:
    """The JSON object of a failure the caller can act on, ``{error, field, message, limit}``
    (``error``: invalid_input, not_found, conflict or unavailable); None for anything else."""
    if isinstance(exc, InvalidInput):
        return {"error": "invalid_input", **exc.to_json()}
    if isinstance(exc, NotFound | Conflict):
        return {"limit": None, **exc.to_json()}
    if isinstance(exc, ValidationError):
        return {"error": "invalid_input", **invalid_from_validation(exc).to_json()}
    if _is_timeout(exc):
        return {
            "error": "unavailable",
            "field": None,
            "message": "the memory service did not answer in time: its workers may be down "
            "or busy; retry later",
            "limit": None,
        }
    if _is_unreachable(exc):
        return {
            "error": "unavailable",
            "field": None,
            "message": "the memory store is unreachable; retry later",
            "limit": None,
        }
    return None


def tool_error(payload: dict[str, str | None]) -> CallToolResult:
    """An ``isError`` result: the JSON object as text (what a model reads) and as structured
    content (what a program reads)."""
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=dict(payload),
        is_error=True,
    )


def _is_timeout(exc: BaseException) -> bool:
    from celery.exceptions import TimeoutError as CeleryTimeout

    return isinstance(exc, TimeoutError | CeleryTimeout)


def _is_unreachable(exc: BaseException) -> bool:
    import psycopg
    import psycopg_pool
    import redis

    return isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout | redis.RedisError)


class MemoryServer(MCPServer[Any]):
    """``MCPServer`` whose tool failures the caller can fix come back as our error objects.

    The SDK reports a failed tool as ``Error executing tool <name>: <text>`` (arguments that
    miss the schema: pydantic's report) or, for any other exception, as that prefix alone.
    Here the typed errors of the project, and arguments that miss the schema, become the
    object ``error_payload`` builds."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if cause is None or (
                # Arguments that miss the schema are the caller's to fix; a model that fails
                # inside a tool's body is this server's bug, and stays the generic error.
                isinstance(cause, ValidationError) and isinstance(exc, UnexpectedToolError)
            ):
                raise
            payload = error_payload(cause)
            if payload is None:
                raise
            if payload["error"] == "unavailable":
                log.warning("tool %s: %r", name, exc.__cause__)
            else:
                log.info("tool %s refused: %s", name, payload.get("field"))
            return tool_error(payload)


def _text_and_data(answer: ContextAnswer) -> CallToolResult:
    """The context itself first (what goes into the prompt), then its summary as JSON."""
    summary = answer.model_dump(mode="json", exclude={"text"})
    return CallToolResult(
        content=[
            TextContent(type="text", text=answer.text),
            TextContent(type="text", text=json.dumps(summary, ensure_ascii=False)),
        ],
        structured_content=answer.model_dump(mode="json"),
    )


def build_server(
    memory: "MemoryClient",
    binding: Binding,
    *,
    recall_timeout_s: float = 10.0,
    context_floor_tokens: int = 4000,
    content_max_bytes: int = 65536,
    metadata_max_bytes: int = 8192,
) -> MemoryServer:
    """The server around ``memory``, acting for ``binding``'s tenant only."""
    tools = MemoryTools(memory, binding, recall_timeout_s=recall_timeout_s)
    server = MemoryServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS.format(tenant=binding.tenant_id),
        log_level="WARNING",
    )
    task_id_doc = (
        "The task this is about: 1-128 characters of letters, digits and . _ : @ / + -, "
        "starting with a letter or digit."
    )

    @server.tool(
        title="Remember",
        annotations=ToolAnnotations(
            title="Remember", read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
        description=(
            "Record one interaction in long-term memory: a decision, an action and its result, "
            "an observation, user feedback, a status change or a preference. Returns at once "
            "with a receipt {memory_id, status, reason}: the write is queued and the workers "
            "decide, summarise and index it in the background (a second or so), so it shows "
            "up in recall/get_context shortly after, not instantly. status: accepted (queued), "
            "duplicate (the same content was already recorded in this task and session: same "
            "memory_id, nothing new) or dropped (filtered as noise; reason says why). "
            f"Limits: content {content_max_bytes} bytes of UTF-8, metadata "
            f"{metadata_max_bytes} bytes as JSON."
        ),
    )
    def remember(
        content: Annotated[
            str, Field(description="What happened, in plain words (or code). Not empty.")
        ],
        task_id: Annotated[str, Field(description=task_id_doc)],
        session_id: Annotated[
            str | None,
            Field(
                description="The conversation or run this belongs to (same id rules as task_id). "
                f"Default: this server's session ({binding.session_id})."
            ),
        ] = None,
        type: Annotated[
            MemoryType | None,
            Field(description="What kind of interaction; omitted: the workers classify it."),
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description="Any JSON object kept with the memory (speaker, tool, file...)."),
        ] = None,
        importance: Annotated[
            float | None,
            Field(
                ge=0.0,
                le=1.0,
                description="Your own estimate of how much this matters, 0-1; kept in the "
                "memory's metadata as 'importance' (the workers still score it themselves).",
            ),
        ] = None,
    ) -> Receipt:
        return tools.remember(content, task_id, session_id, type, metadata, importance)

    @server.tool(
        title="Recall",
        annotations=ToolAnnotations(title="Recall", read_only_hint=True, open_world_hint=False),
        description=(
            "Search the stored memories of this tenant by meaning (dense vector search), "
            "optionally within one task. Returns {hits: [{id, score, task_id, session_id, "
            "timestamp, type, content, importance}]}, best first, at most `limit`. Only "
            "memories the workers have stored are found (a remember of the last second may "
            "be missing). For the context of your next step prefer get_context, which also "
            "uses full-text, time and the recent conversation."
        ),
    )
    def recall(
        query: Annotated[str, Field(description="What to look for, in plain words.")],
        task_id: Annotated[
            str | None, Field(description="Only this task's memories. Default: every task.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many hits.")] = 5,
    ) -> RecallAnswer:
        return tools.recall(query, task_id, limit)

    @server.tool(
        title="Get context",
        annotations=ToolAnnotations(title="Get context", read_only_hint=True),
        description=(
            "The context of your next step, assembled within `budget_tokens`: the relevant "
            "memories and knowledge, the recent interactions of the task's latest session, "
            "laid out in partitions that each keep to their share of the budget. The first "
            "text block is the context itself, ready to put in a prompt; the second (and the "
            "structured result) summarises it: total_tokens, each partition's budget and use, "
            "how many items were compressed or evicted, the focus, and the memory ids placed. "
            f"budget_tokens: from {context_floor_tokens} to {MAX_BUDGET_TOKENS}."
        ),
    )
    def get_context(
        task_id: Annotated[str, Field(description=task_id_doc)],
        query: Annotated[
            str, Field(description="What the next step is about, or the question to answer.")
        ],
        budget_tokens: Annotated[
            int,
            Field(
                ge=context_floor_tokens,
                le=MAX_BUDGET_TOKENS,
                description="Token budget of the whole context, as many as you can give it.",
            ),
        ],
        phase: Annotated[
            TaskPhase | None,
            Field(description="The task's phase; it shifts the budget toward what it needs."),
        ] = None,
        focus: Annotated[
            str | list[str] | None,
            Field(
                description="A short hint of what matters now (text), or a list of kinds most "
                "needed first: decisions, preferences, state, identifiers, temporal, "
                "recent_activity, errors, procedures, facts."
            ),
        ] = None,
    ) -> Annotated[CallToolResult, ContextAnswer]:
        return _text_and_data(tools.get_context(task_id, query, budget_tokens, phase, focus))

    @server.tool(
        title="Checkpoint",
        annotations=ToolAnnotations(
            title="Checkpoint", read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
        description=(
            "Save where you are in a task: its TaskState (the task tree of nodes with their "
            "status, the current node, variables, the last tool calls, the pending actions, "
            "the token usage, the working memory). Returns {checkpoint_id, task_id} once it "
            "is stored (one transaction, checksummed; older checkpoints beyond the retention "
            "are pruned). Saving the same state again on the same parent returns the same id. "
            "Call it after each step that changed the task's state."
        ),
    )
    def checkpoint(
        task_id: Annotated[str, Field(description=task_id_doc)],
        state: Annotated[
            TaskState,
            Field(
                description="The TaskState: tree is a list in execution order, each node "
                "naming its parent earlier in the list; a blocked node says why "
                "(blocked_reason); pending actions name their node."
            ),
        ],
        phase_transition: Annotated[
            bool, Field(description="This checkpoint starts a new phase (kept longer).")
        ] = False,
    ) -> CheckpointSaved:
        return tools.checkpoint(task_id, state, phase_transition)

    @server.tool(
        title="Resume",
        annotations=ToolAnnotations(title="Resume", read_only_hint=True),
        description=(
            "Continue a task after a restart: the newest checkpoint whose checksum holds "
            "(a corrupted newer one is skipped and named in skipped_corrupted). Returns "
            "{found, message, checkpoint_id, created_at, elapsed_s, state, "
            "needs_verification, verification_reason}. found=false with a message when no "
            "checkpoint was saved: start the task from the beginning. When needs_verification "
            "is true, verification nodes were inserted before pending actions that touch the "
            "outside world: check those first. `state` can be passed back to checkpoint as is."
        ),
    )
    def resume(task_id: Annotated[str, Field(description=task_id_doc)]) -> ResumeAnswer:
        return tools.resume(task_id)

    @server.tool(
        title="Forget",
        annotations=ToolAnnotations(
            title="Forget", read_only_hint=False, destructive_hint=True, idempotent_hint=True
        ),
        description=(
            "Erase one memory for good, every version of it (a wrong or sensitive record). "
            "Returns at once with a receipt {request_id, target, target_id, memories, status, "
            "already}: from then on no read returns its text (the row is a tombstone keeping "
            "only the id, times and your reason); the workers then remove every other copy "
            "(summaries, knowledge, vector points, session windows) and verify it. status: "
            "pending or running while they work, done once verified. Forgetting the same "
            "memory again returns the earlier receipt with already=true. A memory_id this "
            f"tenant does not have is a not_found error. reason: 1-{REASON_MAX_CHARS} "
            "characters, kept in the audit log."
        ),
    )
    def forget(
        memory_id: Annotated[
            str, Field(description="The memory's id (a UUID, as remember or recall gave it).")
        ],
        reason: Annotated[
            str, Field(description="Why it must go, for the audit log (not the content).")
        ],
    ) -> ForgetAnswer:
        return tools.forget(memory_id, reason)

    make_strict(server)
    return server


class StrictArguments(FuncMetadata):
    """A tool's arguments read as the API reads a body: strict JSON types (``limit: "5"`` is
    not 5, a JSON text is not unpacked into a list or an object) and no unknown argument."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        fields = self.arg_model.model_fields
        known = {field.alias or name for name, field in fields.items()}
        for name in arguments_to_validate:
            if name not in known:
                raise InvalidInput(
                    name[:60],
                    f"is not an argument of this tool (it takes: {', '.join(sorted(known))})",
                )
        raw = json.dumps(arguments_to_validate, allow_nan=False)
        model = self.arg_model.model_validate_json(raw, strict=True)
        return model.model_dump_one_level()


def make_strict(server: MemoryServer) -> None:
    """Every tool of ``server`` validates strictly and says so in its input schema."""
    for tool in server._tool_manager.list_tools():
        meta = tool.fn_metadata
        tool.fn_metadata = StrictArguments(
            arg_model=meta.arg_model,
            output_schema=meta.output_schema,
            output_model=meta.output_model,
            wrap_output=meta.wrap_output,
        )
        tool.parameters = {**tool.parameters, "additionalProperties": False}


def build_for(settings: "Settings", memory: "MemoryClient", binding: Binding) -> MemoryServer:
    """``build_server`` with the limits ``settings`` configure."""
    from pipelines.read.budget import context_floor_tokens
    from workers.read.request import layout_of

    return build_server(
        memory,
        binding,
        recall_timeout_s=settings.mcp_recall_timeout_s,
        context_floor_tokens=context_floor_tokens(layout_of(settings)),
        content_max_bytes=settings.content_max_bytes,
        metadata_max_bytes=settings.metadata_max_bytes,
    )


def http_app(server: MemoryServer, host: str) -> "Starlette":
    """The streamable HTTP app at ``/mcp`` (DNS-rebinding protection on a loopback host).
    A deployment that wraps it (API keys, TLS) wraps this app."""
    return server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)


async def serve_http(server: MemoryServer, host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(
        http_app(server, host), host=host, port=port, log_level="warning", access_log=False
    )
    await uvicorn.Server(config).serve()


async def serve_stdio(server: MemoryServer) -> None:
    await server.run_stdio_async()
