"""Faults, with real processes over real HTTP: the server SIGKILLed in the middle of a 10 000-result upload and
restarted while the worker's client retries; SIGTERM while an upload is in flight (graceful shutdown); PostgreSQL
restarted under traffic while the service keeps running.

The PostgreSQL restart uses a private, throw-away cluster (`initdb` + `pg_ctl` on a free port, in a temporary
directory), never the shared one other tests use. Without the server binaries the test fails: CI runs here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, func, select, text

from service import auth
from service.db import make_engine, make_sessionmaker
from service.orm import BenchmarkResult, BenchmarkRun, ServingTrace
from tests.conftest import LiveServer, PostgresSchema, free_port, ridgeline_command
from worker.client import RetryPolicy, RidgelineClient, dumps
from worker.spool import Spool
from worker.upload import DeliveryReport, flush

pytestmark = pytest.mark.slow  # real servers SIGKILLed and databases restarted

A100 = "a100-sxm-80gb"


def ten_thousand_results(seed: int = 0) -> dict[str, Any]:
    """A 10 000-result upload (the most one request takes), every op distinct so duplicates would show."""
    results = [
        {
            "op": {"kind": "matmul", "m": 1 + i % 100, "n": 1024 + seed, "k": 64 * (1 + i // 100), "dtype": "bf16"},
            "median_s": 1e-5 * (1 + i % 7),
        }
        for i in range(10_000)
    ]
    return {"hardware": A100, "host": "fault-test", "software": {"jax": "0.4.35"}, "timing_scope": "kernel",
            "results": results}  # fmt: skip


def make_key(url: str, name: str) -> str:
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session:
            key = auth.create_key(session, name, auth.Scope.upload).key
            session.commit()
        return key
    finally:
        engine.dispose()


def counts(engine: Engine) -> tuple[int, int, int]:
    """Runs, results, and distinct (op, median) among the results."""
    with engine.connect() as conn:
        runs = conn.scalar(select(func.count()).select_from(BenchmarkRun)) or 0
        results = conn.scalar(select(func.count()).select_from(BenchmarkResult)) or 0
        distinct = len({(json.dumps(op, sort_keys=True), m) for op, m in conn.execute(
            select(BenchmarkResult.op, BenchmarkResult.median_s))})  # fmt: skip
    return runs, results, distinct


class RecordingTransport(httpx.HTTPTransport):
    """Real HTTP, with every status (0 for a connection error) kept for the test to look at."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.TransportError:
            self.statuses.append(0)
            raise
        self.statuses.append(response.status_code)
        return response


def patient_client(url: str, token: str, transport: httpx.BaseTransport | None = None) -> RidgelineClient:
    # Retries for ~30 s: long enough for `ridgeline serve` to restart (8-10 s on the loaded 2-core machine).
    return RidgelineClient(
        url, token, timeout_s=60, retry=RetryPolicy(attempts=60, base_s=0.1, max_s=0.5), transport=transport
    )


# --- SIGKILL in the middle of a 10 000-result upload -------------------------------------------------------------


class FaultProxy:
    """127.0.0.1:port → the service. `mode` says when, during the first upload, to call `kill`:

    - "body": after half of the request body has been passed on (the service is reading it);
    - "answer": when the service starts to answer (it has committed), before any of the answer reaches the client;
    - "pass": never (the test kills the service itself).
    The client's connection is dropped at the kill; later connections are passed through to whoever listens.
    """

    def __init__(self, upstream_port: int, mode: str, kill: Callable[[], None]) -> None:
        self.upstream_port = upstream_port
        self.mode = mode
        self.kill = kill
        self.fired = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _fire(self, *socks: socket.socket) -> None:
        self.kill()
        self.fired.set()
        _drop(*socks)

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=120)
        except OSError:
            client.close()  # nobody listens: the client sees its connection drop
            return
        doomed = not self.fired.is_set() and self.mode in ("body", "answer")
        threading.Thread(target=self._answers, args=(client, upstream, doomed), daemon=True).start()
        head = b""
        body_seen = 0
        length: int | None = None
        try:
            while data := client.recv(65536):
                if doomed and self.mode == "body" and not self.fired.is_set():
                    if length is None:
                        head += data
                        if b"\r\n\r\n" in head:
                            headers, _, rest = head.partition(b"\r\n\r\n")
                            length = next(
                                int(line.split(b":", 1)[1])
                                for line in headers.split(b"\r\n")
                                if line.lower().startswith(b"content-length:")
                            )
                            body_seen = len(rest)
                    else:
                        body_seen += len(data)
                    if length is not None and body_seen >= length // 2:
                        upstream.sendall(data[: max(0, len(data) - (body_seen - length // 2))])
                        self._fire(client, upstream)
                        return
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _drop(client, upstream)

    def _answers(self, client: socket.socket, upstream: socket.socket, doomed: bool) -> None:
        try:
            while data := upstream.recv(65536):
                if doomed and self.mode == "answer" and not self.fired.is_set():
                    self._fire(client, upstream)
                    return
                client.sendall(data)
        except OSError:
            pass
        finally:
            _drop(client, upstream)

    def close(self) -> None:
        self._listener.close()


def _drop(*socks: socket.socket) -> None:
    """Close connections so that the peers see it: shutdown() sends the FIN even while another thread is blocked in
    recv() on the socket (close() alone would wait for that thread)."""
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def _wait_for_blocked_copy(conn: Any, timeout_s: float = 60.0) -> None:
    """Until a backend waits for the lock this test holds on benchmark_results: the upload is inside its insert."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        waiting = conn.execute(
            text("SELECT count(*) FROM pg_locks WHERE relation = 'benchmark_results'::regclass AND NOT granted")
        ).scalar()
        if waiting:
            return
        time.sleep(0.02)
    pytest.fail("the upload never reached its insert")


class Restarts:
    """One database (a fresh PostgreSQL schema, or a SQLite file) and `ridgeline serve` processes started on it one
    after another on one port, with the proxy in front of them; `close` stops and drops them all."""

    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.schema = PostgresSchema() if backend == "postgresql" else None
        self.url = self.schema.url if self.schema is not None else f"sqlite:///{tmp_path / 'fault.db'}"
        self.admin = create_engine(self.url)
        self.port = free_port()
        self.servers: list[LiveServer] = []
        self.proxy: FaultProxy | None = None

    def start(self, name: str) -> LiveServer:
        (self.tmp_path / name).mkdir()
        env = {**os.environ, "RIDGELINE_DATABASE_URL": self.url}
        server = LiveServer([*ridgeline_command(), "serve", "--port", str(self.port)], env, self.port,
                            self.tmp_path / name)  # fmt: skip
        self.servers.append(server)
        server.wait_healthy()
        return server

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        for server in self.servers:
            server.stop()
        self.admin.dispose()
        if self.schema is not None:
            self.schema.drop()


@contextlib.contextmanager
def restarts(backend: str, tmp_path: Path) -> Iterator[Restarts]:
    run = Restarts(backend, tmp_path)
    try:
        yield run
    finally:
        run.close()


@pytest.mark.parametrize(
    ("backend", "kill_at"),
    [("postgresql", "body"), ("postgresql", "insert"), ("postgresql", "answer"), ("sqlite", "body"),
     ("sqlite", "answer")],
)  # fmt: skip
def test_sigkill_during_a_ten_thousand_result_upload(backend: str, kill_at: str, tmp_path: Path) -> None:
    """The worker's spool and client send one 10 000-result batch through a proxy; the server is SIGKILLed while the
    request is in flight (reading the body / inside the insert, the results' COPY held on a lock / after the commit,
    before the answer reaches the client); a new server starts on the same database and port while the client is
    still retrying. Afterwards: exactly one run of 10 000 results, none twice. (The insert is held on a PostgreSQL
    table lock, so that case runs on PostgreSQL only.)"""
    with restarts(backend, tmp_path) as run:
        url, admin = run.url, run.admin
        first = run.start("first")
        token = make_key(url, "fault-sigkill")
        proxy = FaultProxy(run.port, "pass" if kill_at == "insert" else kill_at, lambda: first.proc.send_signal(9))
        run.proxy = proxy
        spool = Spool(tmp_path / "spool")
        entry = spool.put(ten_thousand_results())
        report: list[DeliveryReport] = []
        client = patient_client(proxy.url, token)
        sender = threading.Thread(target=lambda: report.append(flush(client, spool)), daemon=True)

        if kill_at == "insert":
            with admin.connect() as conn:
                conn.execute(text("LOCK TABLE benchmark_results IN SHARE MODE"))  # COPY must wait for this
                sender.start()
                _wait_for_blocked_copy(conn)
                first.proc.send_signal(signal.SIGKILL)
                assert first.proc.wait(timeout=10) == -signal.SIGKILL
                conn.rollback()  # the killed server's transaction goes on, finds its client gone, and aborts
        else:
            sender.start()
            assert proxy.fired.wait(timeout=60), "the proxy never saw the upload"
            assert first.proc.wait(timeout=10) == -signal.SIGKILL
        assert counts(admin)[0] == (1 if kill_at == "answer" else 0)  # committed only when it was answering

        run.start("second")
        sender.join(timeout=90)
        assert not sender.is_alive(), "the client never finished"
        client.close()
        done = report[0]
        assert (done.sent_batches, done.sent_results, done.spooled_batches) == (1, 10_000, 0), done.errors
        # The batch committed before the kill is found by its Idempotency-Key, not stored again.
        assert done.replayed_batches == (1 if kill_at == "answer" else 0)
        assert spool.pending() == []
        assert counts(admin) == (1, 10_000, 10_000)
        with admin.connect() as conn:
            run_row = conn.execute(select(BenchmarkRun.idempotency_key, BenchmarkRun.result_count)).one()
        assert tuple(run_row) == (entry.idempotency_key, 10_000)


# --- SIGTERM: graceful shutdown finishes the upload in flight -----------------------------------------------------


def test_sigterm_finishes_the_upload_in_flight_and_refuses_new_connections(tmp_path: Path) -> None:
    """A 10 000-result upload whose body arrives slowly (20 parts, 0.1 s apart); SIGTERM after the fifth part. The
    listening socket closes at once (new connections are refused) while the upload goes on to its 201, every result
    stored; then the process exits."""
    url = f"sqlite:///{tmp_path / 'graceful.db'}"
    port = free_port()
    server = LiveServer([*ridgeline_command(), "serve", "--port", str(port)],
                        {**os.environ, "RIDGELINE_DATABASE_URL": url}, port, tmp_path)  # fmt: skip
    try:
        server.wait_healthy()
        token = make_key(url, "graceful")
        payload = dumps(ten_thousand_results())
        parts = [payload[i * len(payload) // 20 : (i + 1) * len(payload) // 20] for i in range(20)]
        terminated = threading.Event()
        refused_while_uploading: list[bool] = []

        def slow_body() -> Iterator[bytes]:
            for index, part in enumerate(parts):
                if index == 5:
                    server.proc.send_signal(signal.SIGTERM)
                    terminated.set()
                    refused_while_uploading.append(_refused(port))
                yield part
                time.sleep(0.1)

        response = httpx.post(
            f"{server.url}/v1/benchmarks",
            content=slow_body(),
            headers={"authorization": f"Bearer {token}", "content-type": "application/json",
                     "content-length": str(len(payload)), "idempotency-key": "graceful-1"},
            timeout=60,
        )  # fmt: skip
        assert terminated.is_set()
        assert refused_while_uploading == [True], "a new connection was accepted after SIGTERM"
        assert response.status_code == 201, response.text[:500]
        assert response.json()["results"] == 10_000
        # uvicorn re-raises the SIGTERM it captured once the shutdown is done (uvicorn.Server.capture_signals), so the
        # process ends "killed by SIGTERM", but only after it logged that it waited for the upload and finished.
        assert server.proc.wait(timeout=30) == -signal.SIGTERM
        log = server.log.read_text()
        assert log.index("Waiting for connections to close") < log.index("Finished server process"), log[-2000:]
        engine = make_engine(url)
        try:
            assert counts(engine) == (1, 10_000, 10_000)
        finally:
            engine.dispose()
    finally:
        server.stop()


# --- SIGKILL during a trace upload: stored once or not at all ----------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "kill_at"), [("postgresql", "body"), ("postgresql", "answer"), ("sqlite", "body"), ("sqlite", "answer")]
)
def test_sigkill_during_a_trace_upload(backend: str, kill_at: str, tmp_path: Path) -> None:
    """A 50 000-request trace file through the proxy; the server is SIGKILLed with half the body read, or after the
    commit and before the answer reaches the client. The client sees its connection drop and sends the file again to
    a new server on the same database: the trace is stored once (its id is the digest of its requests), 201 if the
    first attempt stored nothing, 200 if it had committed."""
    rows = "".join(f"{0.02 * i:.2f},{128 + i % 4000},{16 + i % 500}\n" for i in range(50_000))
    body = ("arrival_s,prompt_tokens,output_tokens\n" + rows).encode()
    headers = {"content-type": "text/csv"}
    with restarts(backend, tmp_path) as run:

        def stored() -> list[tuple[str, int]]:
            with run.admin.connect() as conn:
                return [(str(r[0]), int(r[1])) for r in conn.execute(select(ServingTrace.id, ServingTrace.requests))]

        first = run.start("first")
        headers["Authorization"] = f"Bearer {make_key(run.url, 'fault-trace')}"  # after the migration
        proxy = run.proxy = FaultProxy(run.port, kill_at, lambda: first.proc.send_signal(signal.SIGKILL))
        with pytest.raises(httpx.TransportError):
            httpx.post(f"{proxy.url}/v1/traces", content=body, headers=headers, timeout=60)
        assert proxy.fired.is_set() and first.proc.wait(timeout=10) == -signal.SIGKILL
        assert len(stored()) == (1 if kill_at == "answer" else 0)  # committed only when it was answering

        run.start("second")
        again = httpx.post(f"{proxy.url}/v1/traces", content=body, headers=headers, timeout=60)
        assert again.status_code == (200 if kill_at == "answer" else 201), again.text[:500]
        assert stored() == [(again.json()["id"], 50_000)]


def _refused(port: int, timeout_s: float = 5.0) -> bool:
    """True once a connection to the port is refused (uvicorn closes its listener right after SIGTERM)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
        except ConnectionRefusedError:
            return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


# --- PostgreSQL restarted under traffic ---------------------------------------------------------------------------


class PrivateCluster:
    """A PostgreSQL cluster of its own (initdb, pg_ctl) on a free port, for tests that stop and start it."""

    def __init__(self) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        on_path = shutil.which("pg_ctl")
        if not found and on_path is None:
            pytest.fail("PostgreSQL's server binaries (initdb, pg_ctl) are needed: apt-get install postgresql")
        self.bin = found[-1].parent if found else Path(str(on_path)).parent
        self.dir = Path(tempfile.mkdtemp(prefix="ridgeline-pg-"))
        self.as_postgres = os.geteuid() == 0  # PostgreSQL refuses to run as root
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            pytest.fail(f"{tool} failed: {done.stdout}\n{done.stderr}")

    def start(self) -> None:
        # fsync off: a throw-away cluster, always stopped cleanly (fast shutdown writes a checkpoint).
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-o", options, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(BaseException):  # already stopped (pytest.fail from _run)
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def private_cluster() -> Iterator[PrivateCluster]:
    cluster = PrivateCluster()
    try:
        yield cluster
    finally:
        cluster.destroy()


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_postgresql_restarted_under_traffic(private_cluster: PrivateCluster, tmp_path: Path) -> None:
    """Readers and an uploader run against `ridgeline serve` while its PostgreSQL is stopped for ~3 s and started
    again. During the outage: 503 envelopes with Retry-After, answered fast (no 500, no hang). After it: 200 and 201
    again from the same server process, and every upload stored exactly once (the client retries with its key)."""
    port = free_port()
    env = {**os.environ, "RIDGELINE_DATABASE_URL": private_cluster.url, "RIDGELINE_REQUEST_TIMEOUT_S": "10"}
    server = LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp_path)
    admin: Engine | None = None
    try:
        server.wait_healthy()
        pid = server.proc.pid
        token = make_key(private_cluster.url, "fault-restart")
        stop = threading.Event()
        reads: list[tuple[float, float, int, str, str | None]] = []  # start, seconds, status, error code, Retry-After

        def reader(path: str) -> None:
            with httpx.Client(base_url=server.url, timeout=30) as http:
                while not stop.is_set():
                    began = time.monotonic()
                    try:
                        response = http.get(path)
                    except httpx.HTTPError as err:
                        reads.append((began, time.monotonic() - began, 0, type(err).__name__, None))
                        continue
                    code = response.json().get("error", "") if response.status_code != 200 else ""
                    reads.append((began, time.monotonic() - began, response.status_code, code,
                                  response.headers.get("retry-after")))  # fmt: skip
                    time.sleep(0.05)

        uploads: list[dict[str, Any]] = []
        upload_errors: list[str] = []

        recorder = RecordingTransport()

        def uploader() -> None:
            client = patient_client(server.url, token, recorder)
            try:
                for batch in range(40):
                    body = {"hardware": A100, "host": "fault-test", "software": {}, "timing_scope": "kernel",
                            "results": [{"op": {"kind": "elementwise", "elements": 1000 * (batch + 1) + i,
                                                "dtype": "bf16"}, "median_s": 1e-5} for i in range(100)]}  # fmt: skip
                    uploads.append(client.upload(dumps(body), f"restart-{batch}").body)
                    time.sleep(0.1)
            except Exception as err:  # reported below
                upload_errors.append(repr(err))
            finally:
                client.close()

        threads = [threading.Thread(target=reader, args=(p,), daemon=True) for p in ("/v1/benchmarks", "/v1/hardware")]
        threads.append(threading.Thread(target=uploader, daemon=True))
        for thread in threads:
            thread.start()
        # Conditions, not sleeps: each reader answered before the outage and an upload was stored; during it, each
        # reader and the uploader met a 503 (and the outage lasted long enough for a read to begin 0.5 s before its
        # end); after it, each reader answered 200 to a read begun 0.5 s after the database came back.
        _wait_until(lambda: sum(r[2] == 200 for r in reads) >= 4 and len(uploads) >= 1, "traffic before the outage")
        private_cluster.stop()
        down_at = time.monotonic()
        _wait_until(
            lambda: (
                sum(r[2] == 503 and r[0] >= down_at for r in reads) >= 4
                and any(r[2] == 503 and down_at <= r[0] <= time.monotonic() - 0.5 for r in reads)
                and 503 in recorder.statuses
            ),
            "503s during the outage",
        )
        up_at = time.monotonic()
        private_cluster.start()
        back_at = time.monotonic()
        threads[-1].join(timeout=60)
        _wait_until(lambda: sum(r[2] == 200 and r[0] > back_at + 0.5 for r in reads) >= 4, "reads after the outage")
        stop.set()
        for thread in threads[:-1]:
            thread.join(timeout=30)

        assert not upload_errors, upload_errors
        assert server.proc.poll() is None and server.proc.pid == pid  # the same process throughout
        statuses = {status for _, _, status, _, _ in reads}
        assert statuses <= {200, 503}, sorted({(s, c) for _, _, s, c, _ in reads})
        outage = [r for r in reads if down_at <= r[0] <= up_at - 0.5]
        assert outage and all(r[2] == 503 for r in outage), outage[:5]
        assert all(r[3] == "unavailable" and r[4] == "2" for r in reads if r[2] == 503)
        assert max(seconds for _, seconds, _, _, _ in reads) < 10  # answered, not hung
        after = [r for r in reads if r[0] > back_at + 0.5]
        assert after and all(r[2] == 200 for r in after)

        assert len(uploads) == 40 and all(u["results"] == 100 for u in uploads)
        assert 503 in recorder.statuses and set(recorder.statuses) <= {201, 503}  # uploads met the outage, retried
        admin = make_engine(private_cluster.url)
        assert counts(admin) == (40, 4000, 4000)
    finally:
        server.stop()
        if admin is not None:
            admin.dispose()
