"""Training steps at cluster scale: the data-parallel gradient reduction of a step on 16 384 and 131 072 H100s (Llama 3
405B trained on 16 384: Meta, "The Llama 3 Herd of Models", 2024, §3.3), on the profile's two levels: NVLink 4 inside
a node of 8, InfiniBand NDR across (8 × 400 Gb/s ConnectX-7 per node: 50 GB/s per GPU). Every time is written out
from the profile's figures (tests/roofline/profiles.py) and the schedules' formulas (DTB's hierarchical all-reduce:
reduce-scatter inside the node, the all-reduce of 1/8 of the data across nodes, all-gather inside; a ring of n takes
n − 1 steps per pass), each step costed as NCCL's two protocols (roofline.collectives' `_protocols` docstring) and the
fastest of the candidates taken, as `roofline.collective`'s auto does."""

from __future__ import annotations

import pytest

import roofline
from tests.roofline.profiles import system
from tests.roofline.training.test_training import gpt

G = 8  # GPUs per node (NVLink 4 domain)
NVLINK = 450e9 * 0.82  # NVLink 4 per direction × the profile's interconnect efficiency
NIC = 50e9 * 0.82  # one GPU's NDR share per direction × the same efficiency
HOP_NVLINK, HOP_NIC = 1e-6, 5e-6  # the profile's hop latencies
SYNC_NVLINK, SYNC_NIC = 2.8e-6, 11.3e-6  # NCCL Simple's extra per step (hwLat: 3.4 − 0.6, 14.0 − 2.7 µs)
LL = 1 / 4  # NCCL's LL ring on all-reduce and across nodes: a quarter of the bus bandwidth
LAUNCH = 8e-6  # one NCCL call
MEMORY = 3.35e12 * 0.9  # the buffered Simple ring's copy through device memory (HBM3 × memory efficiency)
SIZES = [16_384, 131_072]


def simple(steps: int, link_bytes: float, bandwidth: float, hop: float, sync: float) -> float:
    return steps * (hop + sync) + link_bytes / bandwidth


def low_latency(steps: int, link_bytes: float, bandwidth: float, hop: float) -> float:
    return steps * hop + link_bytes / (bandwidth * LL)


def copy(streams: int, chunk: float) -> float:
    """The Simple ring's one chunk (V/n) per rank read and written through device memory, `streams` times."""
    return streams * chunk / MEMORY


def hierarchical_all_reduce(v: float, nodes: int) -> dict[str, float]:
    """A data-parallel all-reduce of v bytes over every GPU of `nodes` nodes: the hierarchical schedule and one flat
    ring through all 8·nodes GPUs (each step at min(NVLink, 8 NICs) = 8 × 41 GB/s, the NIC's latency), each as
    Simple and LL."""
    n, flat_bw = G * nodes, min(NVLINK, G * NIC)
    inside = 7  # ring steps of a reduce-scatter (or all-gather) over a node's 8 GPUs
    across = nodes - 1  # ring steps of each pass across nodes
    return {
        "hierarchical/simple": LAUNCH
        + simple(inside, 7 / 8 * v, NVLINK, HOP_NVLINK, SYNC_NVLINK) + copy(2, v / 8)  # reduce-scatter in the node
        + 2 * simple(across, across / nodes * v / 8, NIC, HOP_NIC, SYNC_NIC) + copy(2, v / 8 / nodes)  # AR of V/8
        + simple(inside, 7 / 8 * v, NVLINK, HOP_NVLINK, SYNC_NVLINK) + copy(3, v / 8),  # all-gather in the node
        "hierarchical/ll": LAUNCH
        + 2 * low_latency(inside, 7 / 8 * v, NVLINK, HOP_NVLINK)
        + 2 * low_latency(across, across / nodes * v / 8, NIC, HOP_NIC),
        "ring/simple": LAUNCH + 2 * simple(n - 1, (n - 1) / n * v, flat_bw, HOP_NIC, SYNC_NIC) + copy(2, v / n),
        "ring/ll": LAUNCH + 2 * low_latency(n - 1, (n - 1) / n * v, flat_bw, HOP_NIC),
    }  # fmt: skip


def step(model: roofline.Transformer, devices: int, **kw: object) -> roofline.TrainingEstimate:
    par = kw.pop("parallelism", roofline.TrainingParallelism(data=devices))
    assert isinstance(par, roofline.TrainingParallelism) and par.devices == devices
    run = roofline.TrainingRun(model, system("h100-sxm"), sequence=2048, micro_batch=1, global_batch=devices,
                               parallelism=par, **kw)  # type: ignore[arg-type]  # fmt: skip
    return roofline.estimate_training(run)


def rows(est: roofline.TrainingEstimate) -> dict[str, roofline.training.CommunicationRow]:
    return {r.name: r for r in est.communication}


# The test GPT of tests/roofline/training (4 layers, h = 1024, tied 32 768-word table, 2 048 positions): per layer
# 12h² + 13h weights and biases, plus the table and the positions: 4 · 12 596 224 + 34 816 · 1024 = 86 036 480.
SMALL_PARAMETERS = 4 * (12 * 1024**2 + 13 * 1024) + (32768 + 2048) * 1024


@pytest.mark.parametrize("devices", SIZES)
def test_a_data_parallel_all_reduce_across_every_gpu_is_hierarchical(devices: int) -> None:
    # 172 MB of bf16 gradients over 2 048 (16 384 nodes): the 2(N − 1) steps across nodes dominate, so LL (5 µs a
    # step, a quarter of the bandwidth) beats Simple (16.3 µs a step); the flat ring's 2(8N − 1) steps lose to both.
    est = step(gpt(), devices)
    (row,) = est.communication
    assert (row.name, row.op, row.devices, row.calls) == ("data_parallel_all_reduce", "all_reduce", devices, 1.0)
    assert row.bytes == 2 * SMALL_PARAMETERS == 172_072_960
    candidates = hierarchical_all_reduce(row.bytes, devices // G)
    assert min(candidates, key=candidates.__getitem__) == "hierarchical/ll"
    assert row.time_s == pytest.approx(candidates["hierarchical/ll"], rel=1e-12)
    # Not overlapped (Megatron-LM's default): all of it is exposed, after the step's compute and before the optimizer.
    assert row.exposed_s == row.time_s
    compute = est.forward_s + est.backward_s + est.recompute_s
    assert est.step_s == pytest.approx(compute + row.time_s + est.optimizer_s, rel=1e-12)


@pytest.mark.parametrize("devices", SIZES)
def test_zero_1_reduce_scatters_and_all_gathers_13_gb_hierarchically(devices: int) -> None:
    # A 6.6 B-parameter GPT (32 layers, h = 4096): 32 · (12 · 4096² + 13 · 4096) + 34 816 · 4096 parameters, 13.2 GB
    # in bf16. ZeRO-1 (Rajbhandari et al. 2020) reduce-scatters the gradients and all-gathers the updated weights;
    # hierarchically: RS inside the node then RS of 1/8 across nodes; AG of 1/8 across then AG inside. At this size
    # Simple's full payload beats LL's quarter of the bandwidth even across 16 384 nodes.
    params = 32 * (12 * 4096**2 + 13 * 4096) + (32768 + 2048) * 4096
    est = step(gpt(layers=32, hidden=4096, heads=32), devices, sharding=roofline.Sharding(zero=1))
    rs, ag = rows(est)["zero_reduce_scatter"], rows(est)["zero_all_gather"]
    assert rs.bytes == ag.bytes == 2 * params == 13_173_522_432
    v, nodes = rs.bytes, devices // G
    inside, across = 7, nodes - 1
    node_rs = simple(inside, 7 / 8 * v, NVLINK, HOP_NVLINK, SYNC_NVLINK) + copy(2, v / 8)
    nodes_rs = simple(across, across / nodes * v / 8, NIC, HOP_NIC, SYNC_NIC) + copy(2, v / 8 / nodes)
    assert rs.time_s == pytest.approx(LAUNCH + node_rs + nodes_rs, rel=1e-12)
    nodes_ag = simple(across, across / nodes * v / 8, NIC, HOP_NIC, SYNC_NIC) + copy(3, v / 8 / nodes)
    node_ag = simple(inside, 7 / 8 * v, NVLINK, HOP_NVLINK, SYNC_NVLINK) + copy(3, v / 8)
    assert ag.time_s == pytest.approx(LAUNCH + nodes_ag + node_ag, rel=1e-12)
    ll_node_rs = low_latency(inside, 7 / 8 * v, NVLINK, HOP_NVLINK)
    ll_nodes_rs = low_latency(across, across / nodes * v / 8, NIC, HOP_NIC)
    assert rs.time_s < LAUNCH + ll_node_rs + ll_nodes_rs


@pytest.mark.parametrize("devices", SIZES)
def test_with_tensor_parallelism_in_the_node_the_data_group_is_one_gpu_per_node_on_its_own_nic(devices: int) -> None:
    # TP 8 fills each node (Megatron-LM's rank order: tensor fastest), so a data-parallel group is one GPU of each of
    # the N nodes, 8 ranks apart: a ring of N over the GPUs' own NICs (rail-optimised), 2(N − 1) steps of 1/8 of
    # the gradients (the tensor-split eighth). Across 2 048 and 16 384 nodes the steps' latency again makes it LL.
    est = step(gpt(), devices, parallelism=roofline.TrainingParallelism(tensor=G, data=devices // G))
    row = rows(est)["data_parallel_all_reduce"]
    nodes = devices // G
    assert row.devices == nodes
    v = row.bytes
    # A device's share: each layer's weights and biases (12h² + 9h) and the table split 8 ways, its norms (4h) and
    # the positions whole: 4 · (1 572 864 + 1 152 + 4 096) + 4 194 304 + 2 097 152 = 12 603 904 parameters.
    per_device = 4 * ((12 * 1024**2 + 9 * 1024) // G + 4 * 1024) + (32768 // G + 2048) * 1024
    assert v == 2 * per_device == 25_207_808
    steps = nodes - 1
    ll = LAUNCH + 2 * low_latency(steps, steps / nodes * v, NIC, HOP_NIC)
    full = LAUNCH + 2 * simple(steps, steps / nodes * v, NIC, HOP_NIC, SYNC_NIC) + copy(2, v / nodes)
    assert ll < full
    assert row.time_s == pytest.approx(ll, rel=1e-12)
