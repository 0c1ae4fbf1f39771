"""The API process killed during a job, with real processes: `ridgeline serve` joined to a real Ray cluster, on
PostgreSQL and SQLite, SIGKILLed while the job's pieces run. Ray ends the dead driver's tasks; the job is left
`running` in the database with a lease nobody renews, and the next server takes it up once the lease has run out
and finishes it (the same answer as the synchronous plan, stored once), or, with no attempts left, ends it `failed`
with the reason. Never left running."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from service.orm import Job
from tests.conftest import LiveServer, PostgresSchema, free_port, ridgeline_command
from tests.service.raycluster import RayCluster
from tests.service.test_jobs_ray import LONG, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # real servers SIGKILLed, a Ray cluster


def _job(url: str, job_id: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10)
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


@pytest.mark.parametrize(("backend", "attempts"), [("postgresql", 2), ("postgresql", 1), ("sqlite", 2)])
def test_the_api_killed_mid_job_is_taken_up_or_failed_never_left_running(
    backend: str, attempts: int, tmp_path: Path, ray_cluster: RayCluster
) -> None:
    schema = PostgresSchema() if backend == "postgresql" else None
    url = schema.url if schema is not None else f"sqlite:///{tmp_path / 'jobs.db'}"
    port = free_port()
    env = {**os.environ, "RIDGELINE_DATABASE_URL": url, "RIDGELINE_RAY_ADDRESS": ray_cluster.address,
           "RAY_AUTH_MODE": "disabled", "RIDGELINE_JOB_LEASE_S": "3", "RIDGELINE_JOB_POLL_S": "0.2",
           "RIDGELINE_JOB_CHUNKS_PER_CPU": "1", "RIDGELINE_JOB_MAX_ATTEMPTS": str(attempts)}  # fmt: skip
    servers: list[LiveServer] = []
    db = create_engine(url)

    def start(name: str) -> LiveServer:
        (tmp_path / name).mkdir()
        server = LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp_path / name)
        servers.append(server)
        server.wait_healthy(timeout_s=120)
        return server

    try:
        first = start("first")
        response = httpx.post(f"{first.url}/v1/plan", json=LONG, headers={"Prefer": "respond-async"}, timeout=30)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        wait_until(lambda: _job(first.url, job_id)["state"] == "running" and bool(ray_cluster.running()),
                   "the job's pieces to run on the cluster")  # fmt: skip
        first.proc.kill()
        first.proc.wait(timeout=30)
        # Ray ends the tasks of a driver that died (their owner): nothing runs on for a job nobody holds.
        wait_until(lambda: not ray_cluster.running(), "Ray to end the dead server's tasks", timeout_s=60)
        with db.connect() as conn:
            assert conn.execute(select(Job.state, Job.attempts).where(Job.id == job_id)).one() == ("running", 1)

        second = start("second")
        job: dict[str, Any] = {}

        def ended() -> bool:
            nonlocal job
            job = _job(second.url, job_id)
            return job["state"] not in ("queued", "running")

        wait_until(ended, "the job to end after the restart")
        if attempts == 1:
            assert (job["state"], job["error_status"], job["result"]) == ("failed", 503, None)
            assert job["error"]["error"] == "job_lost" and "stopped 1 times" in job["error"]["message"]
        else:
            assert job["state"] == "succeeded", job["error"]
            assert job["attempts"] == 2
            sync = httpx.post(f"{second.url}/v1/plan", json=LONG, timeout=60)
            assert sync.status_code == 200 and job["result"] == sync.json()
        # One job, finished once: a later look changes nothing.
        with db.connect() as conn:
            assert conn.execute(select(func.count()).select_from(Job)).scalar() == 1
        assert _job(second.url, job_id) == job
    finally:
        for server in servers:
            server.stop()
        db.dispose()
        if schema is not None:
            schema.drop()
