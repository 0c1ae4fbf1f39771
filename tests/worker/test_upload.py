"""Batching, spooling and delivery: a measurement is stored exactly once, whatever the service does."""

from __future__ import annotations

import random
from pathlib import Path

from tests.worker.fakes import FakeService
from worker.client import RetryPolicy, RidgelineClient
from worker.results import Measurement, RunInfo
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
