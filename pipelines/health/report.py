"""The health verdict: three components (storage, retrieval, compression), each a list of
checks with the figure seen, the line it is held to and whether it passes.

The figures are gathered by ``workers.health.report``; the rules here only compare them, so
that a probe, the CLI and the API give the same answer for the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COMPONENTS = ("storage", "retrieval", "compression")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    value: Any
    limit: str
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "value": self.value,
            "limit": self.limit,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class ComponentHealth:
    name: str
    checks: tuple[Check, ...]

    @property
    def healthy(self) -> bool:
        return all(check.ok for check in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "checks": [c.as_dict() for c in self.checks]}


@dataclass(frozen=True)
class HealthReport:
    components: tuple[ComponentHealth, ...]
    checked_at: str
    notes: tuple[str, ...] = field(default=())

    @property
    def healthy(self) -> bool:
        return all(c.healthy for c in self.components)

    def component(self, name: str) -> ComponentHealth:
        return next(c for c in self.components if c.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "checked_at": self.checked_at,
            "components": {c.name: c.as_dict() for c in self.components},
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class StorageFigures:
    postgres_error: str | None
    redis_error: str | None
    # kind -> (index points, PostgreSQL live rows); None: the index could not be counted
    index: dict[str, tuple[int, int]] | None
    index_error: str | None = None


def judge_storage(figures: StorageFigures, drift_max: float) -> ComponentHealth:
    checks = [
        Check("postgresql", figures.postgres_error is None, figures.postgres_error is None,
              "reachable", figures.postgres_error or ""),
        Check("redis", figures.redis_error is None, figures.redis_error is None, "reachable",
              figures.redis_error or ""),
    ]  # fmt: skip
    if figures.index is None:
        checks.append(
            Check("vector_index", False, None, "countable", figures.index_error or "not counted")
        )
    else:
        for kind, (points, rows) in sorted(figures.index.items()):
            drift = abs(points - rows) / max(1, rows)
            checks.append(
                Check(
                    f"index_drift_{kind}",
                    drift <= drift_max,
                    round(drift, 4),
                    f"<= {drift_max}",
                    f"{points} points, {rows} live rows in PostgreSQL",
                )
            )
    return ComponentHealth("storage", tuple(checks))


@dataclass(frozen=True)
class RetrievalFigures:
    # tenant -> last golden hit ratio (None: the run had no queries)
    golden: dict[str, float | None]
    golden_age_s: float | None
    vector_p95_s: float | None
    rerank_p95_s: float | None


def judge_retrieval(
    figures: RetrievalFigures, min_ratio: float, latency_max_s: float, max_age_s: float
) -> ComponentHealth:
    checks: list[Check] = []
    ratios = {t: r for t, r in figures.golden.items() if r is not None}
    if not ratios:
        checks.append(Check("golden_hit_ratio", True, None, f">= {min_ratio}", "no golden run yet"))
    for tenant, ratio in sorted(ratios.items()):
        checks.append(
            Check(f"golden_hit_ratio[{tenant}]", ratio >= min_ratio, round(ratio, 4),
                  f">= {min_ratio}")
        )  # fmt: skip
    if figures.golden_age_s is not None:
        checks.append(
            Check("golden_age_s", figures.golden_age_s <= max_age_s,
                  round(figures.golden_age_s, 1), f"<= {max_age_s}")
        )  # fmt: skip
    for name, value in (("vector_p95_s", figures.vector_p95_s),
                        ("rerank_p95_s", figures.rerank_p95_s)):  # fmt: skip
        if value is None:
            checks.append(Check(name, True, None, f"<= {latency_max_s}", "no samples"))
        else:
            checks.append(
                Check(name, value <= latency_max_s, round(value, 4), f"<= {latency_max_s}")
            )
    return ComponentHealth("retrieval", tuple(checks))


@dataclass(frozen=True)
class CompressionFigures:
    # seconds since the last compress or quality run started (None: never)
    last_run_age_s: float | None
    # live episodic rows: a store with nothing to compress needs no recent run
    live_rows: int
    fact_recall: float | None


# Below this many live rows the compression sweep has nothing worth promoting yet.
COMPRESSIBLE_ROWS = 100


def judge_compression(
    figures: CompressionFigures, max_age_s: float, fact_recall_min: float
) -> ComponentHealth:
    checks: list[Check] = []
    if figures.live_rows < COMPRESSIBLE_ROWS:
        checks.append(
            Check("pipeline_ran", True, figures.last_run_age_s, f"<= {max_age_s}",
                  f"{figures.live_rows} live rows: nothing to compress yet")
        )  # fmt: skip
    elif figures.last_run_age_s is None:
        checks.append(Check("pipeline_ran", False, None, f"<= {max_age_s}", "never ran"))
    else:
        checks.append(
            Check("pipeline_ran", figures.last_run_age_s <= max_age_s,
                  round(figures.last_run_age_s, 1), f"<= {max_age_s}")
        )  # fmt: skip
    if figures.fact_recall is None:
        checks.append(Check("fact_recall", True, None, f">= {fact_recall_min}", "not sampled"))
    else:
        checks.append(
            Check("fact_recall", figures.fact_recall >= fact_recall_min,
                  round(figures.fact_recall, 4), f">= {fact_recall_min}")
        )  # fmt: skip
    return ComponentHealth("compression", tuple(checks))
