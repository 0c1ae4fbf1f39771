"""Health, metrics and docs."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings


@pytest.mark.databases  # the health check queries each backend
def test_healthz_checks_the_database_and_counts_the_catalogue(client: TestClient) -> None:
    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["catalogue"]["hardware"] >= 19 and body["catalogue"]["models"] >= 14


def test_healthz_is_503_when_the_database_is_unreachable() -> None:
    # Port 1 on loopback refuses connections at once.
    app = create_app(Settings(database_url="postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["error"] == "unavailable"


def test_metrics_count_requests_by_route_template(client: TestClient) -> None:
    client.get("/v1/hardware/h100-sxm")
    client.get("/v1/hardware/nope")
    text = client.get("/metrics").text
    assert 'ridgeline_http_requests_total{method="GET",route="/v1/hardware/{slug}",status="200"}' in text
    assert 'ridgeline_http_requests_total{method="GET",route="/v1/hardware/{slug}",status="404"}' in text


def test_docs_page_uses_local_assets_only(client: TestClient) -> None:
    html = client.get("/docs").text
    assert "/static/swagger-ui/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower() and "https://" not in html
    js = client.get("/static/swagger-ui/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000


def test_unknown_route_is_a_404_envelope(client: TestClient) -> None:
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_wrong_method_is_a_405_envelope(client: TestClient) -> None:
    response = client.put("/v1/hardware/h100-sxm", json={})
    assert response.status_code == 405 and response.json()["error"] == "method_not_allowed"
