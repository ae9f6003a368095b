"""``/metrics`` of a server process on a port of its own (``api_metrics_port``), so that the
operator can keep the scrape (about 14 ms of SQL for the scrape-time gauges) on a private
address instead of behind a token on the API's port.

prometheus_client's own threaded HTTP server serves it; each scrape runs the collector in
that thread, off the event loop. With ``serve --workers N`` the first process to bind the
port serves it and the others run without an endpoint (as workers sharing a host do).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from config import Settings

log = logging.getLogger(__name__)


@dataclass
class MetricsEndpoint:
    server: Any
    collector: Any

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.collector.close()


def start_metrics_endpoint(settings: Settings) -> MetricsEndpoint | None:
    """Serve this process's metrics on ``api_metrics_port``; None when the port is off or
    another process holds it."""
    if not settings.api_metrics_port:
        return None
    from prometheus_client import start_http_server

    from workers.health.endpoint import registry_for

    registry, collector = registry_for(settings, multiproc_dir=None, ping_workers=False)
    try:
        server, _thread = start_http_server(
            settings.api_metrics_port, addr=settings.api_host, registry=registry
        )
    except OSError as exc:
        collector.close()
        log.warning("API metrics not served on port %s: %s", settings.api_metrics_port, exc)
        return None
    log.info("API metrics on http://%s:%s/metrics", settings.api_host, settings.api_metrics_port)
    return MetricsEndpoint(server, collector)
