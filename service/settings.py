"""One settings class for the service process, read from the environment with the RIDGELINE_ prefix."""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.limits import DEFAULT_MAX_BODY_BYTES


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RIDGELINE_", extra="ignore")

    # `DATABASE_URL` is honoured too: it is what docker compose and most platforms set.
    database_url: str = Field(
        default="sqlite:///ridgeline.db",
        validation_alias=AliasChoices("RIDGELINE_DATABASE_URL", "DATABASE_URL"),
    )
    load_catalogue_on_start: bool = True
    max_page_size: int = Field(default=500, gt=0)
    db_pool_size: int = Field(default=10, gt=0)  # connections kept per process, as many more lent (service.db)
    log_level: str = "info"
    # Benchmark, accuracy, roofline and calibration reads need an API key (any scope) when set.
    read_requires_key: bool = False
    # Largest request body, bytes (service.limits answers 413 beyond it). 32 MiB: a 10 000-result upload is 1.5-2.5 MB
    # and at most 13.4 MB with the worker's largest op in every result (schemas.limits.DEFAULT_MAX_BODY_BYTES says how
    # that was measured). `RIDGELINE_MAX_BODY_BYTES`.
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    # Time limits (service.timeouts): a request not answered within its limit gets 503 `timeout` and stores nothing.
    # The slowest reads measured (a 576-configuration plan, a 10 000-point list of ops) take ~0.5-1 s on a 2-core
    # machine: 30 s is headroom for a loaded host, not a budget. Uploads get longer: a 10 000-result body (~3 MB)
    # must also arrive over the worker's network, and storing it takes ~0.4 s (README, "Ingestion"); 50 s stays under
    # the worker's own 60 s timeout, so a worker hears the 503 rather than giving up on a request still running.
    request_timeout_s: float = Field(default=30.0, gt=0)
    upload_timeout_s: float = Field(default=50.0, gt=0)

    # Upload rate limits per API key (service.ratelimit; counted in the database so every replica shares them; 0 turns
    # one off). Results: 600 000 per minute is 10 000/s, about half of what one service process stores (20-30 000/s,
    # README "Ingestion"), so one key cannot starve the others, while `bench.calibrate --all` (105 515 results) and a
    # GPU worker (a few results per second) never meet it. Requests: 600 per minute (10/s) is far above a worker's
    # batch rate (one batch of 200 results per tens of seconds) and bounds a client stuck in a loop of tiny uploads.
    upload_results_per_window: int = Field(default=600_000, ge=0)
    upload_requests_per_window: int = Field(default=600, ge=0)
    rate_limit_window_s: int = Field(default=60, gt=0)

    # Heavy endpoints (serving estimates, plans and their charts: service.heavy). Per process, at most `heavy_slots`
    # compute at once (each holds a core: the 2 of the smallest host we run on), the rest wait up to `heavy_queue_s`
    # for a slot, then 503 with Retry-After. Per client (its API key, else its address), at most `heavy_per_client`
    # in flight (else 429), and at most `heavy_requests_per_window` per `rate_limit_window_s`, counted in the database
    # so every replica shares it (0 turns it off; else 429 with Retry-After): 60 a minute is one a second, far above a
    # person's use of a planner and below what one client needs to keep the heavy slots of a process busy.
    heavy_slots: int = Field(default=2, gt=0)
    heavy_queue_s: float = Field(default=2.0, ge=0)
    heavy_per_client: int = Field(default=2, gt=0)
    heavy_requests_per_window: int = Field(default=60, ge=0)
    # A header a trusted proxy sets to the client's address (e.g. X-Forwarded-For: its last entry is what the proxy
    # saw). Off by default: the peer's address is the client's, and a header a client sets itself is not trusted.
    client_address_header: str | None = None

    # Jobs (service.jobs, docs/operations.md "Jobs on Ray"). `RIDGELINE_RAY_ADDRESS`: the Ray cluster to join (its
    # GCS address, `host:6379`, or `auto` on a machine that ran `ray start --address=…`); unset, the first job starts
    # a local cluster of `ray_num_cpus` CPUs (unset: all the machine's).
    ray_address: str | None = None
    ray_num_cpus: int | None = Field(default=None, gt=0)
    # Whether this process runs jobs; off, it stores them and another process (a replica with it on) runs them.
    run_jobs: bool = True
    # Jobs this process runs at once (each a thread that waits on Ray, not on a CPU); more wait queued.
    jobs_per_process: int = Field(default=4, gt=0)
    # A runner renews its jobs' lease every lease / 3 seconds; a job whose lease ran out (its process died) is taken
    # up again by any process, `job_max_attempts` runs in all, then ends failed with the reason.
    job_lease_s: float = Field(default=15.0, gt=0)
    job_max_attempts: int = Field(default=2, gt=0)
    job_poll_s: float = Field(default=1.0, gt=0)  # how often the runner looks for queued and orphaned jobs
    # Ray retries a task whose worker process died this many times (ray.remote max_retries; application errors are
    # not retried: the same input gives the same error).
    job_task_retries: int = Field(default=3, ge=0)
    job_chunks_per_cpu: int = Field(default=4, gt=0)  # a plan's pieces per CPU of the cluster (balance vs overhead)


def normalise_database_url(url: str) -> str:
    """Plain `postgresql://` URLs (as platforms hand them out) use psycopg 3, the driver we ship."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url
