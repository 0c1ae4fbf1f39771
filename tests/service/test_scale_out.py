"""Scale-out: several service replicas behind a load balancer on one PostgreSQL (docker-compose.yml, profile `scale`).

No Docker engine runs here, so the compose file and the nginx configuration are checked for what they promise, and
what they rely on is run for real: replicas racing to migrate an empty database, and two `ridgeline serve` processes
on one PostgreSQL schema where what one writes the other reads, a cached parse of a profile included (a replica that
kept its own copy of a profile would answer the estimate after a PATCH with the old bandwidth).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from service.catalogue.loopread import POSTGRES_POOL_MAX
from service.cli import build_parser
from service.examples import _HARDWARE
from service.settings import Settings
from tests.conftest import REPO, LiveServer, PostgresSchema, free_port, ridgeline_command

pytestmark = pytest.mark.slow  # several live servers

SCALE = "scale"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    result: dict[str, Any] = compose["services"]
    return result


@pytest.fixture(scope="module")
def nginx() -> str:
    return (REPO / "deploy" / "nginx.conf").read_text()


def _serve_port(command: list[str]) -> int:
    return int(command[command.index("--port") + 1])


# --- the compose file -----------------------------------------------------------------------------------------------


def test_the_scale_profile_is_a_migration_then_replicas_then_a_load_balancer(services: dict[str, Any]) -> None:
    in_profile = {name for name, service in services.items() if SCALE in service.get("profiles", [])}
    assert in_profile == {"migrate", "replica", "lb"}
    # `docker compose up` alone: PostgreSQL, one API that migrates itself, and the Ray head and workers its jobs run on
    # (docs/operations.md, "Jobs on Ray").
    assert {name for name, service in services.items() if "profiles" not in service} == {
        "db", "api", "ray-head", "ray-worker"
    }  # fmt: skip

    migrate, replica, lb = services["migrate"], services["replica"], services["lb"]
    assert migrate["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"
    assert replica["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert replica["deploy"]["replicas"] >= 2
    assert lb["depends_on"] == {"replica": {"condition": "service_healthy"}}
    # One image for the API, the migration and the replicas.
    assert migrate["image"] == replica["image"] == services["api"]["image"]
    # Replicas are reached through the load balancer only.
    assert "ports" not in replica and lb["ports"] == ["8080:8080"]
    # All on the one database.
    urls = {services[name]["environment"]["DATABASE_URL"] for name in ("api", "migrate", "replica")}
    assert len(urls) == 1 and "@db:5432/" in urls.pop()


def test_the_commands_are_real_commands(services: dict[str, Any]) -> None:
    parser = build_parser()
    migrate = parser.parse_args(services["migrate"]["command"][1:])
    assert (migrate.command, migrate.catalogue_command, migrate.migrate) == ("catalogue", "load", True)
    replica = parser.parse_args(services["replica"]["command"][1:])
    assert replica.command == "serve"
    assert replica.no_migrate and replica.no_load  # the migrate service did both, once
    assert replica.host == "0.0.0.0" and replica.workers >= 2
    # The settings the replicas' environment sets exist (pydantic-settings ignores unknown ones silently).
    for name in services["replica"]["environment"]:
        if name.startswith("RIDGELINE_"):
            assert name.removeprefix("RIDGELINE_").lower() in Settings.model_fields, name


def test_the_load_balancer_sends_to_the_replicas(services: dict[str, Any], nginx: str) -> None:
    lb = services["lb"]
    assert lb["volumes"] == ["./deploy/nginx.conf:/etc/nginx/nginx.conf:ro"]
    upstream = re.search(r"upstream (\w+) \{(.*?)\}", nginx, re.DOTALL)
    assert upstream is not None
    name, body = upstream.groups()
    servers = re.findall(r"^\s*server (\S+):(\d+)", body, re.MULTILINE)
    assert servers == [("replica", str(_serve_port(services["replica"]["command"])))]
    assert re.search(rf"proxy_pass http://{name};", nginx)
    assert re.search(r"listen (\d+);", nginx).group(1) == lb["ports"][0].split(":")[1]  # type: ignore[union-attr]


def test_the_load_balancer_lets_through_what_the_service_accepts(nginx: str) -> None:
    # nginx refuses bodies over 1 MB by default and gives up on a reply after 60 s: a 10 000-result upload is 1.5-3 MB
    # and the service's own limits (413 and 503 `timeout`) should be the ones a client hears.
    settings = Settings()
    size = re.search(r"client_max_body_size (\d+)m;", nginx)
    assert size is not None and int(size.group(1)) * 1024 * 1024 >= settings.max_body_bytes
    read = re.search(r"proxy_read_timeout (\d+)s;", nginx)
    assert read is not None and int(read.group(1)) > max(settings.request_timeout_s, settings.upload_timeout_s)


def test_postgres_admits_every_connection_the_processes_can_open(services: dict[str, Any]) -> None:
    # Each `serve` worker process keeps db_pool_size connections and lends as many more under load (service.db), plus
    # the event loop's digest pool (service.catalogue.loopread); the api and every replica at peak must fit under
    # max_connections, or requests wait and then fail with 503 under load.
    command = services["db"]["command"]
    max_connections = int(next(arg.split("=")[1] for arg in command if arg.startswith("max_connections=")))
    processes = 0
    for name in ("api", "replica"):
        serve = services[name]["command"]
        workers = int(serve[serve.index("--workers") + 1])
        processes += workers * services[name].get("deploy", {}).get("replicas", 1)
    pool = int(services["replica"]["environment"].get("RIDGELINE_DB_POOL_SIZE", Settings().db_pool_size))
    assert pool == Settings().db_pool_size
    peak = processes * (2 * pool + POSTGRES_POOL_MAX)
    assert processes == 8 and peak == 8 * (2 * 10 + 4)  # 192
    assert peak + 10 <= max_connections  # and a few for `migrate` and an operator


# --- replicas on one PostgreSQL, for real ---------------------------------------------------------------------------


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    schema = PostgresSchema()
    yield schema.url
    schema.drop()


def test_replicas_racing_to_migrate_an_empty_database_all_succeed(
    services: dict[str, Any], empty_postgres: str
) -> None:
    # What a replica started without the migrate step does. Before the advisory lock in service.migrate.upgrade, two
    # of three such processes failed with "relation already exists".
    command = [*ridgeline_command(), *services["migrate"]["command"][1:], "--database-url", empty_postgres]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(3)]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], "\n".join(outputs)
    inserted = [re.search(r"catalogue hardware: (\d+) inserted", out) for out in outputs]
    # The catalogue went in once: one process inserted it, the others found it there.
    assert sorted(int(m.group(1)) if m else 0 for m in inserted)[:2] == [0, 0]


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: the scale-out profile's PostgreSQL, or one SQLite file shared by several processes (the
    embedded default with `--workers 2`, where op estimates read digests on the event loop:
    service.catalogue.loopread)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    schema = PostgresSchema()
    yield schema.url
    schema.drop()


@pytest.fixture
def two_replicas(services: dict[str, Any], empty_database: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The migrate step, then two `ridgeline serve` processes (one worker each, so that the process that answered
    an estimate before a change is the one asked after it) started with the replica's flags."""
    subprocess.run(
        [*ridgeline_command(), *services["migrate"]["command"][1:], "--database-url", empty_database],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "DATABASE_URL": empty_database}
    env.pop("RIDGELINE_DATABASE_URL", None)
    servers = []
    try:
        for name in ("a", "b"):
            command = list(services["replica"]["command"])
            port = free_port()
            command[0] = ridgeline_command()[0]
            command[command.index("--port") + 1] = str(port)
            command[command.index("--host") + 1] = "127.0.0.1"
            command[command.index("--workers") + 1] = "1"
            (tmp_path / name).mkdir()
            servers.append(LiveServer(command, env, port, tmp_path / name))
        for server in servers:
            server.wait_healthy()
        yield servers[0].url, servers[1].url
    finally:
        for server in servers:
            server.stop()


def test_what_one_replica_writes_the_other_reads(two_replicas: tuple[str, str], empty_database: str) -> None:
    a, b = two_replicas
    create = [*ridgeline_command(), "keys", "create", "--name", "scale-out", "--scope", "catalogue"]
    made = subprocess.run([*create, "--database-url", empty_database], check=True, capture_output=True, text=True)
    key = {"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"}
    slug = "scale-out-what-if"
    elements = 1 << 28
    op = {"hardware": slug, "op": {"kind": "elementwise", "elements": elements, "inputs": 2, "outputs": 1}}

    def memory_time_on_b() -> float:
        response = httpx.post(f"{b}/v1/estimate/op", json=op, timeout=30)
        assert response.status_code == 200, response.text
        value: float = response.json()["memory_time_s"]
        return value

    with httpx.Client(base_url=a, timeout=30, headers=key) as on_a:
        assert on_a.post("/v1/hardware", json={**_HARDWARE, "slug": slug}).status_code == 201
        assert httpx.get(f"{b}/v1/hardware/{slug}", timeout=30).json()["name"] == _HARDWARE["name"]
        # 2²⁸ bf16 elements, two inputs and one output: 6·2²⁸ bytes at 5e12 B/s × memory efficiency 0.9.
        for _ in range(3):  # B parses the profile once and answers from its parse after that
            assert memory_time_on_b() == pytest.approx(6 * elements / (5e12 * 0.9))

        patched = on_a.patch(f"/v1/hardware/{slug}", json={"memory": {"device": {"bandwidth_bytes_per_s": 2.5e12}}})
        assert patched.status_code == 200, patched.text
        assert memory_time_on_b() == pytest.approx(6 * elements / (2.5e12 * 0.9))  # half the bandwidth: twice the time

        assert on_a.delete(f"/v1/hardware/{slug}").status_code == 204
        gone = httpx.post(f"{b}/v1/estimate/op", json=op, timeout=30)
        assert gone.status_code == 404 and gone.json()["error"] == "not_found"
