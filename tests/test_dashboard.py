"""The Grafana dashboard (deploy/grafana/) asks only for metrics the project exports.

``METRICS`` is the contract between the code that exports metrics (``workers/metrics.py`` and
the scrape-time collector) and what reads them (the dashboard, the alert rules of
deploy/prometheus/alerts.yml): a panel or rule naming anything else would stay empty forever.
Every panel's PromQL is also checked by promtool, as the expression of a recording rule.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_PATH = ROOT / "deploy" / "grafana" / "dashboards" / "memharness.json"
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"

# name -> type; counters carry their exposition name (with _total).
METRICS: dict[str, str] = {
    # write health
    "memharness_write_records_total": "counter",
    "memharness_write_funnel_total": "counter",
    "memharness_writes_per_interaction": "gauge",
    "memharness_embedding_seconds": "histogram",
    "memharness_drain_batch_size": "histogram",
    "memharness_drain_seconds": "histogram",
    "memharness_outbox_lag_seconds": "gauge",
    "memharness_dead_letters": "gauge",
    # retrieval quality
    "memharness_golden_hit_ratio": "gauge",
    "memharness_golden_runs_total": "counter",
    "memharness_rerank_rank_shift": "histogram",
    "memharness_rerank_seconds": "histogram",
    "memharness_vector_search_seconds": "histogram",
    "memharness_context_budget_utilisation_ratio": "histogram",
    "memharness_context_stage_seconds": "histogram",
    # compression health
    "memharness_memories": "gauge",
    "memharness_sweep_runs_total": "counter",
    "memharness_sweep_seconds": "histogram",
    "memharness_fact_recall_ratio": "gauge",
    "memharness_compression_rollbacks_total": "counter",
    "memharness_compression_resistant": "gauge",
    "memharness_capacity_ratio": "gauge",
    # queues, tasks, the index, health
    "memharness_queue_depth": "gauge",
    "memharness_task_seconds": "histogram",
    "memharness_task_failures_total": "counter",
    "memharness_workers_up": "gauge",
    "memharness_index_points": "gauge",
    "memharness_index_drift_ratio": "gauge",
    "memharness_index_missing_points": "gauge",
    "memharness_index_degraded": "gauge",
    "memharness_degraded_reads_total": "counter",
    "memharness_health_up": "gauge",
    # LLM cost (scrape: the token ledger's totals)
    "memharness_llm_tokens_total": "counter",
    "memharness_llm_calls_total": "counter",
}
FAMILIES = {
    "Write health": {
        "memharness_write_records_total", "memharness_write_funnel_total",
        "memharness_writes_per_interaction", "memharness_embedding_seconds",
        "memharness_drain_batch_size", "memharness_drain_seconds",
        "memharness_outbox_lag_seconds", "memharness_dead_letters",
    },
    "Retrieval quality": {
        "memharness_golden_hit_ratio", "memharness_golden_runs_total",
        "memharness_rerank_rank_shift", "memharness_rerank_seconds",
        "memharness_vector_search_seconds", "memharness_context_budget_utilisation_ratio",
        "memharness_context_stage_seconds",
    },
    "Compression health": {
        "memharness_memories", "memharness_sweep_runs_total", "memharness_sweep_seconds",
        "memharness_fact_recall_ratio", "memharness_compression_rollbacks_total",
        "memharness_compression_resistant", "memharness_capacity_ratio",
    },
    "Queues, tasks and the index": {
        "memharness_queue_depth", "memharness_task_seconds", "memharness_task_failures_total",
        "memharness_workers_up", "memharness_index_points", "memharness_index_drift_ratio",
        "memharness_index_missing_points", "memharness_index_degraded",
        "memharness_degraded_reads_total", "memharness_health_up",
    },
    "LLM cost": {"memharness_llm_tokens_total", "memharness_llm_calls_total"},
}  # fmt: skip
_HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")
_NAME_RE = re.compile(r"\bmemharness_[a-z0-9_]+")
# Grafana's interval variables; a rate window is all they stand for in these panels.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}


def metric_of(series: str) -> str | None:
    """The contract metric a series name belongs to (histograms expose three series)."""
    if series in METRICS:
        return series
    for suffix in _HISTOGRAM_SERIES:
        base = series.removesuffix(suffix)
        if base != series and METRICS.get(base) == "histogram":
            return base
    return None


def series_in(expr: str) -> set[str]:
    """The memharness_* series an expression reads (label values never start with it)."""
    return set(_NAME_RE.findall(re.sub(r'"[^"]*"', '""', expr)))


def expand(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def promtool_or_skip() -> str:
    """promtool's path; under CI a missing promtool fails (scripts/services.sh installs it)."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: scripts/services.sh installs Debian's prometheus")
        pytest.skip("promtool is not installed (bash scripts/services.sh installs it)")
    return found


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text(encoding="utf-8"))
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def rows(dashboard: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Panels under each row title, in the order Grafana lays them out."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    current = ""
    for panel in sorted(dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        if panel["type"] == "row":
            current = panel["title"]
            grouped[current] = []
        else:
            grouped.setdefault(current, []).append(panel)
    return grouped


def test_every_panel_queries_only_metrics_of_the_contract(dashboard: dict[str, Any]) -> None:
    unknown = {}
    for panel in panels(dashboard):
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            names = series_in(target["expr"])
            assert names, f"{panel['title']}: {target['expr']} reads no memharness metric"
            bad = {name for name in names if metric_of(name) is None}
            if bad:
                unknown[panel["title"]] = bad
    assert unknown == {}


def test_every_metric_of_the_contract_is_on_the_dashboard_in_its_family(
    dashboard: dict[str, Any],
) -> None:
    assert set().union(*FAMILIES.values()) == set(METRICS)
    grouped = rows(dashboard)
    assert set(grouped) == set(FAMILIES), "one row per family"
    for family, expected in FAMILIES.items():
        shown = {
            metric_of(name)
            for panel in grouped[family]
            for target in panel["targets"]
            for name in series_in(target["expr"])
        }
        assert shown == expected, family


def test_histograms_are_read_through_buckets_or_sum_over_count(dashboard: dict[str, Any]) -> None:
    # a bare histogram name matches no series at all
    for panel in panels(dashboard):
        for target in panel["targets"]:
            for name in series_in(target["expr"]):
                if METRICS.get(name) == "histogram":
                    pytest.fail(f"{panel['title']}: {name} without _bucket/_sum/_count")
                if name.endswith("_bucket"):
                    assert "histogram_quantile(" in target["expr"], panel["title"]


def test_every_panel_expression_is_valid_promql(dashboard: dict[str, Any], tmp_path: Path) -> None:
    promtool = promtool_or_skip()
    # given every panel's query as a recording rule, so promtool parses it
    rules = [
        {
            "record": f"dashboard:panel_{panel['id']}_{target['refId']}",
            "expr": expand(target["expr"]),
        }
        for panel in panels(dashboard)
        for target in panel["targets"]
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_panels_tile_the_grid_without_overlapping(dashboard: dict[str, Any]) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_panels_use_the_provisioned_data_source(dashboard: dict[str, Any]) -> None:
    provisioned = yaml.safe_load(
        (PROVISIONING / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )
    (source,) = provisioned["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": source["uid"]}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"], panel["title"]


def test_the_dashboard_provider_loads_a_directory_holding_the_dashboard() -> None:
    provider = yaml.safe_load(
        (PROVISIONING / "dashboards" / "memharness.yml").read_text(encoding="utf-8")
    )
    (entry,) = provider["providers"]
    assert entry["type"] == "file"
    assert entry["options"]["path"] == "/etc/grafana/dashboards"
    assert DASHBOARD_PATH.parent.name == "dashboards"


def test_the_renderer_draws_every_panel_and_marks_the_empty_ones(
    dashboard: dict[str, Any],
) -> None:
    # given scripts/render_dashboard.py's drawing, fed one time series and one stat
    spec = importlib.util.spec_from_file_location(
        "render_dashboard", ROOT / "scripts" / "render_dashboard.py"
    )
    assert spec is not None and spec.loader is not None
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    series = next(p for p in panels(dashboard) if p["type"] == "timeseries")
    stat = next(p for p in panels(dashboard) if p["type"] == "stat")
    data = {
        series["id"]: [{"legend": "acme", "points": [(0.0, 0.5), (30.0, 0.9), (60.0, 1.0)]}],
        stat["id"]: [{"legend": "writes", "points": [(60.0, 2.0)]}],
    }
    # when the page is drawn
    page = render.render_html(dashboard, data, 0.0, 60.0, "test", [])
    # then every panel and row is on it, the two with data drawn, the rest saying so
    for panel in dashboard["panels"]:
        assert html.escape(panel["title"]) in page, panel["title"]
    assert page.count("<polyline") == 1
    assert '<div class="stat" style="color:#73bf69;font-size:' in page
    assert page.count("No data") == len(panels(dashboard)) - 2
    assert render.fmt(0.25, "s") == "250 ms" and render.fmt(0.8, "percentunit") == "80 %"
