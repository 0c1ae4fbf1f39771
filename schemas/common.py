"""Types shared by every part of the API contract."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from schemas import limits

T = TypeVar("T")

# Positive, finite numbers: JSON parsers in Python accept NaN and Infinity, so say no explicitly. The range is
# physical (schemas.limits says why): outside it divisions overflow, and an estimate would come back as infinity.
PositiveFloat = Annotated[float, Field(ge=limits.MIN_POSITIVE, le=limits.MAX_POSITIVE, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0, le=2**62)]
Fraction = Annotated[float, Field(ge=limits.MIN_FRACTION, le=1, allow_inf_nan=False)]
Slug = Annotated[
    str,
    StringConstraints(min_length=1, max_length=limits.SLUG_LENGTH, pattern=r"^[a-z0-9][a-z0-9._-]*$"),
    Field(description="Lower-case identifier: letters, digits, '.', '_' and '-', at most 64 characters."),
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=limits.NAME_LENGTH, strip_whitespace=True)]
LongText = Annotated[str, StringConstraints(min_length=1, max_length=limits.TEXT_LENGTH, strip_whitespace=True)]


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


# Timestamps are stored in UTC, but SQLite hands them back without an offset, and RFC 3339 (OpenAPI's `date-time`)
# requires one: a response's timestamps always carry theirs.
UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


class InputModel(BaseModel):
    """Base for request bodies and catalogue files: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Dtype(StrEnum):
    """Element types. fp8 is e4m3/e5m2; fp6 is OCP MXFP6 (e2m3/e3m2, 6 bits); int4 and fp4 are packed two to a
    byte. Block scales of the microscaling formats are not counted in the element size."""

    fp64 = "fp64"
    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp6 = "fp6"
    int8 = "int8"
    int4 = "int4"
    fp4 = "fp4"


class Source(InputModel):
    """A citation: a datasheet, a paper, a repository file at a commit, or a measurement."""

    key: Annotated[
        str, StringConstraints(min_length=1, max_length=limits.KEY_LENGTH, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    ]
    title: LongText
    url: Annotated[str, StringConstraints(max_length=limits.URL_LENGTH)] | None = None


class Page(BaseModel, Generic[T]):
    """One page of a list."""

    items: list[T]
    total: int = Field(description="Number of items matching the filters, over all pages.")
    limit: int
    offset: int


class ErrorDetail(BaseModel):
    field: str | None = Field(
        default=None, description="Dotted path of the offending field, e.g. body.memory.device.bandwidth_bytes_per_s."
    )
    message: str
    type: str | None = None


class ErrorEnvelope(BaseModel):
    """Every 4xx and 5xx response has this shape."""

    error: str = Field(description="Stable machine-readable code, e.g. not_found, validation_error.")
    message: str = Field(description="What went wrong, for a person.")
    detail: list[ErrorDetail] = Field(default_factory=list)
