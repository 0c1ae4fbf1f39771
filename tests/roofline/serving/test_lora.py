"""LoRA adapters in the serving simulator (issue 41): their memory and FLOPs by hand for a small model, vLLM's
`max_loras` rule on every simulated iteration, adapter loads through the slots and the host cache, and a seeded run
repeated."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import roofline
from roofline.inference import InferenceRun, Parallelism, Transformer, Workload
from roofline.serving import EngineSpec, Lora, Pool, Requests, Scheduler, ServingConfigError, prepare, simulate
from roofline.serving import requests as draw
from tests.roofline.models import LLAMA_3_8B
from tests.roofline.profiles import system

MS = 1e-3
# A small model: 2 layers, hidden 64, 4 heads and 2 KV heads of 16, a gated MLP of 128.
SMALL = Transformer(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, gated=True, activation="silu",
                    vocab=1000)  # fmt: skip


def small_run(tensor: int = 1) -> InferenceRun:
    return InferenceRun(SMALL, system("h100-sxm"), Workload.uniform(1, 1, 1), Parallelism(tensor=tensor))


def test_adapter_memory_and_flops_by_hand() -> None:
    # Per layer, (d_in + d_out) of q 64+64, k 64+32, v 64+32, o 64+64, gate 64+128, up 64+128, down 128+64
    # = 128 + 96 + 96 + 128 + 192 + 192 + 192 = 1024. Rank 8, 2 layers, bf16 (2 bytes): 8 × 1024 × 2 × 2 = 32 768 bytes.
    assert roofline.serving.adapter_bytes(small_run(), 8) == 32_768
    # Tensor parallel 2: column-parallel layers split d_out, row-parallel split d_in, A or B stays whole:
    # q 64+32, k 64+16, v 64+16, o 32+64, gate 64+64, up 64+64, down 64+64 = 96+80+80+96+128+128+128 = 736.
    assert roofline.serving.adapter_bytes(small_run(2), 8) == 8 * 736 * 2 * 2
    # FLOPs per token: shrink and expand, 2 × rank × (d_in + d_out) per layer: 2 × 8 × 1024 × 2 = 32 768.
    assert roofline.serving.flops_per_token(SMALL, 8) == 32_768


def test_the_slots_come_out_of_the_kv_pool() -> None:
    # max_loras 4 slots at max_lora_rank 16 take 4 × 16 × 1024 × 2 × 2 = 262 144 bytes from the pool.
    run = small_run()
    base = EngineSpec(run, Scheduler())
    with_lora = EngineSpec(run, Scheduler(lora=Lora(max_loras=4, max_lora_rank=16)))
    a, b = roofline.serving.pool_memory(base), roofline.serving.pool_memory(with_lora)
    assert b.lora == 262_144
    assert a.pool - b.pool == pytest.approx(262_144)


def test_the_kernels_cost_what_the_op_core_says_of_their_products() -> None:
    # One adapter, 64 tokens, rank 16, vLLM's packed layers: qkv (d_in 64; slices 64, 32, 32), o (64; 64), gate_up
    # (64; 128, 128), down (128; 64). Each: one shrink, 64 × d_in × (slices × 16) into fp32, and one expand,
    # 64 × 16 × Σ slices added into the output; two layers: the surface at (1, 64) is the core's products summed.
    run = small_run()
    hw = run.system.hardware
    grid = roofline.serving.kernel_surface(run, Lora(max_loras=2, max_lora_rank=16), 64, hw.launch_s)
    total = 0.0
    for d_in, slices in [(64, (64, 32, 32)), (64, (64,)), (64, (128, 128)), (128, (64,))]:
        kernels = [*roofline.ops.matmul(hw, 64, 16 * len(slices), d_in, out_dtype="fp32"),
                   *roofline.ops.matmul(hw, 64, sum(slices), 16, epilogue=("residual",))]  # fmt: skip
        total += float(roofline.single(kernels, hw, hw.vector_peak("fp32"), hw.launch_s).time_s)
    assert grid(1.0, 64.0) == pytest.approx(2 * total)
    # the products' FLOPs (without the residual's adds) are 2 × tokens × rank × Σ (d_in + d_out) per layer:
    # 2 × 64 × 16 × 1024, the hand figure of `test_adapter_memory_and_flops_by_hand`
    flops = sum(
        k.flops
        for d_in, slices in [(64, (64, 32, 32)), (64, (64,)), (64, (128, 128)), (128, (64,))]
        for k in [*roofline.ops.matmul(hw, 64, 16 * len(slices), d_in), *roofline.ops.matmul(hw, 64, sum(slices), 16)]
    )
    assert flops == 2 * 64 * 16 * 1024


def flat_pool(max_loras: int, max_cpu: int = 0, load_s: float = 0.0) -> Pool:
    lora = Lora(max_loras=max_loras, max_cpu_loras=max_cpu, max_lora_rank=16, load_s_per_rank=load_s)
    return Pool(roofline.serving.IterationSurface.flat(MS), Scheduler(kv_blocks=10_000, block_size=16, lora=lora))


def test_max_loras_caps_the_distinct_adapters_of_every_iteration() -> None:
    # 40 requests at once, 8 adapters in turn, max_loras 2: every iteration holds at most 2 distinct adapters,
    # and the requests of the other adapters wait (each counted once).
    n = 40
    req = Requests(np.full(n, 20), np.full(n, 10), np.zeros(n), 0, adapter=np.arange(n) % 8, adapter_rank=8)
    tr = simulate(req, flat_pool(2), series=True)
    assert tr.adapters is not None and len(tr.adapters) == len(tr.series or [])
    assert max(tr.adapters) == 2
    assert tr.lora is not None
    (stats,) = tr.lora
    assert stats.max_active == 2
    # the first iteration admits adapters 0 and 1 (requests 0, 1, 8, 9, …); every request of adapters 2 … 7 waits
    assert stats.delayed == n - 10
    assert stats.loads == 8  # each adapter activated once: the batch drains one pair before the next
    assert not np.isnan(tr.end).any()


def test_a_load_waits_for_its_adapter_and_the_host_cache_is_lru() -> None:
    # Flat 1 ms iterations, max_loras 1, max_cpu_loras 2, loads of 2 ms (rank 8 × 0.25 ms): requests one after
    # another (each 1 prompt token, 1 output token: one iteration) with adapters 0, 1, 0, 2, 0, 1.
    # Slots (one): consecutive requests never share an adapter, so each of the 6 loads its own.
    # Host cache (2, LRU): 0 miss, 1 miss, 0 hit, 2 miss (evicts 1), 0 hit, 1 miss → 4 misses.
    order = [0, 1, 0, 2, 0, 1]
    n = len(order)
    req = Requests(np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64), np.arange(n) * 10 * MS, 0,
                   adapter=np.array(order), adapter_rank=8)  # fmt: skip
    tr = simulate(req, flat_pool(1, 2, 0.25 * MS))
    (stats,) = tr.lora or []
    assert (stats.loads, stats.host_misses) == (6, 4)
    assert stats.load_s == pytest.approx(6 * 2 * MS)
    # each request: its adapter's load (2 ms), then its one iteration (1 ms)
    assert np.allclose(np.array(tr.end) - np.array(tr.arrival), 3 * MS)


def test_a_seeded_lora_run_is_repeatable_and_an_adapter_above_max_lora_rank_is_refused() -> None:
    run = InferenceRun(LLAMA_3_8B, system("h100-sxm"), Workload.uniform(1, 1, 1), Parallelism())
    lora = Lora(max_loras=4, max_lora_rank=16)
    spec = EngineSpec(run, Scheduler(lora=lora, host_link_bytes_per_s=64e9))

    def once(seed: int) -> roofline.serving.ServingEstimate:
        rng = np.random.default_rng(seed)
        n = 300
        req = Requests(np.full(n, 512), np.full(n, 64), draw.arrivals(rng, n, 20.0, "poisson", 1.0), 0,
                       adapter=draw.adapters(rng, n, 16, "zipf", 1.0), adapter_rank=16)  # fmt: skip
        return roofline.serving.estimate_serving(spec, req)

    a, b = once(3), once(3)
    assert a.ttft_s == b.ttft_s and a.lora == b.lora
    assert a.lora is not None and max(s.max_active for s in a.lora) <= 4
    req = Requests(np.full(4, 512), np.full(4, 64), np.zeros(4), 0, adapter=np.zeros(4, dtype=np.int64),
                   adapter_rank=32)  # fmt: skip
    with pytest.raises(ServingConfigError) as err:
        prepare(spec, req)
    assert err.value.field == "load.adapters.rank"
    with pytest.raises(ServingConfigError) as err:
        prepare(replace(spec, scheduler=replace(spec.scheduler, lora=Lora(max_loras=0))), req)
    assert err.value.field == "engine.max_loras"
