"""Jobs run on a real Ray cluster (`ray start`, two CPUs, one per test session): a plan's candidates in pieces,
reduced, give the synchronous plan bit for bit; the other kinds give their endpoint's answer; a job that fails
carries the endpoint's error envelope; a Ray worker SIGKILLed mid-piece is retried and the answer is the same; a
cancelled job's tasks stop."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update as update_rows

from service.app import create_app
from service.db import make_engine, make_sessionmaker
from service.orm import Job
from service.settings import Settings
from tests.service.raycluster import RayCluster
from tests.service.test_plan_api import BASE
from tests.service.test_plan_sharing import BASE as SHARING
from tests.service.test_serving_api import BASE as SERVING
from tests.service.test_training_plan_api import SMALL as TRAINING

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # a Ray cluster's processes

# 2 profiles × 2 tensor widths × 3 batches × 2 budgets = 24 candidates, in 8 engine families of 3 batches.
PLAN = {**BASE, "search": {"tensor": [1, 2], "max_num_seqs": [16, 64, 128], "max_num_batched_tokens": [2048, 4096]}}
# A plan whose pieces take seconds each on the 2-CPU cluster (one piece per CPU): 2 × 2 × 8 × 2 = 64 candidates.
LONG = {**BASE, "objectives": {"ttft_s": 2.0, "tpot_s": 0.2},
        "search": {"tensor": [1, 2], "max_num_seqs": [16, 32, 48, 64, 96, 128, 192, 256],
                   "max_num_batched_tokens": [2048, 4096]}}  # fmt: skip
# Traffic that shares a 3 968-token prefix, searched with prefix caching off, on, and on with a 64 GB host tier:
# 2 batches × 3 = 6 candidates. The job's piece must replay the same shared requests (their hash chains) as the
# synchronous plan, or caching would find nothing and the figures would differ.
SHARED = {**SHARING, "search": {**SHARING["search"], "host_cache_bytes": [0, 64e9]}}


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def runner(settings: Settings, ray_cluster: RayCluster) -> Iterator[TestClient]:
    """An app whose runner runs jobs on the session's cluster: one piece per CPU, a 3 s lease. The jobs other tests of
    the session stored without running them (a plan of 1 536 candidates among them) are cancelled first, so that this
    runner runs only its test's."""
    engine = make_engine(settings.database_url)
    with make_sessionmaker(engine)() as session:
        session.execute(update_rows(Job).where(Job.state.in_(("queued", "running"))).values(state="cancelled"))
        session.commit()
    engine.dispose()
    update = {"run_jobs": True, "ray_address": ray_cluster.address, "job_poll_s": 0.1, "job_lease_s": 3.0,
              "job_chunks_per_cpu": 1}  # fmt: skip
    app = create_app(settings.model_copy(update=update))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client
    app.state.engine.dispose()


def finished(client: TestClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def done() -> bool:
        nonlocal job
        job = client.get(f"/v1/jobs/{job_id}").json()
        return job["state"] not in ("queued", "running")

    wait_until(done, f"job {job_id} to finish")
    return job


def submit(client: TestClient, kind: str, body: dict[str, Any]) -> str:
    response = client.post("/v1/jobs", json={"kind": kind, "body": body})
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


@pytest.mark.parametrize(("body", "candidates"), [(PLAN, 24), (LONG, 64), (SHARED, 6)])
def test_a_plan_as_a_job_is_the_synchronous_plan_bit_for_bit(
    runner: TestClient, body: dict[str, Any], candidates: int
) -> None:
    # PLAN is one piece (under service.plan.service.MIN_PIECE candidates), LONG two (one per CPU): reduced from parts.
    # SHARED is one piece carrying the traffic's shared requests.
    sync = runner.post("/v1/plan", json=body)
    assert sync.status_code == 200, sync.text
    job = finished(runner, submit(runner, "plan", body))
    assert job["state"] == "succeeded", job["error"]
    # Parsed JSON compared: every float the same double (orjson writes the shortest repr that round-trips).
    assert job["result"] == sync.json()
    assert job["result"]["candidates"] == candidates and job["attempts"] == 1
    progress = job["progress"]
    assert (progress["done"], progress["total"], progress["remaining_s"]) == (candidates, candidates, None)
    assert progress["elapsed_s"] > 0


@pytest.mark.parametrize(("kind", "path", "body"), [
    ("plan_training", "/v1/plan/training", TRAINING), ("estimate_serving", "/v1/estimate/serving", SERVING),
])  # fmt: skip
def test_the_other_kinds_answer_as_their_endpoint(runner: TestClient, kind: str, path: str, body: Any) -> None:
    sync = runner.post(path, json=body)
    assert sync.status_code == 200, sync.text
    response = runner.post(path, json=body, headers={"Prefer": "respond-async"})
    job = finished(runner, response.json()["id"])
    assert job["state"] == "succeeded" and job["result"] == sync.json()
    assert (job["progress"]["done"], job["progress"]["total"]) == (1, 1)


def test_a_failed_job_carries_the_endpoint_s_error(runner: TestClient) -> None:
    # Llama 3.1 405B (810 GB of bf16 weights) fits no engine of one or two H100s (80 GB each): the plan is a 422.
    body = {**BASE, "model": "llama-3.1-405b", "hardware": ["h100-sxm"], "prices": {}, "search": {"tensor": [1, 2]}}
    sync = runner.post("/v1/plan", json=body)
    assert sync.status_code == 422
    job = finished(runner, submit(runner, "plan", body))
    assert (job["state"], job["error_status"], job["error"], job["result"]) == ("failed", 422, sync.json(), None)


def test_a_worker_killed_mid_piece_is_retried_and_the_answer_is_the_same(
    runner: TestClient, ray_cluster: RayCluster
) -> None:
    job_id = submit(runner, "plan", LONG)
    wait_until(lambda: bool(ray_cluster.running()), "a piece to run on a Ray worker")
    victim = ray_cluster.running()[0]
    os.kill(victim, signal.SIGKILL)
    job = finished(runner, job_id)
    assert job["state"] == "succeeded", job["error"]
    assert victim not in ray_cluster.running()
    sync = runner.post("/v1/plan", json=LONG)
    assert sync.status_code == 200 and job["result"] == sync.json()
    assert job["attempts"] == 1  # Ray retried the task; the job itself ran once


def test_cancelling_a_running_job_stops_its_tasks(runner: TestClient, ray_cluster: RayCluster) -> None:
    job_id = submit(runner, "plan", LONG)
    wait_until(lambda: bool(ray_cluster.running()), "a piece to run on a Ray worker")
    response = runner.delete(f"/v1/jobs/{job_id}")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    # The runner sees it at its next heartbeat (a third of the 3 s lease) and cancels with force: the workers that
    # ran the pieces are killed, well before the pieces (seconds each) would have ended.
    wait_until(lambda: not ray_cluster.running(), "the job's Ray tasks to stop", timeout_s=10)
    wait_until(lambda: not runner.app.state.jobs.active(), "the runner to let the job go", timeout_s=10)  # type: ignore[attr-defined]
    job = runner.get(f"/v1/jobs/{job_id}").json()
    assert (job["state"], job["result"]) == ("cancelled", None)
