"""The spool: durable, atomic, content-addressed batches whose idempotency keys never change."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from worker.spool import Spool, batch_id, idempotency_key

PAYLOAD = {"hardware": "cpu-generic", "host": "h", "software": {}, "timing_scope": "wall_clock",
           "results": [{"op": {"kind": "reduction", "rows": 4, "cols": 8}, "median_s": 1.5e-05, "p10_s": 1e-05,
                        "p90_s": 2e-05, "repeats": 9}]}  # fmt: skip


def test_the_key_is_a_hash_of_the_canonical_json() -> None:
    # By hand: sorted keys, no spaces, the first 32 hex digits of SHA-256.
    canonical = '{"a":[1.5,"µ"],"b":1}'
    expected = hashlib.sha256(canonical.encode()).hexdigest()[:32]
    assert batch_id({"b": 1, "a": [1.5, "µ"]}) == expected
    assert idempotency_key({"a": [1.5, "µ"], "b": 1}) == f"rlw-{expected}"


def test_the_key_is_stable_across_key_order_and_changes_with_any_number() -> None:
    reordered = json.loads(json.dumps(PAYLOAD, sort_keys=True))
    reordered = dict(reversed(list(reordered.items())))
    assert idempotency_key(reordered) == idempotency_key(PAYLOAD)
    changed = json.loads(json.dumps(PAYLOAD))
    changed["results"][0]["median_s"] = 1.5000001e-05
    assert idempotency_key(changed) != idempotency_key(PAYLOAD)


def test_a_batch_survives_a_restart_with_its_key(tmp_path: Path) -> None:
    entry = Spool(tmp_path).put(PAYLOAD)
    again = Spool(tmp_path).pending()  # a new process reads the directory
    assert [(e.id, e.idempotency_key, e.payload) for e in again] == [(entry.id, entry.idempotency_key, PAYLOAD)]
    assert Spool(tmp_path).count() == (1, 1)


def test_putting_the_same_batch_twice_keeps_one(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    first = spool.put(PAYLOAD)
    first.attempts = 3
    spool.update(first)
    assert spool.put(PAYLOAD).attempts == 3
    assert len(list((tmp_path / "pending").iterdir())) == 1


def test_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = Spool(tmp_path)
    entry = spool.put(PAYLOAD)
    before = (tmp_path / "pending" / f"{entry.id}.json").read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError("disk went away mid-rename")

    monkeypatch.setattr(os, "replace", crash)
    entry.attempts = 1
    with pytest.raises(OSError):
        spool.update(entry)
    # The visible file is still the whole old one; only a temporary file was left behind.
    assert (tmp_path / "pending" / f"{entry.id}.json").read_bytes() == before
    assert len(list((tmp_path / "tmp").iterdir())) == 1


def test_stale_temporary_files_are_cleaned_fresh_ones_kept(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    stale, fresh = tmp_path / "tmp" / "a.1.tmp", tmp_path / "tmp" / "b.2.tmp"
    unnamed = tmp_path / "tmp" / "c.jsonl"  # a journal whose worker died before renaming it: no result in it yet
    for path in (stale, fresh, unnamed):
        path.write_text("{half")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    os.utime(unnamed, (old, old))
    spool.clean_tmp()
    assert not stale.exists() and not unnamed.exists() and fresh.exists()


def test_an_unreadable_batch_is_set_aside_never_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    (tmp_path / "pending" / "broken.json").write_text("{not json")
    spool.put(PAYLOAD)
    assert len(spool.pending()) == 1
    kept = tmp_path / "rejected" / "broken.unreadable.json"
    assert kept.read_text() == "{not json"


def test_done_forgets_reject_and_conflict_keep(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    entry = spool.put(PAYLOAD)
    spool.reject(entry, "HTTP 422: no fp32 peak")
    assert spool.pending() == []
    kept = json.loads((tmp_path / "rejected" / f"{entry.id}.json").read_text())
    assert kept["payload"] == PAYLOAD and kept["last_error"] == "HTTP 422: no fp32 peak"
    other = spool.put({**PAYLOAD, "host": "other"})
    spool.conflict(other, "409")
    assert (tmp_path / "conflict" / f"{other.id}.json").exists()
    third = spool.put({**PAYLOAD, "host": "third"})
    spool.done(third)
    assert spool.count() == (0, 0)


def test_refused_batches_can_be_queued_again_with_their_keys(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    entry = spool.put(PAYLOAD)
    spool.reject(entry, "HTTP 422: body.hardware: no profile")
    (tmp_path / "rejected" / "x.unreadable.json").write_text("{")
    assert spool.requeue_rejected() == 1
    [again] = spool.pending()
    assert again.idempotency_key == entry.idempotency_key and again.payload == PAYLOAD
