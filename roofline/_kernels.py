"""Kernels: the unit of cost. An op is one or more kernels; a fused chain merges its ops into one kernel."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from roofline import _num
from roofline._estimate import Array, Estimate, Num, kernel_time
from roofline._hardware import Hardware


def arr(x: float | Array | Sequence[float]) -> Array:
    out: Array = np.asarray(x, dtype=np.float64)
    return out


# A kernel's fixed cost when no host launch precedes it (a CUDA-graph replay, a profiler's kernel sum): only the
# device's own scheduling of the next kernel, the shortest kernel a graph replays (aiconfigurator's 1×32×32 GEMM on an
# A100, 2.5 µs: validation/aiconfigurator-a100/gemm_perf.csv). The kernel-time scopes of measurements, the serving
# engines' decode graphs and the validation's graph-replay tables all use it.
KERNEL_FLOOR_S = 2.5e-6

# How the two limits of a streaming kernel combine: the device's bandwidth and Little's law over the loads its threads
# keep in flight (`Hardware.parallel_bandwidth`). They are not independent: as the traffic nears the bandwidth,
# requests queue at the memory controllers and the loaded latency grows, so a kernel runs below both limits near the
# crossover. For a closed system (every thread waits for its load before issuing the next) the throughput lies
# between the optimistic asymptotic bound, min(bandwidth, Little's-law rate) (p → ∞), and the pessimistic
# balanced-job bound 1 / (1/bandwidth + 1/Little's-law rate) (p = 1) (Lazowska, Zahorjan, Graham, Sevcik,
# "Quantitative System Performance", 1984, ch. 5, asymptotic and balanced job bounds). p = 2 sits between them
# (docs/model/memory-bound.md).
MEMORY_QUEUEING_NORM = 2.0


@dataclass
class Kernel:
    """The cost of one kernel before memory time: math per unit, and the tensors it reads and writes.

    `chained_in_bytes` is the input that, inside a chain, is the previous op's output (on chip when fused);
    `external_in_bytes` are the inputs that always come from device memory.
    """

    flops: Num
    matrix_s: Num  # time on the matrix unit (tile- and wave-quantized), 0 if none
    vector_flops: Num  # of `flops`, those on the vector unit
    sfu_ops: Num  # transcendentals on the special-function units
    external_in_bytes: Num
    chained_in_bytes: Num
    out_bytes: Num
    peak: Num  # FLOP/s of the unit that does this kernel's main math
    unit: str
    consumes_whole_input: bool = False  # a matmul needs all of its chained operand, not a stream of it
    # Time the compute units spend waiting rather than computing, on top of `matrix_s`: a tiled kernel's pipeline
    # fill and output store per wave (`roofline.ops.K_STEP`). It adds to the compute timeline, not to memory time.
    exposed_s: Num = 0.0
    launches: Num = 1.0  # a split-K matmul is 2: the product, the sum
    # How a streaming kernel loads (`roofline.ops.MEMORY_ACCESS`): every thread keeps one load of `access_bytes`
    # in flight, `dependent_loads` in series. None: tiled kernels (matmul, attention) that stage their loads.
    access_bytes: float | None = None
    dependent_loads: float = 1.0
    # Loads one thread issues one after another over the whole kernel (a loop whose every trip waits for its load),
    # for a kernel whose threads make many such trips (`memory_s`); 0: not modelled (one round trip at least).
    serial_loads: Num = 0.0
    # Bytes read again from the last-level cache (L2), not from device memory: data this kernel already brought on
    # chip and reads a second time while it is still there (`cache_s`). Only set when the device's cache bandwidth
    # is known (`Hardware.cache_bandwidth_bytes_per_s`); otherwise an op charges those reads to device memory.
    cache_in_bytes: Num = 0.0
    # A matrix product's operand stream: a tiled kernel that reaches `Hardware.stream_efficiency` of the device
    # memory's achievable bandwidth (`MATMUL_STREAM_EFFICIENCY`), and that a `Hardware.warm_operands` scope serves
    # from the cache.
    operand_stream: bool = False
    extra: dict[str, Num] = field(default_factory=dict)
    assumptions: dict[str, object] = field(default_factory=dict)

    def compute_s(self, hw: Hardware, dtype_vector_peak: float) -> Num:
        """Math time: the matrix, vector and special-function units work concurrently, so the slowest one counts."""
        vector_s = self.vector_flops / (dtype_vector_peak * hw.eff_vector)
        sfu_rate = hw.special_function_ops_per_s or dtype_vector_peak / 4.0
        sfu_s = self.sfu_ops / (sfu_rate * hw.eff_vector)
        return _num.maximum(self.matrix_s, _num.maximum(vector_s, sfu_s))

    def memory_s(self, hw: Hardware, moved: Num) -> Num:
        """Time to move `moved` bytes. A tiled kernel moves them at the achievable peak bandwidth. A streaming kernel
        is held by two limits at once, the bandwidth and the bytes its threads keep in flight over the memory latency
        (`Hardware.parallel_bandwidth` over every resident thread), combined as `MEMORY_QUEUEING_NORM` says; and by the
        chain of round trips one thread makes (`serial_loads` × `dependent_loads` latencies), which a grid of few
        thread blocks cannot hide behind other threads' traffic: the three combine the same way. Never less than one
        round trip (the loads in series) of that latency."""
        bw = hw.memory_bytes_per_s * hw.eff_memory
        if self.access_bytes is None:
            return moved / (bw * hw.stream_efficiency if self.operand_stream else bw)
        resident = hw.units * (hw.threads_per_unit or 0)
        latency_bound = hw.parallel_bandwidth(np.asarray(float(resident)), self.access_bytes, self.dependent_loads)
        p = MEMORY_QUEUEING_NORM if hw.memory_queueing_norm is None else hw.memory_queueing_norm
        seconds = moved * ((1.0 / bw) ** p + (1.0 / latency_bound) ** p) ** (1.0 / p)
        latency = hw.memory_latency_s or 0.0
        chain = latency * self.dependent_loads * self.serial_loads
        seconds = (seconds**p + chain**p) ** (1.0 / p)
        return _num.maximum(seconds, _num.where(moved > 0, latency * self.dependent_loads, 0.0))

    def cache_s(self, hw: Hardware, moved: Num) -> Num:
        """Time the last-level cache needs to serve this kernel: every byte the compute units read or write passes
        through it (`moved`, the device-memory bytes, and `cache_in_bytes`, the re-reads it serves itself), at its
        achievable bandwidth (the device's peak × `eff_memory`, RL-ASSUME: the fraction copies reach of device
        memory). The hierarchical roofline: each level of the memory hierarchy is a roof of its own and the slowest
        one holds (Ilic, Pratas, Sousa, "Cache-aware Roofline model", IEEE CAL 2014; Yang, Kurth, Williams,
        "Hierarchical Roofline analysis for GPUs", CCPE 2020). 0 when the cache bandwidth is unknown."""
        if hw.cache_bandwidth_bytes_per_s is None:
            # No published L2 bandwidth: only the re-reads are charged, at the shared-read rate per SM
            # (`Hardware.shared_l2_read_bytes_per_s`); the device-memory stream is held by device memory alone.
            shared = hw.shared_l2_read_bytes_per_s
            if shared is None:
                return _num.zeros_like(moved)
            return self.cache_in_bytes / (shared * hw.eff_memory) + _num.zeros_like(moved)
        return (moved + self.cache_in_bytes) / (hw.cache_bandwidth_bytes_per_s * hw.eff_memory)


def _shaped(values: Num, shape: tuple[int, ...]) -> Num:
    """`values` with the estimate's shape: one point is a float (`roofline._num`), many a broadcast view only where
    the shape differs."""
    if shape == ():
        return float(values)
    out: Array = np.asarray(values) if np.shape(values) == shape else np.broadcast_to(values, shape)
    return out


def _most_flops(k: Kernel) -> float:
    if isinstance(k.flops, float):
        return k.flops
    return float(np.max(k.flops)) if np.size(k.flops) else 0.0


def _merged(kernels: Sequence[Kernel]) -> tuple[Kernel, dict[str, Num], dict[str, object]]:
    """The kernel doing the most math (its unit and peak describe the whole), and everyone's details."""
    main = kernels[0] if len(kernels) == 1 else max(kernels, key=_most_flops)
    extra: dict[str, Num] = {}
    assumptions: dict[str, object] = {}
    for k in kernels:
        extra.update(k.extra)
        assumptions.update(k.assumptions)
    return main, extra, assumptions


def _warm(k: Kernel, hw: Hardware, moved: Num, cold_s: Num) -> Num:
    """Memory time in a warm-cache scope (`Hardware.warm_cache`): a kernel whose bytes (device-memory and L2 re-reads)
    fit in the last-level cache reads and writes them there, at the L2's rate (`Hardware.shared_l2_read_bytes_per_s`
    × `eff_memory`), never slower than from device memory; a larger one streams from device memory as when cold."""
    l2 = hw.shared_l2_read_bytes_per_s
    if l2 is None or hw.cache_bytes <= 0.0:
        return cold_s
    total = moved + k.cache_in_bytes
    return _num.where(total <= hw.cache_bytes, _num.minimum(cold_s, total / (l2 * hw.eff_memory)), cold_s)


def single(kernels: Sequence[Kernel], hw: Hardware, vector_peak: float, launch_s: float) -> Estimate:
    """Kernels run one after another, each reading and writing device memory.

    Each kernel costs `kernel_time`: its fixed cost (once per launch it stands for), then the smooth maximum of
    math and memory time, never less than math plus the waits a tiled kernel cannot hide. `compute_s` reports
    the math alone and `overhead_s` the fixed costs.
    """
    if all(isinstance(k.flops, float) and isinstance(k.out_bytes, float) for k in kernels):
        shape: tuple[int, ...] = ()
    else:
        shape = np.broadcast_shapes(*(np.shape(k.flops) for k in kernels), *(np.shape(k.out_bytes) for k in kernels))
    total: dict[str, Num] = dict.fromkeys(("flops", "bytes", "compute", "memory", "overhead", "time"), 0.0)
    for k in kernels:
        moved = k.external_in_bytes + k.chained_in_bytes + k.out_bytes
        c, m = k.compute_s(hw, vector_peak), _num.maximum(k.memory_s(hw, moved), k.cache_s(hw, moved))
        if hw.warm_cache or (hw.warm_operands and k.operand_stream):
            m = _warm(k, hw, moved, m)
        total["flops"] = total["flops"] + k.flops
        total["bytes"] = total["bytes"] + moved
        total["compute"] = total["compute"] + c
        total["memory"] = total["memory"] + m
        total["overhead"] = total["overhead"] + launch_s * k.launches
        total["time"] = total["time"] + kernel_time(c, m, launch_s * k.launches, k.exposed_s, hw.overlap_norm)
    main, extra, assumptions = _merged(kernels)
    assumptions = {"kernels": len(kernels), **assumptions}
    return Estimate(
        flops=_shaped(total["flops"], shape),
        bytes=_shaped(total["bytes"], shape),
        compute_s=_shaped(total["compute"], shape),
        memory_s=_shaped(total["memory"], shape),
        overhead_s=_shaped(total["overhead"], shape),
        time_s=_shaped(total["time"], shape),
        peak_flops_per_s=_shaped(main.peak, shape),
        bandwidth_bytes_per_s=hw.memory_bytes_per_s,
        unit=main.unit,
        extra=extra,
        assumptions=assumptions,
    )


def fuse(kernels: Sequence[Kernel], hw: Hardware) -> Kernel:
    """Merge a chain into one kernel: only the chain's external inputs and its last output touch device memory,
    except an intermediate that a matmul consumes whole and that outgrows on-chip memory (written and read back)."""
    first, last = kernels[0], kernels[-1]
    external = first.external_in_bytes + first.chained_in_bytes
    spilled = np.zeros_like(arr(first.out_bytes))
    for producer, consumer in itertools.pairwise(kernels):
        external = external + consumer.external_in_bytes
        if consumer.consumes_whole_input:
            spill = producer.out_bytes > hw.on_chip_bytes
            spilled = spilled + np.where(spill, 2.0 * producer.out_bytes, 0.0)
    main, extra, assumptions = _merged(kernels)
    ideal = external + last.out_bytes
    extra["ideal_bytes"] = ideal
    extra["spilled_bytes"] = spilled
    return Kernel(
        flops=sum((k.flops for k in kernels), start=np.zeros(())),
        matrix_s=sum((k.matrix_s for k in kernels), start=np.zeros(())),
        exposed_s=sum((k.exposed_s for k in kernels), start=np.zeros(())),
        launches=np.max(np.stack(np.broadcast_arrays(*(k.launches for k in kernels))), axis=0),
        vector_flops=sum((k.vector_flops for k in kernels), start=np.zeros(())),
        sfu_ops=sum((k.sfu_ops for k in kernels), start=np.zeros(())),
        external_in_bytes=external + spilled,
        chained_in_bytes=np.zeros(()),
        out_bytes=last.out_bytes,
        cache_in_bytes=sum((k.cache_in_bytes for k in kernels), start=np.zeros(())),
        operand_stream=any(k.operand_stream for k in kernels),
        peak=main.peak,
        unit=main.unit,
        extra=extra,
        assumptions=assumptions,
        **_fused_access(kernels),
    )


def _fused_access(kernels: Sequence[Kernel]) -> dict[str, Any]:
    """A fused kernel loads like its members: if they are all memory-bound streams, as the narrowest of them
    (the fused loop runs at the pace of its slowest load); if any is tiled (a matmul), as a tiled kernel."""
    if any(k.access_bytes is None for k in kernels):
        return {}
    narrow = min(kernels, key=lambda k: (k.access_bytes or 0.0) / k.dependent_loads)
    serial = np.max(np.stack(np.broadcast_arrays(*(k.serial_loads for k in kernels))), axis=0)
    return {"access_bytes": narrow.access_bytes, "dependent_loads": narrow.dependent_loads, "serial_loads": serial}


# Backward FLOPs of an elementwise op: about twice its forward (the local derivative and the chain-rule product),
# the usual training estimate (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", C ≈ 6N: backward 2×
# forward).
BACKWARD_FLOPS = 2.0


def _backward(kernels: Sequence[Kernel], hw: Hardware, fused: bool, saved: str) -> list[Kernel]:
    """The forward and backward kernels of an elementwise chain trained through, with its intermediates either
    stored in the forward pass and reloaded (`saved` = "store") or recomputed from the chain's inputs in the backward
    kernel ("recompute"; seed 002's three sigmoids: 8 accesses stored, 5 recomputed).

    Forward: reads the inputs, writes the output (and, stored, every intermediate). Backward: reads the incoming
    gradient (the output's size) and the intermediates (stored) or the inputs again (recomputed), writes one gradient
    per input. Unfused (stored only), each op's backward kernel reads its output's gradient and its saved input and
    writes its input's gradient.
    """
    if any(k.access_bytes is None for k in kernels):
        raise ValueError("backward is modelled for chains of elementwise ops (no matmul or attention)")
    inputs = kernels[0].external_in_bytes + kernels[0].chained_in_bytes
    for k in kernels[1:]:
        inputs = inputs + k.external_in_bytes
    forward_flops = sum((k.flops for k in kernels), start=np.zeros(()))
    if not fused:
        if saved != "store":
            raise ValueError("recompute needs a fused chain: unfused kernels keep nothing on chip to recompute from")
        grads: list[Kernel] = []
        for k in kernels:
            grad_in = k.external_in_bytes + k.chained_in_bytes
            grads.append(replace(
                k, flops=BACKWARD_FLOPS * k.flops, vector_flops=BACKWARD_FLOPS * k.vector_flops,
                external_in_bytes=k.out_bytes + grad_in, chained_in_bytes=np.zeros(()), out_bytes=grad_in,
                extra={}, assumptions={},
            ))  # fmt: skip
        return [*kernels, *reversed(grads)]
    forward = fuse(kernels, hw)
    intermediates = sum((k.out_bytes for k in kernels[:-1]), start=np.zeros(()))
    store = saved == "store"
    if store:
        forward.out_bytes = forward.out_bytes + intermediates
    grad_flops = BACKWARD_FLOPS * forward_flops + (0.0 if store else forward_flops)
    backward = replace(
        forward, flops=grad_flops, vector_flops=grad_flops, sfu_ops=forward.sfu_ops * (0.0 if store else 1.0),
        external_in_bytes=kernels[-1].out_bytes + (intermediates if store else inputs), chained_in_bytes=np.zeros(()),
        out_bytes=inputs, extra={}, assumptions={},
    )  # fmt: skip
    forward.assumptions = {**forward.assumptions, "backward": saved}
    return [forward, backward]


def chain(
    ops: Sequence[Sequence[Kernel]],
    hw: Hardware,
    fused: bool,
    vector_peak: float,
    launch_s: float,
    backward: str | None = None,
) -> Estimate:
    """Ops one after another, each consuming the previous op's output.

    A matmul consumes it as whichever operand has its size (A: b·m·k, B: b·k·n); other ops as their first input.
    Fused: one kernel (`fuse`). Unfused: every kernel reads its inputs from and writes its output to device memory.
    `backward` ("store" | "recompute") adds the training backward pass of an elementwise chain (`_backward`).
    """
    kernels: list[Kernel] = list(ops[0])
    for index, op in enumerate(ops[1:], start=1):
        head = op[0]
        if "a_bytes" in head.extra:
            produced = kernels[-1].out_bytes
            for operand in ("a_bytes", "b_bytes"):
                if np.allclose(head.extra[operand], produced):
                    head.external_in_bytes = head.external_in_bytes - head.extra[operand]
                    head.chained_in_bytes = head.extra[operand]
                    break
            else:
                raise ValueError(
                    f"ops[{index}]: neither operand of this matmul has the size of the previous op's output"
                )
        kernels.extend(op)
    if backward is not None:
        return single(_backward(kernels, hw, fused, backward), hw, vector_peak, launch_s)
    if fused:
        return single([fuse(kernels, hw)], hw, vector_peak, launch_s)
    return single(kernels, hw, vector_peak, launch_s)
