"""The import graph: no circles, the floors in their order, the paths apart, a thin client.

Every import statement counts, at module level or inside a function, under TYPE_CHECKING or
not: a lazy import that closes a circle still ties the two modules together, it only hides
the tie from the interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("config", "pipelines", "workers", "schedules", "memharness")
# Code that moves data along one path: every package folder of the two floors (write, read,
# cognition, state, index, own, health, ...), found rather than listed, so a new folder cannot
# close a circle unseen. Modules directly under a floor (workers/clients.py, workers/window.py)
# are shared by the paths and belong to none.
PATHS = tuple(
    sorted(
        {
            folder.name
            for floor in ("pipelines", "workers")
            for folder in (ROOT / floor).iterdir()
            if (folder / "__init__.py").exists()
        }
    )
)
# A module of more lines than this says in its docstring why it must be one piece.
MAX_LINES = 600


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            found[".".join(parts)] = path
    return found


def imported(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The project modules ``path`` imports (``from a import b`` counts ``a.b`` when it is a
    module, else ``a``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    yield full
                elif node.module in known:
                    yield node.module


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(path, known)) - {name} for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_round_a_circle() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_pipelines_never_import_workers_and_workers_never_import_the_client() -> None:
    offenders = [
        f"{source} -> {target}"
        for source, targets in graph().items()
        for target in targets
        if (source.startswith("pipelines") and not target.startswith("pipelines"))
        or (source.startswith("workers") and target.startswith("memharness"))
        or (source.startswith("schedules") and target.startswith("memharness"))
    ]
    assert offenders == []


def test_no_pipeline_imports_the_composed_port() -> None:
    # Each pipeline declares the narrow protocol it needs; ports.py composes them.
    offenders = [
        source
        for source, targets in graph().items()
        if source.startswith("pipelines.")
        and source != "pipelines.ports"
        and "pipelines.ports" in targets
    ]
    assert offenders == []


def test_the_paths_of_a_floor_import_each_other_without_a_circle() -> None:
    # the path folders, taken as units, form no circle either
    assert {"write", "read", "cognition", "state", "index", "own", "health"} <= set(PATHS)
    for floor in ("pipelines", "workers"):
        edges: dict[str, set[str]] = {}
        for source, targets in graph().items():
            unit = _path_of(source, floor)
            if unit is None:
                continue
            for target in targets:
                other = _path_of(target, floor)
                if other is not None and other != unit:
                    edges.setdefault(unit, set()).add(other)
        assert cycles(edges) == [], floor


def _path_of(module: str, floor: str) -> str | None:
    parts = module.split(".")
    if parts[0] == floor and len(parts) > 1 and parts[1] in PATHS:
        return parts[1]
    return None


def test_long_modules_say_why_they_are_one_piece() -> None:
    long = []
    for name, path in modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "one piece" not in doc:
                long.append(f"{name}: {len(text.splitlines())} lines")
    assert long == []


def test_importing_the_client_loads_no_adapter_and_no_worker_service() -> None:
    # given a fresh interpreter; when it imports the package agents use
    probe = "import sys, memharness, memharness.aio\nprint('\\n'.join(sorted(sys.modules)))\n"
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.split()
    )
    # then nothing of the workers' side came with it: no adapter, no model or engine client,
    # no task module, no drain, index or cognition service, no cognitive pipeline (the
    # checkpoint service is typed on the narrow protocol it calls, not the composed port)
    heavy = {
        name
        for name in loaded
        if name.startswith(("workers.adapters", "workers.index", "workers.cognition", "openai",
                            "qdrant_client", "qdrant_edge", "tokenizers", "numpy",
                            "pipelines.cognition", "pipelines.own", "pipelines.ports",
                            "workers.ledger"))
        or (name.startswith("workers.") and name.endswith(".tasks"))
        or name in {"workers.write.drain", "workers.app", "celery"}
    }  # fmt: skip
    assert heavy == set()
