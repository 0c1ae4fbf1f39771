"""The serving simulator: schedules followed by hand on a flat surface (every iteration 1 ms), then properties
that must hold on the real surface (Little's law, the token budget, seeds, the static run of one request,
disaggregation over an infinitely fast fabric)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import roofline
from roofline.inference import InferenceRun, Parallelism, Workload, estimate_inference
from roofline.serving import (
    EngineSpec,
    Objectives,
    Pool,
    Requests,
    Scheduler,
    ServingConfigError,
    Speculation,
    estimate_serving,
    simulate,
)
from roofline.serving import requests as draw
from tests.roofline.models import LLAMA_3_8B
from tests.roofline.profiles import system

MS = 1e-3


def flat(kind: str, **kw: int | str) -> Pool:
    sched = Scheduler(kind=kind, kv_blocks=int(kw.pop("kv_blocks", 10_000)), block_size=1, **kw)  # type: ignore[arg-type]
    return Pool(roofline.serving.IterationSurface.flat(MS), sched)


def closed(prompt: list[int], output: list[int], concurrency: int) -> Requests:
    return Requests(np.array(prompt), np.array(output), None, concurrency)


def test_continuous_batching_by_hand() -> None:
    # Two clients, prompts of 10, outputs of 5 and 3. Iteration 1 prefills both (20 tokens ≤ budget): both first
    # tokens at 1 ms. Iterations 2-3 decode both; request 1 has its 3 tokens at 3 ms. Iterations 4-5 decode request
    # 0 alone: its 5th token at 5 ms.
    tr = simulate(closed([10, 10], [5, 3], 2), flat("continuous"))
    assert tr.first == pytest.approx([1 * MS, 1 * MS])
    assert tr.end == pytest.approx([5 * MS, 3 * MS])
    assert tr.iterations == 5


def test_pure_decode_iterations_read_their_batch_size_s_row() -> None:
    # A flat surface given a CUDA-graph decode body (1 ms whatever the batch) takes the simulator's hot path: each
    # pure-decode iteration is read from its batch size's row (body 1 ms, attention 0 at every context). The
    # schedule is the hand-worked one above: first tokens at 1 ms, ends at 5 and 3 ms, 5 iterations.
    base = roofline.serving.IterationSurface.flat(MS)
    surface = replace(base, decode_body=base.body)
    assert surface.decode_row(2) == (pytest.approx(MS), [1.0], [0.0])
    assert base.decode_row(2) is None  # no graph body: the parts are summed as before
    tr = simulate(closed([10, 10], [5, 3], 2), Pool(surface, Scheduler(kind="continuous", kv_blocks=10_000,
                                                                       block_size=1)))  # fmt: skip
    assert tr.first == pytest.approx([1 * MS, 1 * MS])
    assert tr.end == pytest.approx([5 * MS, 3 * MS])
    assert tr.iterations == 5


def test_an_iteration_with_prefill_runs_eagerly_and_takes_at_least_its_launches() -> None:
    # A 1 ms surface of 400 kernels at 5 µs each: an eager iteration takes at least 2 ms. With CUDA graphs only the
    # pure-decode iterations are replayed: the prefill (prompt 10) takes 2 ms, first token at 2 ms, then two decode
    # steps of 1 ms (end at 4 ms). Without graphs every iteration takes 2 ms (end at 6 ms).
    surface = replace(roofline.serving.IterationSurface.flat(MS), kernels=400.0)
    for graphs, end in ((True, 4 * MS), (False, 6 * MS)):
        sched = Scheduler(kind="continuous", kv_blocks=10_000, block_size=1, cuda_graphs=graphs)
        tr = simulate(closed([10], [3], 1), Pool(surface, sched, launch_s=5e-6))
        assert tr.first == pytest.approx([2 * MS])
        assert tr.end == pytest.approx([end])


def test_chunked_prefill_by_hand() -> None:
    # Budget 8 tokens: a 20-token prompt runs as chunks of 8, 8, 4 (first token at 3 ms); a second request arriving
    # with it waits until the first's chunks leave room: iteration 3 has 4 tokens left → its first chunk of 4, then
    # 1 decode + 7, then 1 decode + 1 (prompt 12 = 4 + 7 + 1): first token at 5 ms.
    tr = simulate(closed([20, 12], [2, 2], 2), flat("chunked", max_num_batched_tokens=8))
    assert tr.first == pytest.approx([3 * MS, 5 * MS])
    assert tr.end == pytest.approx([4 * MS, 6 * MS])
    assert tr.max_batched_tokens <= 8


def test_static_batching_waits_for_the_longest() -> None:
    # Static: both prefilled at 1 ms; the batch decodes until the 6-token request ends at 6 ms; a third request,
    # sent by the client whose request ended at 2 ms, starts only then: first token at 7 ms, end at 8 ms.
    tr = simulate(closed([4, 4, 4], [2, 6, 2], 2), flat("static"))
    assert tr.first == pytest.approx([1 * MS, 1 * MS, 7 * MS])
    assert tr.end == pytest.approx([2 * MS, 6 * MS, 8 * MS])


def test_reserve_policy_admits_only_what_fits() -> None:
    # A pool of 30 tokens, requests of 10 + 10: one at a time (reserve holds prompt + output).
    tr = simulate(closed([10, 10], [10, 10], 2), flat("continuous", kv_blocks=30))
    assert tr.first == pytest.approx([1 * MS, 11 * MS])


def test_a_disaggregated_closed_loop_client_sends_again_only_when_its_answer_ends() -> None:
    # One client, three requests of prompt 10 and 4 output tokens, prefill and decode pools of one engine each, the
    # KV cache moved in 0.5 ms. Request 0: prefilled at 1 ms (its first token), on the decode worker at 1.5 ms, its
    # 3 other tokens at 2.5, 3.5, 4.5 ms. The client's next request goes out only then: first token at 5.5 ms, end
    # at 9 ms; the third ends at 13.5 ms. (Released at the hand-off instead, request 1 would start at 1 ms.)
    tr = simulate(closed([10] * 3, [4] * 3, 1), flat("chunked"), flat("chunked"), lambda tokens: 0.5 * MS)
    assert tr.arrival == pytest.approx([0.0, 4.5 * MS, 9.0 * MS])
    assert tr.first == pytest.approx([1 * MS, 5.5 * MS, 10 * MS])
    assert tr.end == pytest.approx([4.5 * MS, 9 * MS, 13.5 * MS])


FLEET = 1 << 20  # engines of the largest fleet the API takes (schemas.limits.MAX_DEVICES)


def test_a_million_engines_with_alike_shares_run_one_loop() -> None:
    # A closed loop of 4 clients over 2²⁰ aggregated engines: 4 engines get a client each (the rest nothing) and run
    # their 3 requests one after another: prompt 10 (1 ms, first token), 3 more tokens (1 ms each), so request k of
    # an engine arrives at 4k ms and ends at 4(k + 1) ms. The 4 shares are alike: one loop.
    pool = replace(flat("chunked"), engines=FLEET)
    req = closed([10] * 12, [4] * 12, 4)
    assert roofline.serving.loops(req, pool) == 1
    tr = simulate(req, pool)
    assert tr.arrival == [0.0] * 4 + [4 * MS] * 4 + [8 * MS] * 4
    assert tr.end == pytest.approx([4 * MS] * 4 + [8 * MS] * 4 + [12 * MS] * 4)
    # Each engine's loop is counted for it: 12 requests of 4 iterations (a prefill, 3 decodes), 48 ms busy.
    assert tr.iterations == 12 * 4
    assert tr.busy_s == pytest.approx(48 * MS)


def test_a_million_engines_under_an_open_loop_serve_each_request_alone() -> None:
    # 500 Poisson arrivals over 2²⁰ engines: each request has an engine to itself, prefilled in 1 ms and decoded in
    # 3 more; alike lengths are one loop (times moved to each arrival, so equal to rounding), two lengths two loops.
    rng = np.random.default_rng(5)
    arrival = draw.arrivals(rng, 500, 100.0)
    pool = replace(flat("chunked"), engines=FLEET)
    req = Requests(np.full(500, 10), np.full(500, 4), arrival, 0)
    assert roofline.serving.loops(req, pool) == 1
    tr = simulate(req, pool)
    assert np.array(tr.first) - arrival == pytest.approx(np.full(500, 1 * MS), abs=1e-12)
    assert np.array(tr.end) - arrival == pytest.approx(np.full(500, 4 * MS), abs=1e-12)
    two = replace(req, output=np.where(np.arange(500) % 2, 4, 6))
    assert roofline.serving.loops(two, pool) == 2
    assert np.array(simulate(two, pool).end) - arrival == pytest.approx(np.where(np.arange(500) % 2, 4, 6) * MS)


def test_least_loaded_routing_by_hand() -> None:
    # Two prefill workers of one sequence and a 10-token budget, one decode worker, the KV cache moved at once.
    # 0 ms: r0 (prompt 30: 3 chunks, first token at 3 ms) → worker 0, r1 (prompt 10: 1 ms) → worker 1. At 1.5 ms
    # r1 has left for the decode worker: r2 → worker 1 (held 0 against 1), prefilled by 2.5 ms; r3 → worker 0 (1 and
    # 1: the first of equals), which takes it after r0: 3-4 ms. Round-robin routing would give r2 2.5 → 4 ms.
    prefill = replace(flat("chunked", max_num_seqs=1, max_num_batched_tokens=10), engines=2)
    req = Requests(np.array([30, 10, 10, 10]), np.full(4, 2), np.array([0.0, 0.0, 1.5 * MS, 1.5 * MS]), 0)
    tr = simulate(req, prefill, flat("chunked"), lambda tokens: 0.0)
    assert tr.first == pytest.approx([3 * MS, 1 * MS, 2.5 * MS, 4 * MS])


def test_engines_past_the_requests_are_never_routed_to() -> None:
    # n requests: one of the first n engines of a pool is always empty when one is routed, so 2²⁰ workers in each
    # disaggregated pool run exactly as n do.
    rng = np.random.default_rng(9)
    n = 200
    prompt = draw.lengths(rng, n, "uniform", "prompt", low=5, high=40)
    req = Requests(prompt, np.full(n, 6), draw.arrivals(rng, n, 400.0), 0)

    def pools(engines: int) -> tuple[Pool, Pool]:
        return (replace(flat("chunked", max_num_seqs=2, max_num_batched_tokens=16), engines=engines),
                replace(flat("chunked", max_num_seqs=3), engines=engines))  # fmt: skip

    few, fleet = (simulate(req, *pools(e), lambda tokens: 0.2 * MS) for e in (n, FLEET))
    assert (fleet.first, fleet.end, fleet.iterations) == (few.first, few.end, few.iterations)


def drafted(kind: str, draft_tokens: int, accepted: float, **kw: int | str) -> Pool:
    """The flat surface (1 ms a pass) of a model of 4 layers, so that a one-layer draft step costs 0.25 ms."""
    pool = flat(kind, **kw)
    draft = Speculation(draft_tokens, accepted)
    return Pool(replace(pool.surface, layers=4.0), replace(pool.scheduler, speculation=draft))


def test_speculative_decoding_by_hand() -> None:
    # Prompt 10, 9 tokens out: the prefill (no decoding sequence, no draft) gives the first token at 1 ms; the 8
    # left take ceil(8 / 3) = 3 iterations of 3 drafts accepting 2 on average, each the 1 ms pass over 4 positions
    # and 3 one-layer draft steps of 0.25 ms: 1.75 ms. End at 1 + 3 × 1.75 = 6.25 ms (9 ms without drafts).
    tr = simulate(closed([10], [9], 1), drafted("chunked", 3, 2.0))
    assert tr.first == pytest.approx([1 * MS])
    assert tr.end == pytest.approx([6.25 * MS])
    assert tr.iterations == 4
    # Drafts that are never kept only cost: 8 iterations of 1 + 0.25 ms after the first token.
    tr = simulate(closed([10], [9], 1), drafted("chunked", 1, 0.0))
    assert tr.end == pytest.approx([11 * MS])


def test_speculative_positions_count_against_the_token_budget() -> None:
    # Budget 16, 3 drafts all kept (4 tokens an iteration). Iteration 1 prefills four prompts of 4 (16 tokens, 1 ms).
    # Iteration 2: four sequences × 4 positions fill the budget (1 + 3 × 0.25 = 1.75 ms); the two answers of 2 end
    # at 2.75 ms and the fifth request is sent. Iteration 3: two sequences take 8 positions, the prompt of 10 gets a
    # chunk of 8 (1.75 ms); the answers of 9 end at 4.5 ms. Iteration 4: its last 2 prompt tokens, first token at
    # 5.5 ms; iteration 5 its last token, at 7.25 ms.
    req = closed([4, 4, 4, 4, 10], [2, 2, 9, 9, 2], 4)
    tr = simulate(req, drafted("chunked", 3, 3.0, max_num_batched_tokens=16))
    assert tr.first == pytest.approx([1 * MS] * 4 + [5.5 * MS])
    assert tr.end == pytest.approx([2.75 * MS, 2.75 * MS, 4.5 * MS, 4.5 * MS, 7.25 * MS])
    assert tr.max_batched_tokens == 16


def test_on_demand_preempts_and_every_request_still_ends() -> None:
    req = closed([10] * 6, [40] * 6, 6)
    tr = simulate(req, flat("chunked", kv_blocks=120, kv_policy="on_demand"))
    assert tr.preemptions > 0
    assert all(np.isfinite(tr.end))
    # Each request still produces its 40 tokens: a decode iteration yields one token per running request, so the
    # iterations can be no fewer than the longest request's 40 and no more than all 240 tokens one by one.
    assert 40 <= tr.iterations <= 240 + 6 * 3


H100 = system("h100-sxm")
RUN = InferenceRun(LLAMA_3_8B, H100, Workload.uniform(1, 1, 1), Parallelism())


def spec(kind: str = "chunked", **kw: int) -> EngineSpec:
    return EngineSpec(RUN, Scheduler(kind=kind, **kw))  # type: ignore[arg-type]


def test_concurrency_one_reproduces_the_static_run_of_one_request() -> None:
    # The static run launches every kernel eagerly: so does an engine without CUDA graphs.
    req = closed([2048] * 4, [256] * 4, 1)
    eager = EngineSpec(RUN, Scheduler(cuda_graphs=False))
    ready = roofline.serving.prepare(eager, req)
    est = estimate_serving(eager, req, prepared=ready)
    static = estimate_inference(replace(RUN, workload=Workload.uniform(1, 2048, 256)))
    assert est.e2e_s.mean == pytest.approx(static.prefill.time_s + static.decode.time_s, rel=ready.surface_error)
    assert est.ttft_s.mean == pytest.approx(static.prefill.time_s, rel=ready.surface_error)
    assert ready.surface_error < 0.15


def test_cuda_graphs_replay_each_decode_kernel_at_the_graphs_fixed_cost() -> None:
    # One request at a time, 2 048 prompt and 256 output tokens. Replayed as a CUDA graph, each of a decode step's
    # kernels costs 2.5 µs of fixed time instead of the profile's launch (5 µs on the H100 profile): each of the 255
    # decode steps is shorter by half its kernels' fixed costs (the static run's decode `overhead_s`, launches ×
    # 5 µs, summed over its steps); the prefill runs eagerly, so the first token does not move.
    assert H100.hardware.launch_s == 5e-6
    req = closed([2048] * 4, [256] * 4, 1)
    eager = estimate_serving(EngineSpec(RUN, Scheduler(cuda_graphs=False)), req)
    graph = estimate_serving(EngineSpec(RUN, Scheduler()), req)
    static = estimate_inference(replace(RUN, workload=Workload.uniform(1, 2048, 256)))
    fixed = sum(r.overhead_s for r in static.decode.rows)
    assert fixed > 255 * 32 * 5 * 5e-6  # at least 5 kernels a layer launched each step
    assert graph.ttft_s.mean == pytest.approx(eager.ttft_s.mean, rel=1e-12)
    assert eager.e2e_s.mean - graph.e2e_s.mean == pytest.approx(fixed * (1 - 2.5e-6 / 5e-6), rel=0.02)


@pytest.mark.parametrize("kind", ["static", "continuous", "chunked"])
def test_littles_law_in_a_closed_loop(kind: str) -> None:
    # L = λW (Little 1961): with 64 clients always in the system, throughput × mean latency is 64, but for the
    # tail where fewer than 64 remain (at most one latency of 2 000 requests' run: a few per cent).
    n, c = 2000, 64
    est = estimate_serving(spec(kind, max_num_seqs=64), closed([512] * n, [128] * n, c))
    assert est.requests_per_s * est.e2e_s.mean == pytest.approx(est.mean_in_system, rel=1e-9)
    assert est.mean_in_system == pytest.approx(c, rel=0.05)
    assert est.mean_in_system <= c


def test_littles_law_in_a_disaggregated_closed_loop() -> None:
    # The clients are the requests in the system, wherever they are: the prefill pool, the KV transfer, the decode
    # pool (each client's next request leaves only when its answer ends).
    n, c = 1000, 48
    est = estimate_serving(spec(max_num_seqs=64), closed([1024] * n, [128] * n, c), back=spec(max_num_seqs=64))
    assert est.requests_per_s * est.e2e_s.mean == pytest.approx(est.mean_in_system, rel=1e-9)
    assert est.mean_in_system == pytest.approx(c, rel=0.05)
    assert est.mean_in_system <= c


def test_the_token_budget_bounds_every_iteration() -> None:
    rng = np.random.default_rng(1)
    prompts = draw.lengths(rng, 500, "uniform", "prompt", low=100, high=3000)
    est = estimate_serving(spec("chunked", max_num_batched_tokens=1024), Requests(prompts, np.full(500, 64), None, 48))
    assert 0 < est.max_batched_tokens <= 1024


def test_a_seeded_open_loop_is_repeatable() -> None:
    def once() -> roofline.serving.ServingEstimate:
        rng = np.random.default_rng(7)
        prompts = draw.lengths(rng, 300, "lognormal", "prompt", mean=800, std=400)
        outputs = draw.lengths(rng, 300, "normal", "output", mean=200, std=50)
        return estimate_serving(spec(), Requests(prompts, outputs, draw.arrivals(rng, 300, 20.0), 0))

    a, b = once(), once()
    assert a == b


def test_disaggregation_over_an_infinitely_fast_fabric_is_two_independent_pools() -> None:
    rng = np.random.default_rng(3)
    n = 400
    req = Requests(np.full(n, 1024), np.full(n, 128), draw.arrivals(rng, n, 15.0), 0)
    dis = estimate_serving(spec(), req, back=spec(), transfer_free=True)
    # The prefill pool alone: the same arrivals, one output token each.
    alone = estimate_serving(spec(), replace(req, output=np.ones(n, dtype=np.int64)))
    assert dis.ttft_s == alone.ttft_s
    # The decode pool alone sees arrivals at the first-token times; its TPOT does not depend on the prefill pool's.
    assert dis.tpot_s.mean > 0


def test_goodput_counts_requests_meeting_every_objective() -> None:
    req = closed([512] * 200, [64] * 200, 16)
    est = estimate_serving(spec(), req, Objectives(ttft_s=1e9, tpot_s=1e9))
    assert est.goodput_fraction == 1.0
    none = estimate_serving(spec(), req, Objectives(ttft_s=1e-9))
    assert none.goodput_fraction == 0.0


def test_a_pool_that_cannot_hold_one_request_is_refused() -> None:
    with pytest.raises(ServingConfigError) as err:
        roofline.serving.prepare(spec(kv_blocks=10), closed([4096], [4096], 1))
    assert err.value.field == "engine.memory_fraction"


def test_a_prompt_longer_than_the_budget_needs_chunking() -> None:
    with pytest.raises(ServingConfigError) as err:
        roofline.serving.prepare(spec("continuous", max_num_batched_tokens=1024), closed([2048], [8], 1))
    assert err.value.field == "engine.max_num_batched_tokens"


def test_speculative_decoding_on_a_memory_bound_decode() -> None:
    # Llama-3-8B on one H100 at batch 1 reads its 16 GB of weights each step; checking 4 positions instead of 1 adds
    # ~0.1 ms of math to ~5 ms of reading. Each draft step reads one of the 32 layers (0.44 GB) and the LM head
    # (128 256 × 4 096 × 2 B = 1.05 GB): ~0.09 of a step. Three drafts, all kept: (1 + 3 × 0.09) / 4 ≈ 0.32 of the
    # time per output token without them.
    req = closed([512] * 3, [257] * 3, 1)
    plain = estimate_serving(spec(), req)
    draft = estimate_serving(EngineSpec(RUN, Scheduler(speculation=Speculation(3, 3.0))), req)
    assert 0.28 < draft.tpot_s.mean / plain.tpot_s.mean < 0.37
    assert draft.ttft_s.mean == pytest.approx(plain.ttft_s.mean, rel=1e-9)


def test_on_demand_preemption_with_speculative_decoding_still_ends_every_request() -> None:
    # As above, with 3 drafts of which 1.5 are kept: sequences grow 2.5 keys an iteration, the pool fills sooner,
    # preempted requests keep the tokens they had and every request ends.
    req = closed([10] * 6, [40] * 6, 6)
    tr = simulate(req, drafted("chunked", 3, 1.5, kv_blocks=120, kv_policy="on_demand"))
    assert tr.preemptions > 0
    assert all(np.isfinite(tr.end))


class Calls:
    """A `should_stop` that counts its calls and answers true from call `stop_at` on (never, by default)."""

    def __init__(self, stop_at: float = math.inf) -> None:
        self.calls = 0
        self.stop_at = stop_at

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.stop_at


def test_the_loop_asks_whether_to_stop_every_64_events() -> None:
    # One client, 200 requests of prompt 10 and 1 output token: each is one iteration (its prefill gives its one
    # token), so the loop handles 2 events per request (its arrival, its iteration's end): 400 events, asked at
    # the 64th, 128th, …, 384th: 6 times. Asked and never told to stop, the run is the same.
    req = closed([10] * 200, [1] * 200, 1)
    asked = Calls()
    tr = simulate(req, flat("continuous"), should_stop=asked)
    assert asked.calls == 400 // 64 == 6
    assert tr.iterations == 200
    assert tr.end == simulate(req, flat("continuous")).end
    told = Calls(stop_at=2)
    with pytest.raises(roofline.Stopped):
        simulate(req, flat("continuous"), should_stop=told)
    assert told.calls == 2  # it stopped at the 128th event, at once


def test_alike_shares_found_by_their_bytes_run_one_loop_each() -> None:
    # 6 engines, a closed loop of 6 clients, 18 requests dealt round-robin: engine e gets requests e, e + 6, e + 12.
    # Outputs 2, 3, 2, 3, 2, 4 (repeated): engines 0, 2, 4 are alike, 1 and 3 are alike, 5 is alone: 3 loops. Each
    # engine's requests end as they do on an engine of their own (continuous batching on a 1 ms surface: prefill
    # 1 ms with the first token, then a token per ms; the engine's next request starts when one ends).
    outputs = [2, 3, 2, 3, 2, 4] * 3
    req = closed([10] * 18, outputs, 6)
    pool = replace(flat("continuous"), engines=6)
    assert roofline.serving.loops(req, pool) == 3
    tr = simulate(req, pool)
    for e in range(6):
        own = [e, e + 6, e + 12]
        alone = simulate(closed([10] * 3, [outputs[i] for i in own], 1), flat("continuous"))
        assert [tr.end[i] for i in own] == pytest.approx(alone.end)
        assert alone.end == pytest.approx([outputs[e] * MS, 2 * outputs[e] * MS, 3 * outputs[e] * MS])
    asked = Calls(stop_at=1)
    with pytest.raises(roofline.Stopped):  # asked between loops too (each is too short to ask on its own)
        simulate(req, pool, should_stop=asked)
