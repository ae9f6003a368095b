"""pipelines/ holds pure logic: no client of a broker, a database, a vector store or an LLM."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = {"celery", "kombu", "psycopg", "psycopg_pool", "qdrant_client", "qdrant_edge",
             "openai", "redis", "workers", "memharness", "sqlalchemy", "alembic"}  # fmt: skip

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"


def test_pipelines_import_no_infrastructure() -> None:
    offenders: list[str] = []
    for path in sorted(PIPELINES.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
