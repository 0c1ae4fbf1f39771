"""The local spool: every batch is written here before it is sent and removed only once the service has it.

Layout under the spool directory:

    pending/<id>.json    batches not yet acknowledged by the service (sent by `run`, or later by `flush`)
    rejected/<id>.json   batches the service refused for good (4xx), kept with the reason for a person to read
    conflict/<id>.json   batches whose Idempotency-Key the service holds for another body (a 409 that lasted)
    journal/<id>.jsonl   measurements of a batch still being filled: one line each, on disk before it is reported
    tmp/                 files being written

A file is written whole to tmp/, flushed to disk, then renamed into place (rename is atomic on POSIX), so a crash
leaves either the old file or the new one, never half of one. The batch id is a SHA-256 of the payload's canonical
JSON, and the Idempotency-Key is derived from it: a batch keeps its key through every retry, restart and flush.

A batch fills over many measurements (`--batch-size`, 200 by default: minutes on a GPU). Each measurement is appended
to the batch's journal and synced to disk as soon as it is taken, so a run that is killed (a scheduler's SIGTERM or
SIGKILL, an out-of-memory kill, a lost machine) loses none: `recover` turns a journal whose writer is gone into the
pending batch that writer would have spooled. A live writer holds an exclusive lock on its journal (`flock`, released
by the kernel when the process dies, however it dies), so another worker sharing the spool never takes it. The batch
is spooled before its journal is removed; a crash between the two recovers the same payload, so the same batch id,
and `put` keeps one file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from worker.client import dumps

__all__ = ["BENCHMARKS", "SERVING_BENCHMARKS", "Journal", "Spool", "SpoolEntry", "batch_id", "idempotency_key"]

FORMAT = 1
BENCHMARKS = "/v1/benchmarks"  # where a batch is sent: measured timings (default), or
SERVING_BENCHMARKS = "/v1/serving-benchmarks"  # one load test (`ridgeline-worker serving-bench`)


def batch_id(payload: dict[str, Any]) -> str:
    """Content address of a batch: the first 32 hex digits of SHA-256 over its canonical JSON."""
    return hashlib.sha256(dumps(payload)).hexdigest()[:32]


def idempotency_key(payload: dict[str, Any]) -> str:
    return f"rlw-{batch_id(payload)}"


@dataclass
class SpoolEntry:
    id: str
    idempotency_key: str
    payload: dict[str, Any]
    created_at: str
    attempts: int = 0
    last_error: str | None = None
    history: list[str] = field(default_factory=list)
    path: str = BENCHMARKS

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "id": self.id,
            "idempotency_key": self.idempotency_key,
            "created_at": self.created_at,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "history": self.history[-20:],
            "path": self.path,
            "payload": self.payload,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SpoolEntry:
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown spool format {doc.get('format')!r}")
        return cls(
            id=str(doc["id"]),
            idempotency_key=str(doc["idempotency_key"]),
            payload=dict(doc["payload"]),
            created_at=str(doc["created_at"]),
            attempts=int(doc.get("attempts", 0)),
            last_error=doc.get("last_error"),
            history=list(doc.get("history", [])),
            path=str(doc.get("path", BENCHMARKS)),  # entries spooled before load tests were: timings
        )

    @property
    def results(self) -> int:
        """Measurements it carries: a batch's results, or one load test."""
        return 1 if self.path == SERVING_BENCHMARKS else len(self.payload.get("results", []))


class Spool:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser()
        self.pending_dir = self.root / "pending"
        self.rejected_dir = self.root / "rejected"
        self.conflict_dir = self.root / "conflict"
        self.tmp_dir = self.root / "tmp"
        self.journal_dir = self.root / "journal"
        for directory in (self.pending_dir, self.rejected_dir, self.conflict_dir, self.tmp_dir, self.journal_dir):
            directory.mkdir(parents=True, exist_ok=True)

    def journal(self, header: dict[str, Any]) -> Journal:
        """A new journal for a batch whose payload is `header` plus the results appended to it. It is made in tmp/,
        locked and given its header there, then renamed into journal/: `recover` never sees it unlocked or empty."""
        name = f"{uuid.uuid4().hex}.jsonl"
        return Journal(self.tmp_dir / name, header, self.journal_dir / name)

    def recover(self) -> tuple[int, int]:
        """Spool the journals that no live worker holds (their writer was killed): each becomes the pending batch
        of its header and its complete lines (a line cut off by the kill was never reported as measured). Returns
        (batches, results) recovered; an unreadable journal is moved to rejected/ with the reason, never deleted."""
        batches = results = 0
        for path in sorted(self.journal_dir.glob("*.jsonl")):
            try:
                handle = open(path, "rb")  # noqa: SIM115 - held while the lock is
            except FileNotFoundError:
                continue  # its writer spooled it meanwhile
            with handle:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live worker is filling it
                try:
                    header, found = Journal.read(handle.read())
                except ValueError as err:
                    os.replace(path, self.rejected_dir / f"{path.stem}.journal.unreadable.jsonl")
                    (self.rejected_dir / f"{path.stem}.journal.unreadable.reason.txt").write_text(f"{err}\n")
                    continue
                if found:
                    self.put({**header, "results": found})
                    batches, results = batches + 1, results + len(found)
                path.unlink()
        _fsync_dir(self.journal_dir)
        return batches, results

    def _write(self, directory: Path, entry: SpoolEntry) -> Path:
        target = directory / f"{entry.id}.json"
        tmp = self.tmp_dir / f"{entry.id}.{uuid.uuid4().hex}.tmp"
        data = json.dumps(entry.to_json(), indent=1, sort_keys=True, allow_nan=False).encode()
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        _fsync_dir(directory)
        return target

    def put(self, payload: dict[str, Any], path: str = BENCHMARKS) -> SpoolEntry:
        """Store a batch durably (before it is sent to `path`). Putting the same payload twice keeps one file."""
        entry = SpoolEntry(
            id=batch_id(payload),
            idempotency_key=idempotency_key(payload),
            payload=payload,
            created_at=datetime.now(UTC).isoformat(timespec="microseconds"),
            path=path,
        )
        existing = self.pending_dir / f"{entry.id}.json"
        if existing.exists():
            with contextlib.suppress(ValueError, OSError):
                return self._read(existing)
        self._write(self.pending_dir, entry)
        return entry

    def update(self, entry: SpoolEntry) -> None:
        """Rewrite a pending entry (attempt count, last error)."""
        self._write(self.pending_dir, entry)

    @staticmethod
    def _read(path: Path) -> SpoolEntry:
        return SpoolEntry.from_json(json.loads(path.read_text()))

    def pending(self) -> list[SpoolEntry]:
        """Pending batches, oldest first. An unreadable file is moved to rejected/ (kept, never deleted)."""
        entries = []
        for path in sorted(self.pending_dir.glob("*.json")):
            try:
                entries.append(self._read(path))
            except (OSError, ValueError, KeyError, TypeError) as err:
                os.replace(path, self.rejected_dir / f"{path.stem}.unreadable.json")
                (self.rejected_dir / f"{path.stem}.unreadable.reason.txt").write_text(f"{err}\n")
        return sorted(entries, key=lambda e: (e.created_at, e.id))

    def count(self) -> tuple[int, int]:
        """(pending batches, pending results)."""
        entries = self.pending()
        return len(entries), sum(e.results for e in entries)

    def done(self, entry: SpoolEntry) -> None:
        """The service acknowledged the batch: forget it."""
        with contextlib.suppress(FileNotFoundError):
            (self.pending_dir / f"{entry.id}.json").unlink()
        _fsync_dir(self.pending_dir)

    def _move(self, entry: SpoolEntry, directory: Path, reason: str) -> Path:
        entry.last_error = reason
        entry.history.append(f"{datetime.now(UTC).isoformat(timespec='seconds')} {reason}")
        path = self._write(directory, entry)
        self.done(entry)
        return path

    def reject(self, entry: SpoolEntry, reason: str) -> Path:
        """Keep a batch the service refused for good out of the queue, with the reason."""
        return self._move(entry, self.rejected_dir, reason)

    def conflict(self, entry: SpoolEntry, reason: str) -> Path:
        return self._move(entry, self.conflict_dir, reason)

    def requeue_rejected(self) -> int:
        """Put refused and conflicting batches back in the queue (after a profile was added or a token fixed);
        their keys are unchanged, so a batch the service did store is replayed, not stored again."""
        moved = 0
        for directory in (self.rejected_dir, self.conflict_dir):
            for path in sorted(directory.glob("*.json")):
                if path.name.endswith(".unreadable.json"):
                    continue
                os.replace(path, self.pending_dir / path.name)
                moved += 1
        _fsync_dir(self.pending_dir)
        return moved

    def clean_tmp(self, older_than_s: float = 3600.0) -> None:
        """Remove half-written files left by a crash (their batches are still whole in pending/ or were never
        acknowledged); recent ones may belong to another worker writing now."""
        cutoff = time.time() - older_than_s
        # *.jsonl: a journal whose worker died before naming it, so before it held any measurement.
        for path in [*self.tmp_dir.glob("*.tmp"), *self.tmp_dir.glob("*.jsonl")]:
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()


class Journal:
    """The measurements of one batch as they are taken: a header line (the payload without its results), then one
    result per line, each synced to disk before `append` returns. The writer holds an exclusive lock on the file
    for as long as it lives (`Spool.recover` leaves it alone)."""

    def __init__(self, made: Path, header: dict[str, Any], path: Path) -> None:
        self.path = path
        self.results = 0
        self._handle = open(made, "ab")  # noqa: SIM115 - open until the batch is spooled
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX)  # held by the open file: it follows the rename
        self._write(header)
        os.replace(made, path)
        _fsync_dir(path.parent)

    def _write(self, doc: dict[str, Any]) -> None:
        self._handle.write(json.dumps(doc, sort_keys=True, allow_nan=False).encode() + b"\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def append(self, result: dict[str, Any]) -> None:
        self._write(result)
        self.results += 1

    def discard(self) -> None:
        """The batch is in pending/: the journal has done its job."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        _fsync_dir(self.path.parent)
        self._handle.close()

    def close(self) -> None:
        """Let go of the file without removing it (`Spool.recover` will spool what it holds)."""
        self._handle.close()

    @staticmethod
    def read(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The header and the complete result lines of a journal's bytes. Only the last line can be cut off (by a
        kill during its write): it is dropped. A bad line anywhere else is an error."""
        complete = data.split(b"\n")[:-1]  # text after the last newline was never synced whole
        if not complete:
            raise ValueError("the journal has no header")
        try:
            docs = [json.loads(line) for line in complete]
        except json.JSONDecodeError as err:
            raise ValueError(f"a journal line is not JSON: {err}") from err
        header, results = docs[0], docs[1:]
        if not isinstance(header, dict) or "results" in header or not all(isinstance(r, dict) for r in results):
            raise ValueError("the journal is not a header and its results")
        return header, results


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk too.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
