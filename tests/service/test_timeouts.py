"""Request time limits (service.timeouts): a 503 `timeout` envelope at the deadline, and nothing stored by a request
answered that way, even though its endpoint's thread cannot be stopped and runs on after the answer."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select
from starlette.types import Message, Receive, Scope, Send

from service import auth
from service.app import create_app
from service.db import make_engine, make_sessionmaker
from service.orm import ApiKey, BenchmarkResult, BenchmarkRun, RateLimitWindow
from service.settings import Settings
from service.timeouts import Deadline, RequestTimedOut, TimeoutMiddleware, current_deadline, timeout_for
from tests.conftest import LiveServer, free_port, ridgeline_command
from tests.service.test_benchmarks import bearer, run_body

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL

# --- the deadline's commit/timeout race ---------------------------------------------------------------------------


def test_a_deadline_lets_exactly_one_of_commit_and_timeout_win() -> None:
    now = [100.0]
    timed_out = Deadline(5.0, clock=lambda: now[0])
    assert timed_out.expire()  # the middleware answered 503 first ...
    with pytest.raises(RequestTimedOut):
        timed_out.begin_commit()  # ... so the endpoint's thread must not commit

    committing = Deadline(5.0, clock=lambda: now[0])
    committing.begin_commit()  # the commit began first ...
    assert not committing.expire()  # ... so the middleware waits for the real answer

    late = Deadline(5.0, clock=lambda: now[0])
    now[0] = 105.0  # the deadline passed, the middleware has not woken yet: no commit may start now
    with pytest.raises(RequestTimedOut):
        late.begin_commit()
    assert late.expired


def test_uploads_get_the_longer_limit() -> None:
    pick = timeout_for(30.0, 50.0)
    assert pick({"type": "http", "method": "POST", "path": "/v1/benchmarks"}) == 50.0
    assert pick({"type": "http", "method": "GET", "path": "/v1/benchmarks"}) == 30.0
    assert pick({"type": "http", "method": "POST", "path": "/v1/estimate/ops"}) == 30.0


# --- the middleware around small ASGI apps --------------------------------------------------------------------------


Sent = list[tuple[float, Message]]


def _drive(app: Any, seconds: float, method: str = "GET", path: str = "/x") -> Sent:
    """Run one request through the middleware; every message it sends, with its time since the start."""

    async def main() -> Sent:
        loop = asyncio.get_running_loop()
        start = loop.time()
        sent: Sent = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            sent.append((loop.time() - start, message))

        scope = {"type": "http", "method": method, "path": path, "headers": []}
        await TimeoutMiddleware(app, timeout_for=lambda _: seconds)(scope, receive, send)
        await asyncio.sleep(0)  # let the 503's task finish if it is still sending
        return sent

    return asyncio.run(main())


async def _respond(send: Send, status: int, body: bytes = b"{}") -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body})


def test_a_request_past_its_limit_gets_the_timeout_envelope_at_the_deadline() -> None:
    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.6)
        await _respond(send, 200)

    sent = _drive(slow, 0.1)
    assert [m["type"] for _, m in sent] == ["http.response.start", "http.response.body"]  # the app's 200 is dropped
    at, start = sent[0]
    assert 0.1 <= at < 0.5 and start["status"] == 503  # at the deadline, not when the app finished
    assert json.loads(sent[1][1]["body"]) == {
        "error": "timeout",
        "message": "The request ran past its 0.1 s time limit; nothing it would have written was stored.",
        "detail": [],
    }


def test_the_timeout_answer_is_out_before_the_request_returns() -> None:
    """An endpoint that meets its deadline gives up at once (its thread's commit is refused), so the request may end
    before the 503's task has run; a server answers 500 to an ASGI call that returns without a response (uvicorn:
    "ASGI callable returned without starting response"), so the middleware waits for its 503 first."""

    async def gives_up(scope: Scope, receive: Receive, send: Send) -> None:
        deadline = current_deadline(scope)
        assert deadline is not None
        while not deadline.expired:
            await asyncio.sleep(0.001)

    async def main() -> list[str]:
        sent: list[str] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            await asyncio.sleep(0.01)  # a client on the network: the write takes a while
            sent.append(message["type"])

        scope = {"type": "http", "method": "POST", "path": "/v1/benchmarks", "headers": []}
        await TimeoutMiddleware(gives_up, timeout_for=lambda _: 0.05)(scope, receive, send)
        return sent  # what the client had when the call returned

    assert asyncio.run(main()) == ["http.response.start", "http.response.body"]


def test_a_request_that_began_to_commit_gets_its_own_answer() -> None:
    async def committing(scope: Scope, receive: Receive, send: Send) -> None:
        deadline = current_deadline(scope)
        assert deadline is not None
        deadline.begin_commit()
        await asyncio.sleep(0.3)  # a commit that ends after the deadline
        await _respond(send, 201, b'{"stored": true}')

    sent = _drive(committing, 0.1, "POST", "/v1/benchmarks")
    assert sent[0][1]["status"] == 201 and sent[1][1]["body"] == b'{"stored": true}'


def test_a_response_that_has_started_is_not_cut_off() -> None:
    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one ", b"two ", b"three"):
            await asyncio.sleep(0.1)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    sent = _drive(streaming, 0.05)
    assert sent[0][1]["status"] == 200
    assert b"".join(m.get("body", b"") for _, m in sent[1:]) == b"one two three"


# --- the real service ---------------------------------------------------------------------------------------------


@pytest.fixture
def upload_key(database_url: str) -> Iterator[str]:
    engine = make_engine(database_url)
    factory = make_sessionmaker(engine)
    with factory() as session:
        key = auth.create_key(session, "timeouts", auth.Scope.upload).key
        session.commit()
    yield key
    with factory() as session:
        for table in (BenchmarkResult, BenchmarkRun, RateLimitWindow, ApiKey):
            session.execute(delete(table))
        session.commit()
    engine.dispose()


def _orphans(app: Any) -> set[Any]:
    """The timed-out requests still running in the app's TimeoutMiddleware."""
    layer = app.middleware_stack
    while not isinstance(layer, TimeoutMiddleware):
        layer = layer.app
    orphans: set[Any] = layer._orphans
    return orphans


def test_a_slow_sweep_times_out(database_url: str) -> None:
    """A valid 10 000-point sweep (~0.15-0.4 s, docs/benchmarks.md) under a 10 ms limit."""
    app = create_app(
        Settings(database_url=database_url, request_timeout_s=0.01, load_catalogue_on_start=False, run_jobs=False)
    )
    body = {
        "hardware": "a100-sxm-80gb",
        "sweep": {
            "op": {"kind": "matmul", "m": 1, "n": 1, "k": 4096},
            "vary": {"m": list(range(1, 101)), "n": list(range(1, 101))},
        },
    }
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/estimate/ops", json=body)
        assert response.status_code == 503, response.text[:300]
        assert response.json()["error"] == "timeout"


def test_a_timed_out_upload_stores_nothing_and_its_retry_stores_it_once(
    database_url: str, upload_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 000 results under a 50 ms upload limit: 503 at the deadline; the endpoint's thread finishes later and
    must roll back instead of committing. The same upload retried with a sane limit is stored, once."""
    commits: list[str] = []
    begin_commit = Deadline.begin_commit

    def watched(self: Deadline) -> None:
        try:
            begin_commit(self)
        except RequestTimedOut:
            commits.append("refused")
            raise
        commits.append("allowed")

    monkeypatch.setattr(Deadline, "begin_commit", watched)
    results = [
        {"op": {"kind": "matmul", "m": 1 + i % 100, "n": 4096, "k": 1024 * (1 + i // 100 % 4)}, "median_s": 1e-5}
        for i in range(10_000)
    ]
    headers = bearer(upload_key) | {"Idempotency-Key": "slow-1"}
    # run_jobs off: no runner taking up the jobs other tests of the session left queued (tests/conftest.py)
    slow = create_app(Settings(database_url=database_url, upload_timeout_s=0.05, run_jobs=False))
    with TestClient(slow, raise_server_exceptions=False) as client:
        response = client.post("/v1/benchmarks", json=run_body(results), headers=headers)
        assert response.status_code == 503 and response.json()["error"] == "timeout"
        deadline = time.monotonic() + 60
        while _orphans(slow) and time.monotonic() < deadline:  # the thread validating and predicting runs on
            time.sleep(0.05)
        assert not _orphans(slow), "the timed-out upload never finished"
        assert commits == ["refused"]  # its thread reached the commit after the 503, and rolled back
        with slow.state.sessionmaker() as session:
            assert session.scalar(select(func.count()).select_from(BenchmarkRun)) == 0
            assert session.scalar(select(func.count()).select_from(BenchmarkResult)) == 0

    app = create_app(Settings(database_url=database_url, run_jobs=False))
    with TestClient(app, raise_server_exceptions=False) as client:
        retried = client.post("/v1/benchmarks", json=run_body(results), headers=headers)
        assert retried.status_code == 201 and "Idempotent-Replayed" not in retried.headers
        assert retried.json()["results"] == 10_000
        with app.state.sessionmaker() as session:
            assert session.scalar(select(func.count()).select_from(BenchmarkRun)) == 1
            assert session.scalar(select(func.count()).select_from(BenchmarkResult)) == 10_000


@pytest.mark.slow  # a live server
def test_a_live_server_times_out_an_upload_and_stores_nothing(tmp_path: Path) -> None:
    """`ridgeline serve` with a 0.2 s upload limit: a 10 000-result upload is a 503 `timeout`; the request's thread
    finishes afterwards (the server logs it) and nothing is in the database; the server keeps serving."""
    url = f"sqlite:///{tmp_path / 'timeouts.db'}"
    port = free_port()
    env = {**os.environ, "RIDGELINE_DATABASE_URL": url, "RIDGELINE_UPLOAD_TIMEOUT_S": "0.2"}
    server = LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp_path)
    engine = None
    try:
        server.wait_healthy()
        engine = make_engine(url)
        with make_sessionmaker(engine)() as session:
            key = auth.create_key(session, "live-timeouts", auth.Scope.upload).key
            session.commit()
        results = [{"op": {"kind": "matmul", "m": 1 + i % 100, "n": 512, "k": 64 * (1 + i // 100)}, "median_s": 1e-5}
                   for i in range(10_000)]  # fmt: skip
        response = httpx.post(f"{server.url}/v1/benchmarks", json=run_body(results), headers=bearer(key), timeout=60)
        assert response.status_code == 503 and response.json()["error"] == "timeout", response.text[:300]
        deadline = time.monotonic() + 60
        while "timed-out POST /v1/benchmarks finished" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.1)
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(BenchmarkRun)) == 0
            assert conn.scalar(select(func.count()).select_from(BenchmarkResult)) == 0
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    finally:
        server.stop()
        if engine is not None:
            engine.dispose()
