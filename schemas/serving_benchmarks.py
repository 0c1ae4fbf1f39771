"""Measured load tests: `POST /v1/serving-benchmarks` and its list.

One upload is one load test: the tool's result file as the tool wrote it (`format`, `result`), and beside it what the
file does not carry: the deployment that was measured (model, hardware, layout, dtypes, the engine's name, version
and options) and, where the file does not say it, the load. The service reads the file, checks its figures, predicts
the same deployment under the same load, and stores both.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator

from schemas import limits
from schemas.common import InputModel, ShortText, UtcDatetime
from schemas.inference import Dtypes
from schemas.serving import EngineOptions, Load, Mode, ServingParallelism, ServingRequest, WorkerPool

MAX_RESULT_TEXT = 4 * 1024 * 1024  # a JSONL file sent as text; the body limit bounds a JSON one


class LoadTestFormat(StrEnum):
    """The tools whose result files are read, each in its own file format (docs/serving-benchmarks.md)."""

    aiperf = "aiperf"  # profile_export_aiperf.json
    guidellm = "guidellm"  # guidellm benchmark --outputs json
    vllm = "vllm"  # vllm bench serve --save-result
    sglang = "sglang"  # python -m sglang.bench_serving --output-file (JSON lines)
    inference_perf = "inference_perf"  # inference-perf's per-stage report JSON
    trtllm_bench = "trtllm_bench"  # trtllm-bench throughput --report_json


class EngineName(StrEnum):
    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"
    emulated = "emulated"  # `ridgeline emulate`
    other = "other"


class EngineRelease(InputModel):
    """The serving engine that was measured: its name, release and the options `engine` does not model."""

    name: EngineName
    version: Annotated[str, Field(min_length=1, max_length=64)]
    prefix_caching: bool = Field(default=False, description="Whether the engine reused cached prompt prefixes.")


class ServingDeployment(InputModel):
    """The deployment a load test measured: the fields of `POST /v1/estimate/serving` but the load."""

    model: Annotated[str, Field(min_length=1, max_length=limits.SLUG_LENGTH)] = Field(
        description="A catalogue model slug."
    )
    hardware: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="A hardware profile slug, or a device name (as `nvidia-smi` prints it) that resolves to one."
    )
    release: EngineRelease
    mode: Mode = Mode.aggregated
    replicas: Annotated[int, Field(ge=1, le=limits.MAX_DEVICES)] = 1
    parallelism: ServingParallelism = Field(default_factory=ServingParallelism)
    engine: EngineOptions = Field(default_factory=EngineOptions)
    prefill: WorkerPool | None = None
    decode: WorkerPool | None = None
    dtypes: Dtypes = Field(default_factory=Dtypes)

    @model_validator(mode="after")
    def _pools(self) -> ServingDeployment:
        ServingRequest._pools(self)  # type: ignore[operator]  # the same rule, on the same fields
        return self


class ServingBenchmarkCreate(InputModel):
    format: LoadTestFormat = Field(description="The tool that wrote `result`.")
    result: dict[str, Any] | Annotated[str, Field(max_length=MAX_RESULT_TEXT)] = Field(
        description="The tool's result file as it wrote it: its JSON object, or the file's text (SGLang's JSON lines)."
    )
    entry: Annotated[int, Field(ge=-limits.MAX_SERVING_REQUESTS, le=limits.MAX_SERVING_REQUESTS)] | None = Field(
        default=None,
        description="Which run of a file that holds several (GuideLLM's benchmarks, SGLang's lines); default the last.",
    )
    deployment: ServingDeployment
    load: Load | None = Field(
        default=None,
        description="The load, where the file does not say it all (default: the file's concurrency or rate, its mean "
        "lengths as fixed lengths and its request count).",
    )
    host: ShortText | None = None


class MeasuredStats(BaseModel):
    mean: float
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class ServingMeasured(BaseModel):
    """What the tool measured, seconds and per second."""

    tool: str
    tool_version: str | None = None
    requests: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    ttft_s: MeasuredStats | None = None
    tpot_s: MeasuredStats | None = None
    itl_s: MeasuredStats | None = None
    e2e_s: MeasuredStats
    mean_prompt_tokens: float | None = None
    mean_output_tokens: float | None = None
    concurrency: int | None = None
    rate_per_s: float | None = None


class ServingPredicted(BaseModel):
    """Ridgeline's prediction for the same deployment and load, made at upload."""

    requests_per_s: float
    output_tokens_per_s: float
    ttft_s: MeasuredStats
    tpot_s: MeasuredStats
    e2e_s: MeasuredStats
    duration_s: float


class ServingErrors(BaseModel):
    """predicted / measured − 1 of the means and throughputs (null where not measured)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None


class ServingBenchmarkRead(BaseModel):
    id: int
    format: LoadTestFormat
    model: str
    hardware: str
    hardware_version: int
    device: str | None = Field(default=None, description="The device name the upload gave, when not a slug.")
    engine: str
    engine_version: str
    host: str | None = None
    deployment: dict[str, Any]
    load: dict[str, Any] = Field(description="The load predicted: the request's, or the one the file describes.")
    measured: ServingMeasured
    predicted: ServingPredicted
    error: ServingErrors
    api_key: str | None = None
    created_at: UtcDatetime
