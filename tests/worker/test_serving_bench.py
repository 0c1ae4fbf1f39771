"""`ridgeline-worker serving-bench`: a load test's file and its deployment spooled, sent to a live service, or kept
for `flush` while the service is away. (The tools themselves run against `ridgeline emulate` in tests/emulate, with
the commands `worker.servingbench` builds.)"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest

from service import auth
from service.db import make_engine, make_sessionmaker
from tests.conftest import LiveServer, free_port
from worker.cli import main
from worker.spool import SERVING_BENCHMARKS, Spool

DATA = Path(__file__).resolve().parents[1] / "adapters" / "loadtests" / "data"
DEPLOYMENT = {"model": "llama-3-8b", "hardware": "h100-sxm", "release": {"name": "emulated", "version": "ridgeline"}}


def _upload_key(server: LiveServer) -> str:
    engine = make_engine(f"sqlite:///{server.log.parent / 'live.db'}")
    try:
        with make_sessionmaker(engine)() as session:
            key = auth.create_key(session, "serving-bench", auth.Scope.upload).key
            session.commit()
        return key
    finally:
        engine.dispose()


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    result = tmp_path / "profile_export_aiperf.json"
    result.write_bytes(gzip.decompress((DATA / "aiperf-0.13.0.json.gz").read_bytes()))
    deployment = tmp_path / "deployment.json"
    deployment.write_text(json.dumps(DEPLOYMENT))
    return result, deployment


def _args(result: Path, deployment: Path, spool: Path, server: str, token: str) -> list[str]:
    return ["serving-bench", "--tool", "aiperf", "--result", str(result), "--deployment", str(deployment),
            "--spool-dir", str(spool), "--server", server, "--token", token, "--retries", "1"]  # fmt: skip


@pytest.mark.slow  # a live server
def test_a_load_test_waits_in_the_spool_while_the_service_is_away(
    live_server: LiveServer, files: tuple[Path, Path], tmp_path: Path
) -> None:
    result, deployment = files
    key = _upload_key(live_server)
    away = f"http://127.0.0.1:{free_port()}"
    assert main(_args(result, deployment, tmp_path / "spool", away, key)) == 75  # EX_TEMPFAIL: spooled
    pending = Spool(tmp_path / "spool").pending()
    assert [(e.path, e.results) for e in pending] == [(SERVING_BENCHMARKS, 1)]
    flush = ["flush", "--spool-dir", str(tmp_path / "spool"), "--server", live_server.url, "--token", key]
    assert main(flush) == 0
    assert Spool(tmp_path / "spool").pending() == []
    page = httpx.get(f"{live_server.url}/v1/serving-benchmarks").json()
    assert page["total"] == 1
    stored = page["items"][0]
    # the aiperf file of data/README.md: 40 requests at concurrency 4, 256 + 64 tokens
    assert (stored["format"], stored["engine"], stored["load"]["concurrency"]) == ("aiperf", "emulated", 4)
    # Sent again (a retry of the same upload): the service replays it, nothing is stored twice.
    assert main(_args(result, deployment, tmp_path / "spool", live_server.url, key)) == 0
    assert httpx.get(f"{live_server.url}/v1/serving-benchmarks").json()["total"] == 1


def test_a_deployment_the_contract_refuses_is_not_spooled(files: tuple[Path, Path], tmp_path: Path) -> None:
    result, deployment = files
    deployment.write_text(json.dumps(DEPLOYMENT | {"mode": "sideways"}))
    assert main(_args(result, deployment, tmp_path / "spool", "http://127.0.0.1:9", "k")) == 2
    assert Spool(tmp_path / "spool").pending() == []
