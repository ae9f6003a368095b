"""Render the Grafana dashboard from real data, without Grafana (it is not in Debian).

All of it real: (1) a store-owner worker (write, embed, recall) and a background worker
(compress, quality, consolidate, maintenance), each serving /metrics from its main process,
and beat with short sweep periods; (2) this process as the agent, recording the demo's
conversation for two tenants, calling context() in several phases, drawing and running golden
queries, and serving its own metrics with the scrape-time gauges, as the API server does;
(3) Debian's prometheus on a spare port scraping the three every 2 s, alerts.yml loaded;
(4) each panel's PromQL (deploy/grafana/dashboards/memharness.json) asked of it over the HTTP
API, ``$__rate_interval`` standing for 20 s; (5) the answers drawn as SVG by gridPos into
var/dashboard.html, and headless Chromium's screenshot of it in docs/img/dashboard.png.
``--scrape HOST:PORT`` (repeatable) skips (1)-(2) and renders running endpoints. Run it on
state of its own, e.g.::

    MEMHARNESS_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/memharness_dashboard \\
    MEMHARNESS_REDIS_URL=redis://127.0.0.1:6379/11 MEMHARNESS_QDRANT_PATH=var/dashboard-qdrant \\
    .venv/bin/python scripts/render_dashboard.py --fresh
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "memharness.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
SCRAPE_INTERVAL_S = 2
RATE_WINDOW = "20s"  # four scrape intervals and more: every rate() has two samples or more
PAGE_WIDTH_PX = 1600
GRID_ROW_PX = 30  # Grafana's height of one gridPos unit
# Grafana's classic palette, in its order.
COLOURS = ("#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff")  # fmt: skip
TENANTS = {"acme": 160, "globex": 60}  # interactions recorded per tenant
PHASES = ("planning", "execution", "debugging", "review", None)
# Short periods so every sweep, the golden run and the index check happen within minutes.
WORKLOAD_ENV = {
    "MEMHARNESS_GOLDEN_INTERVAL_S": "20",
    "MEMHARNESS_COMPRESS_INTERVAL_S": "30",
    "MEMHARNESS_COMPRESS_TICK_S": "15",
    "MEMHARNESS_QUALITY_INTERVAL_S": "30",
    "MEMHARNESS_DECAY_INTERVAL_S": "30",
    "MEMHARNESS_TENANT_IDLE_S": "20",
    "MEMHARNESS_INDEX_CHECK_INTERVAL_S": "60",
    "MEMHARNESS_EPISODIC_CAPACITY": "300",
    "MEMHARNESS_RELAY_INTERVAL_S": "5",
}


def spare_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_json(url: str, timeout_s: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


# -- Prometheus --------------------------------------------------------------------------------


@contextlib.contextmanager
def prometheus(targets: Mapping[str, Sequence[str]], workdir: Path) -> Iterator[str]:
    """Debian's prometheus on a spare port, scraping ``targets`` ({job: [host:port]})."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed: bash scripts/services.sh installs it")
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
        },
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(hosts)}]}
            for job, hosts in targets.items()
        ],
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = spare_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).close()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((workdir / "prometheus.log").read_text()[-2000:])
            time.sleep(0.3)
        print(f"prometheus {url} scraping {targets}", file=sys.stderr)
        yield url
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
        log.close()


def query_panel(url: str, panel: dict[str, Any], start: float, end: float) -> list[dict[str, Any]]:
    """Every target's series: [{"legend", "points": [(t, v)]}] (one point for stats)."""
    out: list[dict[str, Any]] = []
    for target in panel["targets"]:
        expr = target["expr"].replace("$__rate_interval", RATE_WINDOW)
        if panel["type"] == "timeseries":
            step = max(SCRAPE_INTERVAL_S, int((end - start) / 240))
            query = {"query": expr, "start": start, "end": end, "step": step}
            answer = http_json(f"{url}/api/v1/query_range?{urllib.parse.urlencode(query)}")
        else:
            query = {"query": expr, "time": end}
            answer = http_json(f"{url}/api/v1/query?{urllib.parse.urlencode(query)}")
        for series in answer["data"]["result"]:
            values = series.get("values") or [series["value"]]
            points = [(float(t), float(v)) for t, v in values if math.isfinite(float(v))]
            if points:
                out.append(
                    {
                        "legend": legend(target.get("legendFormat", ""), series["metric"]),
                        "points": points,
                    }
                )
    return out


def legend(template: str, labels: dict[str, str]) -> str:
    text = template
    for name, value in labels.items():
        text = text.replace("{{" + name + "}}", value)
    return text or ", ".join(f"{k}={v}" for k, v in labels.items()) or "value"


# -- drawing -----------------------------------------------------------------------------------


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        if value == 0:
            return "0 s"
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    if unit == "percentunit":
        return f"{value * 100:.3g} %"
    suffix = "/s" if unit == "ops" else ""
    for scale, name in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{name}{suffix}"
    return f"{value:.3g}{suffix}"


def threshold_colour(panel: dict[str, Any], value: float) -> str:
    colour = "#73bf69"
    for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]:
        if step["value"] is None or value >= step["value"]:
            colour = {"green": "#73bf69", "red": "#f2495c", "orange": "#ff9830"}.get(
                step["color"], step["color"]
            )
    return colour


def draw_timeseries(
    panel: dict[str, Any], series: list[dict[str, Any]], w: int, h: int, start: float, end: float
) -> str:
    unit = panel["fieldConfig"]["defaults"]["unit"]
    plot_w, plot_h, left = w - 80, h - 30, 70
    values = [v for s in series for _, v in s["points"]]
    lines = [
        t["value"]
        for t in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        if t["value"] is not None
    ]
    top = max([*values, *lines, 0.0]) * 1.1 or 1.0
    bottom = min([*values, 0.0])

    def xy(t: float, v: float) -> str:
        x = left + (t - start) / max(end - start, 1) * plot_w
        y = 8 + (1 - (v - bottom) / ((top - bottom) or 1)) * plot_h
        return f"{x:.1f},{y:.1f}"

    parts = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">']
    for i in range(4):
        v = bottom + (top - bottom) * i / 3
        y = 8 + (1 - i / 3) * plot_h
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#2c3235"/>'
        )
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{html.escape(fmt(v, unit))}</text>"
        )
    for stamp, anchor in ((start, "start"), ((start + end) / 2, "middle"), (end, "end")):
        x = left + (stamp - start) / max(end - start, 1) * plot_w
        label = datetime.fromtimestamp(stamp, UTC).strftime("%H:%M:%S")
        parts.append(f'<text x="{x:.1f}" y="{h - 4}" text-anchor="{anchor}">{label}</text>')
    for line in lines:
        line_y = xy(start, line).split(",")[1]
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{line_y}" y2="{line_y}" '
            'stroke="#f2495c" stroke-dasharray="4 3"/>'
        )
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(xy(t, v) for t, v in s["points"])
        if len(s["points"]) == 1:
            dot_x, dot_y = xy(*s["points"][0]).split(",")
            parts.append(f'<circle cx="{dot_x}" cy="{dot_y}" r="2.5" fill="{colour}"/>')
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


def draw_legend(panel: dict[str, Any], series: list[dict[str, Any]]) -> str:
    unit = panel["fieldConfig"]["defaults"]["unit"]
    items = []
    for i, s in enumerate(series[:6]):
        colour = COLOURS[i % len(COLOURS)]
        last = fmt(s["points"][-1][1], unit)
        items.append(
            f'<span><i style="background:{colour}"></i>{html.escape(s["legend"])}'
            f" <b>{html.escape(last)}</b></span>"
        )
    more = f"<span>+{len(series) - 6} more</span>" if len(series) > 6 else ""
    return f'<div class="legend">{"".join(items)}{more}</div>'


def draw_stat(panel: dict[str, Any], series: list[dict[str, Any]], w: int, h: int) -> str:
    unit = panel["fieldConfig"]["defaults"]["unit"]
    cells = []
    for s in series:
        value = s["points"][-1][1]
        colour = threshold_colour(panel, value)
        size = min(48, max(20, h // 3)) if len(series) == 1 else 26
        label = f'<div class="sub">{html.escape(s["legend"])}</div>' if len(series) > 1 else ""
        cells.append(
            f'<div class="stat" style="color:{colour};font-size:{size}px">'
            f"{html.escape(fmt(value, unit))}{label}</div>"
        )
    if panel["type"] == "gauge" and series:
        value = series[0]["points"][-1][1]
        top = panel["fieldConfig"]["defaults"].get("max", 1.0)
        share = max(0.0, min(1.0, value / top))
        r, cx, cy = min(w / 2 - 20, h - 60), w / 2, h - 40
        angle = math.pi * (1 - share)
        x, y = cx + r * math.cos(angle), cy - r * math.sin(angle)
        colour = threshold_colour(panel, value)
        return (
            f'<svg width="{w}" height="{h - 10}"><path d="M {cx - r} {cy} A {r} {r} 0 0 1 '
            f'{cx + r} {cy}" stroke="#2c3235" stroke-width="16" fill="none"/>'
            f'<path d="M {cx - r} {cy} A {r} {r} 0 0 1 {x:.1f} {y:.1f}" stroke="{colour}" '
            f'stroke-width="16" fill="none"/><text x="{cx}" y="{cy - 4}" text-anchor="middle"'
            f' class="big" fill="{colour}">{html.escape(fmt(value, "percentunit"))}</text>'
            "</svg>"
        )
    return f'<div class="stats">{"".join(cells)}</div>'


def render_html(
    dashboard: dict[str, Any],
    data: dict[int, list[dict[str, Any]]],
    start: float,
    end: float,
    note: str,
    alerts: list[dict[str, Any]],
) -> str:
    col = (PAGE_WIDTH_PX - 16) / 24
    header_px = 70
    blocks = []
    bottom = 0
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        x, y = 8 + g["x"] * col, header_px + g["y"] * GRID_ROW_PX
        w, h = int(g["w"] * col) - 6, g["h"] * GRID_ROW_PX - 6
        bottom = max(bottom, int(y + h))
        if panel["type"] == "row":
            blocks.append(
                f'<div class="row" style="left:{x}px;top:{y}px;width:{w}px">'
                f"{html.escape(panel['title'])}</div>"
            )
            continue
        series = data.get(panel["id"], [])
        if not series:
            body = '<div class="empty">No data</div>'
        elif panel["type"] == "timeseries":
            body = draw_timeseries(panel, series, w - 12, h - 64, start, end)
            body += draw_legend(panel, series)
        else:
            body = draw_stat(panel, series, w - 12, h - 36)
        blocks.append(
            f'<div class="panel" style="left:{x}px;top:{y}px;width:{w}px;height:{h}px">'
            f'<div class="title">{html.escape(panel["title"])}</div>{body}</div>'
        )
    firing = ", ".join(f"{a['labels']['alertname']} ({a['state']})" for a in alerts) or "none"
    span = (
        f"{datetime.fromtimestamp(start, UTC):%Y-%m-%d %H:%M:%S} – "
        f"{datetime.fromtimestamp(end, UTC):%H:%M:%S} UTC"
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>memory-harness</title>
<style>
body{{margin:0;background:#111217;color:#ccccdc;font:12px Inter,Helvetica,Arial,sans-serif;
position:relative;height:{bottom + 40}px;width:{PAGE_WIDTH_PX}px}}
.head{{position:absolute;left:8px;top:8px;right:8px}} .head h1{{font-size:18px;margin:0 0 4px;
color:#fff}} .panel{{position:absolute;background:#181b1f;border:1px solid #2c3235;
border-radius:2px;padding:6px;box-sizing:border-box;overflow:hidden}}
.title{{font-weight:600;color:#fff;margin-bottom:4px}} .row{{position:absolute;font-size:15px;
font-weight:600;color:#fff}} svg text{{fill:#9fa7b3;font-size:10px}} .legend span{{margin-right:
10px;white-space:nowrap;display:inline-block}} .legend i{{display:inline-block;width:10px;
height:3px;margin-right:4px;vertical-align:middle}} .stats{{display:flex;flex-wrap:wrap;
height:80%;align-items:center;justify-content:space-around}} .stat{{font-weight:600;
text-align:center}} .sub{{font-size:11px;color:#9fa7b3;font-weight:400}} .big{{font-size:22px;
font-weight:600}} .empty{{color:#6e7380;text-align:center;margin-top:40px}}
</style></head><body><div class="head"><h1>memory-harness</h1>{html.escape(note)}<br>
{span} · alerts: {html.escape(firing)}</div>{"".join(blocks)}</body></html>"""


def screenshot(page: Path, png: Path, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed: bash scripts/services.sh installs it")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memharness-chromium-") as profile:
        subprocess.run(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--force-device-scale-factor=1",
                f"--window-size={PAGE_WIDTH_PX},{height}",
                f"--screenshot={png}",
                page.resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


# -- the workload ------------------------------------------------------------------------------


def drop_database(database_url: str) -> None:
    """``--fresh``: the run's database dropped, so every figure comes from this run."""
    import psycopg

    base, _, name = database_url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def worker_processes(ports: Sequence[int], log_dir: Path) -> Iterator[None]:
    """The store owner and the background worker, each with its /metrics port, and beat."""
    from memharness.processes import Managed, start_beat, start_worker, wait_for_worker

    groups = (
        ("owner", ["write", "embed", "recall"]),
        ("background", ["compress", "quality", "consolidate", "maintenance"]),
    )
    started: list[Managed] = []
    try:
        for (name, queues), port in zip(groups, ports, strict=True):
            env = {"MEMHARNESS_METRICS_PORT": str(port)}
            started.append(start_worker(name, queues, env=env, log_dir=log_dir))
        for worker in started:
            wait_for_worker(worker, timeout_s=90)
        started.append(start_beat(log_dir=log_dir))
        yield
    finally:
        for process in reversed(started):
            process.stop()


def golden(command: str, tenant: str) -> None:
    memharness = str(Path(sys.executable).with_name("memharness"))
    result = subprocess.run(
        [memharness, "golden", command, "--tenant", tenant],
        capture_output=True,
        text=True,
        timeout=180,
    )
    print(
        f"memharness golden {command} --tenant {tenant}: {result.stdout.strip()[:300]}",
        result.stderr.strip()[-300:],
        file=sys.stderr,
    )


def run_load(duration_s: float) -> dict[str, Any]:
    """The agent: the demo conversation recorded per tenant, context() calls, golden runs."""
    from config import get_settings
    from memharness import MemoryClient
    from memharness.demo import TASK
    from memharness.demo_script import RECALL_QUERIES, script

    settings = get_settings()
    started = time.monotonic()
    figures: dict[str, Any] = {"records": 0, "contexts": 0}
    accepted: list[Any] = []
    with MemoryClient(settings) as client:
        for tenant, count in TENANTS.items():
            turns = script(count, seed=len(tenant))
            batch: list[dict[str, Any]] = []
            for i, turn in enumerate(turns):
                item = {
                    "content": turn.text,
                    "tenant_id": tenant,
                    "task_id": TASK,
                    "session_id": f"day{turn.day + 1}",
                    "timestamp": turn.timestamp,
                }
                if i % 3:  # every third turn alone, the rest as one interaction of two
                    batch.append(item)
                    if len(batch) == 2:
                        receipts = client.record_many(batch)
                        batch = []
                    else:
                        continue
                else:
                    receipts = [
                        client.record(
                            turn.text,
                            tenant_id=tenant,
                            task_id=TASK,
                            session_id=f"day{turn.day + 1}",
                            timestamp=turn.timestamp,
                        )
                    ]
                accepted += [r.memory_id for r in receipts if r.status == "accepted"]
                figures["records"] += len(receipts)
                time.sleep(0.05)
        figures["settled"] = client.wait_until_settled(accepted, timeout_s=180)
        for tenant in TENANTS:
            golden("draw", tenant)
            golden("run", tenant)
        i = 0
        while time.monotonic() - started < duration_s:
            tenant = list(TENANTS)[i % len(TENANTS)]
            query = RECALL_QUERIES[i % len(RECALL_QUERIES)]
            client.context(TASK, query, 16_000, PHASES[i % len(PHASES)], tenant_id=tenant)
            figures["contexts"] += 1
            i += 1
            time.sleep(0.4)
    figures["seconds"] = round(time.monotonic() - started, 1)
    return figures


@contextlib.contextmanager
def agent_endpoint(port: int) -> Iterator[None]:
    """This process's metrics and the scrape-time gauges on /metrics, as the API serves them."""
    from prometheus_client import start_http_server

    from config import get_settings
    from workers.health.endpoint import registry_for

    registry, collector = registry_for(get_settings(), multiproc_dir=None)
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield
    finally:
        server.shutdown()
        collector.close()


# -- main --------------------------------------------------------------------------------------


def render(url: str, start: float, note: str, html_path: Path, png_path: Path) -> dict[str, Any]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    end = time.time()
    data = {
        p["id"]: query_panel(url, p, start, end) for p in dashboard["panels"] if p["type"] != "row"
    }
    alerts = http_json(f"{url}/api/v1/alerts")["data"]["alerts"]
    page = render_html(dashboard, data, start, end, note, alerts)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(page, encoding="utf-8")
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    screenshot(html_path, png_path, 70 + height * GRID_ROW_PX + 30)
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    empty = [p["title"] for p in panels if not data.get(p["id"])]
    return {
        "panels": len(panels),
        "panels_with_data": len(panels) - len(empty),
        "empty_panels": empty,
        "alerts": [a["labels"]["alertname"] for a in alerts],
        "html": str(html_path),
        "png": str(png_path),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration-s", type=float, default=180.0, help="length of the load")
    parser.add_argument(
        "--scrape",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="render what these running endpoints export (no workload)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="drop MEMHARNESS_DATABASE_URL's database first (its own one!)",
    )
    parser.add_argument("--html", type=Path, default=ROOT / "var" / "dashboard.html")
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "img" / "dashboard.png")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    work = Path(tempfile.mkdtemp(prefix="memharness-dashboard-"))
    try:
        if args.scrape:
            with prometheus({"memharness": args.scrape}, work) as url:
                start = time.time()
                time.sleep(args.duration_s)
                note = f"Rendered from {', '.join(args.scrape)} by scripts/render_dashboard.py"
                summary = render(url, start, note, args.html, args.png)
        else:
            summary = run_workload(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary, indent=2))
    return 0


def run_workload(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    os.environ.update(WORKLOAD_ENV)
    from config import get_settings
    from workers.db import migrate

    settings = get_settings()
    if args.fresh:
        drop_database(settings.database_url)
    migrate(settings.database_url)
    owner, background, agent = spare_port(), spare_port(), spare_port()
    targets = {
        "memharness-workers": [f"127.0.0.1:{owner}", f"127.0.0.1:{background}"],
        "memharness-api": [f"127.0.0.1:{agent}"],
    }
    with (
        worker_processes([owner, background], ROOT / "var" / "log" / "dashboard"),
        agent_endpoint(agent),
        prometheus(targets, work) as url,
    ):
        start = time.time()
        figures = run_load(args.duration_s)
        time.sleep(5 * SCRAPE_INTERVAL_S)  # the last samples scraped and rules evaluated
        note = (
            f"Real data: 2 Celery workers + beat + an agent recording {figures['records']} "
            f"interactions and {figures['contexts']} context() calls, scraped every "
            f"{SCRAPE_INTERVAL_S} s by Debian's Prometheus; drawn by scripts/render_dashboard.py"
        )
        summary = render(url, start, note, args.html, args.png)
    return {**summary, "workload": figures}


if __name__ == "__main__":
    raise SystemExit(main())
