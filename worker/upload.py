"""Batching, spooling and delivery of results.

Write-ahead: a batch goes to the spool first and is sent from there, so a crash, a dead service or a rejected
token never loses a measurement. A batch leaves pending/ only when the service has answered 2xx (stored, or
replayed for the same Idempotency-Key); a final 4xx moves it to rejected/ (a 422 that names single results splits
them off so the rest of the batch still goes), a 409 that outlasts the retries moves it to conflict/.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.client import AuthError, Conflict, Rejected, RidgelineClient, ServiceUnavailable, dumps
from worker.results import Measurement, RunInfo, TimingScope, run_payload
from worker.spool import Journal, Spool, SpoolEntry

__all__ = ["DeliveryReport", "Uploader", "deliver", "flush"]

_RESULT_FIELD = re.compile(r"^body\.results\.(\d+)(\.|$)")


@dataclass
class DeliveryReport:
    sent_batches: int = 0
    sent_results: int = 0
    replayed_batches: int = 0
    spooled_batches: int = 0  # left in pending/ for `flush`
    spooled_results: int = 0
    rejected_batches: int = 0
    rejected_results: int = 0
    conflict_batches: int = 0
    auth_failed: bool = False
    offline: bool = False
    errors: list[str] = field(default_factory=list)

    def merge(self, other: DeliveryReport) -> None:
        for name in (
            "sent_batches",
            "sent_results",
            "replayed_batches",
            "spooled_batches",
            "spooled_results",
            "rejected_batches",
            "rejected_results",
            "conflict_batches",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.auth_failed = self.auth_failed or other.auth_failed
        self.offline = self.offline or other.offline
        self.errors.extend(other.errors)

    @property
    def clean(self) -> bool:
        return not (self.spooled_batches or self.rejected_batches or self.conflict_batches or self.auth_failed)

    def summary(self) -> str:
        parts = [f"{self.sent_results} results sent in {self.sent_batches} batches"]
        if self.replayed_batches:
            parts.append(f"{self.replayed_batches} already stored (replayed)")
        if self.spooled_batches:
            parts.append(f"{self.spooled_results} results in {self.spooled_batches} batches left in the spool")
        if self.rejected_batches:
            parts.append(f"{self.rejected_results} results in {self.rejected_batches} batches rejected")
        if self.conflict_batches:
            parts.append(f"{self.conflict_batches} batches in conflict")
        return "; ".join(parts)


def _split_rejected(spool: Spool, entry: SpoolEntry, err: Rejected) -> SpoolEntry | None:
    """For a 422 that names results (`body.results.7.op.dtype`): reject those, re-spool the rest as a new batch
    (new content, so a new key: the service stored nothing of the refused one). None when nothing is left."""
    bad = sorted({int(m.group(1)) for f in err.fields() if (m := _RESULT_FIELD.match(f))})
    results = entry.payload.get("results", [])
    if not isinstance(results, list) or not results:  # a load test: refused whole
        return None
    if err.status_code != 422 or not bad or len(bad) >= len(results) or len(bad) != len(err.fields()):
        return None
    good = [r for i, r in enumerate(results) if i not in bad]
    rest = spool.put({**entry.payload, "results": good})
    refused = spool.put({**entry.payload, "results": [results[i] for i in bad]})
    spool.reject(refused, err.message)
    spool.done(entry)
    return rest


def deliver(client: RidgelineClient, spool: Spool, entry: SpoolEntry, report: DeliveryReport) -> None:
    """Send one pending batch and settle it in the spool according to the answer."""
    while True:
        try:
            answer = client.upload(dumps(entry.payload), entry.idempotency_key, entry.path)
        except ServiceUnavailable as err:
            entry.attempts += 1
            entry.last_error = str(err)
            spool.update(entry)
            report.offline = True
            report.spooled_batches += 1
            report.spooled_results += entry.results
            report.errors.append(str(err))
            return
        except AuthError as err:
            entry.last_error = str(err)
            spool.update(entry)  # a new token will send it: keep it pending
            report.auth_failed = True
            report.spooled_batches += 1
            report.spooled_results += entry.results
            report.errors.append(str(err))
            return
        except Conflict as err:
            spool.conflict(entry, str(err))
            report.conflict_batches += 1
            report.errors.append(str(err))
            return
        except Rejected as err:
            rest = _split_rejected(spool, entry, err)
            report.rejected_batches += 1
            report.errors.append(str(err))
            if rest is None:
                spool.reject(entry, str(err))
                report.rejected_results += entry.results
                return
            report.rejected_results += entry.results - rest.results
            entry = rest
            continue
        spool.done(entry)
        report.sent_batches += 1
        report.sent_results += entry.results
        if answer.replayed:
            report.replayed_batches += 1
        return


def flush(client: RidgelineClient, spool: Spool, progress: Callable[[str], None] | None = None) -> DeliveryReport:
    """Send every pending batch, oldest first; stop early if the service is down or the token is refused."""
    report = DeliveryReport()
    spool.clean_tmp()
    entries = spool.pending()
    for index, entry in enumerate(entries):
        if progress:
            progress(f"batch {index + 1}/{len(entries)}: {entry.results} results ({entry.id})")
        deliver(client, spool, entry, report)
        if report.offline or report.auth_failed:
            left = entries[index + 1 :]
            report.spooled_batches += len(left)
            report.spooled_results += sum(e.results for e in left)
            break
    return report


class Uploader:
    """Collects measurements into batches per timing scope and hands each full batch to the spool and the service.

    Once the service is found unreachable the run stops trying (each batch would otherwise wait through every
    retry) and only spools; `ridgeline-worker flush` sends the rest later.
    """

    def __init__(
        self,
        spool: Spool,
        info: RunInfo,
        client: RidgelineClient | None,
        batch_size: int = 200,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch size must be at least 1")
        self.spool = spool
        self.info = info
        self.client = client
        self.batch_size = batch_size
        self.report = DeliveryReport()
        self._buffers: dict[TimingScope, list[dict[str, Any]]] = {}
        self._journals: dict[TimingScope, Journal] = {}

    def add(self, measurement: Measurement) -> None:
        """Keep a measurement: on disk in its batch's journal before this returns, sent once its batch is full."""
        scope, result = measurement.timing_scope, measurement.result()
        journal = self._journals.get(scope)
        if journal is None:
            header = {k: v for k, v in run_payload(self.info, scope, [result]).items() if k != "results"}
            journal = self._journals[scope] = self.spool.journal(header)
        journal.append(result)
        buffer = self._buffers.setdefault(scope, [])
        buffer.append(result)
        if len(buffer) >= self.batch_size:
            self._submit(scope)

    def _submit(self, scope: TimingScope, send: bool = True) -> None:
        results = self._buffers.pop(scope, [])
        journal = self._journals.pop(scope, None)
        if not results:
            return
        entry = self.spool.put(run_payload(self.info, scope, results))
        if journal is not None:
            journal.discard()  # after the batch is in pending/: a crash between the two recovers the same batch
        if not send or self.client is None or self.report.offline or self.report.auth_failed:
            self.report.spooled_batches += 1
            self.report.spooled_results += entry.results
            return
        deliver(self.client, self.spool, entry, self.report)

    def close(self) -> DeliveryReport:
        for scope in list(self._buffers):
            self._submit(scope)
        return self.report

    def spool_rest(self) -> DeliveryReport:
        """An interrupted run: spool the batches being filled without sending them (`flush` sends them later)."""
        for scope in list(self._buffers):
            self._submit(scope, send=False)
        return self.report
