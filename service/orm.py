"""ORM models: every table of the service, in one place. Migrations are made from (and checked against) these."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names, so migrations can refer to them on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JSONDocument = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class CatalogueEntry:
    """Columns shared by hardware profiles and model configs: identity, filters, the document, provenance."""

    slug: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    builtin: Mapped[bool] = mapped_column(Boolean, default=False)
    # The validated document (the XCreate schema, minus the slug), as JSON.
    spec: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    # sha256 of the canonical JSON of `spec`: lets the catalogue load tell unchanged from updated.
    spec_sha256: Mapped[str] = mapped_column(String(64))
    # 1, 2, …: every change of `spec` (a PATCH, a catalogue load that changed a built-in) is a new version, kept in
    # the kind's versions table; stored results name the version they were predicted with.
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The key that made a user entry (only it or an admin key may change it); None for built-ins, and for what a
    # deleted key made (keys are revoked, not deleted, by the service).
    owner_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class HardwareProfile(CatalogueEntry, Base):
    __tablename__ = "hardware_profiles"

    vendor: Mapped[str] = mapped_column(String(20), index=True)
    kind: Mapped[str] = mapped_column(String(10), index=True)


class ModelConfig(CatalogueEntry, Base):
    __tablename__ = "model_configs"

    family: Mapped[str] = mapped_column(String(200), index=True)


class CatalogueVersion:
    """Every version of an entry's document, the current one included: what a stored result was predicted with.
    Deleted with its entry (which nothing stored may refer to then)."""

    version: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    spec_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class HardwareProfileVersion(CatalogueVersion, Base):
    __tablename__ = "hardware_profile_versions"
    __table_args__ = (PrimaryKeyConstraint("slug", "version"),)

    slug: Mapped[str] = mapped_column(String(64), ForeignKey("hardware_profiles.slug", ondelete="CASCADE"))


class ModelConfigVersion(CatalogueVersion, Base):
    __tablename__ = "model_config_versions"
    __table_args__ = (PrimaryKeyConstraint("slug", "version"),)

    slug: Mapped[str] = mapped_column(String(64), ForeignKey("model_configs.slug", ondelete="CASCADE"))


# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit id for the big table.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class ApiKey(Base):
    """An API key: only its SHA-256 is stored (the key itself is printed once, by `ridgeline keys create`)."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    scope: Mapped[str] = mapped_column(String(10))  # upload | catalogue | admin (service.auth.Scope)
    prefix: Mapped[str] = mapped_column(String(16), index=True)  # the key's public part, to name it in lists
    key_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class BenchmarkRun(Base):
    """One upload: a worker session on one device, with its software versions and timing scope."""

    __tablename__ = "benchmark_runs"
    # A retried upload finds its first run through (key, Idempotency-Key); the constraint makes racing retries safe.
    __table_args__ = (UniqueConstraint("api_key_id", "idempotency_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hardware: Mapped[str] = mapped_column(String(64), index=True)
    # The profile's version its results were predicted with (HardwareProfileVersion).
    hardware_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    device: Mapped[str | None] = mapped_column(String(200))
    host: Mapped[str] = mapped_column(String(200))
    software: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    timing_scope: Mapped[str] = mapped_column(String(20))
    host_overhead_s: Mapped[float | None] = mapped_column(Float)
    api_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_sha256: Mapped[str] = mapped_column(String(64))
    result_count: Mapped[int] = mapped_column(Integer)
    predicted_count: Mapped[int] = mapped_column(Integer)
    calibrated_count: Mapped[int] = mapped_column(Integer)
    calibration_id: Mapped[int | None] = mapped_column(Integer)
    median_measured_over_predicted: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class BenchmarkResult(Base):
    """One measured op and the predictions made for it. Written in bulk (Core executemany), never one by one."""

    __tablename__ = "benchmark_results"
    __table_args__ = (Index("ix_benchmark_results_kind_dtype", "op_kind", "dtype"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("benchmark_runs.id", ondelete="CASCADE"), index=True)
    op_kind: Mapped[str] = mapped_column(String(20))
    dtype: Mapped[str] = mapped_column(String(8))
    op: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    median_s: Mapped[float] = mapped_column(Float)
    p10_s: Mapped[float | None] = mapped_column(Float)
    p90_s: Mapped[float | None] = mapped_column(Float)
    repeats: Mapped[int] = mapped_column(Integer)
    # The raw model in the run's timing scope, its fixed-cost part, and the op's FLOPs and device-memory bytes.
    predicted_s: Mapped[float | None] = mapped_column(Float)
    predicted_overhead_s: Mapped[float | None] = mapped_column(Float)
    measured_over_predicted: Mapped[float | None] = mapped_column(Float)
    flops: Mapped[float | None] = mapped_column(Float)
    bytes: Mapped[float | None] = mapped_column(Float)
    calibrated_s: Mapped[float | None] = mapped_column(Float)
    calibration_id: Mapped[int | None] = mapped_column(Integer)


class Calibration(Base):
    """A fitted correction for one hardware profile, per op family; immutable once stored."""

    __tablename__ = "calibrations"
    __table_args__ = (UniqueConstraint("hardware", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hardware: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer)  # 1, 2, … per hardware
    # The profile's version it was fitted on (the results predicted with it) and is applied to.
    hardware_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    op_families: Mapped[list[str]] = mapped_column(JSONDocument)
    request: Mapped[dict[str, Any]] = mapped_column(JSONDocument)  # the filters and split it was fitted with
    summary: Mapped[dict[str, Any]] = mapped_column(JSONDocument)  # counts and error before/after, per family
    model: Mapped[dict[str, Any]] = mapped_column(JSONDocument)  # the fitted parameters and neighbour points
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RateLimitWindow(Base):
    """What one API key spent in one rate-limit window: the counters every replica increments (service.ratelimit)."""

    __tablename__ = "rate_limit_windows"

    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # Unix seconds, a multiple of the window
    requests: Mapped[int] = mapped_column(Integer)
    results: Mapped[int] = mapped_column(BigInteger)


class HeavyRateWindow(Base):
    """Heavy requests (serving estimates, plans) one client made in one rate-limit window, counted by every replica
    (service.heavy): the client is `key:ID` for an API key, `addr:ADDRESS` for a client without one."""

    __tablename__ = "heavy_rate_windows"

    client: Mapped[str] = mapped_column(String(80), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # Unix seconds, a multiple of the window
    requests: Mapped[int] = mapped_column(Integer)


class ServingTrace(Base):
    """A request trace for serving estimates: its columns (`adapters.Trace.encode`) and what `TraceRead` summarises.
    The id is the digest of the columns, so the same requests are stored once (`INSERT … ON CONFLICT DO NOTHING`)."""

    __tablename__ = "serving_traces"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    format: Mapped[str] = mapped_column(String(20))
    requests: Mapped[int] = mapped_column(Integer)
    summary: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    # The key that first stored these requests (only it or an admin key may delete them).
    owner_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class ServingBenchmark(Base):
    """One measured load test (`POST /v1/serving-benchmarks`): the deployment and load, what the tool measured, and
    the prediction made for them at upload; the errors of the means are columns, for the accuracy report."""

    __tablename__ = "serving_benchmarks"
    __table_args__ = (UniqueConstraint("api_key_id", "idempotency_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    format: Mapped[str] = mapped_column(String(20))
    model: Mapped[str] = mapped_column(String(64), index=True)
    hardware: Mapped[str] = mapped_column(String(64), index=True)
    hardware_version: Mapped[int] = mapped_column(Integer)
    device: Mapped[str | None] = mapped_column(String(200))
    engine: Mapped[str] = mapped_column(String(20))
    engine_version: Mapped[str] = mapped_column(String(64))
    host: Mapped[str | None] = mapped_column(String(200))
    deployment: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    load: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    measured: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    predicted: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    error_ttft: Mapped[float | None] = mapped_column(Float)
    error_tpot: Mapped[float | None] = mapped_column(Float)
    error_e2e: Mapped[float | None] = mapped_column(Float)
    error_output_tokens_per_s: Mapped[float | None] = mapped_column(Float)
    api_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class ServingCalibration(Base):
    """Named corrections of serving predictions fitted on measured load tests of one hardware profile (and engine,
    and model, where given): `parameters` (first-token cost, per-iteration host cost, prefill and decode factors),
    and the held-out errors before and after (leave one load point out)."""

    __tablename__ = "serving_calibrations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hardware: Mapped[str] = mapped_column(String(64), index=True)
    engine: Mapped[str | None] = mapped_column(String(20))
    model: Mapped[str | None] = mapped_column(String(64))
    points: Mapped[int] = mapped_column(Integer)
    parameters: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    errors: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Job(Base):
    """A long computation run as a job (service.jobs): its request, its state, its progress, and its result or error.
    The runner holding it (`runner`) renews `heartbeat_at`; a job whose heartbeat is older than the lease is taken up
    again by another process (or ends failed), and every state change is a compare-and-set on (state, runner), so a
    result is stored once."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_state_heartbeat", "state", "heartbeat_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # random, hex: the id is the job's only address
    kind: Mapped[str] = mapped_column(String(32), index=True)
    state: Mapped[str] = mapped_column(String(16))  # queued | running | succeeded | failed | cancelled
    body: Mapped[dict[str, Any]] = mapped_column(JSONDocument)  # the request as the synchronous endpoint takes it
    request_sha256: Mapped[str] = mapped_column(String(64))  # of kind and body: a replayed key with another is a 409
    # "<key id or ->:<Idempotency-Key>": the same key from the same API key (or none) returns the same job.
    idempotency_key: Mapped[str | None] = mapped_column(String(220), unique=True)
    owner_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    runner: Mapped[str | None] = mapped_column(String(100))  # the process running it now (host:pid:random)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # runs started (a restart's take-up adds one)
    done: Mapped[int] = mapped_column(Integer, default=0)  # units of work finished (a plan: candidates)
    total: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)  # the synchronous endpoint's answer
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)  # the error envelope, with its status
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
