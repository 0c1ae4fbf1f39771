"""The job runner: the only module of the service that knows Ray.

Each service process has one. Its dispatcher thread claims queued jobs and takes up those whose runner stopped
renewing its lease (a killed process), `Settings.jobs_per_process` at a time, each run by a thread that sends the
job's pieces to Ray as tasks, waits on them (`ray.wait`), renews the lease with the progress, sends the reduction as
a task on the pieces' results, and stores the answer with a compare-and-set on (state running, this runner): a
cancelled job, or one another process took up, is never overwritten, and a result is stored once.

Ray retries a task whose worker process died (`max_retries`); a cancelled job's tasks are cancelled with
`ray.cancel(force=True)`, which kills the worker processes running them. Ray joins `Settings.ray_address`, or starts
a local cluster (`ray_num_cpus`) on the first job, so `ridgeline serve` alone still runs jobs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

import ray
from pydantic import ValidationError
from ray.exceptions import RayError, RayTaskError, TaskCancelledError, WorkerCrashedError
from sqlalchemy.orm import Session, sessionmaker

from adapters import InvalidField
from schemas.jobs import JobKind
from service.db import unit_of_work
from service.errors import RidgelineError, database_unavailable, details_from_validation, invalid, validation_message
from service.jobs import service
from service.jobs.repository import JobRepository
from service.jobs.work import Kind, Work
from service.settings import Settings

log = logging.getLogger("ridgeline.jobs")
_ray_lock = threading.Lock()


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """A piece, on a Ray worker: the core's (or `adapters`') function, as the synchronous endpoint calls it."""
    return fn(*args)


def _reduce(fn: Callable[..., Any], args: tuple[Any, ...], *parts: Any) -> Any:
    """The reduction, on a Ray worker: the pieces' values (Ray resolves the references given as arguments)."""
    return fn(list(parts), *args)


# Made remote once (each `ray.remote` of a function is exported to the cluster again), given options per job.
_piece_task = ray.remote(_call)
_reduce_task = ray.remote(_reduce)


def ray_up(settings: Settings) -> None:
    """Join the cluster at `ray_address`, or start a local one, once per process."""
    with _ray_lock:
        if ray.is_initialized():
            return
        common: dict[str, Any] = {"log_to_driver": False, "configure_logging": False, "namespace": "ridgeline"}
        if settings.ray_address:
            ray.init(address=settings.ray_address, **common)
        else:
            # The workers import this module (the pieces' functions are pickled by name): they get our path.
            path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
            ray.init(
                num_cpus=settings.ray_num_cpus, include_dashboard=False,
                runtime_env={"env_vars": {"PYTHONPATH": path}}, **common,
            )  # fmt: skip


def _cpus() -> int:
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]  # Ray leaves it untyped
    return max(1, int(resources.get("CPU", 1)))


def failure(err: BaseException, retries: int) -> dict[str, Any]:
    """The error envelope (with its status) of a job that failed with `err`: what the synchronous endpoint would
    have answered for the same request, or why the engine could not finish it."""
    while isinstance(err, RayTaskError) and err.cause is not None and err.cause is not err:
        err = err.cause
    if isinstance(err, InvalidField):
        e = invalid(err.field, err.message, err.kind)
        return service.error_doc(e.status_code, e.code, e.message, [d.model_dump() for d in e.detail])
    if isinstance(err, RidgelineError):
        return service.error_doc(err.status_code, err.code, err.message, [d.model_dump() for d in err.detail])
    if isinstance(err, ValidationError):
        detail = details_from_validation(list(err.errors()), ("body", "body"))
        return service.error_doc(422, "validation_error", validation_message(detail), [d.model_dump() for d in detail])
    if isinstance(err, WorkerCrashedError):
        message = f"A Ray worker running the job died {retries + 1} times (the task is retried {retries} times)."
        return service.error_doc(503, "worker_lost", message)
    if isinstance(err, RayError):
        return service.error_doc(503, "engine_error", f"The Ray cluster could not run the job: {err}")
    log.exception("job failed", exc_info=err)
    return service.error_doc(500, "internal_error", f"The job failed unexpectedly: {type(err).__name__}")


def _shared(work: Work) -> dict[int, Any]:
    """The arguments several pieces share (the same object: a plan's traffic lengths, its shared requests with their
    hash chains, megabytes), each put in Ray's object store once, by the object's id: a piece is given the reference,
    which Ray resolves to the value on its worker, instead of a copy serialised with every piece."""
    seen: dict[int, int] = {}
    for p in work.pieces:
        for a in p.args:
            if a is not None and not isinstance(a, bool | int | float | str) and not callable(a):
                seen[id(a)] = seen.get(id(a), 0) + 1
    args = {id(a): a for p in work.pieces for a in p.args}
    return {key: ray.put(args[key]) for key, count in seen.items() if count > 1}


class _Stopped(Exception):
    """The job is no longer this runner's (cancelled, taken up elsewhere) or the process is stopping."""


class JobRunner:
    def __init__(self, settings: Settings, factory: sessionmaker[Session], kinds: dict[str, Kind]) -> None:
        self.settings = settings
        self.factory = factory
        self.kinds = kinds
        self.token = f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._active: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._dispatcher: threading.Thread | None = None
        # Ray is joined (or its local cluster started) from a thread of its own that lives as long as the runner: the
        # processes of a local cluster die with the *thread* that started them (Linux's parent-death signal follows
        # the thread), so a job's thread, which ends with its job, must not be the one.
        self._ray_wanted = threading.Event()
        self._ray_ready = threading.Event()
        self._ray_error: BaseException | None = None
        self._ray_thread: threading.Thread | None = None

    def _tx(self) -> contextlib.AbstractContextManager[Session]:
        return contextlib.contextmanager(unit_of_work)(self.factory)

    def start(self) -> None:
        self._dispatcher = threading.Thread(target=self._dispatch, name="ridgeline-jobs", daemon=True)
        self._dispatcher.start()
        self._ray_thread = threading.Thread(target=self._hold_ray, name="ridgeline-ray", daemon=True)
        self._ray_thread.start()

    def _hold_ray(self) -> None:
        """Join Ray when the first job wants it, then keep this thread alive until the runner stops."""
        while not self._stop.is_set():
            if self._ray_wanted.wait(0.5):
                try:
                    ray_up(self.settings)
                except Exception as err:  # each job that wanted it fails with the reason, and the next one retries
                    self._ray_error = err
                    self._ray_wanted.clear()
                self._ray_ready.set()
                if self._ray_error is None:
                    self._stop.wait()

    def _ray(self) -> None:
        """Ray, joined by the runner's Ray thread (the job's thread waits for it)."""
        if ray.is_initialized():
            return
        self._ray_error = None
        self._ray_ready.clear()
        self._ray_wanted.set()
        while not self._ray_ready.wait(0.5):
            if ray.is_initialized():
                return
            if self._stop.is_set():
                raise _Stopped
        if self._ray_error is not None:
            raise self._ray_error

    def wake(self) -> None:
        """A job was submitted (and committed): look now rather than at the next poll."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop claiming; each running job's thread cancels its tasks and hands its job back to the queue, so that
        the next process (or another replica) runs it at once instead of after the lease."""
        self._stop.set()
        self._wake.set()
        if self._dispatcher is not None:
            self._dispatcher.join(timeout_s)
        with self._lock:
            threads = list(self._active.values())
        for t in threads:
            t.join(timeout_s)

    def active(self) -> list[str]:
        """The jobs this process is running now."""
        with self._lock:
            return list(self._active)

    def _dispatch(self) -> None:
        """Every poll (at least three times a lease): renew the lease of the jobs this process runs, whatever they
        are doing (joining Ray, reading the database, waiting on tasks); take up orphaned jobs and claim queued
        ones while there is room."""
        s = self.settings
        while not self._stop.is_set():
            try:
                running = set(self.active())
                if running:
                    with self._tx() as session:
                        JobRepository(session).renew(sorted(running), self.token, service.now())
                free = s.jobs_per_process - len(running)
                if free > 0:
                    with self._tx() as session:
                        ids = service.take_up_stale(
                            session, self.token, s.job_lease_s, s.job_max_attempts, free, running
                        )
                    with self._tx() as session:
                        ids += service.claim_queued(session, self.token, free - len(ids))
                    for job_id in ids:
                        self._spawn(job_id)
            except Exception as err:  # the database is away: try again at the next poll
                if not database_unavailable(err):
                    log.exception("job dispatcher")
            self._wake.wait(min(s.job_poll_s, s.job_lease_s / 3))
            self._wake.clear()

    def _spawn(self, job_id: str) -> None:
        t = threading.Thread(target=self._run, args=(job_id,), name=f"ridgeline-job-{job_id[:8]}", daemon=True)
        with self._lock:
            self._active[job_id] = t
        t.start()

    def _run(self, job_id: str) -> None:
        try:
            self._attempt(job_id)
        except _Stopped:
            pass
        except Exception as err:  # stored as the job's error, once, if the job is still this runner's
            self._record(job_id, {"state": "failed", "error": failure(err, self.settings.job_task_retries)})
        finally:
            with self._lock:
                self._active.pop(job_id, None)

    def _record(self, job_id: str, values: dict[str, Any]) -> bool:
        with self._tx() as session:
            return JobRepository(session).finish(job_id, self.token, service.now(), values)

    def _attempt(self, job_id: str) -> None:
        self._ray()
        with self._tx() as session:
            job = service.get(session, job_id)
            kind = JobKind(job.kind)
            body = service.validate(self.kinds, kind, job.body)
            work = self.kinds[kind].prepare(session, body, _cpus() * self.settings.job_chunks_per_cpu)
        answer = self._compute(job_id, work)
        result = work.finish(answer).model_dump(mode="json")
        self._record(job_id, {"state": "succeeded", "result": result, "done": work.total, "total": work.total})

    def _compute(self, job_id: str, work: Work) -> Any:
        call = _piece_task.options(max_retries=self.settings.job_task_retries, name="ridgeline_piece")
        shared = _shared(work)
        refs = [call.remote(p.fn, *(shared.get(id(a), a) for a in p.args)) for p in work.pieces]
        weight = {r: p.weight for r, p in zip(refs, work.pieces, strict=True)}
        done = 0
        pending = list(refs)
        self._beat(job_id, refs, done, work.total)
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=self.settings.job_lease_s / 3)
            done += sum(weight[r] for r in ready)
            self._beat(job_id, pending, done, work.total)
        if work.reduce is None:
            return ray.get(refs[0])
        reduce = _reduce_task.options(max_retries=self.settings.job_task_retries, name="ridgeline_reduce")
        ref = reduce.remote(work.reduce, work.reduce_args, *refs)
        while not ray.wait([ref], timeout=self.settings.job_lease_s / 3)[0]:
            self._beat(job_id, [ref], done, work.total)
        try:
            return ray.get(ref)
        except TaskCancelledError:
            raise _Stopped from None

    def _beat(self, job_id: str, pending: list[Any], done: int, total: int) -> None:
        """Renew the lease with the progress; when the job is no longer this runner's (cancelled, or taken up by
        another process) or the process is stopping, cancel its tasks (killing their workers) and stop."""
        stopping = self._stop.is_set()
        mine = False
        if not stopping:
            with self._tx() as session:
                mine = JobRepository(session).heartbeat(job_id, self.token, service.now(), done, total)
        if mine:
            return
        for ref in pending:
            ray.cancel(ref, force=True)
        if stopping:
            with self._tx() as session:
                JobRepository(session).release(job_id, self.token)
        raise _Stopped
