"""Serving deployments under load: `POST /v1/estimate/serving`.

A deployment is a model on devices of one hardware profile: aggregated (`replicas` engines each on `parallelism`)
or disaggregated (`prefill` and `decode` worker pools, each with its own parallelism and count). Each engine runs a
scheduler (`engine`: static, continuous in-flight batching, or chunked prefill) over a paged KV pool. The load is a
closed loop at a concurrency, an open loop at an arrival rate, or a trace. Times are seconds; throughput counts
output tokens over every device of the deployment.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, NoReturn

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from schemas import limits
from schemas.common import InputModel, PositiveFloat
from schemas.estimates import EstimateContext
from schemas.inference import AllReduceImpl, Degree, Dtypes, Fleet, ModelRef, PlainPaths, Tokens
from schemas.lora import AdapterLoad, LoraEngineOptions, LoraRead
from schemas.sharing import PrefixCacheRead, PrefixGroups, Router, ThinkTime
from schemas.traces import TraceId, TraceRequest


class SchedulerKind(StrEnum):
    static = "static"
    continuous = "continuous"
    chunked = "chunked"


class KvPolicy(StrEnum):
    reserve = "reserve"
    on_demand = "on_demand"


class Mode(StrEnum):
    aggregated = "aggregated"
    disaggregated = "disaggregated"


class SpeculativeMethod(StrEnum):
    mtp = "mtp"
    eagle = "eagle"


class SpeculativeOptions(InputModel):
    """Speculative decoding: a draft proposes `draft_tokens` per sequence each iteration and the model checks them in
    one pass, keeping `accepted_tokens` of them on average."""

    method: SpeculativeMethod = Field(
        default=SpeculativeMethod.mtp,
        description="mtp: the model's own multi-token-prediction module (DeepSeek-V3/R1, Kimi-K2, GLM; TensorRT-LLM "
        "decoding_type MTP, vLLM method mtp); eagle: an EAGLE-3 draft head. Both cost draft_layers decoder layers "
        "of the model's shapes and its LM head per draft token; the method names the engines' option in the plan's "
        "export.",
    )
    draft_tokens: Annotated[int, Field(ge=1, le=16)] = Field(
        description="Drafts per sequence per iteration (vLLM num_speculative_tokens; TensorRT-LLM "
        "num_nextn_predict_layers / max_draft_len); the model checks draft_tokens + 1 positions."
    )
    accepted_tokens: Annotated[float, Field(ge=0, le=16)] = Field(
        description="Mean drafts kept per iteration, 0 to draft_tokens (the engines report it: vLLM's spec_decode "
        "acceptance metrics, TensorRT-LLM's acceptance length − 1). It depends on the model, the draft and the "
        "text; Ridgeline assumes none. Each iteration moves a sequence on by 1 + accepted_tokens."
    )
    draft_layers: Annotated[int, Field(ge=1, le=8)] = Field(
        default=1, description="Decoder layers of the draft, each with the model's shapes (MTP and EAGLE: 1)."
    )

    @model_validator(mode="after")
    def _accepted(self) -> SpeculativeOptions:
        if self.accepted_tokens > self.draft_tokens:
            raise ValueError(
                f"accepted_tokens ({self.accepted_tokens}) must be between 0 and draft_tokens ({self.draft_tokens})"
            )
        return self


class EngineOptions(LoraEngineOptions):
    """The engine's scheduler and KV cache, with the engines' own defaults, and its LoRA options."""

    scheduler: SchedulerKind = Field(
        default=SchedulerKind.chunked,
        description="static: whole batches, nothing joins a running batch; continuous: in-flight batching, prompts "
        "admitted whole (TensorRT-LLM without chunked context); chunked: decode first, prefill chunks fill the token "
        "budget (vLLM V1's default, Sarathi-Serve).",
    )
    max_num_seqs: Annotated[int, Field(ge=1, le=limits.MAX_SERVING_SEQS)] = Field(
        default=256, description="Sequences per iteration (vLLM --max-num-seqs; TensorRT-LLM max_batch_size)."
    )
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=limits.MAX_TOKENS)] = Field(
        default=8192,
        description="Tokens per iteration (vLLM --max-num-batched-tokens; TensorRT-LLM max_num_tokens).",
    )
    memory_fraction: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.9,
        description="Device memory the engine may use: weights, activations, the KV pool (vLLM "
        "--gpu-memory-utilization).",
    )
    kv_block_tokens: Annotated[int, Field(ge=1, le=limits.MAX_KV_BLOCK_TOKENS)] = Field(
        default=32, description="Tokens per KV block (TensorRT-LLM tokens_per_block 32; vLLM --block-size 16)."
    )
    kv_policy: KvPolicy = Field(
        default=KvPolicy.reserve,
        description="reserve: admit only when blocks for the prompt and the whole output are free, never preempt "
        "(TensorRT-LLM GUARANTEED_NO_EVICT); on_demand: allocate as tokens come, preempt the newest request when "
        "the pool runs out (vLLM, recompute).",
    )
    cuda_graphs: bool = Field(
        default=True, description="false: each iteration takes at least its kernels' launches on the host."
    )
    iteration_overhead_s: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.0, description="Host time per iteration not hidden behind the device (scheduling, sampling)."
    )
    speculative: SpeculativeOptions | None = Field(
        default=None, description="Speculative decoding (null: one token per sequence per iteration)."
    )
    prefix_caching: bool = Field(
        default=True,
        description="Keep computed KV blocks, named by their prefix, after their request ends, and reuse them for "
        "later prompts that start the same way, evicting least recently used (vLLM --enable-prefix-caching, on by "
        "default in V1; SGLang's radix cache, on unless --disable-radix-cache; TensorRT-LLM "
        "kv_cache_config.enable_block_reuse, on by default). It matters only for loads that share prefixes.",
    )
    host_cache_bytes: Annotated[float, Field(ge=0, le=limits.MAX_HOST_CACHE_BYTES)] = Field(
        default=0.0,
        description="Host memory per device for KV blocks evicted from the device (0: none; vLLM's CPU offloading "
        "connector, SGLang --enable-hierarchical-cache): each device keeps its share of a block there, and a block "
        "coming back crosses each device's host link (PCIe or C2C), which the profile must have.",
    )
    all_reduce: AllReduceImpl = Field(
        default=AllReduceImpl.custom,
        description="The tensor-parallel all-reduce. custom (the engines' default: TensorRT-LLM's AUTO strategy, "
        "vLLM's and SGLang's custom all-reduce): one-shot/two-shot kernels over NVLink for messages under 2 MiB, "
        "NCCL beyond and off NVLink; library: NCCL's always (vLLM --disable-custom-all-reduce).",
    )


class ServingParallelism(InputModel):
    tensor: Degree = Field(default=1, description="Tensor parallelism inside an engine.")
    pipeline: Degree = Field(default=1, description="Pipeline stages; p micro-batches in flight.")
    expert: Degree = Field(default=1, description="Expert parallelism over tensor × attention data-parallel.")
    attention_data: Degree = Field(
        default=1,
        description="Attention data parallelism inside an engine (DeepSeek-style: attention replicated, experts "
        "spread over the ranks); each rank schedules its own requests.",
    )


class WorkerPool(InputModel):
    """A disaggregated pool: `workers` engines, each on `parallelism`."""

    workers: Fleet = 1
    parallelism: ServingParallelism = Field(default_factory=ServingParallelism)
    engine: EngineOptions = Field(default_factory=EngineOptions)


class LengthKind(StrEnum):
    fixed = "fixed"
    uniform = "uniform"
    normal = "normal"
    lognormal = "lognormal"
    empirical = "empirical"


class Lengths(InputModel):
    """Token counts of requests: fixed (`value`), uniform in [`low`, `high`], normal or log-normal with the lengths'
    own `mean` and `std`, or drawn from `values` (empirical). Rounded, at least 1."""

    kind: LengthKind = LengthKind.fixed
    value: Tokens | None = None
    low: Tokens | None = None
    high: Tokens | None = None
    mean: Annotated[float, Field(gt=0, le=limits.MAX_TOKENS)] | None = None
    std: Annotated[float, Field(ge=0, le=limits.MAX_TOKENS)] | None = None
    values: list[Tokens] | None = Field(default=None, min_length=1, max_length=limits.MAX_SERVING_REQUESTS)

    @model_validator(mode="after")
    def _parameters(self) -> Lengths:
        need = {
            LengthKind.fixed: ("value",),
            LengthKind.uniform: ("low", "high"),
            LengthKind.normal: ("mean", "std"),
            LengthKind.lognormal: ("mean", "std"),
            LengthKind.empirical: ("values",),
        }[self.kind]
        missing = [name for name in need if getattr(self, name) is None]
        if missing:
            raise ValueError(f"kind {self.kind.value} needs {' and '.join(missing)}")
        if self.kind is LengthKind.uniform and self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


class Sessions(InputModel):
    """Multi-turn sessions: each has `turns` turns; a turn's prompt is the session's history (every prompt and answer
    so far) and `load.prompt_tokens` new tokens, its answer `load.output_tokens`; the next turn is sent `think_s`
    after the answer ends. With `rate_per_s`, sessions start at that rate; with `concurrency`, that many users each
    run one session after another. `load.requests` counts turns."""

    turns: Lengths = Field(description="Turns per session (fixed or a distribution; at least 1).")
    think_s: ThinkTime = Field(default_factory=lambda: ThinkTime(value=0.0))


class ArrivalProcess(StrEnum):
    poisson = "poisson"
    gamma = "gamma"


class Load(InputModel):
    """Exactly one of: `concurrency` (a closed loop: that many clients, each sending its next request when the last
    ends, as aiperf and trtllm-bench run), `rate_per_s` (an open loop, Poisson or gamma arrivals), `trace` (the
    requests themselves) or `trace_id` (a trace stored with `POST /v1/traces`)."""

    concurrency: Annotated[int, Field(ge=1, le=limits.MAX_SERVING_REQUESTS)] | None = None
    rate_per_s: Annotated[float, Field(gt=0, le=1e6)] | None = None
    arrival: ArrivalProcess = ArrivalProcess.poisson
    arrival_cv: Annotated[float, Field(gt=0, le=100)] = Field(
        default=1.0, description="Gamma arrivals: coefficient of variation of the gaps (1 is Poisson)."
    )
    trace: list[TraceRequest] | None = Field(default=None, min_length=1, max_length=limits.MAX_SERVING_REQUESTS)
    trace_id: TraceId | None = None
    requests: Annotated[int, Field(ge=1, le=limits.MAX_SERVING_REQUESTS)] = Field(
        default=1000, description="Requests simulated (closed and open loops)."
    )
    prompt_tokens: Lengths | None = None
    output_tokens: Lengths | None = None
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    prefix_tokens: Annotated[int, Field(ge=1, le=limits.MAX_TOKENS)] | None = Field(
        default=None,
        description="A prefix of this many tokens (a system prompt, tool schemas, a document) starts every prompt, "
        "before its prompt_tokens (or each group's own: prefix_groups).",
    )
    prefix_groups: PrefixGroups | None = Field(
        default=None, description="Groups with a prefix of prefix_tokens each (null: one, shared by all)."
    )
    sessions: Sessions | None = Field(default=None, description="Multi-turn sessions (null: independent requests).")
    adapters: AdapterLoad | None = Field(
        default=None, description="LoRA adapters the requests run (null: the base model; a trace names its own)."
    )

    @model_validator(mode="after")
    def _one_load(self) -> Load:
        given = [n for n in ("concurrency", "rate_per_s", "trace", "trace_id") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("exactly one of concurrency, rate_per_s, trace and trace_id")
        if self.trace is None and self.trace_id is None and (self.prompt_tokens is None or self.output_tokens is None):
            raise ValueError("prompt_tokens and output_tokens are needed unless a trace gives them")
        traced = self.trace is not None or self.trace_id is not None
        for name in ("prefix_tokens", "prefix_groups", "sessions"):
            if traced and getattr(self, name) is not None:
                _refuse_load(name, getattr(self, name), "a trace carries its own sharing (prefix hashes, sessions)")
        if traced and self.adapters is not None:
            _refuse_load("adapters", self.adapters, "a trace names its own adapters (each request's adapter)")
        if self.prefix_groups is not None and self.prefix_tokens is None:
            _refuse_load("prefix_groups", self.prefix_groups, "needs prefix_tokens: the length of each group's prefix")
        return self


def _refuse_load(field: str, value: Any, message: str) -> NoReturn:
    detail = InitErrorDetails(type="value_error", loc=(field,), input=value, ctx={"error": ValueError(message)})
    raise ValidationError.from_exception_data("Load", [detail])


class Objectives(InputModel):
    """Per-request latency objectives for goodput (seconds)."""

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None


class ServingRequest(EstimateContext, PlainPaths):
    model: ModelRef
    mode: Mode = Mode.aggregated
    replicas: Fleet = Field(default=1, description="Aggregated: engines, each on `parallelism`'s devices.")
    parallelism: ServingParallelism = Field(default_factory=ServingParallelism)
    engine: EngineOptions = Field(default_factory=EngineOptions)
    router: Router = Field(
        default=Router.round_robin,
        description="How requests are spread over the replicas (aggregated) or prefill workers (disaggregated; "
        "round_robin there is the least loaded, as before): round_robin; least_loaded (fewest requests held); "
        "prefix_aware: the engine whose cache holds the longest prefix of the prompt, over half of it, unless its "
        "load exceeds the least loaded engine's by more than 32 requests (SGLang router's cache-aware policy, "
        "llm-d's prefix-cache scorer), else the least loaded.",
    )
    prefill: WorkerPool | None = Field(default=None, description="Disaggregated: the prefill workers.")
    decode: WorkerPool | None = Field(default=None, description="Disaggregated: the decode workers.")
    dtypes: Dtypes = Field(default_factory=Dtypes)
    load: Load
    objectives: Objectives = Field(default_factory=Objectives)
    series: bool = Field(default=False, description="Return the iterations over time (thinned to 2 000 points).")
    price_per_device_hour: PositiveFloat | None = None

    @model_validator(mode="after")
    def _pools(self) -> ServingRequest:
        """Each mode's fields and only those: a field of the other mode would be ignored without a word."""
        if self.mode is Mode.disaggregated:
            for pool in ("prefill", "decode"):
                if getattr(self, pool) is None:
                    _refuse(pool, None, "required with mode disaggregated: its workers, parallelism and engine")
            for name in ("replicas", "parallelism", "engine"):
                if name in self.model_fields_set:
                    _refuse(name, getattr(self, name), "applies to mode aggregated only: with mode disaggregated, "
                            "each pool (prefill, decode) has its own workers, parallelism and engine")  # fmt: skip
        else:
            for pool in ("prefill", "decode"):
                if getattr(self, pool) is not None:
                    _refuse(pool, getattr(self, pool), "applies to mode disaggregated only (set mode: disaggregated)")
        return self


def _refuse(field: str, value: Any, message: str) -> NoReturn:
    """A validation error at `field` of the request (a model validator's own error would name the whole body)."""
    detail = InitErrorDetails(type="value_error", loc=(field,), input=value, ctx={"error": ValueError(message)})
    raise ValidationError.from_exception_data("ServingRequest", [detail])


class Stats(BaseModel):
    """Over the simulated requests: their mean and percentiles; `mean_p10` … `mean_p90` the mean's prediction
    interval for time to first token, per output token and end to end (every op at its band's edge together,
    docs/model/intervals.md; null for the queue)."""

    mean: float
    p50: float
    p90: float
    p99: float
    mean_p10: float | None = None
    mean_p90: float | None = None


class SeriesPoint(BaseModel):
    start_s: float
    duration_s: float
    decoding: int
    prefill_tokens: int
    kv_cache_use: float
    adapters: int = Field(default=0, description="Distinct LoRA adapters in the iteration's batch.")


class ServingRead(BaseModel):
    model: str
    hardware: str
    mode: Mode
    devices: int
    requests: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    output_tokens_per_s_per_user: float = Field(description="Mean over requests of 1 / their time per output token.")
    requests_per_s_p10: float | None = Field(
        default=None, description="The low end of requests_per_s's prediction interval."
    )
    requests_per_s_p90: float | None = Field(default=None, description="Its high end.")
    output_tokens_per_s_p10: float | None = Field(
        default=None, description="The low end of output_tokens_per_s's prediction interval."
    )
    output_tokens_per_s_p90: float | None = Field(default=None, description="Its high end.")
    ttft_s: Stats = Field(description="Time to first token: arrival to the end of the prompt's last chunk.")
    tpot_s: Stats = Field(description="Time per output token after the first, per request.")
    e2e_s: Stats
    queue_s: Stats = Field(description="Arrival to admission (the first chunk scheduled).")
    mean_in_system: float = Field(description="Requests between arrival and end, time-averaged (Little's L).")
    mean_batch: float = Field(description="Sequences per iteration, time-averaged.")
    mean_kv_cache_use: float = Field(description="Fraction of the KV pool in use, time-averaged.")
    kv_cache_blocks: list[int] = Field(
        description="Blocks per engine (aggregated: one; disaggregated: prefill, decode)."
    )
    preemptions: int
    prefill_share: float = Field(description="Prefill tokens' share of iteration time.")
    iterations: int
    max_batched_tokens: int
    prefix_cache: PrefixCacheRead | None = Field(
        default=None, description="Prefix caching, when the load shares prefixes and the engines cache them."
    )
    lora: LoraRead | None = Field(default=None, description="LoRA adapters, when the requests name them.")
    goodput_requests_per_s: float
    goodput_fraction: float
    cost_per_million_output_tokens: float | None = None
    surface_error: float = Field(
        description="Largest relative error of the iteration-time interpolant against the core at off-grid points."
    )
    assumptions: dict[str, str | float | int | bool]
    series: list[SeriesPoint] | None = None
