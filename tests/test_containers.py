"""The container files: no Docker engine runs here, so test what they run — the entry commands and settings."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import REPO, LiveServer, PostgresSchema, free_port

pytestmark = pytest.mark.slow  # the containers' commands, run as processes


@pytest.fixture(scope="module")
def compose() -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return data


@pytest.fixture
def postgres_url() -> Iterator[str]:
    schema = PostgresSchema()
    yield schema.url
    schema.drop()


def _local(command: list[str], port: int) -> list[str]:
    """The container's command, bound to loopback on a free port, with this environment's console script."""
    out = list(command)
    out[out.index("--port") + 1] = str(port)
    out[out.index("--host") + 1] = "127.0.0.1"
    out[0] = str(Path(sys.executable).with_name(out[0]))
    return out


def test_compose_waits_for_a_healthy_postgres(compose: dict[str, object]) -> None:
    services = compose["services"]
    assert isinstance(services, dict)
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert services["api"]["depends_on"]["db"]["condition"] == "service_healthy"
    url = services["api"]["environment"]["DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@db:5432/" in url


def test_compose_api_command_migrates_loads_and_serves_on_postgres(
    compose: dict[str, object], postgres_url: str, tmp_path: Path
) -> None:
    services = compose["services"]
    assert isinstance(services, dict)
    api = services["api"]
    port = free_port()
    # The compose file's own environment, with the database host swapped for this machine's test schema.
    env = {**os.environ, **api["environment"], "DATABASE_URL": postgres_url}
    env.pop("RIDGELINE_DATABASE_URL", None)
    server = LiveServer(_local(api["command"], port), env, port, tmp_path)
    try:
        health = server.wait_healthy().json()
        assert health["catalogue"]["hardware"] >= 19 and health["catalogue"]["models"] >= 14
        # Two worker processes: many requests, all answered; metrics aggregate across processes.
        for _ in range(20):
            assert httpx.get(f"{server.url}/v1/hardware/h100-sxm", timeout=5).status_code == 200
        metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
        counts = re.findall(r'route="/v1/hardware/\{slug\}",status="200"\} (\d+\.\d+)', metrics)
        assert counts and float(counts[0]) == 20.0
    finally:
        server.stop()
    log = server.log.read_text()
    assert "database at revision" in log and "catalogue hardware:" in log


def test_dockerfile_command_serves_on_sqlite_in_its_workdir(tmp_path: Path) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE).group(1))  # type: ignore[union-attr]
    copied = set(re.findall(r"^COPY (\w+) ", dockerfile, re.MULTILINE))
    # Every package `pip install .` installs must be in the image (pyproject's packages.find include list).
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert {name.rstrip("*") for name in packages["include"]} <= copied
    assert {"roofline", "schemas", "adapters", "hardware_db", "service", "migrations", "worker"} <= copied
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "RIDGELINE_DATABASE_URL")}
    server = LiveServer(_local(cmd, port), env, port, tmp_path)  # cwd plays the image's WORKDIR /data
    try:
        assert server.wait_healthy().json()["catalogue"]["hardware"] >= 19
    finally:
        server.stop()
    assert (tmp_path / "ridgeline.db").exists()


def test_compose_runs_jobs_on_a_ray_head_and_scalable_workers(compose: dict[str, object], tmp_path: Path) -> None:
    services = compose["services"]
    assert isinstance(services, dict)
    head, worker, api = services["ray-head"], services["ray-worker"], services["api"]
    assert worker["command"][:3] == ["ray", "start", "--address=ray-head:6379"] and worker["deploy"]["replicas"] >= 1
    assert worker["depends_on"]["ray-head"]["condition"] == "service_healthy"
    # The API joins as a node without CPUs (a driver needs a raylet on its host) and reaches the cluster through it.
    assert "ray start --address=ray-head:6379 --num-cpus=0" in api["entrypoint"][2]
    assert api["environment"]["RIDGELINE_RAY_ADDRESS"] == "auto"
    for service in (head, worker, api):
        assert service["environment"]["RAY_AUTH_MODE"] == "token" and service["environment"]["RAY_AUTH_TOKEN"]
    # The head's command, run here on free ports, answers its own health check.
    port = free_port()
    command = [str(Path(sys.executable).with_name("ray")), *head["command"][1:]]
    command = [f"--port={port}" if c == "--port=6379" else c for c in command]
    ports = ("dashboard-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
             "runtime-env-agent-port", "node-manager-port", "object-manager-port")  # fmt: skip
    command += [f"--{name}={free_port()}" for name in ports]
    temp = Path(tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp"))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "test-token", "RAY_USAGE_STATS_ENABLED": "0"}
    log = (tmp_path / "head.log").open("w")
    proc = subprocess.Popen([*command, f"--temp-dir={temp}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    check = [str(Path(sys.executable).with_name("ray")), *head["healthcheck"]["test"][2:]]
    check = [f"--address=127.0.0.1:{port}" if c.startswith("--address=") else c for c in check]
    try:
        deadline = time.monotonic() + 120
        while subprocess.run(check, env=env, capture_output=True, timeout=60).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "head.log").read_text()
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
