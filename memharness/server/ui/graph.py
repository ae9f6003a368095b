"""The links around a memory as an inline SVG, laid out on the server: the memory in the
middle, each hop on its own ring, every node a link to that memory's page. Drawing it here
keeps the page free of a graph library and its script, and a test reads the markup as text.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from workers.own.inspector import Neighbourhood

WIDTH = 720
HEIGHT = 440
# Ring radii per hop: two hops fit a 440-pixel-high box with room for the labels.
RING_PX = (0.0, 120.0, 200.0)
NODE_PX = 9
LABEL_CHARS = 28
KIND_COLOURS = {"entity": "#2b6cb0", "similar": "#718096", "causal": "#c05621"}


@dataclass(frozen=True)
class Placed:
    id: uuid.UUID
    x: float
    y: float
    label: str
    status: str
    centre: bool


def layout(graph: Neighbourhood) -> list[Placed]:
    """Positions: the first node at the centre, the others spread evenly on their hop's ring."""
    by_hop: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        by_hop.setdefault(min(node.hops, len(RING_PX) - 1), []).append(index)
    placed: list[Placed | None] = [None] * len(graph.nodes)
    cx, cy = WIDTH / 2, HEIGHT / 2
    for hop, members in by_hop.items():
        for position, index in enumerate(members):
            node = graph.nodes[index]
            angle = 2 * math.pi * position / max(1, len(members)) - math.pi / 2 + hop * 0.4
            radius = RING_PX[hop]
            placed[index] = Placed(
                id=node.id,
                x=round(cx + radius * math.cos(angle), 1),
                y=round(cy + radius * math.sin(angle), 1),
                label=_label(node.content, node.status),
                status=node.status,
                centre=index == 0,
            )
    return [p for p in placed if p is not None]


def _label(content: str, status: str) -> str:
    if status == "forgotten" or not content:
        return f"({status})"
    text = " ".join(content.split())
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def render_svg(graph: Neighbourhood, href_prefix: str = "/ui/memories/") -> str:
    """The SVG markup (every text escaped), or '' when the memory has no links."""
    if not graph.links:
        return ""
    nodes = layout(graph)
    at = {p.id: p for p in nodes}
    parts: list[str] = [
        f'<svg class="graph" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'role="img" aria-label="links around this memory" xmlns="http://www.w3.org/2000/svg">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="18" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#c05621"/></marker></defs>',
    ]
    for link in graph.links:
        a, b = at.get(link.src_id), at.get(link.dst_id)
        if a is None or b is None:
            continue
        kind = link.kind.value
        colour = KIND_COLOURS.get(kind, "#718096")
        arrow = ' marker-end="url(#arrow)"' if kind == "causal" else ""
        dash = ' stroke-dasharray="4 3"' if kind == "similar" else ""
        title = escape(f"{kind} link, weight {link.weight:.2f}" + _reason(link.reason))
        parts.append(
            f'<line class="link {kind}" x1="{a.x}" y1="{a.y}" x2="{b.x}" y2="{b.y}" '
            f'stroke="{colour}" stroke-width="{1 + 2 * link.weight:.1f}"{dash}{arrow}>'
            f"<title>{title}</title></line>"
        )
    for p in nodes:
        fill = "#1a202c" if p.centre else ("#e2e8f0" if p.status != "stored" else "#fff")
        parts.append(
            f'<a href="{href_prefix}{p.id}"><g class="node">'
            f'<circle cx="{p.x}" cy="{p.y}" r="{NODE_PX + (3 if p.centre else 0)}" '
            f'fill="{fill}" stroke="#1a202c" stroke-width="1.5"/>'
            f'<text x="{p.x}" y="{p.y + NODE_PX + 14}" text-anchor="middle">'
            f"{escape(p.label)}</text><title>{escape(str(p.id))}</title></g></a>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _reason(reason: str) -> str:
    return f": {reason}" if reason else ""


def legend(kinds: Sequence[str] = tuple(KIND_COLOURS)) -> list[tuple[str, str]]:
    return [(kind, KIND_COLOURS[kind]) for kind in kinds]
