"""Who may knock: requests without a live key limited per client address, and ``/metrics``
behind the install's token or on a port of its own, through real servers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from memharness.server.keys import create_key
from tests.integration.test_http_api import (
    assert_refused,
    spare_port,
    spawn_server,
    stop_server,
    wait_ready,
)

pytestmark = pytest.mark.integration

BAD_KEY = "mh_0123456789ab_not-a-secret-anyone-holds"


def test_a_flood_of_bad_keys_from_one_address_gets_429_with_retry_after(
    db: Any, redis_client: Any, tmp_path: Path
) -> None:
    good, _ = create_key(db, tenant_id="acme", scopes="read")
    server = wait_ready(
        spawn_server(
            tmp_path,
            "flood",
            {
                "MEMHARNESS_API_UNAUTHENTICATED_RATE_PER_S": "0.2",
                "MEMHARNESS_API_UNAUTHENTICATED_BURST": "5",
            },
        )
    )
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            # the good key is used once, so this process knows it is live
            assert client.get("/v1/stats", headers={"X-API-Key": good}).status_code == 200
            # when: made-up keys, no key and a key in the URL, one after the other
            answers = []
            for n in range(12):
                headers = {"Authorization": f"Bearer {BAD_KEY}{n}"} if n % 3 else {}
                path = "/v1/stats?api_key=x" if n % 4 == 3 else "/v1/stats"
                answers.append(client.get(path, headers=headers))
            # then: the burst is answered 401, the rest 429 with Retry-After
            assert [a.status_code for a in answers[:5]] == [401] * 5
            for limited in answers[5:]:
                assert_refused(limited, 429, "rate_limited", "client")
                assert int(limited.headers["retry-after"]) >= 1
            assert answers[5].json()["limit"] == "0.2 requests/s, burst 5"
            # a live key from the same address is still served: the limit is for knocking
            assert client.get("/v1/stats", headers={"X-API-Key": good}).status_code == 200
            # the bucket refills: after its Retry-After, one more bad key is a 401 again
            time.sleep(int(answers[-1].headers["retry-after"]) + 0.2)
            assert client.get("/v1/stats").status_code == 401
    finally:
        stop_server(server)


def test_metrics_on_the_api_port_need_the_install_token(
    db: Any, redis_client: Any, tmp_path: Path
) -> None:
    tenant_admin, _ = create_key(db, tenant_id="acme", scopes="admin")
    server = wait_ready(
        spawn_server(
            tmp_path,
            "metrics-key",
            {
                "MEMHARNESS_API_METRICS_KEY": "scrape-token-1",
                "MEMHARNESS_API_UNAUTHENTICATED_BURST": "4",
                "MEMHARNESS_API_UNAUTHENTICATED_RATE_PER_S": "0.1",
            },
        )
    )
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            scraped = client.get("/metrics", headers={"Authorization": "Bearer scrape-token-1"})
            assert scraped.status_code == 200
            assert scraped.headers["content-type"].startswith("text/plain")
            assert "memharness_outbox_lag_seconds" in scraped.text
            # no token, a wrong one, a tenant's admin key: none of them reads every tenant's
            for headers in ({}, {"Authorization": "Bearer scrape-token-2"},
                            {"Authorization": f"Bearer {tenant_admin}"}):  # fmt: skip
                assert_refused(client.get("/metrics", headers=headers), 401, "unauthorized",
                               "authorization")  # fmt: skip
            # the failures count against the address like bad API keys
            client.get("/metrics")
            assert_refused(client.get("/metrics"), 429, "rate_limited", "client")
            # the operator's token still scrapes
            assert (
                client.get(
                    "/metrics", headers={"Authorization": "Bearer scrape-token-1"}
                ).status_code
                == 200
            )
    finally:
        stop_server(server)


def test_metrics_without_a_token_or_a_port_are_refused(
    db: Any, redis_client: Any, tmp_path: Path
) -> None:
    server = wait_ready(spawn_server(tmp_path, "metrics-none", {}))
    try:
        refused = httpx.get(f"{server.url}/metrics", timeout=10)
        assert_refused(refused, 401, "unauthorized", "authorization")
        assert "MEMHARNESS_API_METRICS_PORT" in refused.json()["message"]
    finally:
        stop_server(server)


def test_metrics_on_their_own_port_leave_the_api_port(
    db: Any, redis_client: Any, tmp_path: Path
) -> None:
    port = spare_port()
    server = wait_ready(
        spawn_server(tmp_path, "metrics-port", {"MEMHARNESS_API_METRICS_PORT": str(port)})
    )
    try:
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
        assert scraped.status_code == 200
        assert "memharness_outbox_lag_seconds" in scraped.text
        assert_refused(httpx.get(f"{server.url}/metrics", timeout=10), 404, "not_found", "path")
    finally:
        stop_server(server)


def test_swagger_ui_is_served_by_the_server_itself(
    db: Any, redis_client: Any, tmp_path: Path
) -> None:
    import re

    server = wait_ready(spawn_server(tmp_path, "docs", {}))
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            page = client.get("/docs")
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/html")
            # every asset the page loads is a path of this server: no CDN, no other host
            assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
            assert len(assets) >= 3, page.text
            assert "://" not in page.text.replace("http-equiv", "")
            for asset in assets:
                assert asset.startswith("/docs/assets/"), asset
                served = client.get(asset)
                assert served.status_code == 200, asset
                assert len(served.content) > 500, asset
            bundle = client.get("/docs/assets/swagger-ui-bundle.js")
            assert "javascript" in bundle.headers["content-type"]
            assert "SwaggerUIBundle" in bundle.text
            # Swagger UI 5: the one that renders the OpenAPI 3.1 the page points at
            assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
            assert client.get("/docs/oauth2-redirect").status_code == 200
            # ReDoc would load from a CDN: it is off
            assert client.get("/redoc").status_code == 404
    finally:
        stop_server(server)
