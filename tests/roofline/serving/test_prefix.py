"""Prefix caching, shared prefixes and multi-turn sessions in the serving simulator, worked by hand on a flat
surface (every iteration 1 ms), then on the real surface: a cached prefix still costs its attention reads, a seeded
shared load is repeatable and Little's law still holds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import roofline
from roofline.inference import InferenceRun, Parallelism, Workload
from roofline.serving import EngineSpec, Pool, Requests, Scheduler, estimate_serving, prepare, simulate
from roofline.serving import requests as draw
from tests.roofline.models import LLAMA_3_8B
from tests.roofline.profiles import system

MS = 1e-3


def flat(engines: int = 1, **kw: int | str | bool) -> Pool:
    sched = Scheduler(
        kind=str(kw.pop("kind", "chunked")), kv_blocks=int(kw.pop("kv_blocks", 10_000)),
        block_size=int(kw.pop("block_size", 10)), prefix_caching=bool(kw.pop("prefix_caching", True)), **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    return Pool(roofline.serving.IterationSurface.flat(MS), sched, engines)


def shared(prompts: list[int], outputs: list[int], chains: list[list[int]], block: int = 10,
           arrival: list[float] | None = None) -> Requests:  # fmt: skip
    starts = np.cumsum([0, *(len(c) for c in chains)])
    times = np.array(arrival if arrival is not None else [i * 10 * MS for i in range(len(prompts))])
    return Requests(np.array(prompts), np.array(outputs), times, 0,
                    np.array([h for c in chains for h in c], dtype=np.int64), starts, block)  # fmt: skip


def test_n_identical_prompts_hit_all_but_the_first_ones_full_blocks() -> None:
    # 5 prompts of 41 tokens, blocks of 10: 4 full blocks each. The first computes all 41 and caches its 4 blocks;
    # each later one finds all 4 (at most prompt − 1 = 40 tokens may come from the cache) and computes 1 token:
    # hits 4 × 4 of 4 × 5 blocks = (n − 1)/n, tokens prefilled 41 + 4 × 1 = 45 of 205.
    n = 5
    tr = simulate(shared([41] * n, [3] * n, [[1, 2, 3, 4]] * n), flat())
    assert tr.caches is not None
    (c,) = tr.caches
    assert c.hit_blocks / c.lookup_blocks == pytest.approx((n - 1) / n)
    assert (c.prompt_tokens, c.prompt_tokens - c.hit_tokens) == (205, 45)
    # a prompt exactly 4 blocks long reuses only 3 (its last token is computed again, as vLLM does)
    (d,) = simulate(shared([40] * n, [3] * n, [[1, 2, 3, 4]] * n), flat()).caches or []
    assert d.hit_blocks == 3 * (n - 1)


def test_without_prefix_caching_every_prompt_token_is_computed() -> None:
    tr = simulate(shared([41] * 3, [3] * 3, [[1, 2, 3, 4]] * 3), flat(prefix_caching=False))
    assert tr.caches is None


def test_eviction_order_under_a_pool_of_six_blocks() -> None:
    # Blocks of 10 tokens, a pool of 6, requests one at a time, each of 21 prompt tokens and 1 output token (3 blocks
    # reserved: 2 full, cached when computed, and the partial one, private). Freed blocks go to the free queue's
    # tail, a request's last block first; new blocks come from empty ones, else evict the queue's head.
    #   A [1, 2]: cached; queue 2 1, 4 empty.      B [3, 4]: queue 2 1 4 3, 2 empty.
    #   C [5, 6]: needs 3, evicts 2 (A's tail, the head): queue 1 4 3 6 5, 1 empty.
    #   D [1, 2]: finds 1, not 2 (hit 10 tokens); needs 2 new: evicts 4 (B's tail); ends: queue 3 6 5 2 1.
    #   E [3, 4]: finds 3, not 4 (hit 10 tokens); needs 2 new, 1 empty: evicts 6 (C's tail, now the head).
    chains = [[1, 2], [3, 4], [5, 6], [1, 2], [3, 4]]
    tr = simulate(shared([21] * 5, [1] * 5, chains), flat(kv_blocks=6))
    (c,) = tr.caches or []
    assert (c.hit_tokens, c.hit_blocks, c.evictions) == (20, 2, 3)
    # the same with room for everything: D and E find both blocks
    (u,) = simulate(shared([21] * 5, [1] * 5, chains), flat(kv_blocks=100)).caches or []
    assert (u.hit_tokens, u.evictions) == (40, 0)


def test_a_session_with_an_unbounded_cache_prefills_only_its_new_tokens() -> None:
    # Three turns of 20 new tokens and 10 output tokens, blocks of 10. Turn 1: prompt 20. Turn 2: its history (20 +
    # 10) and 20 new: 50, of which the 3 full blocks of turn 1's prompt and answer are cached: 20 computed. Turn 3:
    # 50 + 10 + 20 = 80, 6 cached blocks: 20 computed. Each turn is sent 5 ms after the one before ends.
    new, out = np.full(3, 20), np.full(3, 10)
    previous = np.array([-1, 0, 1])
    prompt, hashes, starts = draw.sharing(new, out, 10, previous=previous)
    assert prompt.tolist() == [20, 50, 80]
    req = Requests(prompt, out, np.zeros(3), 0, hashes, starts, 10, previous, np.full(3, 5 * MS))
    tr = simulate(req, flat(kind="continuous"))
    (c,) = tr.caches or []
    assert c.prompt_tokens - c.hit_tokens == 60  # 20 per turn
    assert c.hit_tokens == 30 + 60
    # turn 1: prefill 1 ms, 9 decode iterations: ends at 10 ms; turn 2 arrives at 15 ms, ends at 25; turn 3 at 30
    assert tr.arrival == pytest.approx([0.0, 15 * MS, 30 * MS])
    assert tr.end == pytest.approx([10 * MS, 25 * MS, 40 * MS])


def test_shared_prefix_groups_hash_alike() -> None:
    # A prefix of 25 tokens (2 full blocks of 10) per group, then each request's own 12 tokens: prompt 37, 3 full
    # blocks: the group's 2, then one of its own.
    group = np.array([0, 1, 0])
    prompt, hashes, starts = draw.sharing(np.full(3, 12), np.full(3, 4), 10, prefix_tokens=25, group=group)
    chains = [hashes[starts[i] : starts[i + 1]].tolist() for i in range(3)]
    assert prompt.tolist() == [37, 37, 37]
    assert chains[0][:2] == chains[2][:2] != chains[1][:2]
    assert len({chains[0][2], chains[1][2], chains[2][2]}) == 3


def test_the_prefix_aware_router_keeps_each_group_on_one_replica() -> None:
    # Two replicas, two groups alternating (A B A B …), prompts of 41 tokens of which 40 are the group's prefix
    # (4 blocks): round robin sends every A to replica 0 and every B to replica 1 by luck of the order; the order
    # A A B B A A B B … splits each group over both replicas, so each replica computes each prefix once (4 misses
    # of 4 blocks), while the prefix-aware router sends each group where its prefix is (2 misses).
    order = [0, 0, 1, 1] * 4
    chains = [[10 * g + k for k in range(4)] for g in order]
    req = shared([41] * 16, [2] * 16, chains)
    rr = simulate(req, flat(2))
    aware = simulate(req, flat(2, router="prefix_aware"))
    miss = [sum(c.lookup_blocks - c.hit_blocks for c in tr.caches or []) for tr in (rr, aware)]
    assert miss == [16, 8]


H100 = system("h100-sxm")
RUN = InferenceRun(LLAMA_3_8B, H100, Workload.uniform(1, 1, 1), Parallelism())


def test_a_cached_prefix_still_costs_its_attention_reads() -> None:
    # Two requests of 4 160 tokens sharing a 4 096-token prefix, one after the other: the second computes 64 tokens
    # whose attention reads the 4 096 cached keys. Its first token comes after one iteration costing that chunk,
    # (64 new, 4 096 cached), as the surface prices it: more than a 64-token prompt alone, far less than the whole.
    spec = EngineSpec(RUN, Scheduler(block_size=32, prefix_caching=True))
    chains = [list(range(130)), [*range(128), 900, 901]]  # the same 128 blocks, then each its own
    req = shared([4160, 4160], [2, 2], chains, block=32, arrival=[0.0, 1.0])
    ready = prepare(spec, req)
    tr = simulate(req, ready.front)
    surf, floor = ready.front.surface, ready.front.surface.kernels * H100.hardware.launch_s
    cached = max(surf.time(64.0, [(64.0, 4096.0)], 0.0, 0.0, 1.0), floor)
    alone = max(surf.time(64.0, [(64.0, 0.0)], 0.0, 0.0, 1.0), floor)
    whole = max(surf.time(4160.0, [(4160.0, 0.0)], 0.0, 0.0, 1.0), floor)
    assert tr.first[1] - tr.arrival[1] == pytest.approx(cached, rel=1e-12)
    assert alone < cached < whole / 4


def _sessions(seed: int) -> Requests:
    rng = np.random.default_rng(seed)
    n = 600
    turns = draw.lengths(rng, n, "uniform", "turns", low=1, high=6)
    _session, previous = draw.sessions(rng, turns, n)
    new = draw.lengths(rng, n, "lognormal", "prompt", mean=300, std=150)
    out = draw.lengths(rng, n, "lognormal", "output", mean=150, std=80)
    group = draw.group_of(rng, n, 4, "zipf", 1.2)
    prompt, hashes, starts = draw.sharing(new, out, 32, prefix_tokens=1000, group=group, previous=previous)
    heads = previous < 0
    arrival = np.zeros(n)
    arrival[heads] = draw.arrivals(rng, int(heads.sum()), 3.0)
    think = rng.exponential(2.0, n)
    return Requests(prompt, out, arrival, 0, hashes, starts, 32, previous, think)


def test_a_seeded_shared_load_is_repeatable_and_keeps_littles_law() -> None:
    spec = EngineSpec(RUN, Scheduler(block_size=32, prefix_caching=True), replicas=2)
    a, b = estimate_serving(spec, _sessions(5)), estimate_serving(spec, _sessions(5))
    assert a == b
    # L = λW over the run (Little 1961): the time-average in the system is the arrival rate times the mean stay.
    assert a.requests_per_s * a.e2e_s.mean == pytest.approx(a.mean_in_system, rel=1e-9)


def test_a_host_tier_keeps_evicted_blocks_and_brings_them_back_over_its_link() -> None:
    # The six-block pool above with a host tier of 10 blocks, 0.1 ms a token over the host link. C evicts A's block 2
    # to the host; D finds block 1 on the device and block 2 in the host (20 tokens reused, 10 of them loaded: 1 ms
    # before its 1 ms prefill) and evicts B's block 4 to the host; E finds 3 on the device and 4 in the host
    # (likewise), evicting C's 6.
    chains = [[1, 2], [3, 4], [5, 6], [1, 2], [3, 4]]
    pool = flat(kv_blocks=6, host_cache_blocks=10)
    pool = Pool(pool.surface, replace(pool.scheduler, host_s_per_token=1e-4))
    tr = simulate(shared([21] * 5, [1] * 5, chains), pool)
    (c,) = tr.caches or []
    assert (c.hit_tokens, c.host_hit_blocks, c.evictions) == (40, 2, 3)
    assert c.host_s == pytest.approx(2 * 10 * 1e-4)
    ttft = [f - a for f, a in zip(tr.first, tr.arrival, strict=True)]
    assert ttft == pytest.approx([1 * MS, 1 * MS, 1 * MS, 2 * MS, 2 * MS])


def test_on_demand_pools_cache_too_and_every_request_ends() -> None:
    # vLLM's on-demand allocation with preemption: 40 requests of one 401-token prompt (40 full blocks of 10), 30
    # tokens out, a pool of 200 blocks, all at once: the first computes the prompt, each later one reuses its 40
    # blocks once they are cached (those admitted with it compute it too).
    n = 40
    req = shared([401] * n, [30] * n, [list(range(40))] * n, arrival=[0.0] * n)
    tr = simulate(req, flat(kv_blocks=200, kv_policy="on_demand"))
    assert not any(np.isnan(tr.end))
    (c,) = tr.caches or []
    assert c.hit_blocks > 0 and c.hit_blocks % 40 == 0
