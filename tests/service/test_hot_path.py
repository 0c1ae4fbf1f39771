"""The op endpoint's hot path (service.estimates.service.estimate_op): catalogue digests read on the event loop
(service.catalogue.loopread); the single item it renders without numpy's column path (adapters.item_dict) is held
equal to the column path in tests/adapters/test_rows.py.

That a digest read on the loop is always current is proven with two real processes on one database (SQLite file and
PostgreSQL) in tests/service/test_scale_out.py (a PATCH through one, an estimate through the other); here, the
readers' own rules, against real SQLite files and the real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from service.catalogue.loopread import (
    POSTGRES_WAIT_S,
    SQLITE_BUSY_MS,
    DigestReader,
    PostgresDigests,
    SqliteDigests,
    digest_reader,
)
from service.db import make_engine
from service.examples import _HARDWARE, ESTIMATE_OP_EXAMPLES
from tests.conftest import PostgresSchema, free_port

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL


def _read(reader: DigestReader, slug: str, table: str = "hardware_profiles") -> tuple[bool, str | None]:
    async def run() -> tuple[bool, str | None]:
        await reader.open()
        try:
            return await reader.digest(table, slug)
        finally:
            await reader.close()

    return asyncio.run(run())


def test_each_database_gets_its_reader(tmp_path: Path) -> None:
    assert type(digest_reader(create_engine(f"sqlite:///{tmp_path / 'r.db'}"))) is SqliteDigests
    assert type(digest_reader(create_engine("sqlite://"))) is DigestReader  # in memory: a database per connection
    assert type(digest_reader(create_engine("sqlite:///:memory:"))) is DigestReader
    assert type(digest_reader(make_engine("postgresql://u@127.0.0.1:5432/test"))) is PostgresDigests


def test_no_reader_leaves_every_read_to_the_session() -> None:
    assert _read(DigestReader(), "a100-sxm-80gb") == (False, None)


def test_a_missing_sqlite_file_is_left_to_the_session_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    assert _read(SqliteDigests(path), "a100-sxm-80gb") == (False, None)
    assert not path.exists()


def test_the_sqlite_digest_is_the_rows_and_an_unknown_slug_is_known_absent(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE hardware_profiles (slug TEXT PRIMARY KEY, spec_sha256 TEXT)")
    db.execute("INSERT INTO hardware_profiles VALUES ('h', 'abc')")
    reader = SqliteDigests(path)

    async def run() -> list[tuple[bool, str | None]]:
        seen = [await reader.digest("hardware_profiles", "h"), await reader.digest("hardware_profiles", "nope")]
        db.execute("UPDATE hardware_profiles SET spec_sha256 = 'def' WHERE slug = 'h'")  # another connection commits
        seen.append(await reader.digest("hardware_profiles", "h"))  # the next read sees it
        await reader.close()
        return seen

    assert asyncio.run(run()) == [(True, "abc"), (True, None), (True, "def")]
    db.close()


def test_an_unmigrated_sqlite_database_is_left_to_the_session(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    assert _read(SqliteDigests(path), "h") == (False, None)


def test_a_locked_sqlite_database_does_not_hold_the_loop(tmp_path: Path) -> None:
    # WAL readers wait only for a connection in exclusive locking mode (or recovering the WAL). The reader gives up
    # after SQLITE_BUSY_MS and the request goes to the thread pool; the engine's own connections would wait 30 s.
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
        started = time.monotonic()
        assert _read(SqliteDigests(path), "h") == (False, None)
        assert time.monotonic() - started < 20 * SQLITE_BUSY_MS / 1000
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _read(SqliteDigests(path), "h") == (True, None)  # the lock is gone, the insert rolled back


def test_the_postgres_digest_is_the_rows_and_an_unknown_slug_is_known_absent() -> None:
    schema = PostgresSchema()
    engine = make_engine(schema.url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE hardware_profiles (slug TEXT PRIMARY KEY, spec_sha256 TEXT)"))
            conn.execute(text("INSERT INTO hardware_profiles VALUES ('h', 'abc')"))
        reader = digest_reader(engine)  # the engine's URL, search_path option included

        async def run() -> list[tuple[bool, str | None]]:
            await reader.open()
            seen = [await reader.digest("hardware_profiles", "h"), await reader.digest("hardware_profiles", "nope")]
            with engine.begin() as conn:  # another connection commits: the next read sees it
                conn.execute(text("UPDATE hardware_profiles SET spec_sha256 = 'def' WHERE slug = 'h'"))
            seen.append(await reader.digest("hardware_profiles", "h"))
            await reader.close()
            seen.append(await reader.digest("hardware_profiles", "h"))  # closed: left to the session
            return seen

        assert asyncio.run(run()) == [(True, "abc"), (True, None), (True, "def"), (False, None)]
    finally:
        engine.dispose()
        schema.drop()


def test_an_unreachable_postgres_is_left_to_the_session_without_holding_the_request() -> None:
    # Nothing listens on the port: the pool keeps trying in the background, each read waits POSTGRES_WAIT_S at most.
    reader = digest_reader(make_engine(f"postgresql://postgres@127.0.0.1:{free_port()}/test"))
    started = time.monotonic()
    assert _read(reader, "h") == (False, None)
    assert time.monotonic() - started < POSTGRES_WAIT_S + 2.0


def test_the_loop_path_and_the_session_path_answer_alike(client: TestClient) -> None:
    # The first estimate on a profile parses it through a session (thread pool); the next is answered on the loop
    # from the cached parse. Same numbers either way: the matmul of seed 002's wave cliff, 1793³ with 256×128 tiles
    # on 108 SMs, is 8·15 = 120 tiles in 2 waves.
    body = ESTIMATE_OP_EXAMPLES["wave-cliff"]["value"]
    first, second = (client.post("/v1/estimate/op", json=body) for _ in range(2))
    assert first.status_code == second.status_code == 200, first.text
    assert first.json() == second.json()
    assert (first.json()["tiles"], first.json()["waves"]) == (120, 2)


def test_inference_on_the_loop_answers_as_through_a_session(client: TestClient) -> None:
    # Model and profile parsed through a session on the first request, then read from the cache under the digests
    # read on the loop: the same run either way, for a catalogue profile and an inline one.
    body = {
        "model": "llama-3-8b",
        "hardware": "a100-sxm-80gb",
        "workload": {"batch": 8, "prompt_tokens": 1024, "output_tokens": 128},
    }
    inline = {**body, "hardware": {**_HARDWARE, "slug": "inline-h100"}}
    for request in (body, inline):
        first, second = (client.post("/v1/estimate/inference", json=request) for _ in range(2))
        assert first.status_code == second.status_code == 200, first.text
        assert first.json() == second.json()
    # Llama 3 8B's weights in bf16: 8.03 B parameters × 2 bytes on one device (Meta's model card: 8.03 B).
    assert first.json()["memory"]["weights_bytes"] == pytest.approx(2 * 8.03e9, rel=0.01)
    missing = client.post("/v1/estimate/inference", json={**body, "model": "no-such-model"})
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
