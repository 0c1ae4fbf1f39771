"""Upload rate limits per API key (service.ratelimit), on SQLite and PostgreSQL.

The limiter's estimate is previous·(1 − f) + current, f the fraction of the current window elapsed (Cloudflare's
sliding window). The windows here are 60 s and the clock is set by hand, so every Retry-After below is worked out in
the test's comments from that formula.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select

from service import auth, migrate, ratelimit
from service.app import create_app
from service.db import make_engine, make_sessionmaker
from service.errors import TooManyRequests
from service.orm import ApiKey, BenchmarkResult, BenchmarkRun, RateLimitWindow
from service.settings import Settings
from tests.conftest import LiveServer, PostgresSchema, free_port, ridgeline_command
from tests.service.test_benchmarks import bearer, elementwise, run_body

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limited_client(database_url: str, clock: Clock, **limits: Any) -> TestClient:
    # run_jobs off: no runner taking up the jobs other tests of the session left queued (tests/conftest.py)
    app = create_app(Settings(database_url=database_url, rate_limit_window_s=60, run_jobs=False, **limits))
    app.state.rate_limits = dataclasses.replace(app.state.rate_limits, clock=clock)
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def keys(database_url: str) -> Iterator[dict[str, tuple[int, str]]]:
    """Two upload keys (id, key); every run, key and window is removed afterwards."""
    engine = make_engine(database_url)
    factory = make_sessionmaker(engine)
    with factory() as session:
        made = {name: auth.create_key(session, f"rate-{name}", auth.Scope.upload) for name in ("a", "b")}
        session.commit()
    yield {name: (new.id, new.key) for name, new in made.items()}
    with factory() as session:
        session.execute(delete(BenchmarkResult))
        session.execute(delete(BenchmarkRun))
        session.execute(delete(RateLimitWindow))
        session.execute(delete(ApiKey))
        session.commit()
    engine.dispose()


def post(client: TestClient, key: str, results: int, idem: str, start: int = 1000) -> httpx.Response:
    body = run_body([{"op": elementwise(start + i), "median_s": 3e-6} for i in range(results)])
    response: httpx.Response = client.post("/v1/benchmarks", json=body, headers=bearer(key) | {"Idempotency-Key": idem})
    return response


def test_the_fourth_upload_waits_for_the_window_and_other_keys_do_not(
    database_url: str, keys: dict[str, tuple[int, str]]
) -> None:
    clock = Clock(6015.0)  # window [6000, 6060), f = 0.25
    (key_a_id, key_a), (_, key_b) = keys["a"], keys["b"]
    with limited_client(database_url, clock, upload_requests_per_window=3, upload_results_per_window=0) as client:
        for i in range(3):
            assert post(client, key_a, 2, f"a-{i}", start=10 * i + 10).status_code == 201

        refused = post(client, key_a, 2, "a-3", start=100)
        assert refused.status_code == 429
        body = refused.json()
        assert body["error"] == "too_many_requests" and "3 uploads per 60 s" in body["message"]
        # Current window 3, previous 0: the next window at f with 3·(1 − f) + 1 ≤ 3, f = 1/3;
        # (1 − 0.25) · 60 + 60 / 3 = 45 + 20 = 65 s.
        assert refused.headers["Retry-After"] == "65"

        # Another key is not affected; a replay of a stored upload is answered and costs nothing.
        assert post(client, key_b, 2, "b-0").status_code == 201
        replay = post(client, key_a, 2, "a-0", start=10)
        assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"

        # Refused requests are not counted: the window still holds 3, so the wait only shrinks with time.
        clock.now = 6015.0 + 64  # window [6060, 6120), f = 19/60: 3·41/60 + 0 + 1 = 3.05 > 3
        again = post(client, key_a, 2, "a-3", start=100)
        assert again.status_code == 429
        # This window now: 3·(1 − f) + 1 ≤ 3 from f = 1/3 = 20/60, one second away.
        assert again.headers["Retry-After"] == "1"
        clock.now = 6015.0 + 65  # f = 20/60: 3·2/3 + 1 = 3
        assert post(client, key_a, 2, "a-3", start=100).status_code == 201

        factory = client.app.state.sessionmaker  # type: ignore[attr-defined]
        with factory() as session:
            rows = session.execute(
                select(RateLimitWindow.window_start, RateLimitWindow.requests, RateLimitWindow.results)
                .where(RateLimitWindow.api_key_id == key_a_id)
                .order_by(RateLimitWindow.window_start)
            ).all()
        assert [tuple(r) for r in rows] == [(6000, 3, 6), (6060, 1, 2)]


def test_results_per_window(database_url: str, keys: dict[str, tuple[int, str]]) -> None:
    clock = Clock(6000.0)  # f = 0
    key = keys["a"][1]
    with limited_client(database_url, clock, upload_requests_per_window=0, upload_results_per_window=100) as client:
        assert post(client, key, 60, "r-0").status_code == 201
        refused = post(client, key, 50, "r-1", start=5000)
        assert refused.status_code == 429 and "100 results per 60 s" in refused.json()["message"]
        # 60 + 50 > 100 in this window; in the next, 60·(1 − f) + 50 ≤ 100 from f = 1/6: 60 + 10 = 70 s.
        assert refused.headers["Retry-After"] == "70"
        assert post(client, key, 40, "r-2", start=6000).status_code == 201  # 60 + 40 = 100 fits exactly
        # One upload larger than the whole limit can never pass: a 422 naming the field, not a 429 to retry forever.
        too_big = post(client, key, 101, "r-3", start=7000)
        assert too_big.status_code == 422 and too_big.json()["detail"][0]["field"] == "body.results"


def test_two_service_instances_share_the_count(database_url: str, keys: dict[str, tuple[int, str]]) -> None:
    """Two apps, each with its own engine and pool, on one database: the count lives in the database."""
    clock = Clock(6000.0)
    key = keys["a"][1]
    limits = {"upload_requests_per_window": 3, "upload_results_per_window": 0}
    with limited_client(database_url, clock, **limits) as one, limited_client(database_url, clock, **limits) as two:
        assert post(one, key, 1, "s-0").status_code == 201
        assert post(two, key, 1, "s-1", start=2000).status_code == 201
        assert post(one, key, 1, "s-2", start=3000).status_code == 201
        assert post(two, key, 1, "s-3", start=4000).status_code == 429
        assert post(one, key, 1, "s-4", start=5000).status_code == 429


def test_concurrent_charges_admit_exactly_the_limit(database_url: str, keys: dict[str, tuple[int, str]]) -> None:
    """12 threads, each with its own connection, charge one key with a limit of 5 at the same moment: the upsert is
    atomic, so exactly 5 pass (a read-then-write counter would let more through)."""
    engine = make_engine(database_url, pool_size=12)
    factory = make_sessionmaker(engine)
    limits = ratelimit.RateLimits(requests=5, results=0, window_s=60, clock=Clock(6000.0))
    key_id = keys["a"][0]
    barrier = threading.Barrier(12)

    def attempt(_: int) -> bool:
        with factory() as session:
            barrier.wait()
            try:
                ratelimit.charge(session, limits, key_id, 1)
            except TooManyRequests:
                return False
            return True

    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            passed = list(pool.map(attempt, range(12)))
        assert sum(passed) == 5
        with factory() as session:
            assert session.scalar(select(RateLimitWindow.requests).where(RateLimitWindow.api_key_id == key_id)) == 5
    finally:
        engine.dispose()


def test_retry_after_formula() -> None:
    # Hand-worked: limit 10, previous 8, current 4 (with cost 1 → 5 ≤ 10) at f = 0.5: 8·(1 − g) + 5 ≤ 10 from
    # g = 1 − 5/8 = 0.375, already passed, so 0 s; at f = 0.1: (0.375 − 0.1) · 60 = 16.5 s.
    assert ratelimit.retry_after_s(10, 8, 4, 1, 0.5, 60) == 0.0
    assert ratelimit.retry_after_s(10, 8, 4, 1, 0.1, 60) == pytest.approx(16.5)
    # Current already 10: next window, 10·(1 − h) + 1 ≤ 10 from h = 0.1; at f = 0.5: 30 + 6 = 36 s.
    assert ratelimit.retry_after_s(10, 0, 10, 1, 0.5, 60) == pytest.approx(36.0)


@pytest.mark.slow  # two live servers
def test_two_server_processes_on_postgresql_share_the_count(tmp_path: Path) -> None:
    """`ridgeline serve` twice on one PostgreSQL, 3 uploads per hour per key: the 4th is refused by either."""
    schema = PostgresSchema()
    servers: list[LiveServer] = []
    try:
        migrate.upgrade(schema.url)
        engine = make_engine(schema.url)
        with make_sessionmaker(engine)() as session:
            key = auth.create_key(session, "replicas", auth.Scope.upload).key
            session.commit()
        engine.dispose()
        env = {
            **os.environ,
            "RIDGELINE_DATABASE_URL": schema.url,
            "RIDGELINE_UPLOAD_REQUESTS_PER_WINDOW": "3",
            "RIDGELINE_RATE_LIMIT_WINDOW_S": "3600",
        }
        for name in ("one", "two"):
            (tmp_path / name).mkdir()
            port = free_port()
            servers.append(LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp_path / name))
        for server in servers:
            server.wait_healthy()
        statuses = []
        for i, server in enumerate([servers[0], servers[1], servers[0], servers[1], servers[0]]):
            body = run_body([{"op": elementwise(100 * (i + 1)), "median_s": 3e-6}])
            response = httpx.post(
                f"{server.url}/v1/benchmarks", json=body, headers=bearer(key) | {"Idempotency-Key": f"p-{i}"}
            )
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert int(response.headers["Retry-After"]) >= 1
        assert statuses == [201, 201, 201, 429, 429]
    finally:
        for server in servers:
            server.stop()
        schema.drop()


def test_the_limits_are_in_the_openapi_document(client: TestClient) -> None:
    responses = client.get("/openapi.json").json()["paths"]["/v1/benchmarks"]["post"]["responses"]
    for status in ("429", "503"):
        assert responses[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorEnvelope"
        }
        assert responses[status]["headers"]["Retry-After"]["schema"] == {"type": "integer"}
