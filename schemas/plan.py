"""The capacity planner: `POST /v1/plan`, on the serving simulator.

Given a model, the traffic (a request or output-token rate, the lengths of requests), latency objectives on a
percentile and the hardware to consider, the planner simulates every candidate deployment of the search — hardware ×
tensor × pipeline × expert parallelism × dtypes × aggregated or disaggregated (prefill : decode worker ratios) ×
`max_num_seqs` × chunk budget — at its operating point (a closed loop that fills its batch), sizes the fleet the
traffic needs, checks the best fleets under the traffic's own arrivals, and returns those that meet the objectives,
cheapest first, with the engines' launch arguments. When none does: the closest, and what each misses.
"""

from __future__ import annotations

import itertools
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from schemas import limits
from schemas.common import PositiveFloat
from schemas.estimates import HardwareRef, Options
from schemas.inference import Degree, Dtypes, ModelRef, PlainPaths, Tokens
from schemas.lora import AdapterLoad
from schemas.serving import EngineOptions, Lengths, Mode, Sessions, Stats
from schemas.sharing import PrefixGroups
from schemas.traces import TraceId

MAX_CANDIDATES = limits.MAX_SERVING_PLAN_CANDIDATES  # answered within a request
MAX_JOB_CANDIDATES = limits.MAX_JOB_PLAN_CANDIDATES  # as a job


class Traffic(PlainPaths):
    """What the fleet must serve: a request rate or an output-token rate, and the lengths of requests (a fixed
    count, or a distribution as `POST /v1/estimate/serving` takes it); or a stored trace (`trace_id`), whose
    requests' (prompt, output) pairs and mean arrival rate it is, unless a rate is given to scale it to."""

    requests_per_s: PositiveFloat | None = None
    output_tokens_per_s: PositiveFloat | None = None
    prompt_tokens: Tokens | Lengths | None = None
    output_tokens: Tokens | Lengths | None = None
    trace_id: TraceId | None = Field(
        default=None,
        description="A trace stored with POST /v1/traces: its lengths (pairs drawn from it, seeded) and its mean "
        "rate (or `requests_per_s` / `output_tokens_per_s` if given); its arrivals' burstiness is not replayed.",
    )
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = Field(
        default=0, description="Seeds the lengths drawn and the arrivals of the traffic check."
    )
    prefix_tokens: Annotated[int, Field(ge=1, le=limits.MAX_TOKENS)] | None = Field(
        default=None, description="A prefix of this many tokens before every prompt (or each group's: prefix_groups)."
    )
    prefix_groups: PrefixGroups | None = None
    sessions: Sessions | None = Field(
        default=None,
        description="Multi-turn sessions: each turn's prompt is its session's history and prompt_tokens new tokens. "
        "The planner replays the turns in order, a session's next turn about a batch of requests after the one "
        "before (think times are not simulated: its closed loop and Poisson check send requests, not sessions).",
    )
    adapters: AdapterLoad | None = Field(
        default=None, description="LoRA adapters the requests run (null: the base model; a trace names its own)."
    )

    def longest_prompt(self) -> int:
        """The longest prompt the traffic sends, as far as its description bounds it (a distribution: its upper
        bound, or mean + 3 standard deviations; a stored trace: 1 until the service has read it and checks the
        search again, `Search.check_work`)."""
        p = self.prompt_tokens
        if p is None:
            return 1
        if isinstance(p, int):
            return p
        if p.values:
            return max(p.values)
        bound = p.value or p.high or (p.mean or 1) + 3 * (p.std or 0)
        return int(min(bound, limits.MAX_TOKENS))

    @model_validator(mode="after")
    def _one_rate(self) -> Traffic:
        rates = (self.requests_per_s is not None) + (self.output_tokens_per_s is not None)
        lengths = (self.prompt_tokens is not None) + (self.output_tokens is not None)
        if self.prefix_groups is not None and self.prefix_tokens is None:
            raise ValueError("prefix_groups needs prefix_tokens: the length of each group's prefix")
        if self.trace_id is not None:
            if self.prefix_tokens is not None or self.sessions is not None:
                raise ValueError("a trace carries its own sharing: prefix_tokens and sessions go with no trace_id")
            if self.adapters is not None:
                raise ValueError("a trace names its own adapters: adapters go with no trace_id")
            if lengths:
                raise ValueError("a trace gives the lengths: prompt_tokens and output_tokens go with no trace_id")
            if rates > 1:
                raise ValueError("give at most one of requests_per_s and output_tokens_per_s with a trace")
            return self
        if rates != 1:
            raise ValueError("give exactly one of requests_per_s and output_tokens_per_s")
        if lengths != 2:
            raise ValueError("give prompt_tokens and output_tokens, or a trace_id")
        return self


class Percentile(StrEnum):
    p50 = "p50"
    p90 = "p90"
    p99 = "p99"


class Objectives(PlainPaths):
    """Latency objectives (seconds) on one percentile of the requests."""

    ttft_s: PositiveFloat | None = Field(default=None, description="Time to first token, arrival to first token.")
    tpot_s: PositiveFloat | None = Field(default=None, description="Time per output token after the first.")
    e2e_s: PositiveFloat | None = Field(default=None, description="Arrival to last token.")
    percentile: Percentile = Percentile.p90
    margin: Literal["estimate", "interval"] = Field(
        default="estimate",
        description="estimate: the objectives hold on the simulated latencies; interval: they hold at the upper edge "
        "of the latencies' prediction interval, and fleets are sized on the lower edge of a unit's throughput "
        "(headroom for the model's error on a device it was not measured on; docs/model/intervals.md).",
    )


class Ratio(PlainPaths):
    """A disaggregated unit: `prefill` prefill workers feeding `decode` decode workers."""

    prefill: Annotated[int, Field(ge=1, le=64)] = 1
    decode: Annotated[int, Field(ge=1, le=64)] = 1


Seqs = Annotated[int, Field(ge=1, le=limits.MAX_PLAN_SEQS)]
# A chunk budget of at least 64 tokens: vLLM asks for max_num_batched_tokens ≥ max_num_seqs and TensorRT-LLM's
# chunked context runs whole KV blocks (tokens_per_block 32-64); a 1-token budget would make a prompt that many
# iterations.
Budget = Annotated[int, Field(ge=64, le=limits.MAX_TOKENS)]


class Search(PlainPaths):
    tensor: list[Degree] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1, max_length=limits.MAX_LIST)
    pipeline: list[Degree] = Field(default_factory=lambda: [1], min_length=1, max_length=limits.MAX_LIST)
    expert: list[Degree] = Field(
        default_factory=lambda: [1], min_length=1, max_length=limits.MAX_LIST,
        description="Expert parallelism (MoE models; over the tensor-parallel devices).",
    )  # fmt: skip
    dtypes: list[Dtypes] = Field(default_factory=lambda: [Dtypes()], min_length=1, max_length=16)
    modes: list[Mode] = Field(default_factory=lambda: [Mode.aggregated], min_length=1, max_length=2)
    ratios: list[Ratio] = Field(
        default_factory=lambda: [Ratio(prefill=1, decode=1), Ratio(prefill=1, decode=2), Ratio(prefill=2, decode=1)],
        min_length=1,
        max_length=16,
        description="Disaggregated: prefill : decode workers per unit. Each pool's tensor width is searched on its "
        "own (tensor × tensor).",
    )
    max_num_seqs: list[Seqs] = Field(
        default_factory=lambda: [8, 16, 32, 64, 128, 256],
        min_length=1,
        max_length=limits.MAX_LIST,
        description="Sequences per engine (decode engines when disaggregated): vLLM --max-num-seqs, TensorRT-LLM "
        "max_batch_size.",
    )
    max_num_batched_tokens: list[Budget] = Field(
        default_factory=lambda: [2048, 8192],
        min_length=1,
        max_length=limits.MAX_LIST,
        description="Tokens per iteration of the engines that prefill (the chunk budget): vLLM "
        "--max-num-batched-tokens, TensorRT-LLM max_num_tokens.",
    )
    max_devices: Annotated[int, Field(ge=1, le=limits.MAX_DEVICES)] | None = Field(
        default=None, description="Fleets of more devices are left out."
    )
    prefix_caching: list[bool] | None = Field(
        default=None, min_length=1, max_length=2,
        description="Prefix caching on and off (null: engine.prefix_caching only); it matters for traffic that shares.",
    )  # fmt: skip
    host_cache_bytes: list[Annotated[float, Field(ge=0, le=limits.MAX_HOST_CACHE_BYTES)]] | None = Field(
        default=None, min_length=1, max_length=8,
        description="Host tiers per device to try (null: engine.host_cache_bytes only; each needs a host link).",
    )  # fmt: skip

    def caching(self, engine: EngineOptions) -> list[tuple[bool, float]]:
        """(prefix caching, host cache bytes) pairs searched: a host tier only with caching on."""
        flags = self.prefix_caching or [engine.prefix_caching]
        hosts = list(dict.fromkeys(self.host_cache_bytes or [engine.host_cache_bytes]))
        return [(True, h) for h in hosts if True in flags] + ([(False, 0.0)] if False in flags else [])

    def _variants(self) -> int:
        """Caching variants searched, at most."""
        return len(self.prefix_caching or [True]) * len(self.host_cache_bytes or [0.0])

    @field_validator("tensor", "pipeline", "expert", "max_num_seqs", "max_num_batched_tokens")
    @classmethod
    def _distinct(cls, values: list[int]) -> list[int]:
        if len(set(values)) != len(values):
            raise ValueError("values must be distinct")
        return values

    def simulated_iterations_per_hardware(self, prompt: int) -> int:
        """Iterations the operating points simulate before any candidate is pruned: per candidate, its 2 × clients +
        64 requests each take ⌈prompt / budget⌉ prefill iterations (chunks) and about two decode stretches."""
        total = 0
        for p, budget in itertools.product(self.pipeline, self.max_num_batched_tokens):
            per_request = -(-prompt // budget) + 2
            for decode, tensors in self._pools():
                for seqs in self.max_num_seqs:
                    total += tensors * (2 * p * decode * seqs + 64) * per_request
        return total * len(self.expert) * len(self.dtypes) * self._variants()

    def check_work(self, hardware: int, prompt: int, limit: int = limits.MAX_PLAN_SIMULATED_ITERATIONS) -> None:
        """ValueError when the search, over `hardware` profiles with prompts up to `prompt` tokens, would simulate
        more iterations than `limit` (a request's, `limits.MAX_PLAN_SIMULATED_ITERATIONS`, or a job's)."""
        work = hardware * self.simulated_iterations_per_hardware(prompt)
        if work > limit:
            raise ValueError(
                f"the search would simulate about {work} iterations ((2 × clients + 64) requests per candidate, each "
                f"⌈{prompt} prompt tokens / max_num_batched_tokens⌉ + 2 iterations); at most "
                f"{limit} are allowed: fewer or smaller max_num_seqs, larger token "
                "budgets, fewer tensor widths or hardware"
            )

    def _pools(self) -> list[tuple[int, int]]:
        """(decode workers per unit, tensor combinations) of each mode searched."""
        pools = []
        if Mode.aggregated in self.modes:
            pools.append((1, len(self.tensor)))
        if Mode.disaggregated in self.modes:
            pools += [(r.decode, len(self.tensor) ** 2) for r in self.ratios]
        return pools

    def engines_per_hardware(self) -> int:
        return len(self.dtypes) * len(self.tensor) * len(self.pipeline) * len(self.expert)

    def candidates_per_hardware(self) -> int:
        t, shared = len(self.tensor), len(self.pipeline) * len(self.expert) * len(self.dtypes)
        shared *= len(self.max_num_seqs) * len(self.max_num_batched_tokens)
        per = 0
        if Mode.aggregated in self.modes:
            per += t
        if Mode.disaggregated in self.modes:
            per += t * t * len(self.ratios)
        return per * shared * self._variants()


class PlanRequest(PlainPaths):
    model: ModelRef
    hardware: list[HardwareRef] = Field(min_length=1, max_length=16)
    options: Options = Field(default_factory=Options, description="Launch overhead, for every profile.")
    traffic: Traffic
    objectives: Objectives = Field(default_factory=Objectives)
    engine: EngineOptions = Field(
        default_factory=EngineOptions,
        description="The engines' scheduler and KV cache; the search sets max_num_seqs and max_num_batched_tokens.",
    )
    search: Search = Field(default_factory=Search)
    prices: dict[Annotated[str, Field(max_length=limits.SLUG_LENGTH)], PositiveFloat] = Field(
        default_factory=dict,
        max_length=16,
        description="Price per device hour by hardware slug; with a price for every profile, the cheapest "
        "fleet ranks first, otherwise the one with the fewest devices.",
    )
    max_results: Annotated[int, Field(ge=1, le=50)] = 10

    @field_validator("options")
    @classmethod
    def _uncalibrated(cls, options: Options) -> Options:
        if options.calibration != "none":
            raise ValueError(
                'the planner simulates serving with the physical model: calibration must be "none" (calibrations '
                "apply to POST /v1/estimate/inference)"
            )
        return options

    # A field validator (hardware comes before search), so that the error names body.search. The bounds are a job's
    # (service.jobs); a plan past a request's (`beyond_request`) is run as one.
    @field_validator("search")
    @classmethod
    def _size(cls, s: Search, info: ValidationInfo) -> Search:
        hardware = len(info.data.get("hardware") or [None])
        count = hardware * s.candidates_per_hardware()
        if count > MAX_JOB_CANDIDATES:
            raise ValueError(
                f"the search has {count} candidates (hardware × dtypes × pipeline × expert × max_num_seqs × "
                f"max_num_batched_tokens × (tensor, aggregated + tensor² × ratios, disaggregated)); at most "
                f"{MAX_JOB_CANDIDATES} are allowed"
            )
        engines = hardware * s.engines_per_hardware()
        if engines > limits.MAX_PLAN_ENGINES:
            raise ValueError(
                f"the search has {engines} distinct engines (hardware × dtypes × tensor × pipeline × expert), each "
                f"an iteration-time surface; at most {limits.MAX_PLAN_ENGINES} are allowed"
            )
        traffic = info.data.get("traffic")
        prompt = traffic.longest_prompt() if isinstance(traffic, Traffic) else 1
        s.check_work(hardware, prompt, limits.MAX_JOB_PLAN_SIMULATED_ITERATIONS)
        return s

    def beyond_request(self) -> str | None:
        """Why the plan is too big to answer within a request (then it runs as a job), or None: more than
        `MAX_CANDIDATES` candidates, or more than `limits.MAX_PLAN_SIMULATED_ITERATIONS` simulated iterations."""
        count = len(self.hardware) * self.search.candidates_per_hardware()
        if count > MAX_CANDIDATES:
            return f"the search has {count} candidates; a request answers at most {MAX_CANDIDATES}"
        try:
            self.search.check_work(len(self.hardware), self.traffic.longest_prompt())
        except ValueError as err:
            return str(err)
        return None


class Check(BaseModel):
    objective: str = Field(description="ttft_s, tpot_s or e2e_s, at the request's percentile.")
    target: float
    predicted: float
    ratio: float = Field(description="predicted / target (> 1 misses).")


class Role(StrEnum):
    aggregated = "aggregated"
    prefill = "prefill"
    decode = "decode"
    router = "router"  # trtllm-serve disaggregated, in front of the prefill and decode servers


class EnginePlan(BaseModel):
    role: Role
    workers: int = Field(description="Engines of this role in one unit.")
    tensor: int
    pipeline: int
    expert: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_blocks: int = Field(description="Blocks of the KV pool per engine (of `block tokens` each).")


class Figures(BaseModel):
    clients: int | None = Field(description="The closed loop's clients (None: the traffic's arrivals).")
    requests_per_s: float = Field(description="Of one unit.")
    output_tokens_per_s: float = Field(description="Of one unit.")
    output_tokens_per_s_per_device: float
    output_tokens_per_s_per_user: float
    ttft_s: Stats
    tpot_s: Stats
    e2e_s: Stats
    preemptions: int


class Launch(BaseModel):
    role: Role
    instances: int = Field(description="Processes to launch with this command, in the whole fleet.")
    command: str
    config_yaml: str | None = Field(default=None, description="The file the command's options name, if any.")


class Export(BaseModel):
    vllm: list[Launch]
    trtllm: list[Launch]
    trtllm_disaggregated_yaml: str | None = Field(
        default=None,
        description="`trtllm-serve disaggregated -c` configuration joining the prefill and decode servers.",
    )
    notes: list[str]


class PlanCandidate(BaseModel):
    rank: int
    label: str
    hardware: str
    mode: Mode
    dtypes: Dtypes
    engines: list[EnginePlan]
    devices_per_unit: int
    units: int = Field(description="Units the traffic needs (aggregated: engines; disaggregated: worker groups).")
    devices: int
    utilisation: float = Field(description="Demand over the fleet's throughput at the operating point.")
    operating_point: Figures = Field(description="One unit under a closed loop that fills its batch.")
    at_traffic: Figures | None = Field(
        description="One unit under its share of the traffic (Poisson arrivals), once checked."
    )
    meets: bool
    binding: Check | None = Field(description="The objective closest to its bound (under the traffic if checked).")
    misses: list[Check]
    price_per_device_hour: float | None
    cost_per_hour: float | None
    cost_per_million_tokens: float | None = Field(
        description="cost_per_hour over the output tokens the traffic asks for in an hour, × 10⁶."
    )
    surface_error: float
    export: Export


class FrontierPoint(BaseModel):
    label: str
    hardware: str
    mode: Mode
    output_tokens_per_s_per_user: float
    output_tokens_per_s_per_device: float
    meets_at_operating_point: bool


class RankedBy(StrEnum):
    cost = "cost"
    devices = "devices"


class PlanRead(BaseModel):
    model: str
    demand_requests_per_s: float
    percentile: Percentile
    margin: Literal["estimate", "interval"] = Field(
        default="estimate", description="What the objectives were checked on (objectives.margin)."
    )
    ranked_by: RankedBy
    feasible: list[PlanCandidate] = Field(description="Fleets that meet every objective under the traffic, best first.")
    closest: list[PlanCandidate] = Field(
        description="When none meets them: the candidates that miss by least (largest predicted / target ratio)."
    )
    frontier: list[FrontierPoint] = Field(
        description="Pareto frontier of the candidates' operating points: output tokens/s per device against per user."
    )
    candidates: int = Field(description="Candidates in the search.")
    evaluated: int = Field(description="Candidates simulated (the rest cannot run).")
    checked_at_traffic: int
    unfinished: int = Field(
        description="Candidates not simulated because the plan's time (a little less than the request's time limit) "
        "ran out: narrow the search to see them."
    )
    partial: bool = Field(
        default=False,
        description="True when the plan stopped at its time limit: candidates unfinished, or traffic checks left "
        "undone, so the ranking covers only what was simulated. The header `Ridgeline-Partial: unfinished=N; "
        "candidates=M` says so too.",
    )
    pruned: int = Field(
        description="Candidates not simulated: the same engines with a smaller max_num_seqs already miss the TPOT "
        "objective (a larger batch only makes each iteration longer)."
    )
    invalid: list[str] = Field(description="Candidates that cannot run, and why (at most 20 listed).")
    invalid_count: int
    assumptions: dict[str, str]


__all__ = [
    "Check",
    "EnginePlan",
    "Export",
    "Figures",
    "FrontierPoint",
    "Launch",
    "Objectives",
    "Percentile",
    "PlanCandidate",
    "PlanRead",
    "PlanRequest",
    "RankedBy",
    "Ratio",
    "Role",
    "Search",
    "Traffic",
]
