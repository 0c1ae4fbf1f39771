"""Fixtures: a test that takes the `database_url` fixture (or `client` or `settings`, built on it) runs on SQLite; one
where the database matters (storage, migrations, concurrency, idempotency) is marked `databases` and runs on SQLite
and on the local PostgreSQL.

PostgreSQL is not optional: if it cannot be reached the tests fail (CI must not pass by skipping). Each test process
(each pytest-xdist worker) works in its own schema of the `test` database, made by the real migrations and dropped at
the end. `--databases=sqlite` (the fast tier, `scripts/test.sh --fast`) runs the marked tests on SQLite only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from _pytest.nodeid import coerce_node_id
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, delete, text

from service import migrate
from service.app import create_app
from service.catalogue.load import load_catalogue
from service.db import make_engine, make_sessionmaker
from service.orm import HardwareProfile, Job, ModelConfig, ServingTrace
from service.settings import Settings

REPO = Path(__file__).resolve().parent.parent
POSTGRES_ADMIN_URL = os.environ.get("RIDGELINE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--databases",
        choices=["all", "sqlite"],
        default="all",
        help="where the tests marked `databases` run: SQLite and PostgreSQL (all, the default) or SQLite only",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The backends of a database test: both where it is marked `databases` (unless `--databases=sqlite`), else
    SQLite. Session-scoped, so that every test of one backend shares its migrated database."""
    if "database_url" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):  # a test that names its backends keeps them
        if "database_url" in (mark.args[0] if isinstance(mark.args[0], (list, tuple)) else mark.args[0].split(",")):
            return
    both = metafunc.definition.get_closest_marker("databases") and metafunc.config.getoption("databases") == "all"
    metafunc.parametrize("database_url", BACKENDS if both else ["sqlite"], indirect=True, scope="session")


class PostgresSchema:
    """A throw-away schema in the test database; the URL pins search_path to it."""

    def __init__(self) -> None:
        self.name = f"rl_test_{uuid.uuid4().hex[:10]}"
        self.admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
        try:
            with self.admin.connect() as conn:
                conn.execute(text(f'CREATE SCHEMA "{self.name}"'))
        except Exception as err:
            pytest.fail(f"PostgreSQL at {POSTGRES_ADMIN_URL} is required for the database tests: {err}")
        self.url = f"{POSTGRES_ADMIN_URL}?options={quote(f'-csearch_path={self.name}')}"

    def drop(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{self.name}" CASCADE'))
        self.admin.dispose()


@pytest.fixture
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A brand-new, empty database of the backend named by the test's `backend` parameter."""
    backend = request.param if hasattr(request, "param") else "sqlite"
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    schema = PostgresSchema()
    try:
        yield schema.url
    finally:
        schema.drop()


def _params(item: pytest.Item) -> dict[str, object]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


@pytest.hookimpl(trylast=True)  # after the hooks that add marks (tests/bench/conftest.py)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--databases=sqlite` also leaves out the tests that name PostgreSQL as their backend themselves; the tests
    marked `longest` go first, so that they run beside the rest rather than after it; and under `--dist loadgroup`
    an `xdist_group` reaches the scheduler (pytest-xdist 3.8 sets the group's suffix on `Node._nodeid`, which pytest
    9 no longer reads: the id lives in `Node._id`)."""
    if config.getoption("databases") == "sqlite":
        on_postgresql = [i for i in items if any(v == "postgresql" for v in _params(i).values() if isinstance(v, str))]
        if on_postgresql:
            config.hook.pytest_deselected(items=on_postgresql)
            items[:] = [i for i in items if i not in on_postgresql]
    items.sort(key=lambda item: item.get_closest_marker("longest") is None)  # stable: otherwise in collection order
    if getattr(config.option, "loadgroup", False):  # set on xdist's workers under --dist loadgroup
        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})  # fmt: skip
            if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
                item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture(scope="session")
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database with the built-in catalogue loaded, shared by the tests of one backend."""
    schema = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'ridgeline.db'}"
    else:
        schema = PostgresSchema()
        url = schema.url
    migrate.upgrade(url)
    engine = make_engine(url)
    load_catalogue(make_sessionmaker(engine))
    engine.dispose()
    yield url
    if schema is not None:
        schema.drop()


@pytest.fixture
def settings(database_url: str) -> Settings:
    # The heavy requests' rate per client is off: the tests of one database share its counts (and one address), and
    # tests/service/test_heavy.py turns it on where it is the subject. Jobs are stored but not run: a test that runs
    # them on Ray says so (tests/service/test_jobs_ray.py), so that no other test starts a Ray cluster because its
    # request was big enough to become a job.
    return Settings(database_url=database_url, heavy_requests_per_window=0, run_jobs=False)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    # Each test leaves the built-in catalogue as it found it and takes its own entries (and traces) away.
    with app.state.sessionmaker() as session:
        session.execute(delete(HardwareProfile).where(HardwareProfile.builtin.is_(False)))
        session.execute(delete(ModelConfig).where(ModelConfig.builtin.is_(False)))
        session.execute(delete(ServingTrace))
        session.execute(delete(Job))  # nor does a queued job wait for the next test's runner
        session.commit()
    app.state.engine.dispose()


def make_key(client: TestClient, scope: str, name: str | None = None) -> str:
    """A new API key with `scope` on the client's database (as `ridgeline keys create` makes one)."""
    from service import auth

    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        key = auth.create_key(session, name or f"test-{scope}-{uuid.uuid4().hex[:6]}", auth.Scope(scope)).key
        session.commit()
    return key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def writer(client: TestClient) -> dict[str, str]:
    """The `Authorization` header of a catalogue key made for this test: it may write catalogue entries, runs and
    traces, and change what it made."""
    return bearer(make_key(client, "catalogue"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """`ridgeline serve` in a subprocess, as a user or the container runs it."""

    def __init__(self, args: list[str], env: dict[str, str], port: int, cwd: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = cwd / "server.log"
        self._log_file = self.log.open("w")
        self.proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=self._log_file, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout_s: float = 60) -> httpx.Response:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                response = httpx.get(f"{self.url}/healthz", timeout=2)
                if response.status_code == 200:
                    return response
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"server did not become healthy; log:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log_file.close()


def ridgeline_command() -> list[str]:
    """The installed console script, next to the interpreter running the tests."""
    script = Path(sys.executable).with_name("ridgeline")
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[LiveServer]:
    port = free_port()
    # Jobs are stored, not run (as `settings` below): no Ray cluster started by a request big enough to be a job.
    env = {**os.environ, "RIDGELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'live.db'}", "RIDGELINE_RUN_JOBS": "false"}
    server = LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp_path)
    server.wait_healthy()
    yield server
    server.stop()
