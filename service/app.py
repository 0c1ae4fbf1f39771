"""The FastAPI application factory."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from schemas.jobs import JobKind
from schemas.plan import PlanRequest
from schemas.serving import ServingRequest
from schemas.training_plan import TrainingPlanRequest
from service.accuracy.router import router as accuracy_router
from service.auth import READ_RESPONSES, viewer
from service.benchmarks.router import router as benchmarks_router
from service.calibrations.router import router as calibrations_router
from service.catalogue.loopread import digest_reader
from service.charts.router import router as roofline_router
from service.collectives.router import router as collectives_router
from service.db import make_engine, make_sessionmaker
from service.encoding import ORJSONResponse
from service.errors import install_error_handlers
from service.estimates.router import router as estimates_router
from service.hardware.router import router as hardware_router
from service.heavy import HeavyGate, HeavyLimits
from service.inference.router import router as inference_router
from service.jobs.router import router as jobs_router
from service.jobs.runner import JobRunner
from service.jobs.work import Kind
from service.limits import install_body_limit
from service.models.router import router as models_router
from service.plan import service as plan_service
from service.plan.router import router as plan_router
from service.ratelimit import RateLimits
from service.serving import service as serving_service
from service.serving.router import router as serving_router
from service.serving_benchmarks.router import router as serving_benchmarks_router
from service.settings import Settings
from service.system.router import install_metrics_middleware
from service.system.router import router as system_router
from service.timeouts import install_timeouts
from service.traces.router import router as traces_router
from service.training import service as training_service
from service.training.router import router as training_router
from service.ui.router import STATIC_DIR as UI_STATIC_DIR
from service.ui.router import router as ui_router

STATIC_DIR = Path(__file__).parent / "static"

# The long computations that run as jobs: each its synchronous endpoint's schema and how it splits into pieces.
JOB_KINDS: dict[str, Kind] = {
    JobKind.plan: Kind(PlanRequest, plan_service.job),
    JobKind.plan_training: Kind(TrainingPlanRequest, training_service.plan_job),
    JobKind.estimate_serving: Kind(ServingRequest, serving_service.job),
}

DESCRIPTION = """
Ridgeline tells capacity planners and kernel engineers how long accelerator work should take, why, and how far
real hardware is from that answer.

Every figure in the hardware catalogue carries its source. Errors always have the shape
`{"error": code, "message": text, "detail": [{"field", "message", "type"}]}`.
"""


class _StaticFiles(StaticFiles):
    """The bundled assets; a path with a NUL character names none of them (the file system refuses such a name with
    a ValueError that would otherwise be a 500)."""

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        if "\x00" in path:
            return "", None
        return super().lookup_path(path)


def _version() -> str:
    try:
        return version("ridgeline")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Per process, on its event loop: the loop's digest reader (a PostgreSQL pool) opens at start-up and closes at
    shutdown."""
    await app.state.digests.open()
    if app.state.settings.run_jobs:
        app.state.jobs.start()
    try:
        yield
    finally:
        app.state.jobs.stop()
        await app.state.digests.close()
        app.state.heavy.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(
        lifespan=_lifespan,
        title="Ridgeline",
        version=_version(),
        description=DESCRIPTION,
        # orjson, strict: a numpy value or a NaN reaching a response fails loudly (service.encoding).
        default_response_class=ORJSONResponse,
        docs_url=None,  # served by system.router from local assets: no CDN, works offline
        redoc_url=None,
    )
    engine = make_engine(settings.database_url, pool_size=settings.db_pool_size)
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = make_sessionmaker(engine)
    app.state.digests = digest_reader(engine)  # catalogue digests read on the event loop (the hot path)
    app.state.rate_limits = RateLimits.from_settings(settings)  # configuration only: the counts are in the database
    app.state.heavy = HeavyGate(HeavyLimits.from_settings(settings))  # compute slots and threads (service.heavy)
    app.state.job_kinds = JOB_KINDS
    app.state.jobs = JobRunner(settings, app.state.sessionmaker, JOB_KINDS)  # started by the lifespan

    install_error_handlers(app)
    # Innermost of the middlewares (each added one wraps the ones before): a 413 is still timed and counted.
    install_body_limit(app, settings.max_body_bytes)
    # Added before the metrics middleware, so it runs inside it: a timed-out request is counted as a 503.
    install_timeouts(app, settings.request_timeout_s, settings.upload_timeout_s)
    install_metrics_middleware(app)
    # Reads need a key only where the operator says so: then every route but the system ones (health, metrics, docs)
    # checks it first. Added only then, so that open reads (the hot path) pay nothing for it.
    gated = settings.read_requires_key
    # Routes are matched in order, each route passed over at a cost (FastAPI tries each in turn): the estimate routes,
    # the service's hot path, come right after the system routes (bench/throughput.py).
    _docstring_summaries(system_router)
    app.include_router(system_router)
    for router in (
        estimates_router,
        collectives_router,
        inference_router,
        serving_router,
        training_router,
        hardware_router,
        models_router,
        benchmarks_router,
        serving_benchmarks_router,
        calibrations_router,
        accuracy_router,
        roofline_router,
        plan_router,
        jobs_router,
        traces_router,
    ):
        _docstring_summaries(router)
        if gated:
            app.include_router(router, dependencies=[Depends(viewer)], responses=READ_RESPONSES)
        else:
            app.include_router(router)
    # The planner's pages (HTML, after the API: no estimate route waits behind them), gated as the API's reads are.
    if gated:
        app.include_router(ui_router, dependencies=[Depends(viewer)])
    else:
        app.include_router(ui_router)
    app.mount("/ui/static", _StaticFiles(directory=UI_STATIC_DIR), name="ui-static")
    app.mount("/static", _StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _docstring_summaries(router: APIRouter) -> None:
    """An endpoint's one-line docstring is its OpenAPI summary (FastAPI would title-case the function name)."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.summary is None and route.description:
            route.summary = route.description.strip().splitlines()[0]
