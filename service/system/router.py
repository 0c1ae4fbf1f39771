"""Health, metrics and the self-hosted API docs."""

from __future__ import annotations

import os
import time

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.common import ErrorEnvelope
from schemas.system import Health, Pong
from service.deps import SessionDep
from service.system import service

router = APIRouter(tags=["system"])  # no request bodies: no OrjsonRoute

# Module-level collectors, as prometheus_client expects; with several worker processes the serve command sets
# PROMETHEUS_MULTIPROC_DIR and /metrics aggregates every process's files.
REQUESTS = Counter("ridgeline_http_requests_total", "HTTP requests", ["method", "route", "status"])
LATENCY = Histogram(
    "ridgeline_http_request_duration_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


# A constant, not touching the database: the baseline bench/throughput.py measures the estimates against (the cost of
# HTTP, routing and the middleware alone).
PONG = Pong(pong=True)


@router.get("/v1/system/ping")
async def ping() -> Pong:
    """A constant answer: the framework's own cost per request (the baseline of bench/throughput.py)."""
    return PONG


@router.get("/healthz", responses={503: {"model": ErrorEnvelope, "description": "Database unreachable"}})
def healthz(session: SessionDep) -> Health:
    """Liveness and readiness: the database answers and the catalogue is loaded."""
    return service.health(session)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics() -> Response:
    """Prometheus metrics in the text exposition format."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        data = generate_latest(registry)
    else:
        data = generate_latest()
    return Response(content=data, media_type=CONTENT_TYPE_LATEST)


@router.get("/docs", include_in_schema=False)
def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="Ridgeline API",
        swagger_js_url=f"{root}/static/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/static/swagger-ui/swagger-ui.css",
        swagger_favicon_url=f"{root}/static/swagger-ui/favicon-32x32.png",
    )


class MetricsMiddleware:
    """Counts and times every HTTP request by route template and status.

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs each request through a task
    group and wraps every `receive` in another, a cost on every request with a body (bench/throughput.py). The time
    is taken when the response starts: the server's work, not the body's transfer to a slow client.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        elapsed: float | None = None

        async def observed_send(message: Message) -> None:
            nonlocal status, elapsed
            if message["type"] == "http.response.start":
                status, elapsed = message["status"], time.perf_counter() - start
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            # The route template, not the path: /v1/hardware/{slug}, so slugs don't explode the label set.
            name = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"]
            LATENCY.labels(method, name).observe(time.perf_counter() - start if elapsed is None else elapsed)
            REQUESTS.labels(method, name, str(status)).inc()


def install_metrics_middleware(app: FastAPI) -> None:
    app.add_middleware(MetricsMiddleware)
