"""The serving planner: operating points and fleets worked by hand on flat surfaces (every iteration a fixed time),
the best-first search against a brute-force one, the TPOT pruning against the pruned candidates simulated, the
Pareto frontier by hand; and the simulator's one-token answers."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

import roofline
from roofline.inference import InferenceRun, Parallelism, Workload
from roofline.serving import (
    Deployment,
    EngineSpec,
    Pool,
    Requests,
    Scheduler,
    ServingConfigError,
    SurfaceCache,
    Targets,
    check_at_traffic,
    evaluate,
    families,
    operating_point,
    pareto,
    plan_serving,
    reduce,
    simulate,
    size,
    surface_cache,
)
from roofline.serving import requests as draw
from tests.roofline.models import LLAMA_3_8B
from tests.roofline.profiles import system

MS = 1e-3
H100 = system("h100-sxm")


def run(tensor: int = 1) -> InferenceRun:
    return InferenceRun(LLAMA_3_8B, H100, Workload.uniform(1, 1, 1), Parallelism(tensor=tensor))


class Flat(SurfaceCache):
    """Every iteration takes `ms_per_tensor[tensor]` milliseconds, whatever its mix."""

    def __init__(self, ms: dict[int, float]) -> None:
        super().__init__(1, 1, 1)
        self.ms = ms

    def __call__(
        self, r: InferenceRun, tokens: int, sequences: int, context: int, graph_kernel_s: float | None = None
    ) -> roofline.serving.IterationSurface:
        return roofline.serving.IterationSurface.flat(self.ms[r.parallelism.tensor] * MS)


def engine(tensor: int = 1, seqs: int = 4, **kw: int | str) -> EngineSpec:
    sched = Scheduler(kind="chunked", max_num_seqs=seqs, kv_blocks=100_000, block_size=1, **kw)  # type: ignore[arg-type]
    return EngineSpec(run(tensor), sched)


PROMPT, OUTPUT = np.array([10]), np.array([5])


def test_operating_point_by_hand() -> None:
    # 4 clients, prompts of 10, answers of 5, 1 ms an iteration: each wave prefills together (1 ms, first tokens)
    # and decodes 4 more (5 ms end to end); the next wave arrives as the last ends. Little: X = 4 / 5 ms = 800/s;
    # 800 × 5 = 4 000 tokens/s on one device; a user sees 1 token per ms.
    point = operating_point(
        Deployment(engine()), PROMPT, OUTPUT, Targets(ttft_s=2 * MS, tpot_s=0.5 * MS), Flat({1: 1.0})
    )
    assert point.clients == 4
    assert point.requests_per_s == pytest.approx(800.0)
    assert point.output_tokens_per_s == pytest.approx(4000.0)
    assert point.output_tokens_per_s_per_device == pytest.approx(4000.0)
    assert point.output_tokens_per_s_per_user == pytest.approx(1000.0)
    assert point.ttft_s.p90 == pytest.approx(MS) and point.tpot_s.p90 == pytest.approx(MS)
    # TTFT 1 ms of 2 ms: ratio 0.5; TPOT 1 ms of 0.5 ms: ratio 2, a miss, and it binds.
    assert [c.objective for c in point.checks] == ["ttft_s", "tpot_s"]
    assert [c.ratio for c in point.checks] == pytest.approx([0.5, 2.0])
    assert [c.objective for c in point.misses] == ["tpot_s"] and point.binding is not None
    assert point.binding.objective == "tpot_s"


def test_a_fleet_is_the_ceiling_of_demand_over_a_unit() -> None:
    dep = Deployment(engine())
    point = operating_point(dep, PROMPT, OUTPUT, Targets(), Flat({1: 1.0}))
    sized = size(dep, point, 2000.0)  # 2 000 / 800 = 2.5 → 3 units
    assert (sized.units, sized.devices) == (3, 3)
    assert sized.utilisation == pytest.approx(2000.0 / 2400.0)
    assert size(dep, point, 1600.0).units == 2  # exactly two units' worth needs no third


def test_a_fleet_past_the_limit_is_refused_naming_the_traffic() -> None:
    # 800/s a unit of one device: 2²⁰ units hold 1 048 576 devices, one more request per second needs a 1 048 577th.
    dep = Deployment(engine())
    point = operating_point(dep, PROMPT, OUTPUT, Targets(), Flat({1: 1.0}))
    limit = 1 << 20
    assert size(dep, point, 800.0 * limit, limit).devices == limit
    with pytest.raises(ServingConfigError, match="more than the 1048576 devices") as err:
        size(dep, point, 800.0 * limit + 800.0, limit)
    assert err.value.field == "traffic"
    with pytest.raises(ServingConfigError):  # 10²⁴ requests/s: no integer count of units is asked for
        size(dep, point, 1e24, limit)


def test_disaggregated_units_count_both_pools() -> None:
    # 1 prefill worker (TP2) feeding 2 decode workers (TP1) of 4 sequences each: 8 clients, 2 + 2 = 4 devices.
    dep = Deployment(EngineSpec(run(2), engine(2).scheduler, 1), EngineSpec(run(1), engine(1).scheduler, 2))
    assert dep.devices == 4
    point = operating_point(dep, PROMPT, OUTPUT, Targets(), Flat({1: 1.0, 2: 1.0}))
    assert point.clients == 8


def test_the_traffic_check_adds_units_until_the_objective_holds() -> None:
    # A unit serves 800/s at its full batch. At 1 600/s over 2 units (utilisation 1) Poisson arrivals queue; a p90
    # TTFT of 3 ms then needs more units, added 10 % (at least one) at a time, and the checked fleet meets it.
    dep = Deployment(engine())
    targets = Targets(ttft_s=3 * MS)
    cache = Flat({1: 1.0})
    point = operating_point(dep, PROMPT, OUTPUT, targets, cache)
    sized = check_at_traffic(dep, point, size(dep, point, 1600.0), PROMPT, OUTPUT, targets, cache, 1600.0, seed=0)
    assert sized.units > 2
    assert sized.at_traffic is not None and not sized.at_traffic.misses
    assert sized.utilisation == pytest.approx(1600.0 / (sized.units * 800.0))


def _brute_force(deps: list[Deployment], prices: list[float], targets: Targets, demand: float) -> list[float]:
    cache = SurfaceCache(8192, 256, 3000)
    costs = []
    for dep, price in zip(deps, prices, strict=True):
        point = operating_point(dep, np.array([2048]), np.array([256]), targets, cache)
        if point.misses:
            continue
        s = size(dep, point, demand)
        s = check_at_traffic(dep, point, s, np.array([2048]), np.array([256]), targets, cache, demand, 0)
        if s.at_traffic is not None and not s.at_traffic.misses:
            costs.append(price * s.devices)
    return sorted(costs)


def test_best_first_equals_a_brute_force_search() -> None:
    deps = [Deployment(EngineSpec(run(t), Scheduler(kind="chunked", max_num_seqs=s))) for t in (1, 2)
            for s in (16, 64, 128)]  # fmt: skip
    prices = [2.0] * len(deps)
    targets = Targets(ttft_s=0.5, tpot_s=0.02)
    plan = plan_serving(deps, prices, np.array([2048]), np.array([256]), targets, 30.0, max_results=3)
    assert plan.ranked_by == "cost" and plan.feasible
    costs = [float(e.cost_per_hour or 0.0) for e in plan.feasible]
    assert costs == sorted(costs)
    assert costs == _brute_force(deps, prices, targets, 30.0)[: len(costs)]
    for e in plan.feasible:
        assert e.meets and e.sized.at_traffic is not None
        assert e.sized.at_traffic.ttft_s.p90 <= 0.5 and e.sized.at_traffic.tpot_s.p90 <= 0.02


def test_tpot_pruning_skips_only_batches_that_miss() -> None:
    # Llama 3 8B on one H100: TPOT grows with the batch. Those pruned, simulated on their own, miss too.
    seqs = (8, 32, 128, 512)
    deps = [Deployment(EngineSpec(run(1), Scheduler(kind="chunked", max_num_seqs=s))) for s in seqs]
    targets = Targets(tpot_s=0.012)
    plan = plan_serving(deps, [None] * 4, np.array([1024]), np.array([128]), targets, 5.0)
    assert plan.pruned >= 1 and len(plan.entries) + plan.pruned == 4
    simulated = {e.index for e in plan.entries}
    cache = SurfaceCache(8192, 512, 1152)
    for i in set(range(4)) - simulated:
        assert operating_point(deps[i], np.array([1024]), np.array([128]), targets, cache).misses
    assert plan.ranked_by == "devices"


def test_pareto_frontier_by_hand() -> None:
    # (per user, per device): (3, 1) is fastest per user; (2, 4.5) beats (2, 4); (1, 5) has the most per device;
    # (0.5, 3) is beaten by (1, 5).
    points = [(1.0, 5.0), (2.0, 4.0), (0.5, 3.0), (2.0, 4.5), (3.0, 1.0)]
    assert pareto(points) == [4, 3, 0]


def test_percentiles_are_p50_p90_or_p99() -> None:
    with pytest.raises(ValueError, match=r"objectives\.percentile"):
        Targets(percentile="p95")


def flat_pool(ms: float = 1.0, **kw: int | str) -> Pool:
    sched = Scheduler(kind="continuous", kv_blocks=10_000, block_size=1, **kw)  # type: ignore[arg-type]
    return Pool(roofline.serving.IterationSurface.flat(ms * MS), sched)


def test_a_one_token_answer_ends_with_its_prompt() -> None:
    # One client: the first answer is one token, ready with the prompt at 1 ms; the client's next request starts
    # then (first token 2 ms, second at 3 ms). Before the fix the first never ended and the loop lost its client.
    tr = simulate(Requests(np.array([4, 4]), np.array([1, 2]), None, 1), flat_pool())
    assert tr.end == pytest.approx([1 * MS, 3 * MS])
    # Disaggregated: a one-token answer never goes to a decode worker.
    req = Requests(np.array([4, 4]), np.array([1, 3]), np.array([0.0, 0.0]), 0)
    tr = simulate(req, flat_pool(), flat_pool(), lambda prompt: 0.0)
    assert tr.first == pytest.approx([1 * MS, 1 * MS])
    assert tr.end[0] == pytest.approx(1 * MS)
    assert math.isfinite(tr.end[1]) and tr.end[1] > 1 * MS


class Calls:
    """A `should_stop` that answers true from call `stop_at` on."""

    def __init__(self, stop_at: float = math.inf) -> None:
        self.calls = 0
        self.stop_at = stop_at

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.stop_at


def test_a_stopped_plan_ranks_what_it_simulated_and_counts_the_rest_unfinished() -> None:
    # Six candidates (tensor 1 or 2 × batch 2, 4, 8) of Llama 3 8B on an H100. Asked and never told to stop, the
    # plan is the one without the question; told to stop at the n-th question (n from 1 to all of them), it says it
    # stopped, every candidate is simulated, pruned or unfinished, and the later the stop the more it simulated.
    deps = [Deployment(engine(t, s)) for t in (1, 2) for s in (2, 4, 8)]
    targets = Targets(ttft_s=1.0)
    asked = Calls()
    full = plan_serving(deps, [None] * 6, PROMPT, OUTPUT, targets, 100.0, should_stop=asked)
    assert (full.unfinished, full.stopped) == (0, False)
    plain = plan_serving(deps, [None] * 6, PROMPT, OUTPUT, targets, 100.0)
    assert [(e.index, e.sized.devices) for e in full.feasible] == [(e.index, e.sized.devices) for e in plain.feasible]
    assert len(full.entries) == len(plain.entries) and full.checked == plain.checked
    nothing = plan_serving(deps, [None] * 6, PROMPT, OUTPUT, targets, 100.0, should_stop=lambda: True)
    assert (nothing.unfinished, nothing.entries, nothing.feasible, nothing.stopped) == (6, (), (), True)
    done = []
    for n in sorted({*range(1, asked.calls + 1, max(1, asked.calls // 8)), asked.calls}):
        part = plan_serving(deps, [None] * 6, PROMPT, OUTPUT, targets, 100.0, should_stop=Calls(n))
        assert part.stopped
        assert len(part.entries) + part.pruned + part.unfinished + len(part.invalid) == 6
        assert all(e.meets for e in part.feasible)
        done.append(len(part.entries))
    assert done == sorted(done) and done[-1] == len(full.entries)


def test_a_search_split_by_family_and_reduced_is_the_same_plan() -> None:
    # What the service's jobs do: the families evaluated apart, each in its own copy of the candidates (as a process
    # that unpickled them holds them) and its own surface cache, then reduced in yet another: the same plan as
    # `plan_serving` in one process, bit for bit (the dataclasses compare every float exactly). Two tensor widths and
    # two budgets × four batches: 4 families of 4; a TPOT target that prunes some of each family's larger batches.
    deps = [Deployment(EngineSpec(run(t), Scheduler(kind="chunked", max_num_seqs=s, max_num_batched_tokens=b)))
            for t in (1, 2) for b in (512, 2048) for s in (128, 8, 512, 32)]  # fmt: skip
    prices = [2.0 * t for t in (1, 2) for _ in range(8)]
    prompt, output, targets = np.array([1024, 300]), np.array([128, 40]), Targets(ttft_s=1.0, tpot_s=0.012)
    whole = plan_serving(deps, prices, prompt, output, targets, 20.0, max_results=3, seed=7)
    groups = families(deps)
    assert sorted(len(g) for g in groups) == [4, 4, 4, 4] and sorted(i for g in groups for i in g) == list(range(16))
    parts = []
    for chunk in (groups[:1], groups[1:]):
        items = pickle.loads(pickle.dumps([(i, deps[i], prices[i]) for g in chunk for i in g]))
        parts.append(evaluate(items, prompt, output, targets, 20.0, surface_cache(deps, prompt, output)))
    parts = pickle.loads(pickle.dumps(parts))
    split = reduce(parts, True, prompt, output, targets, 20.0, surface_cache(deps, prompt, output), 3, 7)
    assert whole.pruned > 0 and whole.feasible
    for name in ("feasible", "closest", "entries"):
        assert [(e.index, e.point, e.sized, e.price_per_device_hour) for e in getattr(split, name)] == [
            (e.index, e.point, e.sized, e.price_per_device_hour) for e in getattr(whole, name)
        ]
    assert (split.frontier, split.invalid, split.checked, split.pruned, split.unfinished) == (
        whole.frontier, whole.invalid, whole.checked, whole.pruned, whole.unfinished,
    )  # fmt: skip


def test_a_split_search_of_traffic_that_shares_prefixes_is_the_same_plan() -> None:
    # A job's pieces carry the traffic's shared requests (`sample`, with their hash chains) as the synchronous plan
    # does: 600 requests of four groups sharing a 1 000-token prefix (blocks of 32), engines with prefix caching;
    # two tensor widths × three batches, evaluated per family in pickled copies and reduced apart, are the plan of one
    # process bit for bit, and caching made it differ from the same lengths without their chains (hits are cheaper).
    rng = np.random.default_rng(3)
    new = draw.lengths(rng, 600, "lognormal", "prompt", mean=300, std=150)
    out = draw.lengths(rng, 600, "lognormal", "output", mean=100, std=50)
    group = draw.group_of(rng, 600, 4, "zipf", 1.2)
    prompt, hashes, starts = draw.sharing(new, out, 32, prefix_tokens=1000, group=group)
    sample = Requests(prompt, out, None, 0, hashes, starts, 32)
    sched = {s: Scheduler(kind="chunked", max_num_seqs=s, block_size=32, prefix_caching=True) for s in (8, 32, 128)}
    deps = [Deployment(EngineSpec(run(t), sched[s])) for t in (1, 2) for s in (32, 8, 128)]
    prices = [2.0 * t for t in (1, 2) for _ in range(3)]
    targets = Targets(ttft_s=1.0, tpot_s=0.05)
    whole = plan_serving(deps, prices, prompt, out, targets, 20.0, max_results=3, seed=7, sample=sample)
    plain = plan_serving(deps, prices, prompt, out, targets, 20.0, max_results=3, seed=7)
    assert whole.feasible and whole.checked > 0
    assert [e.point for e in whole.entries] != [e.point for e in plain.entries]
    parts = []
    for g in families(deps):
        items = pickle.loads(pickle.dumps([(i, deps[i], prices[i]) for i in g]))
        mine = pickle.loads(pickle.dumps(sample))
        parts.append(evaluate(items, prompt, out, targets, 20.0, surface_cache(deps, prompt, out), sample=mine))
    split = reduce(pickle.loads(pickle.dumps(parts)), True, prompt, out, targets, 20.0,
                   surface_cache(deps, prompt, out), 3, 7, sample=sample)  # fmt: skip
    for name in ("feasible", "closest", "entries"):
        assert [(e.index, e.point, e.sized) for e in getattr(split, name)] == [
            (e.index, e.point, e.sized) for e in getattr(whole, name)
        ]
    assert (split.frontier, split.checked, split.pruned, split.unfinished, split.stopped) == (
        whole.frontier, whole.checked, whole.pruned, whole.unfinished, False,
    )  # fmt: skip


def test_a_stopped_piece_makes_the_reduced_plan_stopped() -> None:
    # A piece whose `should_stop` answered true at once left its 3 candidates unfinished; the reduction then checks
    # nothing under the traffic (as the synchronous plan stops its checks) and says it stopped.
    deps = [Deployment(engine(t, s)) for t in (1, 2) for s in (2, 4, 8)]
    targets = Targets(ttft_s=1.0)
    build = surface_cache(deps, PROMPT, OUTPUT)
    first = evaluate([(i, deps[i], None) for i in range(3)], PROMPT, OUTPUT, targets, 100.0, build)
    second = evaluate([(i, deps[i], None) for i in range(3, 6)], PROMPT, OUTPUT, targets, 100.0, build,
                      should_stop=lambda: True)  # fmt: skip
    assert (first.stopped, second.stopped, second.unfinished, second.entries) == (False, True, 3, ())
    plan = reduce([first, second], False, PROMPT, OUTPUT, targets, 100.0, build)
    assert (plan.stopped, plan.unfinished, plan.checked, plan.feasible) == (True, 3, 0, ())
    assert [e.index for e in plan.entries] == [0, 1, 2]
