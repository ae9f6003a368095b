"""The inspector's pages and actions. Every page reads through the same ``MemoryClient``
calls the API's routes make (``list_memories``, ``history``, ``links``, ``knowledge``,
``context`` + ``explain``, ``conflicts``, the health report of ``/readyz``), scoped to the
signed-in key's tenant; every action is the same call the API's POST makes. The client's
calls are synchronous, so they run in the thread pool, as the API's ``def`` routes do.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from memharness.server.access import runtime_of
from memharness.server.ui.graph import legend, render_svg
from memharness.server.ui.session import (
    COOKIE,
    COOKIE_MAX_AGE_S,
    COOKIE_PATH,
    SignedIn,
    UiRefusal,
    check_action,
    resolve_key,
    signed_in,
)
from pipelines.errors import Conflict, InvalidInput, NotFound
from workers.own.correct import AUTOMATIC_ACTOR

HERE = Path(__file__).resolve().parent
TEMPLATES = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
# A form is a few fields of text: a correction's content is the largest (content_max_bytes
# of the settings), so the API's body limit bounds a form too.
FORM_CHARSET = "utf-8"
TIMELINE_PAGE = 200
# The context replay's defaults: the smallest budget the assembler serves.
REPLAY_BUDGET_TOKENS = 4000

router = APIRouter(prefix="/ui", include_in_schema=False)
T = TypeVar("T")


def page(name: str, who: SignedIn | None, code: int = 200, **values: Any) -> HTMLResponse:
    html = TEMPLATES.get_template(name).render(who=who, **values)
    return HTMLResponse(html, status_code=code, headers=_NO_STORE)


# A page shows a tenant's memories: never kept by a shared cache or the browser's history.
_NO_STORE = {"Cache-Control": "no-store", "X-Frame-Options": "DENY",
             "Content-Security-Policy": "default-src 'self'; style-src 'self'; "
             "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'"}  # fmt: skip


def refusal_page(who: SignedIn | None, status: int, message: str) -> HTMLResponse:
    return page("error.html", who, status, status=status, message=message)


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await run_in_threadpool(fn, *args, **kwargs)


async def need_session(request: Request) -> SignedIn:
    who = await signed_in(request)
    if who is None:
        raise _SignIn()
    return who


class _SignIn(Exception):
    """No live key: the pages send the browser to the sign-in form, an action answers 401."""


async def read_form(request: Request) -> dict[str, str]:
    limit = runtime_of(request).settings.api_max_body_bytes
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise UiRefusal(413, f"the form is over {limit} bytes")
    try:
        text = body.decode(FORM_CHARSET)
    except UnicodeDecodeError:
        raise UiRefusal(422, "the form is not UTF-8") from None
    return dict(parse_qsl(text, keep_blank_values=True))


def parse_memory_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise UiRefusal(404, "no such memory") from None


# -- sign-in ---------------------------------------------------------------------------------


@router.get("/login")
async def login_form(request: Request) -> HTMLResponse:
    return page("login.html", None, message=None)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await read_form(request)
    text = form.get("key", "").strip()
    record = await resolve_key(request, text) if text else None
    if record is None:
        return page("login.html", None, 401, message="That is not a live API key.")
    response = RedirectResponse("/ui", status_code=303)
    response.set_cookie(
        COOKIE,
        text,
        max_age=COOKIE_MAX_AGE_S,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


# -- pages ------------------------------------------------------------------------------------


@router.get("")
async def timeline(request: Request) -> HTMLResponse:
    who = await need_session(request)
    task = request.query_params.get("task_id") or None
    cursor = request.query_params.get("cursor") or None
    client = runtime_of(request).client
    listing = await call(
        client.list_memories,
        who.tenant_id,
        task_id=task,
        status="any",
        cursor=cursor,
        limit=TIMELINE_PAGE,
    )
    groups: dict[str, dict[str, list[Any]]] = {}
    for item in listing.items:
        groups.setdefault(item.task_id, {}).setdefault(item.session_id, []).append(item)
    return page(
        "timeline.html",
        who,
        groups=groups,
        task=task,
        next_cursor=listing.next_cursor,
        count=len(listing.items),
    )


@router.get("/memories/{memory_id}")
async def memory_page(memory_id: str, request: Request) -> HTMLResponse:
    who = await need_session(request)
    parsed = parse_memory_id(memory_id)
    client = runtime_of(request).client
    history = await call(client.history, parsed, tenant_id=who.tenant_id)
    memory = await call(client.get, parsed, tenant_id=who.tenant_id)
    graph = await call(client.links, parsed, tenant_id=who.tenant_id)
    this = next((v for v in history.versions if v.id == parsed), None)
    undoable = any(
        e.event == "superseded" and e.memory_id == parsed and e.actor == AUTOMATIC_ACTOR
        for e in history.events
    ) and (this is not None and this.status == "corrected")
    return page(
        "memory.html",
        who,
        memory_id=parsed,
        memory=memory,
        this=this,
        history=history,
        graph=graph,
        svg=Markup(render_svg(graph)),  # every text in it is escaped by render_svg
        legend=legend(),
        undoable=undoable,
        done=request.query_params.get("done"),
    )


@router.get("/knowledge")
async def knowledge_page(request: Request) -> HTMLResponse:
    who = await need_session(request)
    kind = request.query_params.get("kind") or None
    query = request.query_params.get("query") or None
    items = await call(
        runtime_of(request).client.knowledge,
        tenant_id=who.tenant_id,
        kind=kind,
        query=query,
        limit=200,
    )
    return page("knowledge.html", who, items=items, kind=kind or "", query=query or "")


@router.get("/context")
async def context_page(request: Request) -> HTMLResponse:
    """A context() call replayed: the same call an agent makes, then ``explain()`` of it."""
    who = await need_session(request)
    params = request.query_params
    form = {
        "task_id": params.get("task_id", ""),
        "query": params.get("query", ""),
        "budget_tokens": params.get("budget_tokens", str(REPLAY_BUDGET_TOKENS)),
        "session_id": params.get("session_id", ""),
    }
    if not (form["task_id"] and form["query"]):
        return page("context.html", who, form=form, context=None, trace=None)
    try:
        budget = int(form["budget_tokens"])
    except ValueError:
        raise InvalidInput("budget_tokens", "must be an integer") from None
    from celery.exceptions import TimeoutError as ResultTimeout

    client = runtime_of(request).client
    timeout_s = runtime_of(request).settings.context_timeout_s
    try:
        assembled = await call(
            client.context,
            form["task_id"],
            form["query"],
            budget,
            tenant_id=who.tenant_id,
            session_id=form["session_id"] or None,
            timeout_s=timeout_s,
        )
    except ResultTimeout:
        # as /v1/context: the store's owner did not answer in time (no worker running?)
        raise UiRefusal(504, f"the context answer took over {timeout_s:g} s") from None
    trace = await call(client.explain, assembled, tenant_id=who.tenant_id)
    return page("context.html", who, form=form, context=assembled, trace=trace)


@router.get("/conflicts")
async def conflicts_page(request: Request) -> HTMLResponse:
    who = await need_session(request)
    pairs = await call(runtime_of(request).client.conflicts, tenant_id=who.tenant_id)
    return page("conflicts.html", who, pairs=pairs, done=request.query_params.get("done"))


@router.get("/health")
async def health_page(request: Request) -> HTMLResponse:
    who = await need_session(request)
    figures, report = await call(read_health, runtime_of(request).settings)
    components = []
    for name, component in report.as_dict()["components"].items():
        # The retrieval component names every tenant's golden ratio: show this key's only.
        checks = [
            c
            for c in component["checks"]
            if not c["name"].startswith("golden_hit_ratio[")
            or c["name"] == f"golden_hit_ratio[{who.tenant_id}]"
        ]
        components.append({"name": name, "healthy": component["healthy"], "checks": checks})
    golden = figures.golden.get(who.tenant_id)
    return page(
        "health.html",
        who,
        healthy=report.healthy,
        checked_at=report.checked_at,
        components=components,
        golden=golden,
        queues=sorted(figures.queue_depth.items()),
        outbox=sorted(figures.outbox_lag_s.items()),
        dead=sorted(figures.dead_letters.items()),
    )


def read_health(settings: Any) -> tuple[Any, Any]:
    """What ``/readyz`` reports (``health_report`` without the owner's round trip), from the
    figures it was judged on: queue depths, outbox lag and dead letters come along."""
    from workers.health.figures import FigureReader
    from workers.health.report import health_report

    reader = FigureReader(settings)
    try:
        figures = reader.read(ping_workers=False)
        report = health_report(settings, live_index=False, reader=reader, figures=figures)
    finally:
        reader.close()
    return figures, report


# -- actions ----------------------------------------------------------------------------------


async def acting(request: Request) -> tuple[SignedIn, dict[str, str]]:
    who = await signed_in(request)
    if who is None:
        raise UiRefusal(401, "sign in with an API key first")
    form = await read_form(request)
    check_action(who, form)
    return who, form


@router.post("/memories/{memory_id}/forget")
async def forget_action(memory_id: str, request: Request) -> Response:
    who, form = await acting(request)
    parsed = parse_memory_id(memory_id)
    await call(
        runtime_of(request).client.forget,
        tenant_id=who.tenant_id,
        reason=form.get("reason", ""),
        memory_id=parsed,
        actor=who.actor(),
    )
    return RedirectResponse(f"/ui/memories/{parsed}?done=forgotten", status_code=303)


@router.post("/memories/{memory_id}/correct")
async def correct_action(memory_id: str, request: Request) -> Response:
    who, form = await acting(request)
    parsed = parse_memory_id(memory_id)
    receipt = await call(
        runtime_of(request).client.correct,
        parsed,
        form.get("content", ""),
        tenant_id=who.tenant_id,
        reason=form.get("reason", ""),
        actor=who.actor(),
    )
    return RedirectResponse(f"/ui/memories/{receipt.memory_id}?done=corrected", status_code=303)


@router.post("/memories/{memory_id}/undo")
async def undo_action(memory_id: str, request: Request) -> Response:
    who, form = await acting(request)
    parsed = parse_memory_id(memory_id)
    await call(
        runtime_of(request).client.undo_correction,
        parsed,
        tenant_id=who.tenant_id,
        reason=form.get("reason") or "undone in the inspector",
        actor=who.actor(),
    )
    back = form.get("back", "")
    target = "/ui/conflicts" if back == "conflicts" else f"/ui/memories/{parsed}"
    return RedirectResponse(f"{target}?done={quote('restored')}", status_code=303)


# -- mounting ---------------------------------------------------------------------------------


def is_ui(request: Request) -> bool:
    return request.url.path == "/ui" or request.url.path.startswith("/ui/")


def mount_ui(app: FastAPI) -> None:
    """The pages, their static files, and the errors of ``/ui`` as pages instead of JSON."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    api_handlers = dict(app.exception_handlers)

    async def by_path(request: Request, exc: Exception) -> Response:
        if is_ui(request):
            who = await _quiet_session(request)
            if isinstance(exc, _SignIn):
                return RedirectResponse("/ui/login", status_code=303)
            if isinstance(exc, UiRefusal):
                return refusal_page(who, exc.status, exc.message)
            if isinstance(exc, NotFound):
                return refusal_page(who, 404, "no such memory in this tenant")
            if isinstance(exc, InvalidInput):
                return refusal_page(who, 422, f"{exc.field}: {exc.message}")
            if isinstance(exc, Conflict):
                return refusal_page(who, 409, f"{exc.field}: {exc.message}")
        handler = api_handlers.get(type(exc))
        if handler is None:
            raise exc
        answer: Response = await handler(request, exc)
        return answer

    for kind in (_SignIn, UiRefusal, NotFound, InvalidInput, Conflict):
        app.add_exception_handler(kind, by_path)


async def _quiet_session(request: Request) -> SignedIn | None:
    """The navigation of an error page: the session if there is one, never a second error."""
    try:
        return await signed_in(request)
    except Exception:
        return None
