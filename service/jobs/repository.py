"""Queries of the jobs table. Every change of a job's state is one UPDATE guarded by its expected state (and, while
it runs, by the runner holding it), so that two processes never both finish a job, a cancelled job is never
resurrected and a result is stored once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.orm import Job

ACTIVE = ("queued", "running")


class JobRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def insert(self, values: dict[str, Any]) -> bool:
        """Insert the job; False when a concurrent submit with the same idempotency key got there first (ON CONFLICT
        DO NOTHING: on PostgreSQL the loser waits for the winner's transaction, then finds its row)."""
        table = Job.__table__
        assert isinstance(table, Table)
        dialect = self.session.get_bind().dialect.name
        stmt: Any
        if dialect == "postgresql":
            stmt = postgresql.insert(table).on_conflict_do_nothing(index_elements=["idempotency_key"])
        else:
            stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=["idempotency_key"])
        inserted = self.session.execute(stmt.values(**values).returning(table.c.id)).scalar()
        return inserted is not None

    def get(self, job_id: str) -> Job | None:
        return self.session.get(Job, job_id, populate_existing=True)

    def by_idempotency_key(self, key: str) -> Job | None:
        return self.session.scalar(select(Job).where(Job.idempotency_key == key))

    def page(
        self, kind: str | None, state: str | None, owner: int | None, everyone: bool, limit: int, offset: int
    ) -> tuple[list[Job], int]:
        where = []
        if kind is not None:
            where.append(Job.kind == kind)
        if state is not None:
            where.append(Job.state == state)
        if not everyone:
            where.append(Job.owner_key_id.is_(None) if owner is None else Job.owner_key_id == owner)
        total = self.session.scalar(select(func.count()).select_from(Job).where(*where)) or 0
        rows = self.session.scalars(
            select(Job).where(*where).order_by(Job.created_at.desc(), Job.id).limit(limit).offset(offset)
        ).all()
        return list(rows), total

    def queued(self, limit: int) -> list[str]:
        rows = self.session.scalars(
            select(Job.id).where(Job.state == "queued").order_by(Job.created_at).limit(limit)
        ).all()
        return list(rows)

    def stale(self, cutoff: datetime, limit: int) -> list[tuple[str, str | None, int]]:
        """Running jobs whose runner has not renewed its lease since `cutoff`: (id, runner, attempts)."""
        rows = self.session.execute(
            select(Job.id, Job.runner, Job.attempts)
            .where(Job.state == "running", Job.heartbeat_at < cutoff)
            .order_by(Job.created_at)
            .limit(limit)
        ).all()
        return [(r[0], r[1], r[2]) for r in rows]

    def _cas(self, job_id: str, expect: dict[str, Any], values: dict[str, Any]) -> bool:
        where = [Job.id == job_id] + [getattr(Job, k) == v for k, v in expect.items()]
        result = self.session.execute(
            update(Job).where(*where).values(**values).execution_options(synchronize_session=False)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def claim(self, job_id: str, runner: str, now: datetime) -> bool:
        """queued → running, held by `runner`."""
        return self._cas(
            job_id, {"state": "queued"},
            {"state": "running", "runner": runner, "attempts": Job.attempts + 1, "started_at": now,
             "heartbeat_at": now, "done": 0},
        )  # fmt: skip

    def take_up(self, job_id: str, old_runner: str | None, runner: str, now: datetime) -> bool:
        """A running job whose runner stopped renewing its lease, taken by `runner` (a new attempt)."""
        return self._cas(
            job_id, {"state": "running", "runner": old_runner},
            {"runner": runner, "attempts": Job.attempts + 1, "started_at": now, "heartbeat_at": now, "done": 0},
        )  # fmt: skip

    def renew(self, job_ids: list[str], runner: str, now: datetime) -> None:
        """Renew the lease of the jobs `runner` is running."""
        self.session.execute(
            update(Job)
            .where(Job.id.in_(job_ids), Job.state == "running", Job.runner == runner)
            .values(heartbeat_at=now)
            .execution_options(synchronize_session=False)
        )

    def heartbeat(self, job_id: str, runner: str, now: datetime, done: int, total: int) -> bool:
        """Renew the lease and record progress; False when the job is no longer this runner's (cancelled, or taken
        up by another process after this one stalled past its lease)."""
        return self._cas(
            job_id, {"state": "running", "runner": runner}, {"heartbeat_at": now, "done": done, "total": total}
        )

    def finish(self, job_id: str, runner: str | None, now: datetime, values: dict[str, Any]) -> bool:
        """running (held by `runner`) → succeeded or failed, with its result or error; False when it is not."""
        return self._cas(job_id, {"state": "running", "runner": runner}, {**values, "finished_at": now})

    def cancel(self, job_id: str, now: datetime) -> bool:
        """queued or running → cancelled (its runner sees it at its next heartbeat and stops its tasks)."""
        result = self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.state.in_(ACTIVE))
            .values(state="cancelled", finished_at=now)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def release(self, job_id: str, runner: str) -> bool:
        """running (held by `runner`, whose process is stopping) → queued, for the next process to claim at once."""
        return self._cas(job_id, {"state": "running", "runner": runner}, {"state": "queued", "runner": None})
