"""Rules of jobs: submitting (the kind's schema, the same access as its synchronous endpoint, an Idempotency-Key
returning the same job), reading, listing and cancelling, and what the runner records (its claims, its progress,
the result once). Ray is the runner's business (`service.jobs.runner`), not this module's."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from schemas.common import ErrorEnvelope
from schemas.jobs import JobKind, JobProgress, JobRead, JobState
from service.auth import Forbidden, Principal, check_owner
from service.errors import Conflict, NotFound, Unprocessable, details_from_validation, validation_message
from service.jobs.repository import JobRepository
from service.jobs.work import Kind
from service.orm import Job


def now() -> datetime:
    return datetime.now(UTC)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def validate(kinds: dict[str, Kind], kind: JobKind, body: dict[str, Any]) -> BaseModel:
    """The body as the kind's synchronous endpoint takes it; a 422 naming `body.body.<field>` when it is not."""
    try:
        return kinds[kind].schema.model_validate(body)
    except ValidationError as err:
        detail = details_from_validation(list(err.errors()), ("body", "body"))
        raise Unprocessable(validation_message(detail), detail) from None


def _digest(kind: str, body: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps([kind, body], option=orjson.OPT_SORT_KEYS)).hexdigest()


def submit(
    session: Session, kind: JobKind, body: BaseModel, principal: Principal | None, idempotency_key: str | None
) -> tuple[Job, bool]:
    """Store a queued job (the runner of some process claims it); with an Idempotency-Key this key (or no key)
    already used with the same kind and body: that job, and True. The same Idempotency-Key with another request is
    a 409."""
    doc = body.model_dump(mode="json")
    digest = _digest(kind, doc)
    repo = JobRepository(session)
    scoped = None
    if idempotency_key is not None:
        scoped = f"{principal.key_id if principal else '-'}:{idempotency_key}"
        existing = repo.by_idempotency_key(scoped)
        if existing is not None:
            return _replay(existing, digest, idempotency_key), True
    job_id = secrets.token_hex(16)
    values = {
        "id": job_id, "kind": str(kind), "state": "queued", "body": doc, "request_sha256": digest,
        "idempotency_key": scoped, "owner_key_id": principal.key_id if principal else None, "attempts": 0,
        "done": 0, "total": 0, "created_at": now(),
    }  # fmt: skip
    if not repo.insert(values):
        assert scoped is not None and idempotency_key is not None  # only keyed inserts can conflict
        existing = repo.by_idempotency_key(scoped)
        if existing is None:
            raise Conflict(f"Idempotency-Key {idempotency_key!r} is in use by a concurrent submit; retry.")
        return _replay(existing, digest, idempotency_key), True
    job = repo.get(job_id)
    assert job is not None
    return job, False


def _replay(job: Job, digest: str, key: str) -> Job:
    if job.request_sha256 != digest:
        raise Conflict(
            f"Idempotency-Key {key!r} was already used for a different job ({job.id}); send a new key for a new job."
        )
    return job


def get(session: Session, job_id: str) -> Job:
    job = JobRepository(session).get(job_id)
    if job is None:
        raise NotFound(f"No job {job_id!r}.")
    return job


def read(job: Job, at: datetime | None = None) -> JobRead:
    """The job as `GET /v1/jobs/{id}` shows it: progress with the elapsed time and an estimate of the rest."""
    at = at or now()
    started, finished = _utc(job.started_at), _utc(job.finished_at)
    elapsed = None if started is None else max(0.0, ((finished or at) - started).total_seconds())
    remaining = None
    if elapsed is not None and job.state == JobState.running and job.done > 0:
        remaining = elapsed * (job.total - job.done) / job.done
    error = job.error or None
    return JobRead(
        id=job.id, kind=JobKind(job.kind), state=JobState(job.state),
        progress=JobProgress(done=job.done, total=job.total, elapsed_s=elapsed, remaining_s=remaining),
        attempts=job.attempts, created_at=_utc(job.created_at) or at, started_at=started, finished_at=finished,
        result=job.result if job.state == JobState.succeeded else None,
        error=ErrorEnvelope.model_validate(error["envelope"]) if error else None,
        error_status=error["status"] if error else None,
    )  # fmt: skip


def page(
    session: Session, principal: Principal | None, kind: JobKind | None, state: JobState | None, limit: int,
    offset: int,
) -> tuple[list[JobRead], int]:  # fmt: skip
    """The caller's jobs (an admin key: everyone's; no key: those submitted without one), newest first."""
    everyone = principal is not None and principal.owns(None)
    rows, total = JobRepository(session).page(
        kind, state, principal.key_id if principal else None, everyone, limit, offset
    )
    at = now()
    return [read(r, at) for r in rows], total


def cancel(session: Session, job_id: str, principal: Principal | None) -> Job:
    """Cancel a queued or running job (its runner stops its tasks at its next heartbeat); a finished job stays as
    it is. Only the key that submitted it, or an admin key, may (a job submitted without a key: whoever knows its
    id, which is random)."""
    job = get(session, job_id)
    if job.owner_key_id is not None:
        if principal is None:
            raise Forbidden(
                f"The job {job_id!r} was submitted with an API key; only that key or an admin key may cancel it."
            )
        check_owner(principal, job.owner_key_id, f"job {job_id!r}")
    JobRepository(session).cancel(job_id, now())
    session.flush()
    return get(session, job_id)


# What the runner records, each in its own short transaction (service.jobs.runner).


def claim_queued(session: Session, runner: str, limit: int) -> list[str]:
    repo = JobRepository(session)
    return [job_id for job_id in repo.queued(limit) if repo.claim(job_id, runner, now())]


def take_up_stale(
    session: Session, runner: str, lease_s: float, max_attempts: int, limit: int, running: set[str]
) -> list[str]:
    """Running jobs whose runner stopped renewing its lease (its process died): taken up by `runner` while they
    have attempts left, else failed with the reason (`running`: those this process runs, never taken). Returns the
    ids taken up."""
    repo = JobRepository(session)
    at = now()
    taken = []
    for job_id, old, attempts in repo.stale(at - timedelta(seconds=lease_s), limit):
        if job_id in running:
            continue
        if attempts >= max_attempts:
            repo.finish(job_id, old, at, {"state": "failed", "error": lost(attempts)})
        elif repo.take_up(job_id, old, runner, at):
            taken.append(job_id)
    return taken


def lost(attempts: int) -> dict[str, Any]:
    message = (
        f"The job's runner stopped {attempts} times before it finished (its process was killed or lost its "
        "database); it is not run again."
    )
    return error_doc(503, "job_lost", message)


def error_doc(status: int, code: str, message: str, detail: list[Any] | None = None) -> dict[str, Any]:
    envelope = ErrorEnvelope(error=code, message=message, detail=detail or [])
    return {"status": status, "envelope": envelope.model_dump(mode="json")}
