"""The planner's search over candidate deployments, in two steps that a caller may run apart: `evaluate` (the
operating point and fleet of each candidate of a group of engine families; groups are independent of each other)
and `reduce` (the groups' entries merged, the best checked under the traffic and ranked). `plan_serving` runs both
in one process; the service's jobs run `evaluate` on chunks of `families` in other processes and `reduce` on their
parts, and get the same plan bit for bit, since neither step depends on what another group evaluated: the surfaces
are built at the search's own largest budget, batch and context (`surface_cache`), and pruning only ever looks at a
candidate's own family. Both steps take the traffic's shared requests (`sample`: prefixes, sessions), which every
simulation replays, and a `should_stop` (`roofline._stop`): a synchronous plan stops at its request's time and ranks
what it has (`unfinished`, `stopped`); a job's pieces run to the end (`never`), a cancelled job's tasks being killed."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace

from roofline._stop import StopCheck, Stopped, never
from roofline.serving._config import IntArray, Requests
from roofline.serving._deploy import EngineSpec
from roofline.serving._plan import (
    CHECK_BUDGET,
    Deployment,
    Entry,
    ServingPlan,
    SurfaceCache,
    Targets,
    _tokens,
    check_at_traffic,
    operating_point,
    pareto,
    size,
)


def _decoder(dep: Deployment) -> EngineSpec:
    return dep.back if dep.back is not None else dep.front


def _family(dep: Deployment) -> tuple[object, ...]:
    """Everything about a candidate but its decoding engines' batch (`max_num_seqs`)."""
    parts: list[object] = []
    for spec in (dep.front, dep.back):
        if spec is None:
            continue
        run = spec.run
        sched = spec.scheduler
        if spec is _decoder(dep):
            sched = replace(sched, max_num_seqs=0)
        parts += [id(run.model), id(run.system), run.parallelism, run.precision, sched, spec.replicas,
                  spec.memory_fraction]  # fmt: skip
    return tuple(parts)


def _batch(dep: Deployment) -> int:
    return _decoder(dep).scheduler.max_num_seqs


def surface_cache(candidates: Sequence[Deployment], prompt: IntArray, output: IntArray) -> SurfaceCache:
    """An empty cache of iteration-time surfaces sized for the whole search: its largest token budget, batch and
    context (every process that evaluates part of the search builds the same surfaces)."""
    longest = int((prompt + output).max())
    specs = [s for d in candidates for s in (d.front, d.back) if s is not None]
    tokens = max((_tokens(s.scheduler, int(prompt.max())) for s in specs), default=1)
    return SurfaceCache(tokens, max((s.scheduler.max_num_seqs for s in specs), default=1), longest)


def _engine(dep: Deployment) -> tuple[object, ...]:
    """What a candidate's iteration-time surfaces depend on (`SurfaceCache`'s key, of each engine it runs)."""
    return tuple(
        (id(s.run.model), id(s.run.system), s.run.parallelism, s.run.precision)
        for s in (dep.front, dep.back)
        if s is not None
    )


def families(candidates: Sequence[Deployment]) -> list[list[int]]:
    """The candidates' indices grouped by engine family (all but the decoding batch), each group smallest batch
    first: the units `evaluate` may be given apart. Groups on the same engines come together (in order of their
    engines' first candidate), so that contiguous groups share their surfaces."""
    order = sorted(range(len(candidates)), key=lambda i: _batch(candidates[i]))
    groups: dict[tuple[object, ...], list[int]] = {}
    for i in order:
        groups.setdefault(_family(candidates[i]), []).append(i)
    first: dict[tuple[object, ...], int] = {}
    for i, dep in enumerate(candidates):
        first.setdefault(_engine(dep), i)
    return sorted(groups.values(), key=lambda g: (first[_engine(candidates[g[0]])], min(g)))


@dataclass(frozen=True)
class Evaluated:
    """What `evaluate` found for its candidates: their entries, the invalid (index, field, reason), how many it
    pruned or left unfinished, and whether `should_stop` answered true (`stopped`)."""

    entries: tuple[Entry, ...]
    invalid: tuple[tuple[int, str, str], ...]
    pruned: int = 0
    unfinished: int = 0
    stopped: bool = False


def evaluate(
    items: Sequence[tuple[int, Deployment, float | None]], prompt: IntArray, output: IntArray, targets: Targets,
    demand_rps: float, build: SurfaceCache, max_devices: int | None = None, fleet_limit: int | None = None,
    should_stop: StopCheck = never, sample: Requests | None = None,
) -> Evaluated:  # fmt: skip
    """The operating point and fleet of each (index, candidate, price) in `items`, in the order given (a family's
    smallest batch first: once an engine misses the TPOT objective at a batch, its larger batches are pruned).
    `should_stop` is asked before each candidate and inside its simulations: once it answers true, the candidate
    being simulated and those not yet are `unfinished`. `sample`: the traffic's requests when they share prefixes
    (`prompt` and `output` are then its lengths), replayed in order by every simulation."""
    entries: list[Entry] = []
    invalid: list[tuple[int, str, str]] = []
    slow: set[tuple[object, ...]] = set()  # engines whose smaller batch already misses the TPOT objective
    pruned = late = 0
    stopped = False
    for i, dep, price in items:
        if stopped or should_stop():
            late, stopped = late + 1, True
            continue
        family = _family(dep)
        if family in slow:
            pruned += 1
            continue
        try:
            point = operating_point(dep, prompt, output, targets, build, should_stop, sample)
            if any(c.objective == "tpot_s" and c.ratio > 1.0 for c in point.checks):
                slow.add(family)
            sized = size(dep, point, demand_rps, fleet_limit)
        except ValueError as err:
            invalid.append((i, getattr(err, "field", "parallelism"), getattr(err, "message", str(err))))
            continue
        except Stopped:
            late, stopped = late + 1, True
            continue
        entries.append(Entry(i, dep, point, sized, price, max_devices))
    return Evaluated(tuple(entries), tuple(invalid), pruned, late, stopped)


def reduce(
    parts: Sequence[Evaluated], priced: bool, prompt: IntArray, output: IntArray, targets: Targets,
    demand_rps: float, build: SurfaceCache, max_results: int = 10, seed: int = 0, fleet_limit: int | None = None,
    should_stop: StopCheck = never, sample: Requests | None = None,
) -> ServingPlan:  # fmt: skip
    """The parts merged (entries in candidate order), the best checked under the traffic (best-first: a check only
    adds units, so an unchecked candidate's rank is a bound) and ranked by cost per hour (`priced`: every candidate
    has a price) or devices. `should_stop` is asked before each traffic check and inside its simulations; once it
    answers true (or a part was stopped) no more are checked and the plan ranks what it has (`stopped`)."""
    entries = sorted((e for p in parts for e in p.entries), key=lambda e: e.index)
    invalid = sorted(x for p in parts for x in p.invalid)
    stopped = any(p.stopped for p in parts)

    def key(e: Entry) -> tuple[float, ...]:
        first = e.cost_per_hour if priced and e.cost_per_hour is not None else float(e.sized.devices)
        return (first, float(e.sized.devices), -e.point.output_tokens_per_s_per_device, float(e.index))

    # Best-first over the candidates that meet at their operating point.
    heap = [(key(e), False, n, e) for n, e in enumerate(entries) if not e.misses]
    heapq.heapify(heap)
    feasible: list[Entry] = []
    checked = simulated = 0
    budget = 2 * max_results + 8
    while heap and len(feasible) < max_results and checked < budget and simulated < CHECK_BUDGET:
        _, done, n, e = heapq.heappop(heap)
        if done:
            feasible.append(e)
            continue
        try:
            if stopped or should_stop():
                raise Stopped("before a traffic check")
            sized = check_at_traffic(e.deployment, e.point, e.sized, prompt, output, targets, build, demand_rps,
                                     seed, fleet_limit, should_stop, sample)  # fmt: skip
        except Stopped:
            stopped = True
            break
        checked += 1
        simulated += sized.iterations
        e = replace(e, sized=sized)
        entries[n] = e
        if e.meets:
            heapq.heappush(heap, (key(e), True, n, e))
    while stopped and heap and heap[0][1] and len(feasible) < max_results:  # checked, and ahead of every bound
        feasible.append(heapq.heappop(heap)[3])
    closest: list[Entry] = []
    if not feasible:
        closest = sorted(entries, key=lambda e: (e.worst, key(e)))[:max_results]
    points = [(e.point.output_tokens_per_s_per_user, e.point.output_tokens_per_s_per_device) for e in entries]
    return ServingPlan(
        tuple(feasible), tuple(closest), tuple(entries), tuple(pareto(points)), tuple(invalid), checked,
        "cost" if priced else "devices", sum(p.pruned for p in parts), sum(p.unfinished for p in parts), stopped,
    )  # fmt: skip


def plan_serving(
    candidates: Sequence[Deployment], prices: Sequence[float | None], prompt: IntArray, output: IntArray,
    targets: Targets, demand_rps: float, max_results: int = 10, seed: int = 0, max_devices: int | None = None,
    fleet_limit: int | None = None, should_stop: StopCheck = never, sample: Requests | None = None,
) -> ServingPlan:  # fmt: skip
    """Evaluate every candidate's operating point, size each for `demand_rps` requests per second, check the best
    under the traffic, and rank those that meet by cost per hour (when every candidate has a price) or devices
    (`evaluate`, then `reduce`, in this process). Candidates run smallest batch first; once an engine misses the TPOT
    objective at a batch, its larger batches (more clients, each iteration longer) are not simulated and are counted
    as `pruned`. A candidate whose fleet would hold more than `fleet_limit` devices is invalid (field `traffic`).
    `should_stop` is asked before each candidate, before each traffic check and inside their simulations: once it
    answers true, the candidate being simulated and those not yet are `unfinished`, no more are checked under the
    traffic, and the plan ranks what it has (`stopped`). `sample`: the traffic's requests when they share prefixes
    (with their hash chains; `prompt` and `output` are then its lengths), replayed in order by every simulation."""
    build = surface_cache(candidates, prompt, output)
    order = sorted(range(len(candidates)), key=lambda i: _batch(candidates[i]))
    items = [(i, candidates[i], prices[i]) for i in order]
    part = evaluate(items, prompt, output, targets, demand_rps, build, max_devices, fleet_limit, should_stop, sample)
    priced = all(p is not None for p in prices)
    return reduce([part], priced, prompt, output, targets, demand_rps, build, max_results, seed, fleet_limit,
                  should_stop, sample)  # fmt: skip
