"""The inspector's pure parts: the SVG of a memory's links and the CSRF token of a session."""

from __future__ import annotations

import uuid

from memharness.server.keys import KeyRecord, Scope
from memharness.server.ui.graph import render_svg
from memharness.server.ui.session import SignedIn, UiRefusal, check_action, csrf_token
from pipelines.cognition.link import LinkKind, MemoryLink
from workers.own.inspector import GraphNode, Neighbourhood


def _node(content: str, hops: int, status: str = "stored") -> GraphNode:
    return GraphNode(id=uuid.uuid4(), content=content, status=status, level=0, hops=hops)


def test_the_graph_links_every_node_to_its_page_and_escapes_what_memories_say() -> None:
    centre = _node("The auth module is delayed <script>alert(1)</script>", 0)
    effect = _node("Export waits & slips", 1)
    gone = _node("", 2, status="forgotten")
    graph = Neighbourhood(
        nodes=(centre, effect, gone),
        links=(
            MemoryLink(src_id=centre.id, dst_id=effect.id, kind=LinkKind.CAUSAL, weight=0.9,
                       reason="delays"),
            MemoryLink(src_id=effect.id, dst_id=gone.id, kind=LinkKind.ENTITY, weight=0.4),
        ),
    )  # fmt: skip
    svg = render_svg(graph)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    for node in (centre, effect, gone):
        assert f'href="/ui/memories/{node.id}"' in svg
    assert "<script>" not in svg and "&lt;script&gt;" not in svg  # cut to a label, escaped
    assert "&amp; slips" in svg and "(forgotten)" in svg
    assert 'marker-end="url(#arrow)"' in svg  # a causal link points from cause to effect
    assert "causal link, weight 0.90: delays" in svg


def test_a_memory_without_links_draws_nothing() -> None:
    assert render_svg(Neighbourhood(nodes=(_node("alone", 0),), links=())) == ""


def _signed_in(scopes: frozenset[Scope], key: str = "mh_0123456789ab_secret") -> SignedIn:
    record = KeyRecord(id=uuid.uuid4(), prefix="0123456789ab", secret_hash=b"", tenant_id="t",
                       agent_id=None, scopes=scopes, name="")  # fmt: skip
    return SignedIn(record, key)


def test_an_action_needs_the_session_token_and_the_write_scope() -> None:
    writer = _signed_in(frozenset({Scope.READ, Scope.WRITE}))
    check_action(writer, {"csrf": writer.csrf})
    for who, form, words in (
        (writer, {}, "CSRF"),
        (writer, {"csrf": csrf_token("mh_0123456789ab_other")}, "CSRF"),
        (_signed_in(frozenset({Scope.READ})), {"csrf": writer.csrf}, "write scope"),
    ):
        try:
            check_action(who, form)
        except UiRefusal as refused:
            assert refused.status == 403 and words in refused.message
        else:
            raise AssertionError(f"{form} was let through")
    admin = _signed_in(frozenset({Scope.ADMIN}))
    check_action(admin, {"csrf": admin.csrf})
