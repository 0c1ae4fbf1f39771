"""Batching, spooling and delivery: a measurement is stored exactly once, whatever the service does."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from tests.worker.fakes import FakeService
from worker.client import RetryPolicy, RidgelineClient
from worker.results import Measurement, RunInfo, TimingScope, host_overhead_s, run_payload
from worker.spool import Spool
from worker.timing import Stats
from worker.upload import Uploader, flush

INFO = RunInfo(hardware="cpu-generic", host="test-host", software={"jax": "0.0"})


def measurement(i: int) -> Measurement:
    op = {"kind": "reduction", "rows": 1 + i, "cols": 1024, "dtype": "fp32"}
    return Measurement("norms", f"sum {i}", op, Stats(1e-5 * (i + 1), 0.9e-5 * (i + 1), 1.2e-5 * (i + 1), 11))


def client(service: FakeService) -> RidgelineClient:
    return RidgelineClient(
        "http://ridgeline.test", "k", retry=RetryPolicy(attempts=3, base_s=0.0, max_s=0.0),
        transport=service.transport(), sleep=lambda _: None, rng=random.Random(0),
    )  # fmt: skip


def medians(results: list[dict[str, object]]) -> list[object]:
    return sorted(r["median_s"] for r in results)  # type: ignore[type-var]


def run(uploader: Uploader, n: int) -> None:
    for i in range(n):
        uploader.add(measurement(i))


def test_batches_are_sent_and_forgotten(tmp_path: Path) -> None:
    service = FakeService()
    uploader = Uploader(Spool(tmp_path), INFO, client(service), batch_size=2)
    run(uploader, 5)
    report = uploader.close()
    assert (report.sent_batches, report.sent_results) == (3, 5)
    assert len(service.stored) == 3 and len(service.results) == 5
    assert Spool(tmp_path).count() == (0, 0)
    first = service.stored[service.requests[0].headers["idempotency-key"]][1]
    assert first == [measurement(0).result(), measurement(1).result()]


def test_a_dead_service_spools_everything_and_flush_sends_it_once(tmp_path: Path) -> None:
    service = FakeService()
    service.down = True
    uploader = Uploader(Spool(tmp_path), INFO, client(service), batch_size=2)
    run(uploader, 5)
    report = uploader.close()
    assert report.offline and (report.spooled_batches, report.spooled_results) == (3, 5)
    # Only the first batch waited through its retries; later ones went straight to the spool.
    assert len(service.requests) == 3
    assert Spool(tmp_path).count() == (3, 5)

    service.down = False
    flushed = flush(client(service), Spool(tmp_path))
    assert (flushed.sent_batches, flushed.sent_results) == (3, 5) and flushed.clean
    assert medians(service.results) == medians([measurement(i).result() for i in range(5)])
    assert flush(client(service), Spool(tmp_path)).sent_batches == 0  # nothing left, nothing sent twice


def test_a_response_lost_after_the_commit_is_replayed_not_stored_twice(tmp_path: Path) -> None:
    service = FakeService()
    service.lose_responses = 1  # stored, then the connection dies before the answer
    uploader = Uploader(Spool(tmp_path), INFO, client(service), batch_size=3)
    run(uploader, 3)
    report = uploader.close()
    assert report.sent_batches == 1 and report.replayed_batches == 1
    assert len(service.results) == 3
    assert len({r.headers["idempotency-key"] for r in service.requests}) == 1


def test_a_crash_before_sending_leaves_the_batch_for_flush(tmp_path: Path) -> None:
    # No client: the run only spools (as if it died right after writing); flush sends.
    uploader = Uploader(Spool(tmp_path), INFO, None, batch_size=10)
    run(uploader, 4)
    uploader.close()
    service = FakeService()
    assert flush(client(service), Spool(tmp_path)).sent_results == 4
    assert len(service.results) == 4


def test_refused_results_are_split_off_and_the_rest_delivered(tmp_path: Path) -> None:
    service = FakeService()
    service.refuse_rows = {2}  # measurement(1)
    uploader = Uploader(Spool(tmp_path), INFO, client(service), batch_size=3)
    run(uploader, 3)
    report = uploader.close()
    assert (report.sent_results, report.rejected_results) == (2, 1)
    assert medians(service.results) == medians([measurement(i).result() for i in (0, 2)])
    rejected = list((tmp_path / "rejected").glob("*.json"))
    assert len(rejected) == 1 and "bad dtype" in rejected[0].read_text()
    assert Spool(tmp_path).count() == (0, 0)


def test_a_refused_token_keeps_the_batch_pending(tmp_path: Path) -> None:
    service = FakeService()
    service.status_override = [401]
    uploader = Uploader(Spool(tmp_path), INFO, client(service), batch_size=2)
    run(uploader, 4)
    report = uploader.close()
    assert report.auth_failed and report.spooled_results == 4
    assert len(service.requests) == 1  # no more tries with a key the service refuses
    assert Spool(tmp_path).count() == (2, 4)


def test_a_lasting_conflict_is_set_aside(tmp_path: Path) -> None:
    service = FakeService()
    service.status_override = [409, 409, 409]
    uploader = Uploader(Spool(tmp_path), INFO, client(service), batch_size=2)
    run(uploader, 2)
    report = uploader.close()
    assert report.conflict_batches == 1
    assert len(list((tmp_path / "conflict").glob("*.json"))) == 1


def test_each_measurement_is_on_disk_before_the_batch_is_full(tmp_path: Path) -> None:
    """Batches of 4: after 3 measurements nothing is pending, and the journal holds a header and 3 lines."""
    spool = Spool(tmp_path)
    uploader = Uploader(spool, INFO, None, batch_size=4)
    run(uploader, 3)
    assert spool.count() == (0, 0)
    (journal,) = spool.journal_dir.glob("*.jsonl")
    lines = journal.read_text().splitlines()
    assert len(lines) == 1 + 3
    assert json.loads(lines[0]) == {"hardware": "cpu-generic", "host": "test-host", "software": {"jax": "0.0"},
                                    "timing_scope": "wall_clock"}  # fmt: skip
    assert [json.loads(line) for line in lines[1:]] == [measurement(i).result() for i in range(3)]
    uploader.add(measurement(3))  # the batch is full: spooled, and its journal gone
    assert spool.count() == (1, 4) and not list(spool.journal_dir.glob("*.jsonl"))


def test_a_run_killed_mid_batch_is_recovered_as_the_batch_it_would_have_spooled(tmp_path: Path) -> None:
    """The killed run's journal (3 whole lines, a fourth cut off mid-write) becomes the batch of those 3, with the
    payload and key a finished run would have given them; a second recovery finds nothing."""
    killed = Uploader(Spool(tmp_path), INFO, None, batch_size=200)
    run(killed, 3)
    (path,) = Spool(tmp_path).journal_dir.glob("*.jsonl")
    killed._journals[TimingScope.wall_clock].close()  # the process dies: the kernel drops its lock
    with open(path, "ab") as handle:
        handle.write(b'{"op": {"kind": "reduc')  # the write the kill cut off
    spool = Spool(tmp_path)  # the next run
    assert spool.recover() == (1, 3)
    (entry,) = spool.pending()
    finished = Uploader(Spool(tmp_path / "other"), INFO, None, batch_size=200)
    run(finished, 3)
    finished.close()
    (expected,) = Spool(tmp_path / "other").pending()
    assert (entry.id, entry.payload) == (expected.id, expected.payload)
    assert spool.recover() == (0, 0) and not list(spool.journal_dir.glob("*.jsonl"))


def test_a_live_runs_journal_is_left_alone(tmp_path: Path) -> None:
    """Another worker on the same spool (here, a second Spool object) cannot take a journal whose writer lives."""
    uploader = Uploader(Spool(tmp_path), INFO, None, batch_size=200)
    run(uploader, 2)
    assert Spool(tmp_path).recover() == (0, 0)
    uploader.add(measurement(2))
    assert uploader.close().spooled_results == 3
    assert Spool(tmp_path).count() == (1, 3)


def test_a_crash_between_spooling_a_batch_and_removing_its_journal_stores_it_once(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    uploader = Uploader(spool, INFO, None, batch_size=200)
    run(uploader, 2)
    journal = uploader._journals[TimingScope.wall_clock]
    spool.put(run_payload(INFO, TimingScope.wall_clock, [measurement(i).result() for i in range(2)]))
    journal.close()  # the crash: the batch is in pending/, its journal still there
    assert Spool(tmp_path).recover() == (1, 2)
    assert Spool(tmp_path).count() == (1, 2)  # the same content, the same id: one batch


def test_an_unreadable_journal_is_set_aside_never_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    (spool.journal_dir / "bad.jsonl").write_bytes(b'{"hardware": "x"}\nnot json\n{"median_s": 1}\n')
    assert spool.recover() == (0, 0)
    assert (spool.rejected_dir / "bad.journal.unreadable.jsonl").exists()
    assert "not JSON" in (spool.rejected_dir / "bad.journal.unreadable.reason.txt").read_text()


def test_wall_clock_batches_carry_the_hosts_cost_per_call(tmp_path: Path) -> None:
    # The probe's median less the 2.5 µs kernel floor it is predicted at (adapters.KERNEL_FLOOR_S); never negative.
    assert host_overhead_s(Stats(72.5e-6, 70e-6, 80e-6, 1000)) == pytest.approx(70e-6, rel=1e-12)
    assert host_overhead_s(Stats(2e-6, 1.9e-6, 2.1e-6, 1000)) == 0.0
    info = replace(INFO, host_overhead_s=70e-6)
    result = measurement(0).result()
    assert run_payload(info, TimingScope.wall_clock, [result])["host_overhead_s"] == 70e-6
    assert "host_overhead_s" not in run_payload(info, TimingScope.kernel, [result])  # kernel time has none
    assert "host_overhead_s" not in run_payload(INFO, TimingScope.wall_clock, [result])
    service = FakeService()
    uploader = Uploader(Spool(tmp_path), info, client(service), batch_size=2)
    run(uploader, 3)
    uploader.close()
    bodies = [json.loads(r.content) for r in service.requests]
    assert [b["host_overhead_s"] for b in bodies] == [70e-6, 70e-6] and medians(service.results) == medians(
        [measurement(i).result() for i in range(3)]
    )
