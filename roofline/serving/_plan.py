"""Fleet planning on the serving simulator: each candidate deployment's operating point at its full batch, the
fleet the traffic needs, a check of that fleet under the traffic's own arrivals, and the Pareto frontier.

Method (as aiconfigurator and the engines' own benchmark guides size a deployment: a sweep of engine batch sizes
under a closed loop, the best throughput that meets the latency objectives, then replicas for the traffic):
1. A candidate is one *unit*: an aggregated engine (tensor × pipeline × attention-data devices), or a disaggregated
   group of x prefill and y decode workers. Its operating point is a closed loop of `max_num_seqs` clients per
   decoding engine, the load at which its scheduler is full; the first wave of clients, who arrive together at
   t = 0, is a warm-up and left out of the statistics. Throughput follows from Little's law for a closed system
   without think time: X = clients / mean end-to-end latency (Little 1961).
2. The objectives are checked on the chosen percentile of TTFT, TPOT and end-to-end latency at that point.
3. The fleet is ⌈demand / X⌉ units. The best candidates are then checked under the traffic itself: one unit's share
   of Poisson arrivals (random routing; least-loaded routing only does better); a fleet that misses there gets
   more units, up to `MAX_GROWTH` times and within the fleet limit the caller gives, and its figures are those of
   the checked fleet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from roofline._stop import StopCheck, never
from roofline.inference import InferenceRun
from roofline.serving._config import IntArray, Requests, Scheduler, ServingConfigError
from roofline.serving._deploy import EngineSpec, ServingRun, prepare, transfer_function
from roofline.serving._results import Distribution, ServingBand, band_factors
from roofline.serving._simulator import Trace, simulate
from roofline.serving._surface import IterationSurface
from roofline.serving._surface_build import build_surface

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
MARGINS = ("estimate", "interval")
OBJECTIVES = ("ttft_s", "tpot_s", "e2e_s")
MIN_STEADY = 64  # requests measured after the warm-up wave, at least
MAX_CHECK_REQUESTS = 20_000  # requests of one traffic check, at most (the operating points are bounded by the caller)
CHECK_REQUESTS = 512  # requests of the traffic check, at least
MAX_GROWTH = 6  # traffic checks that add units before a candidate is declared to miss
CHECK_BUDGET = 1_000_000  # iterations the traffic checks of one plan may simulate (then the rest stay unchecked)


@dataclass(frozen=True)
class Targets:
    """Latency objectives on one percentile of the requests (seconds; None: no bound). `margin`: `estimate` checks
    the simulated latencies; `interval` checks them at the upper edge of their prediction interval and sizes fleets
    on the lower edge of a unit's throughput (the objectives held even where the model is as far off as on the devices
    its bands were measured on, docs/model/intervals.md)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: str = "p90"
    margin: str = "estimate"

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise ServingConfigError("objectives.percentile", f"one of {', '.join(PERCENTILES)}")
        if self.margin not in MARGINS:
            raise ServingConfigError("objectives.margin", f"one of {', '.join(MARGINS)}")


@dataclass(frozen=True)
class Deployment:
    """One candidate unit: `front` serves both phases (aggregated, `back` None) or prefills for `back`'s decode
    workers. `front.replicas` / `back.replicas` are the worker counts in the unit (aggregated: 1)."""

    front: EngineSpec
    back: EngineSpec | None = None

    @property
    def devices(self) -> int:
        return self.front.devices + (self.back.devices if self.back is not None else 0)

    def prepare(self, requests: Requests, build: SurfaceCache) -> ServingRun:
        return prepare(self.front, requests, self.back, build=build)


@dataclass(frozen=True)
class Check:
    """An objective against its prediction: `ratio` = predicted / target (> 1 misses)."""

    objective: str
    target: float
    predicted: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.target


@dataclass(frozen=True)
class Point:
    """A unit's figures under one load."""

    clients: int  # closed loop: clients; traffic check: 0
    requests_per_s: float  # of the unit
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    output_tokens_per_s_per_user: float  # mean over requests of 1 / their TPOT
    ttft_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    preemptions: int
    checks: tuple[Check, ...]
    kv_blocks: tuple[int, ...]  # per engine: aggregated, or prefill and decode
    surface_error: float
    band: ServingBand | None = None  # the prediction interval's factors (None: no interval table)

    @property
    def misses(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.ratio > 1.0)

    @property
    def binding(self) -> Check | None:
        """The objective closest to (or furthest past) its bound."""
        return max(self.checks, key=lambda c: c.ratio, default=None)


@dataclass
class SurfaceCache:
    """Iteration-time surfaces shared by every candidate on the same engine (model, system, parallelism,
    precision), built once at the search's largest token budget, batch and context."""

    tokens: int
    sequences: int
    context: int
    built: dict[tuple[object, ...], tuple[IterationSurface, int, int, int]] = field(default_factory=dict)

    def __call__(
        self, run: InferenceRun, tokens: int, sequences: int, context: int, graph_kernel_s: float | None = None
    ) -> IterationSurface:
        key = (id(run.model), id(run.system), run.parallelism, run.precision, graph_kernel_s)
        have = self.built.get(key)
        if have is not None and tokens <= have[1] and sequences <= have[2] and context <= have[3]:
            return have[0]
        t, s, c = max(tokens, self.tokens), max(sequences, self.sequences), max(context, self.context)
        if have is not None:
            t, s, c = max(t, have[1]), max(s, have[2]), max(c, have[3])
        surface = build_surface(run, t, s, c, graph_kernel_s)
        self.built[key] = (surface, t, s, c)
        return surface


def _check_requests(clients: int) -> int:
    """Requests of one traffic check: three per client, at least `CHECK_REQUESTS`, at most `MAX_CHECK_REQUESTS`."""
    return min(MAX_CHECK_REQUESTS, max(CHECK_REQUESTS, 3 * clients))


def _tokens(scheduler: Scheduler, prompt: int) -> int:
    """Tokens one iteration may run: the budget, or a static batch's whole prompts (as `prepare` sizes it)."""
    return scheduler.max_num_seqs * prompt if scheduler.kind == "static" else scheduler.max_num_batched_tokens


def clients(dep: Deployment) -> int:
    """Clients that fill the unit's decoding engines: `max_num_seqs` per engine (replicas × pipeline virtual
    engines × attention data-parallel ranks)."""
    spec = dep.back if dep.back is not None else dep.front
    par = spec.run.parallelism
    return spec.scheduler.max_num_seqs * spec.replicas * par.pipeline * par.data


def _checks(targets: Targets, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray) -> tuple[Check, ...]:
    q = PERCENTILES[targets.percentile]
    out = []
    for name, values in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e)):
        target = getattr(targets, name)
        if target is not None:
            out.append(Check(name, target, float(np.percentile(values, q)) if values.size else 0.0))
    return tuple(out)


def _steady(n: int, c: int) -> slice:
    """The requests measured: after the first `c` (the engines filling from empty, a closed loop's clients all
    arriving at t = 0) and before the last `c` (a closed loop drains once the last request is sent)."""
    skip = max(0, min(c, (n - MIN_STEADY) // 2))
    return slice(skip, n - skip)


def _point(requests: Requests, trace: Trace, steady: slice, ready: ServingRun, targets: Targets, closed: int) -> Point:
    devices = ready.devices
    out = requests.output[steady].astype(np.float64)
    first, end = np.array(trace.first)[steady], np.array(trace.end)[steady]
    arr = np.array(trace.arrival)[steady]
    ttft, e2e = first - arr, end - arr
    multi = out > 1
    tpot = (end[multi] - first[multi]) / (out[multi] - 1.0)
    # Closed loop without think time, Little's law: X = N / W; open loop: requests served over the span.
    rps = closed / float(e2e.mean()) if closed else out.size / float(arr.max() - arr.min())
    band = band_factors(trace, ready.front, ready.back)
    checks = _checks(targets, ttft, tpot, e2e)
    if targets.margin == "interval" and band is not None:
        # The objectives at the upper edge of the latencies' interval; a closed loop's throughput at its lower
        # edge (what a unit is sized on). An open loop's rate is the traffic's own.
        checks = _checks(targets, ttft * band.ttft[1], tpot * band.tpot[1], e2e * band.e2e[1])
        rps = rps / band.duration[1] if closed else rps
    tokens_per_s = rps * float(out.mean())
    user = 1.0 / tpot[tpot > 0] if tpot.size else np.zeros(0)
    return Point(
        clients=closed, requests_per_s=rps, output_tokens_per_s=tokens_per_s,
        output_tokens_per_s_per_device=tokens_per_s / devices,
        output_tokens_per_s_per_user=float(user.mean()) if user.size else 0.0,
        ttft_s=Distribution.of(ttft), tpot_s=Distribution.of(tpot), e2e_s=Distribution.of(e2e),
        preemptions=trace.preemptions, checks=checks, kv_blocks=ready.kv_blocks,
        surface_error=ready.surface_error, band=band,
    )  # fmt: skip


def _lengths(prompt: IntArray, output: IntArray, n: int) -> tuple[IntArray, IntArray]:
    """The first `n` requests of the traffic's lengths, repeated as often as needed."""
    reps = -(-n // prompt.size)
    return np.tile(prompt, reps)[:n], np.tile(output, reps)[:n]


def _take(sample: Requests | None, prompt: IntArray, output: IntArray, n: int, arrival: np.ndarray | None,
          c: int) -> Requests:  # fmt: skip
    """The first `n` requests of the traffic: its lengths repeated as often as needed, or (`sample`: requests that
    share prefixes, in an order a planner replays them) its requests with their hash chains, each repetition's
    hashes new (a repeated request finds nothing a first pass cached)."""
    adapter, rank = None, 0
    if sample is not None and sample.adapter is not None:  # LoRA: each request keeps its adapter
        adapter, rank = np.tile(sample.adapter, -(-n // sample.count))[:n], sample.adapter_rank
    if sample is None or sample.hashes is None or sample.hash_starts is None:
        p, o = _lengths(prompt, output, n)
        return Requests(p, o, arrival, c, adapter=adapter, adapter_rank=rank)
    reps = -(-n // sample.count)
    idx = np.tile(np.arange(sample.count), reps)[:n]
    rep = np.repeat(np.arange(reps), sample.count)[:n]
    counts = np.diff(sample.hash_starts)[idx]
    starts = np.zeros(n + 1, dtype=np.int64)
    starts[1:] = np.cumsum(counts)
    span = int(sample.hashes.max()) + 1 if sample.hashes.size else 1
    pieces = [sample.hashes[sample.hash_starts[i] : sample.hash_starts[i + 1]] + r * span
              for i, r in zip(idx.tolist(), rep.tolist(), strict=True)]  # fmt: skip
    hashes = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return Requests(sample.prompt[idx], sample.output[idx], arrival, c, hashes, starts, sample.hash_block,
                    adapter=adapter, adapter_rank=rank)  # fmt: skip


def operating_point(
    dep: Deployment, prompt: IntArray, output: IntArray, targets: Targets, build: SurfaceCache,
    should_stop: StopCheck = never, sample: Requests | None = None,
) -> Point:  # fmt: skip
    """The unit under a closed loop that fills its decoding engines (its most throughput at its own batch)."""
    c = clients(dep)
    n = 2 * c + MIN_STEADY
    requests = _take(sample, prompt, output, n, None, c)
    ready = dep.prepare(requests, build)
    trace = simulate(requests, ready.front, ready.back, transfer_function(ready), should_stop=should_stop)
    return _point(requests, trace, _steady(n, c), ready, targets, c)


def traffic_point(
    dep: Deployment, prompt: IntArray, output: IntArray, targets: Targets, build: SurfaceCache,
    rate_per_s: float, seed: int, should_stop: StopCheck = never, sample: Requests | None = None,
) -> Point:  # fmt: skip
    """One unit under its share of the traffic, Poisson arrivals at `rate_per_s`; the first `clients` requests
    (the engines filling from empty) are left out."""
    c = clients(dep)
    n = _check_requests(c)
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    arrival -= arrival[0]
    requests = _take(sample, prompt, output, n, arrival, 0)
    ready = dep.prepare(requests, build)
    trace = simulate(requests, ready.front, ready.back, transfer_function(ready), should_stop=should_stop)
    return _point(requests, trace, _steady(n, c), ready, targets, 0)


@dataclass(frozen=True)
class Sized:
    """A candidate sized for the traffic: `units` of it, and (once checked) its figures under the traffic."""

    units: int
    devices: int
    utilisation: float  # demand / (units × the unit's closed-loop throughput)
    at_traffic: Point | None = None
    iterations: int = 0  # the traffic checks' simulated iterations, about: requests × (⌈prompt / budget⌉ + 2)


def size(dep: Deployment, point: Point, demand_rps: float, fleet_limit: int | None = None) -> Sized:
    """⌈demand / X⌉ units. Raises `ServingConfigError` (field `traffic`) when they would hold more than `fleet_limit`
    devices: such a fleet is no answer, and its count need not fit an integer a JSON reader takes."""
    need = demand_rps / point.requests_per_s if point.requests_per_s > 0 else math.inf
    if fleet_limit is not None and not (need < fleet_limit + 1 and math.ceil(need - 1e-9) * dep.devices <= fleet_limit):
        raise ServingConfigError(
            "traffic",
            f"the traffic needs {need:.4g} units of {dep.devices} devices, more than the {fleet_limit} devices a "
            "fleet may have",
        )
    units = max(1, math.ceil(need - 1e-9))
    return Sized(units, units * dep.devices, demand_rps / (units * point.requests_per_s))


def check_at_traffic(
    dep: Deployment, point: Point, sized: Sized, prompt: IntArray, output: IntArray, targets: Targets,
    build: SurfaceCache, demand_rps: float, seed: int, fleet_limit: int | None = None, should_stop: StopCheck = never,
    sample: Requests | None = None,
) -> Sized:  # fmt: skip
    """Simulate one unit's share of the traffic; while it misses, add units (10 % at a time, at least one), as long
    as the fleet stays within `fleet_limit` devices."""
    units = sized.units
    at = traffic_point(dep, prompt, output, targets, build, demand_rps / units, seed, should_stop, sample)
    runs = 1
    for _ in range(MAX_GROWTH):
        grown = units + max(1, math.ceil(0.1 * units))
        if not at.misses or (fleet_limit is not None and grown * dep.devices > fleet_limit):
            break
        units = grown
        at = traffic_point(dep, prompt, output, targets, build, demand_rps / units, seed, should_stop, sample)
        runs += 1
    n = _check_requests(clients(dep))
    chunks = -(-int(prompt.max()) // dep.front.scheduler.max_num_batched_tokens) + 2
    return Sized(units, units * dep.devices, demand_rps / (units * point.requests_per_s), at, runs * n * chunks)


def pareto(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (per user, per device: more is better), in order of
    per-user speed."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


@dataclass(frozen=True)
class Entry:
    """A candidate that runs: its operating point and its fleet."""

    index: int  # position in the candidates given
    deployment: Deployment
    point: Point
    sized: Sized
    price_per_device_hour: float | None
    max_devices: int | None = None

    @property
    def cost_per_hour(self) -> float | None:
        p = self.price_per_device_hour
        return None if p is None else p * self.sized.devices

    @property
    def checks(self) -> tuple[Check, ...]:
        """The objectives under the traffic once checked (else at the operating point), and the fleet's size."""
        at = self.sized.at_traffic or self.point
        limit = () if self.max_devices is None else (Check("devices", self.max_devices, self.sized.devices),)
        return at.checks + limit

    @property
    def misses(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.ratio > 1.0)

    @property
    def meets(self) -> bool:
        return self.sized.at_traffic is not None and not self.misses

    @property
    def worst(self) -> float:
        """How far the candidate misses: the largest predicted / target ratio (≤ 1 meets)."""
        return max((c.ratio for c in self.checks), default=0.0)


@dataclass(frozen=True)
class ServingPlan:
    """`feasible`: the candidates that meet the objectives under the traffic, best first; `closest`: when none
    does, those that miss by least. `entries` every candidate that runs, `frontier` the indices (into `entries`) of
    its Pareto frontier; `invalid` (candidate index, field, reason) for those that cannot run."""

    feasible: tuple[Entry, ...]
    closest: tuple[Entry, ...]
    entries: tuple[Entry, ...]
    frontier: tuple[int, ...]
    invalid: tuple[tuple[int, str, str], ...]
    checked: int  # candidates simulated under the traffic
    ranked_by: str  # "cost" or "devices"
    pruned: int = 0  # not simulated: the same engines with a smaller batch already miss the TPOT objective
    unfinished: int = 0  # not simulated: `should_stop` answered true first
    stopped: bool = False  # `should_stop` answered true: candidates unfinished, or traffic checks left undone
