"""Jobs: a long computation submitted, watched and fetched later (`POST /v1/jobs`, `GET /v1/jobs/{id}`), run on Ray.

A job's `body` is what the synchronous endpoint of its kind takes, and its `result` is exactly what that endpoint
answers (`plan`: `PlanRead` of `POST /v1/plan`; `plan_training`: `TrainingPlanRead` of `POST /v1/plan/training`;
`estimate_serving`: `ServingRead` of `POST /v1/estimate/serving`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from schemas.common import ErrorEnvelope, InputModel


class JobKind(StrEnum):
    plan = "plan"  # POST /v1/plan
    plan_training = "plan_training"  # POST /v1/plan/training
    estimate_serving = "estimate_serving"  # POST /v1/estimate/serving


# The synchronous endpoint of each kind.
JOB_PATHS = {
    JobKind.plan: "/v1/plan",
    JobKind.plan_training: "/v1/plan/training",
    JobKind.estimate_serving: "/v1/estimate/serving",
}


class JobState(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


FINISHED = frozenset({JobState.succeeded, JobState.failed, JobState.cancelled})


class JobCreate(InputModel):
    kind: JobKind
    body: dict[str, Any] = Field(description="The request body the kind's synchronous endpoint takes.")


class JobProgress(BaseModel):
    done: int = Field(description="Units of work finished (a plan: candidates evaluated).")
    total: int = Field(description="Units of work of the job (0 until it has started).")
    elapsed_s: float | None = Field(description="Seconds since the job (its latest attempt) started.")
    remaining_s: float | None = Field(
        description="Estimate of the seconds left: elapsed × (total − done) / done; None before any unit is done."
    )


class JobRead(BaseModel):
    id: str
    kind: JobKind
    state: JobState
    progress: JobProgress
    attempts: int = Field(description="Runs started: a job taken up again after its process stopped counts twice.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    result: dict[str, Any] | None = Field(
        description="When succeeded: the synchronous endpoint's answer, exactly (PlanRead, TrainingPlanRead or "
        "ServingRead)."
    )
    error: ErrorEnvelope | None = Field(description="When failed: the error envelope the endpoint would have sent.")
    error_status: int | None = Field(description="When failed: the HTTP status the endpoint would have sent.")
