"""Heavy endpoints (service.heavy): the limits per client and per process, the shared rate table, who the client
is, partial plans and the training plan's bound.

The slow request is the issue's worst case (issue 40 §2): Llama 3.1 8B on H100 SXM, 2 replicas of TP4, max_num_seqs
65 536, fp8, a closed loop of 100 000 clients and requests, prompts of 64 000 and outputs of 16 000 tokens: ~8 s
of simulation alone on a 2-core machine, stopped here by a 3 s request limit. The window-based figures are worked out
from the sliding-window formula (service.ratelimit) in the comments, on a clock set by hand.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import delete

from service import heavy
from service.app import create_app
from service.examples import PLAN_EXAMPLES
from service.orm import HeavyRateWindow
from service.settings import Settings
from tests.conftest import bearer, make_key

WORST = {
    "model": "llama-3.1-8b", "hardware": "h100-sxm", "replicas": 2, "parallelism": {"tensor": 4},
    "engine": {"max_num_seqs": 65536}, "dtypes": {"weights": "fp8", "activations": "fp8"},
    "load": {"concurrency": 100_000, "requests": 100_000, "prompt_tokens": {"value": 64_000},
             "output_tokens": {"value": 16_000}},
}  # fmt: skip
SMALL = {
    "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "load": {"concurrency": 4, "requests": 16, "prompt_tokens": {"value": 128}, "output_tokens": {"value": 16}},
}  # fmt: skip


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def make_client(database_url: str) -> Iterator[Callable[..., TestClient]]:
    """Apps on the test's database with the heavy settings given; their rate windows are removed afterwards."""
    made: list[TestClient] = []

    def make(**settings: Any) -> TestClient:
        # Jobs are stored, not run (as tests/conftest.py's settings): a runner here would take up the jobs other
        # tests of the session left queued and start a Ray cluster beside the heavy computes it times.
        app = create_app(Settings(database_url=database_url, **{"run_jobs": False, **settings}))
        client = TestClient(app, raise_server_exceptions=False)
        made.append(client.__enter__())
        return client

    yield make
    for client in made:
        client.__exit__(None, None, None)
    app: FastAPI = made[0].app  # type: ignore[assignment]
    with app.state.sessionmaker() as session:
        session.execute(delete(HeavyRateWindow))
        session.commit()


def in_background(client: TestClient, path: str, body: dict[str, Any], **kw: Any) -> tuple[threading.Thread, list]:
    answers: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answers.append(client.post(path, json=body, **kw)))
    thread.start()
    return thread, answers


def test_a_third_heavy_request_of_one_client_is_a_429(make_client: Callable[..., TestClient]) -> None:
    client = make_client(request_timeout_s=3, heavy_requests_per_window=0)
    gate = client.app.state.heavy  # type: ignore[attr-defined]
    key = make_key(client, "upload")
    mine = f"key:{_key_id(client, key)}"
    slow = [in_background(client, "/v1/estimate/serving", WORST, headers=bearer(key)) for _ in range(2)]
    wait_until(lambda: gate.in_flight.get(mine) == 2, "two heavy requests of the key in flight")
    third = client.post("/v1/estimate/serving", json=SMALL, headers=bearer(key))
    assert third.status_code == 429, third.text
    assert third.headers["Retry-After"] == "2"  # ⌈heavy_queue_s⌉ (2 s)
    assert third.json()["error"] == "too_many_requests"
    for thread, answers in slow:
        thread.join()
        assert answers[0].status_code == 503 and answers[0].json()["error"] == "timeout"
    assert client.post("/v1/estimate/serving", json=SMALL, headers=bearer(key)).status_code == 200


def _key_id(client: TestClient, key: str) -> int:
    from service import auth

    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        return auth.authenticate(session, key).key_id


def test_a_busy_server_answers_503_after_the_queue_wait_and_the_work_stops_at_the_deadline(
    make_client: Callable[..., TestClient],
) -> None:
    # One slot, a 0.3 s queue, 2 heavy requests per window (the clock held inside one window). The slow request is
    # charged 1; the one turned away for want of a slot is charged and refunded; the next small one is the 2nd, and
    # one more is over the rate (without the refund the small one would already be the 3rd, a 429).
    client = make_client(request_timeout_s=3, heavy_slots=1, heavy_queue_s=0.3, heavy_requests_per_window=2)
    gate = client.app.state.heavy  # type: ignore[attr-defined]
    gate.limits = dataclasses.replace(gate.limits, clock=Clock(60 * 16_667 + 15))
    thread, answers = in_background(client, "/v1/estimate/serving", WORST)
    wait_until(lambda: gate.slots.held == 1, "the slow request computing")
    start = time.monotonic()
    queued = client.post("/v1/estimate/serving", json=SMALL)
    waited = time.monotonic() - start
    assert queued.status_code == 503, queued.text
    assert queued.json()["error"] == "unavailable"
    assert queued.headers["Retry-After"] == "1"  # ⌈0.3 s⌉
    assert waited >= 0.3  # it waited its turn first
    thread.join()
    assert answers[0].status_code == 503 and answers[0].json()["error"] == "timeout"
    # The slot is given back only when the compute has returned: the work ended with its answer.
    wait_until(lambda: gate.slots.held == 0, "the stopped compute to give its slot back", timeout_s=2.0)
    assert client.post("/v1/estimate/serving", json=SMALL).status_code == 200
    assert client.post("/v1/estimate/serving", json=SMALL).status_code == 429


@pytest.mark.databases
def test_the_rate_is_counted_in_the_database_for_every_replica(make_client: Callable[..., TestClient]) -> None:
    # Two apps (two replicas) on one database, 3 heavy requests per 60 s window, the clock 15 s into a window
    # (f = 0.25) with nothing in the one before. Requests 1 and 2 through replica A, 3 through B: allowed. The 4th,
    # through either, makes the estimate 0·(1 − 0.25) + 4 > 3: 429. Retry-After: this window's 3 become the
    # previous window's count; at fraction f of the next one the estimate is 3·(1 − f) + 1 ≤ 3 once f ≥ 1/3, i.e.
    # 45 s left here + 20 s there = 65 s.
    clock = Clock(60 * 16_667 + 15)
    a, b = (make_client(heavy_requests_per_window=3, rate_limit_window_s=60) for _ in range(2))
    for client in (a, b):
        gate = client.app.state.heavy  # type: ignore[attr-defined]
        gate.limits = dataclasses.replace(gate.limits, clock=clock)
    key = bearer(make_key(a, "upload"))
    for client in (a, a, b):
        assert client.post("/v1/estimate/serving", json=SMALL, headers=key).status_code == 200
    for client in (b, a):
        refused = client.post("/v1/estimate/serving", json=SMALL, headers=key)
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "65"
    # Another client (no key: the test client's address) has its own count.
    assert b.post("/v1/estimate/serving", json=SMALL).status_code == 200
    # 20 s into the next window (f = 1/3): 3·(2/3) + 1 = 3, allowed again.
    clock.now += 45 + 20
    assert a.post("/v1/estimate/serving", json=SMALL, headers=key).status_code == 200


def test_the_client_is_the_address_a_trusted_proxy_names(make_client: Callable[..., TestClient]) -> None:
    # One heavy request per window per client. Behind a proxy that names the address, two addresses are two
    # clients; without the setting the header is the client's own word and ignored: one client.
    proxied = make_client(heavy_requests_per_window=1, client_address_header="X-Forwarded-For")

    def post(client: TestClient, forwarded: str) -> int:
        return client.post("/v1/estimate/serving", json=SMALL, headers={"X-Forwarded-For": forwarded}).status_code

    assert post(proxied, "198.51.100.7, 10.0.0.1") == 200
    assert post(proxied, "203.0.113.9, 10.0.0.1") == 429  # the last entry is what the proxy saw: the same client
    assert post(proxied, "10.0.0.2") == 200
    plain = make_client(heavy_requests_per_window=1)
    assert post(plain, "10.0.0.3") == 200
    assert post(plain, "10.0.0.4") == 429  # the test client's own address, both times


def test_an_unknown_key_on_a_heavy_endpoint_is_a_401(client: TestClient) -> None:
    for path, body in (("/v1/estimate/serving", SMALL), ("/v1/plan", PLAN_EXAMPLES["impossible"]["value"])):
        answer = client.post(path, json=body, headers=bearer("rl_0000_not-a-key"))
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"] == "unauthorized"


def test_a_plan_stopped_by_its_deadline_says_it_is_partial(make_client: Callable[..., TestClient]) -> None:
    # The chat example with 7 batches and 4 token budgets: 4 profiles × 4 tensor widths × 7 × 4 × 2 dtypes = 896
    # candidates, ~16 s in full on a 2-core machine. With an 8 s limit the plan stops 1.6 s before it (a fifth of the
    # limit, service.heavy.PARTIAL_MARGIN) and answers what it has; the margin holds a candidate's simulation even
    # on a loaded machine (with a 2 s limit's 0.4 s, one candidate under load overran it: a 503).
    body = copy.deepcopy(PLAN_EXAMPLES["llama-70b-chat"]["value"])
    batches = [16, 32, 64, 96, 128, 192, 256]
    body["search"] |= {"max_num_seqs": batches, "max_num_batched_tokens": [2048, 4096, 8192, 16384]}
    client = make_client(request_timeout_s=8, heavy_requests_per_window=0)
    answer = client.post("/v1/plan", json=body)
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["partial"] is True and plan["candidates"] == 896 and 0 < plan["unfinished"] <= 896
    assert answer.headers["Ridgeline-Partial"] == f"unfinished={plan['unfinished']}; candidates=896"
    whole = make_client(heavy_requests_per_window=0).post("/v1/plan", json=PLAN_EXAMPLES["impossible"]["value"])
    assert whole.status_code == 200 and whole.json()["partial"] is False and whole.json()["unfinished"] == 0
    assert "Ridgeline-Partial" not in whole.headers


TRAINING = {
    "model": "llama-3-70b", "hardware": "h100-sxm", "devices": {"min": 8, "max": 64, "step": 8}, "sequence": 8192,
    "global_batch": 128, "train_tokens": 15e12,
}  # fmt: skip


def test_a_training_plan_stopped_by_its_deadline_says_it_is_partial(
    make_client: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 device counts × the default 2 352 configurations (18 816 before a data group of one drops its shardings:
    # 17 520) take ~1.2 s on a 2-core machine; with a 1 s limit and half of it kept to answer (PARTIAL_MARGIN 0.5
    # here: the shipped fifth leaves the 0.25 s floor, which ranking 17 520 layouts overran under load, a 503) the
    # search stops at 0.5 s and answers what it has.
    monkeypatch.setattr(heavy, "PARTIAL_MARGIN", 0.5)
    client = make_client(request_timeout_s=1.0, heavy_requests_per_window=0)
    answer = client.post("/v1/plan/training", json=TRAINING)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["partial"] is True and body["unfinished"] > 0
    assert body["searched"] + body["unfinished"] == 17_520
    assert answer.headers["Ridgeline-Partial"] == f"unfinished={body['unfinished']}; candidates=17520"


def test_the_default_training_search_is_held_to_the_limit(client: TestClient) -> None:
    # Left out, the search is tensor 1, 2, 4, 8 (with and without sequence parallelism where tensor > 1: 7) ×
    # pipeline 1, 2, 4, 8 (1F1B and interleaved where pipeline > 1: 7) × 4 shardings × 4 micro-batches × 3
    # recomputations = 2 352 per device count; 9 counts (8 to 72 by 8) are 21 168 > 20 000.
    body = {**TRAINING, "devices": {"min": 8, "max": 72, "step": 8}}
    answer = client.post("/v1/plan/training", json=body)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert [d["field"] for d in detail] == ["body.search"]
    assert "21168 configurations" in detail[0]["message"] and "at most 20000" in detail[0]["message"]
    # The request: every count from 1 to 64 (150 528 configurations), searched in full before.
    every = client.post("/v1/plan/training", json={**TRAINING, "devices": {"min": 1, "max": 64}})
    assert every.status_code == 422 and "150528 configurations" in every.json()["detail"][0]["message"]


def test_a_job_is_submitted_past_the_heavy_limits(make_client: Callable[..., TestClient]) -> None:
    # One heavy request per window per client and one slot. The client's first serving estimate uses its rate; the
    # second is a 429. The same request asked as a job (`Prefer: respond-async`) is still a 202: a submission is a
    # short database write, not heavy work, so it is neither counted nor gated (its compute runs on Ray). So is a
    # plan too big for a request, which becomes a job unasked, and a training plan asked as a job. Jobs are stored,
    # not run (run_jobs off, as in tests/conftest.py).
    client = make_client(heavy_requests_per_window=1, heavy_slots=1, run_jobs=False)
    assert client.post("/v1/estimate/serving", json=SMALL).status_code == 200
    assert client.post("/v1/estimate/serving", json=SMALL).status_code == 429
    asked = client.post("/v1/estimate/serving", json=SMALL, headers={"Prefer": "respond-async"})
    assert asked.status_code == 202, asked.text
    assert asked.headers["Location"] == f"/v1/jobs/{asked.json()['id']}"
    trained = client.post("/v1/plan/training", json=TRAINING, headers={"Prefer": "respond-async"})
    assert trained.status_code == 202, trained.text
    big = copy.deepcopy(PLAN_EXAMPLES["llama-70b-chat"]["value"])
    big["search"] |= {"max_num_seqs": list(range(8, 136, 8)), "max_num_batched_tokens": [2048, 4096, 8192]}
    assert client.post("/v1/plan", json=big).status_code == 202  # 4 × 4 × 16 × 3 × 2 = 1 536 > 1 500 candidates
    # Nothing was charged for them: the next heavy request of the client is still over its rate.
    assert client.post("/v1/estimate/serving", json=SMALL).status_code == 429


def test_a_chart_of_a_plan_past_a_request_s_bounds_is_a_422(client: TestClient) -> None:
    # The frontier chart cannot be a job: the 1 536-candidate plan POST /v1/plan runs as one is a 422 here.
    big = copy.deepcopy(PLAN_EXAMPLES["llama-70b-chat"]["value"])
    big["search"] |= {"max_num_seqs": list(range(8, 136, 8)), "max_num_batched_tokens": [2048, 4096, 8192]}
    for fmt in ("svg", "png"):
        answer = client.post(f"/v1/plan/frontier.{fmt}", json=big)
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert [d["field"] for d in detail] == ["body.search"]
        assert "1536 candidates" in detail[0]["message"] and "at most 1500" in detail[0]["message"]
