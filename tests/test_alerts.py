"""The alert rules and Prometheus config of deploy/prometheus/, checked by promtool.

``promtool check rules`` and ``check config`` validate the files; ``promtool test rules`` runs
alerts_test.yml, where every alert fires on series that should fire it and stays silent on
series that should not. The rest holds the rules to the project: each has a ``for:``, a
severity, a summary and a runbook anchor that docs/operations.md really has, and reads only
metrics of the contract (tests/test_dashboard.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_dashboard import metric_of, promtool_or_skip, series_in

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES_PATH = PROMETHEUS_DIR / "alerts.yml"
RULE_TESTS_PATH = PROMETHEUS_DIR / "alerts_test.yml"
CONFIG_PATH = PROMETHEUS_DIR / "prometheus.yml"
OPERATIONS = ROOT / "docs" / "operations.md"
# The operator's lines, each an alert of its own: retrieval, write path, capacity, index, workers.
REQUIRED_ALERTS = {
    "MemharnessGoldenHitRateLow",
    "MemharnessRerankSlow",
    "MemharnessOutboxLagHigh",
    "MemharnessDeadLettersRising",
    "MemharnessCapacityNearWatermark",
    "MemharnessIndexDrift",
    "MemharnessWorkersDown",
    "MemharnessQueueBacklogGrowing",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool_or_skip(), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.fixture(scope="module")
def alerts() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


# -- promtool --------------------------------------------------------------------------------


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", str(RULES_PATH))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_accepts_the_scrape_config_and_its_rule_file() -> None:
    result = promtool("check", "config", str(CONFIG_PATH))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is valid prometheus config file syntax" in result.stdout


def test_every_alert_passes_its_unit_tests() -> None:
    result = promtool("test", "rules", str(RULE_TESTS_PATH))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_fail_when_an_alert_misbehaves(tmp_path: Path) -> None:
    # given the golden-query line moved from 80 % to 40 %, acme's 50 % no longer fires
    broken = RULES_PATH.read_text(encoding="utf-8").replace(
        "(memharness_golden_hit_ratio) < 0.8", "(memharness_golden_hit_ratio) < 0.4"
    )
    assert broken != RULES_PATH.read_text(encoding="utf-8")
    (tmp_path / "alerts.yml").write_text(broken)
    (tmp_path / "alerts_test.yml").write_text(RULE_TESTS_PATH.read_text(encoding="utf-8"))
    result = promtool("test", "rules", str(tmp_path / "alerts_test.yml"))
    assert result.returncode != 0
    assert "MemharnessGoldenHitRateLow" in result.stdout + result.stderr


# -- the rules, held to the project ------------------------------------------------------------


def test_the_alerts_asked_for_exist(alerts: list[dict[str, Any]]) -> None:
    names = [rule["alert"] for rule in alerts]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_ALERTS


def test_every_alert_has_a_for_a_severity_a_summary_and_a_runbook(
    alerts: list[dict[str, Any]],
) -> None:
    anchors = github_anchors(OPERATIONS.read_text(encoding="utf-8"))
    for rule in alerts:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"].strip(), name
        assert rule["annotations"]["description"].strip(), name
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/operations.md", name
        assert anchor in anchors, f"{name}: docs/operations.md has no heading #{anchor}"


def test_every_alert_reads_only_metrics_of_the_contract(alerts: list[dict[str, Any]]) -> None:
    for rule in alerts:
        names = series_in(rule["expr"])
        assert names or re.search(r"\bup\{", rule["expr"]), rule["alert"]
        assert {name for name in names if metric_of(name) is None} == set(), rule["alert"]


def test_every_alert_is_seen_firing_and_silent_in_the_unit_tests(
    alerts: list[dict[str, Any]],
) -> None:
    tests = yaml.safe_load(RULE_TESTS_PATH.read_text(encoding="utf-8"))
    assert tests["rule_files"] == ["alerts.yml"]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerts}
    assert names - firing == set(), "alerts never seen firing"
    assert names - silent == set(), "alerts never seen silent"


def test_the_scrape_config_loads_the_rules_and_scrapes_workers_and_api() -> None:
    config = yaml.safe_load(CONFIG_PATH.read_text(encoding="utf-8"))
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {"memharness-workers", "memharness-api"} <= set(jobs)
    # the alert on scrape targets matches exactly the project's jobs
    assert all(re.fullmatch("memharness.*", name) for name in jobs if name != "prometheus")
