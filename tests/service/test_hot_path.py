"""The op endpoint's hot path (service.estimates.router): catalogue digests read on the event loop
(service.catalogue.loopread) and a single item rendered without numpy's column path
(service.estimates.service.item_dict).

That a digest read on the loop is always current is proven with two real processes on one SQLite file in
tests/service/test_scale_out.py (a PATCH through one, an estimate through the other); here, the reader's own rules.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from schemas.estimates import EstimateOpRequest
from service.catalogue.loopread import BUSY_TIMEOUT_MS, LoopReader
from service.estimates import service
from service.examples import ESTIMATE_OP_EXAMPLES


def test_the_reader_is_on_for_sqlite_files_only(tmp_path: Path) -> None:
    assert LoopReader.for_engine(create_engine(f"sqlite:///{tmp_path / 'r.db'}")).enabled
    assert not LoopReader.for_engine(create_engine("sqlite://")).enabled  # in memory: one database per connection
    assert not LoopReader.for_engine(create_engine("sqlite:///:memory:")).enabled
    # PostgreSQL is across a network: a blocking read there would hold the loop for a round trip, or an outage.
    assert not LoopReader.for_engine(create_engine("postgresql+psycopg://u@127.0.0.1:5432/test")).enabled


def test_a_missing_file_is_left_to_the_session_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    reader = LoopReader(path)
    assert reader.digest("hardware_profiles", "a100-sxm-80gb") == (False, None)
    assert not path.exists()


def test_the_digest_is_the_rows_and_an_unknown_slug_is_known_absent(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE hardware_profiles (slug TEXT PRIMARY KEY, spec_sha256 TEXT)")
        db.execute("INSERT INTO hardware_profiles VALUES ('h', 'abc')")
    reader = LoopReader(path)
    assert reader.digest("hardware_profiles", "h") == (True, "abc")
    assert reader.digest("hardware_profiles", "nope") == (True, None)
    with sqlite3.connect(path) as db:  # another connection commits a change: the next read sees it
        db.execute("UPDATE hardware_profiles SET spec_sha256 = 'def' WHERE slug = 'h'")
    assert reader.digest("hardware_profiles", "h") == (True, "def")


def test_an_unmigrated_database_is_left_to_the_session(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    assert LoopReader(path).digest("hardware_profiles", "h") == (False, None)


def test_a_locked_database_does_not_hold_the_loop(tmp_path: Path) -> None:
    # WAL readers wait only for a connection in exclusive locking mode (or recovering the WAL). The reader gives up
    # after BUSY_TIMEOUT_MS and the request goes to the thread pool; the engine's own connections would wait 30 s.
    path = tmp_path / "r.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE hardware_profiles (slug TEXT PRIMARY KEY, spec_sha256 TEXT)")
    db.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO hardware_profiles VALUES ('h', 'abc')")
    try:
        reader = LoopReader(path)
        started = time.monotonic()
        assert reader.digest("hardware_profiles", "h") == (False, None)
        assert time.monotonic() - started < 20 * BUSY_TIMEOUT_MS / 1000
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert reader.digest("hardware_profiles", "h") == (True, None)  # reopened once the lock is gone


def _op_examples() -> list[dict[str, Any]]:
    return [example["value"] for example in ESTIMATE_OP_EXAMPLES.values()]


@pytest.mark.parametrize("body", _op_examples(), ids=list(ESTIMATE_OP_EXAMPLES))
def test_one_item_renders_as_the_column_path_renders_it(client: TestClient, body: dict[str, Any]) -> None:
    # Both renderers of an estimate (the single op's and the sweep's) give the same item, key order included.
    request = EstimateOpRequest.model_validate(body)
    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        spec, name = service.resolve_hardware(session, request)
    hw = service.to_core(spec, request)
    est = service.with_assumptions(service.evaluate(hw, request.op), hw, name)
    single = service.item_dict(est)
    assert list(single) == list(service.item_dicts(est, where=None)[0])
    assert single == service.item_dicts(est, where=None)[0]
    assert all(type(value) is float for key, value in single.items() if key.endswith("_s"))


def test_the_loop_path_and_the_session_path_answer_alike(client: TestClient) -> None:
    # The first estimate on a profile parses it through a session (thread pool); the next is answered on the loop
    # from the cached parse (SQLite) or through the session again (PostgreSQL). Same numbers either way: the
    # matmul of seed 002's wave cliff, 1793³ with 256×128 tiles on 108 SMs, is 8·15 = 120 tiles in 2 waves.
    body = ESTIMATE_OP_EXAMPLES["wave-cliff"]["value"]
    first, second = (client.post("/v1/estimate/op", json=body) for _ in range(2))
    assert first.status_code == second.status_code == 200, first.text
    assert first.json() == second.json()
    assert (first.json()["tiles"], first.json()["waves"]) == (120, 2)
