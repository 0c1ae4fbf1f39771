"""Leave one device out: every constant the op validation chose from measured data, re-derived without a device.

    .venv/bin/python -m bench.validate --leave-one-device-out

The constants and where each came from: docs/decisions/0027-leave-one-device-out.md. Each one chosen from measured
rows is a rule here, a function of the rows of a set of devices (`Facts`, `derive`, `choose_norms`); the run holds out
each device with data in turn, derives every constant from the others' rows, and predicts the held-out device's rows
with them. `bench.validate` supplies the evaluation (its scopes and profiles); this module only decides the numbers.

Data used beyond the devices the validation reports: vidur's A40 tables (validation/vidur/compute/a40), whose shortest
kernels and scalar RMS-norm bandwidth give the vidur fixed cost and the loaded memory latency without the A100. The
A40 has no catalogue profile, so it is never reported; its SM count and threads per SM are below, with sources.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

import roofline
from adapters import to_core
from hardware_db import load_hardware
from measured.datasets import Group, tables, vidur_table
from schemas.estimates import EstimateContext, Options
from schemas.hardware import HardwareCreate

A40 = "a40"
# NVIDIA A40 datasheet (GA102: 10 752 CUDA cores = 84 SMs × 128); CUDA C++ Programming Guide, compute capability 8.6:
# 1 536 resident threads per SM.
A40_UNITS = 84
A40_THREADS_PER_UNIT = 1536
SCALAR_LOAD_BYTES = 2.0  # vLLM/Sarathi's rms_norm loads one fp16 element per thread per trip (bench.validate's vidur)
LATENCY_MIN_TOKENS = 1024  # rows of at least this many tokens: the kernel streams, its fixed cost is negligible
SHORTEST_TOKENS = 2  # vidur's residual add of one or two tokens: no measurable work

# The candidates each norm is chosen among (docs/decisions/0001 tried the queueing norm at 1, 1.5, 2 and 3).
OVERLAP_NORMS = (2.0, 3.0, 4.0, 6.0)
QUEUEING_NORMS = (1.0, 1.5, 2.0, 3.0)
# The weight copies TensorRT-LLM 1.3's GEMM collector cycles (its source is unpublished: decision 0041); 0: never warm.
WEIGHT_COPIES = (0.0, 1.0, 2.0, 4.0, 8.0)
GEMM_WEIGHT_COPIES = 4.0  # shipped: chosen by the rule with every device (decision 0041)
COPIES_SCOPE = "aiconfigurator-gemm"
# The copies are the harness's, the same for every product it times: read off its bf16 GEMMs, whose kernels the op
# model knows best (the other harness constants are read off bf16 rows too, `facts`); the quantised families carry
# residuals of their own (block fp8's scales on sm_120, decision 0046) that would choose the copies in their place.
COPIES_FAMILY = "gemm"
# The families each norm is judged on: the overlap of math and memory where both matter (GEMMs near the ridge,
# docs/decisions/0027); the queueing of streaming loads on the families that run streaming kernels.
OVERLAP_FAMILIES = ("gemm",)
QUEUEING_EXCLUDED = ("gemm", "attention-generation")


class Scored(Protocol):
    """What an evaluation returns per (source, family, device): measured and predicted seconds per row."""

    source: str
    family: str
    device: str
    measured_s: np.ndarray
    predicted_s: np.ndarray


@dataclass(frozen=True)
class Constants:
    """Every constant of the op validation that was chosen from measured rows. None: no rule can derive it from the
    devices given (LLMCompass's fixed costs without the A100): the evaluation falls back to the profile's own."""

    kernel_floor_s: float  # aiconfigurator: per-kernel fixed cost of a CUDA-graph replay
    # aiconfigurator: the shortest TensorRT-LLM context- and generation-attention calls, in SM clock cycles (each
    # device's seconds × its profile's clock; `PLATEAU_CYCLES`): a device's plateau is these over its own clock
    context_plateau_cycles: float
    generation_plateau_cycles: float
    vidur_launch_s: float  # vidur: per-kernel fixed cost of a torch-profiler kernel sum
    llmcompass_call_s: float | None  # LLMCompass: softmax's plateau, the eager call's fixed cost
    llmcompass_layernorm_floor_s: float | None  # LLMCompass: the layer norm series' plateau
    llmcompass_gelu_call_s: float | None  # LLMCompass: the GELU series' plateau
    memory_latency_s: float  # every NVIDIA profile's loaded device-memory latency
    xla_floor_s: float | None = None  # XLA's matmul table: the shortest matmul's time (None: the GEMM floor)
    overlap_norm: float = 3.0  # roofline.kernel_time
    memory_queueing_norm: float = 2.0  # roofline's streaming kernels
    # roofline.NARROW_MATMUL_EFFICIENCY: (key, factor) pairs; a key no device has rows for keeps its shipped value
    narrow_matmul_efficiency: tuple[tuple[str, float], ...] = tuple(roofline.NARROW_MATMUL_EFFICIENCY.items())
    matmul_stream_efficiency: float = roofline.MATMUL_STREAM_EFFICIENCY  # a product's operand stream against a copy
    gemm_weight_copies: float = GEMM_WEIGHT_COPIES  # bench.validate's "aiconfigurator-gemm" scope
    block_scaled_step_latency: float = roofline.BLOCK_SCALED_STEP_LATENCY  # an fp4 product's wait per k-tile
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # constant -> the devices it came from

    def adjust(self, hw: roofline.Hardware) -> roofline.Hardware:
        """A core profile with this set's latency, norms and narrow-product efficiencies (a profile with no latency
        keeps none: TPU, CPU)."""
        latency = None if hw.memory_latency_s is None else self.memory_latency_s
        return replace(
            hw, memory_latency_s=latency, overlap_norm=self.overlap_norm,
            memory_queueing_norm=self.memory_queueing_norm,
            narrow_matmul_efficiency=dict(self.narrow_matmul_efficiency),
            matmul_stream_efficiency=self.matmul_stream_efficiency,
            block_scaled_step_latency=self.block_scaled_step_latency,
        )  # fmt: skip


SHIPPED_MEMORY_LATENCY_S = 650e-9  # every NVIDIA profile's memory latency (RL-ASSUME; the rule below re-derives it)
# An attention call that does no measurable work still runs its kernels' whole chain of on-chip steps (loading its
# arguments, the thread blocks' barriers, the softmax's warp and block reductions, a split's second pass, the
# epilogue), 15-25 thousand SM cycles against a few device-memory round trips (decision 0047): its plateau is a number
# of cycles, which each device runs at its own clock. The shipped plateaus are the A100's 13.3 and 10.4 µs at its
# profile's 1 410 MHz; `PLATEAU_CYCLES` names the constants the rule derives in cycles.
A100_CLOCK_HZ = next(h.compute.clock_hz for h in load_hardware() if h.slug == "a100-sxm-80gb")  # 1.41e9
PLATEAU_CYCLES = ("context_plateau_cycles", "generation_plateau_cycles")
# The constants shipped in bench/validate.py and the catalogue, for the report's first column.
SHIPPED = Constants(
    kernel_floor_s=roofline.KERNEL_FLOOR_S,
    context_plateau_cycles=13.3e-6 * A100_CLOCK_HZ,
    generation_plateau_cycles=10.4e-6 * A100_CLOCK_HZ,
    vidur_launch_s=2e-6,
    llmcompass_call_s=13.1e-6,
    llmcompass_layernorm_floor_s=52e-6,
    llmcompass_gelu_call_s=47e-6,
    memory_latency_s=SHIPPED_MEMORY_LATENCY_S,
    xla_floor_s=4.14e-6,
)


@dataclass
class Facts:
    """What each rule reads, per device: a number taken from that device's own rows (one per source table)."""

    gemm_min_s: dict[str, float] = field(default_factory=dict)
    context_min_s: dict[str, float] = field(default_factory=dict)
    generation_min_s: dict[str, float] = field(default_factory=dict)
    clock_hz: dict[str, float] = field(default_factory=dict)  # each device's profile clock (the plateaus' cycles)
    vidur_shortest_s: dict[str, float] = field(default_factory=dict)
    latency_s: dict[str, float] = field(default_factory=dict)
    llmcompass_min_s: dict[str, dict[str, float]] = field(default_factory=dict)  # device -> series -> seconds
    narrow_ratio: dict[str, dict[str, float]] = field(default_factory=dict)  # efficiency key -> device -> ratio
    xla_min_s: dict[str, float] = field(default_factory=dict)
    stream_fraction: dict[str, float] = field(default_factory=dict)
    fp4_step_fraction: dict[str, float] = field(default_factory=dict)


def _tokens(labels: Sequence[str]) -> np.ndarray:
    return np.array([float(re.search(r"T=(\d+)", label).group(1)) for label in labels])  # type: ignore[union-attr]


def facts(groups: Iterable[Group]) -> Facts:
    """The per-device numbers the rules read:
    - aiconfigurator: the shortest bf16 GEMM, context- and generation-attention call of the device's tables (the
      attention calls' turned into cycles at the device's profile clock by `derive`, `PLATEAU_CYCLES`);
    - vidur: the median residual add of at most `SHORTEST_TOKENS` tokens (no measurable work: the kernel's floor);
      the loaded memory latency at which one `SCALAR_LOAD_BYTES` load per resident thread in flight (Little's law)
      gives the median bandwidth of the scalar RMS norm over rows of at least `LATENCY_MIN_TOKENS` tokens;
    - LLMCompass: the shortest call of its softmax, layer norm and GELU series (their plateaus);
    - XLA's matmul table: its shortest matmul (no measurable work: the fixed cost of one XLA matmul);
    - aiconfigurator's quantised GEMMs: per efficiency key, the median over the GEMMs of at least
      `NARROW_RATIO_MIN_FLOPS` that the device's bf16 table also holds of the ratio of their achieved fractions of
      peak, narrow against bf16 (`narrow_ratios`).
    """
    out = Facts()
    out.narrow_ratio = narrow_ratios(groups)
    threads = {h.slug: h.compute.units * (h.compute.threads_per_unit or 0) for h in load_hardware()}
    out.clock_hz = {h.slug: h.compute.clock_hz for h in load_hardware() if h.compute.clock_hz}
    threads[A40] = A40_UNITS * A40_THREADS_PER_UNIT
    shortest: dict[str, list[np.ndarray]] = {}
    bandwidth: dict[str, list[np.ndarray]] = {}
    shortest_call = {
        "gemm": out.gemm_min_s,
        "attention-context": out.context_min_s,
        "attention-generation": out.generation_min_s,
    }
    for g in groups:
        d, low = g.device, float(np.min(g.measured_s))
        if g.source == "aiconfigurator" and g.family in shortest_call:
            if getattr(g.parts[0].op, "dtype", None) == "bf16":  # the shipped constants were read off bf16 rows
                slot = shortest_call[g.family]
                slot[d] = min(slot.get(d, np.inf), low)
        elif g.source == "vidur" and g.family == "elementwise":
            shortest.setdefault(d, []).append(g.measured_s[_tokens(g.labels) <= SHORTEST_TOKENS])
        elif g.source == "vidur" and g.family == "rmsnorm":
            rows, cols = g.parts[0].overrides["rows"], g.parts[0].overrides["cols"]
            big = rows >= LATENCY_MIN_TOKENS
            bandwidth.setdefault(d, []).append((2.0 * 2.0 * rows * cols / g.measured_s)[big])  # fp16 in and out
        elif g.source == "xla":
            out.xla_min_s[d] = min(out.xla_min_s.get(d, np.inf), low)
        elif g.source == "llmcompass" and g.family != "gemm":
            series = out.llmcompass_min_s.setdefault(d, {})
            series[g.scope] = min(series.get(g.scope, np.inf), low)
    out.stream_fraction = stream_fractions(groups, out.gemm_min_s)
    out.fp4_step_fraction = fp4_step_fractions(groups)
    for d, parts in shortest.items():
        out.vidur_shortest_s[d] = float(np.median(np.concatenate(parts)))
    for d, parts in bandwidth.items():
        out.latency_s[d] = threads[d] * SCALAR_LOAD_BYTES / float(np.median(np.concatenate(parts)))
    return out


STREAM_MAX_M = 16  # decode-shaped: the weights are nearly all the bytes and the math is negligible
STREAM_MIN_L2 = 2.0  # weights at least this many L2s: read from device memory whatever copies the harness cycles


def stream_fractions(groups: Iterable[Group], floor_s: dict[str, float]) -> dict[str, float]:
    """Per device: the median, over aiconfigurator's bf16 GEMMs of at most `STREAM_MAX_M` rows whose weights (2·k·n
    bytes) are at least `STREAM_MIN_L2` times the device's L2, of the bytes the product moves (2·(m·k + k·n + m·n))
    over (the measured time less the device's shortest GEMM, `floor_s`) over the profile's achievable bandwidth
    (datasheet × `efficiency.memory`): the fraction of a copy's rate a product's operand stream reaches
    (`roofline.MATMUL_STREAM_EFFICIENCY`)."""
    specs = {h.slug: h for h in load_hardware()}
    fractions: dict[str, list[np.ndarray]] = {}
    for g in groups:
        if g.source != "aiconfigurator" or g.family != "gemm" or g.device not in floor_s or len(g.parts) != 1:
            continue
        spec = specs[g.device]
        cache = spec.memory.cache.capacity_bytes if spec.memory.cache is not None else 0.0
        m, n, k = (np.asarray(g.parts[0].overrides[x], dtype=np.float64) for x in ("m", "n", "k"))
        keep = (m <= STREAM_MAX_M) & (2.0 * k * n >= STREAM_MIN_L2 * cache)
        if not np.any(keep):
            continue
        rate = spec.memory.device.bandwidth_bytes_per_s * spec.efficiency.memory
        moved = (2.0 * (m * k + k * n + m * n))[keep]
        fractions.setdefault(g.device, []).append(moved / (g.measured_s[keep] - floor_s[g.device]) / rate)
    return {d: float(np.median(np.concatenate(parts))) for d, parts in fractions.items()}


FP4_STEP_MAX_M = 16  # rows of A: one 128-row tile, nothing to compute
FP4_STEP_MAX_N = 4096  # columns: at most 32 tiles of 128, one wave on any device with fp4 units
FP4_STEP_MIN_K = 8192  # deep enough that the k-tiles' waits are most of the call


def fp4_step_fractions(groups: Iterable[Group]) -> dict[str, float]:
    """Per device: the least-squares slope of aiconfigurator's NVFP4 GEMM times (m ≤ `FP4_STEP_MAX_M`, n ≤
    `FP4_STEP_MAX_N`, k ≥ `FP4_STEP_MIN_K`: one wave of tiles, each walking its k loop) over the number of k-tiles
    (k / `roofline.ops.BLOCK_SCALED_FP4_K_TILE` of the device's architecture), over the profile's memory latency as
    shipped: the fraction of a round trip an fp4 product waits per k-tile (`roofline.BLOCK_SCALED_STEP_LATENCY`)."""
    specs = {h.slug: h for h in load_hardware()}
    steps: dict[str, list[np.ndarray]] = {}
    seconds: dict[str, list[np.ndarray]] = {}
    for g in groups:
        if g.source != "aiconfigurator" or not g.family.startswith("gemm") or len(g.parts) != 1:
            continue
        if str(getattr(g.parts[0].op, "quantization", "none")) != "nvfp4":
            continue
        k_tile = roofline.BLOCK_SCALED_FP4_K_TILE.get(specs[g.device].compute.architecture or "")
        if k_tile is None:
            continue
        m, n, k = (np.asarray(g.parts[0].overrides[x], dtype=np.float64) for x in ("m", "n", "k"))
        keep = (m <= FP4_STEP_MAX_M) & (n <= FP4_STEP_MAX_N) & (k >= FP4_STEP_MIN_K)
        steps.setdefault(g.device, []).append(k[keep] / k_tile)
        seconds.setdefault(g.device, []).append(g.measured_s[keep])
    out = {}
    for d in steps:
        x, y = np.concatenate(steps[d]), np.concatenate(seconds[d])
        if x.size < 2:
            continue
        slope = float(np.polyfit(x, y, 1)[0])
        out[d] = slope / SHIPPED_MEMORY_LATENCY_S
    return out


NARROW_RATIO_MIN_FLOPS = 2e11  # GEMMs this large run at their kernel's steady rate on every device with data


def narrow_ratios(groups: Iterable[Group]) -> dict[str, dict[str, float]]:
    """Per `roofline.NARROW_MATMUL_EFFICIENCY` key and device: the median, over aiconfigurator's GEMMs of at least
    `NARROW_RATIO_MIN_FLOPS` measured both quantised and in bf16, of (bf16 time / narrow product time) × (bf16 peak /
    narrow peak): the narrow product's achieved fraction of its peak over bf16's on the same shape. The narrow call's
    time includes its input's quantise kernels, which the model costs apart (`roofline.matmul`'s `quantization`):
    their modelled time (the call's less the product's alone, on the device's profile) is taken off first, so the
    factor is the product's own."""
    specs = {h.slug: h for h in load_hardware()}
    plain: dict[str, dict[tuple[float, float, float], float]] = {}
    narrow: dict[tuple[str, str], list[tuple[tuple[float, float, float], float]]] = {}
    for g in groups:
        if g.source != "aiconfigurator" or not g.family.startswith("gemm") or len(g.parts) != 1:
            continue
        op, v = g.parts[0].op, g.parts[0].overrides
        shapes = list(zip(v["m"], v["n"], v["k"], strict=True))
        quantization = str(getattr(op, "quantization", "none"))
        if quantization == "none" and getattr(op, "dtype", None) == "bf16":
            plain.setdefault(g.device, {}).update(zip(shapes, g.measured_s, strict=True))
        elif quantization != "none":
            narrow.setdefault((quantization, g.device), []).extend(zip(shapes, g.measured_s, strict=True))
    out: dict[str, dict[str, float]] = {}
    for (quantization, device), rows in narrow.items():
        q = roofline.QUANTIZATIONS[quantization]
        rates = specs[device].compute.matrix_flops_per_s
        # A 4-bit product's rate is its k-tiles' wait (`fp4_step_fractions`), not a factor on its peak.
        if device not in plain or q.dtype not in rates or q.dtype == "fp4":
            continue
        peak_ratio = rates["bf16"] / rates[q.dtype]
        kept = [
            (shape, seconds)
            for shape, seconds in rows
            if shape in plain[device] and 2.0 * shape[0] * shape[1] * shape[2] >= NARROW_RATIO_MIN_FLOPS
        ]
        if not kept:
            continue
        m, n, k = (np.array([shape[i] for shape, _ in kept]) for i in range(3))
        quantise_s = _quantise_s(specs[device], quantization, m, n, k)
        ratios = [
            plain[device][shape] / (seconds - extra) * peak_ratio
            for (shape, seconds), extra in zip(kept, quantise_s, strict=True)
        ]
        out.setdefault(q.efficiency, {})[device] = float(np.median(ratios))
    return out


def core_profile(spec: HardwareCreate, launch_s: float) -> roofline.Hardware:
    """A catalogue profile as the service maps it, with the per-kernel fixed cost of a timing scope."""
    return to_core(spec, EstimateContext(hardware=spec.slug, options=Options(launch_overhead_s=launch_s)))


def _quantise_s(spec: HardwareCreate, quantization: str, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The modelled time of the quantise kernels of a quantised product: the call's less the product's alone."""
    hw = core_profile(spec, SHIPPED.kernel_floor_s)
    vector = hw.vector_peak("fp32")
    call = roofline.single(roofline.matmul(hw, m, n, k, quantization=quantization), hw, vector, hw.launch_s)
    alone = roofline.matmul(hw, m, n, k, quantization=quantization, input_quantized=True)
    product = roofline.single(alone, hw, vector, hw.launch_s)
    out: np.ndarray = np.asarray(call.time_s) - np.asarray(product.time_s)
    return out


def a40_groups(root: Path) -> list[Group]:
    """vidur's A40 tables, for the rules only (no A40 profile: they are never predicted)."""
    found = [g for path in tables(root / "vidur" / "compute" / "a40", "*/*/mlp.csv") for g in vidur_table(path)]
    for g in found:
        g.device = A40
    return found


def _pick(values: dict[str, float], devices: set[str], name: str, sources: dict[str, str]) -> float | None:
    """The median over `devices` of a per-device number (None if none of them has it), noting which devices."""
    have = sorted(d for d in values if d in devices)
    if not have:
        sources[name] = "none"
        return None
    sources[name] = ", ".join(have)
    return float(statistics.median(values[d] for d in have))


def _cycles(seconds: dict[str, float], clock_hz: dict[str, float]) -> dict[str, float]:
    """Per-device seconds as SM clock cycles at each device's profile clock (a device without one is left out)."""
    return {d: s * clock_hz[d] for d, s in seconds.items() if clock_hz.get(d)}


def derive(f: Facts, devices: set[str]) -> Constants:
    """The closed-form constants from the rows of `devices` alone: each the median over those devices of the
    per-device number `facts` reads. The norms stay at their shipped values (`choose_norms` chooses them)."""
    src: dict[str, str] = {}

    def need(value: float | None, name: str) -> float:
        if value is None:
            raise ValueError(f"no device among {sorted(devices)} has the rows {name} is derived from")
        return value

    llm = {series: {d: v[series] for d, v in f.llmcompass_min_s.items() if series in v} for series in _LLM_SERIES}
    step = _pick(f.fp4_step_fraction, devices, "block_scaled_step_latency", src)
    stream = _pick(f.stream_fraction, devices, "matmul_stream_efficiency", src)
    narrow = dict(roofline.NARROW_MATMUL_EFFICIENCY)
    for key, per_device in f.narrow_ratio.items():
        value = _pick(per_device, devices, f"narrow_matmul_efficiency.{key}", src)
        if value is not None:
            narrow[key] = round(value, 2)
    return Constants(
        kernel_floor_s=need(_pick(f.gemm_min_s, devices, "kernel_floor_s", src), "kernel_floor_s"),
        context_plateau_cycles=need(
            _pick(_cycles(f.context_min_s, f.clock_hz), devices, "context_plateau_cycles", src),
            "context_plateau_cycles",
        ),
        generation_plateau_cycles=need(
            _pick(_cycles(f.generation_min_s, f.clock_hz), devices, "generation_plateau_cycles", src),
            "generation_plateau_cycles",
        ),
        vidur_launch_s=need(_pick(f.vidur_shortest_s, devices, "vidur_launch_s", src), "vidur_launch_s"),
        llmcompass_call_s=_pick(llm["llmcompass"], devices, "llmcompass_call_s", src),
        llmcompass_layernorm_floor_s=_pick(llm["llmcompass-layernorm"], devices, "llmcompass_layernorm_floor_s", src),
        llmcompass_gelu_call_s=_pick(llm["llmcompass-gelu"], devices, "llmcompass_gelu_call_s", src),
        memory_latency_s=need(_pick(f.latency_s, devices, "memory_latency_s", src), "memory_latency_s"),
        xla_floor_s=_pick(f.xla_min_s, devices, "xla_floor_s", src),
        narrow_matmul_efficiency=tuple(sorted(narrow.items())),
        # Without a device with cold decode-shaped GEMMs the shipped fraction stands.
        matmul_stream_efficiency=round(stream, 2) if stream is not None else roofline.MATMUL_STREAM_EFFICIENCY,
        # Without a device with NVFP4 rows (the A100 alone) the shipped fraction stands: no product it predicts waits.
        block_scaled_step_latency=round(step, 2) if step is not None else roofline.BLOCK_SCALED_STEP_LATENCY,
        sources=src,
    )


_LLM_SERIES = ("llmcompass", "llmcompass-layernorm", "llmcompass-gelu")

Evaluate = Callable[[Sequence[Group], Constants], Sequence[Scored]]


def _score(results: Sequence[Scored], keep: Callable[[str], bool]) -> float:
    """The mean over (source, family, device) cells of their median absolute error, over the families `keep`s."""
    medians = [float(np.median(np.abs(r.predicted_s / r.measured_s - 1.0))) for r in results if keep(r.family)]
    return float(np.mean(medians)) if medians else np.nan


def choose_norms(groups: Sequence[Group], base: Constants, evaluate: Evaluate) -> Constants:
    """The two norms and the GEMM collector's weight copies chosen on `groups` (the training devices' rows), one after
    the other: the overlap norm among `OVERLAP_NORMS` with the least `_score` over `OVERLAP_FAMILIES`, then the
    queueing norm among `QUEUEING_NORMS` on every family but `QUEUEING_EXCLUDED`, then the copies among
    `WEIGHT_COPIES` on the bf16 GEMMs of `COPIES_SCOPE` (`COPIES_FAMILY`); the first of equals; a constant with no
    family to judge it keeps its shipped value."""
    chosen = base
    for name, candidates, keep in (
        ("overlap_norm", OVERLAP_NORMS, lambda family: family in OVERLAP_FAMILIES),
        ("memory_queueing_norm", QUEUEING_NORMS, lambda family: family not in QUEUEING_EXCLUDED),
        ("gemm_weight_copies", WEIGHT_COPIES, lambda family: family == COPIES_FAMILY),
    ):
        # Only the judged families' groups are evaluated (the others' results would be discarded), and for the weight
        # copies only the groups of the scope that has them.
        judged = [g for g in groups if keep(g.family) and (name != "gemm_weight_copies" or g.scope == COPIES_SCOPE)]
        scores = [_score(evaluate(judged, replace(chosen, **{name: p})), keep) for p in candidates]
        if all(np.isnan(scores)):
            chosen.sources[name] = "none (shipped value)"
            continue
        best = candidates[int(np.nanargmin(scores))]
        chosen = replace(chosen, **{name: best})
        chosen.sources[name] = "chosen on " + ", ".join(sorted({g.device for g in groups}))
    return chosen


@dataclass
class Fold:
    """One held-out device: the constants derived without it, and its rows predicted with them."""

    device: str
    constants: Constants
    results: list[Scored]


def leave_one_device_out(
    groups: Sequence[Group], extra: Sequence[Group], evaluate: Evaluate, devices: Sequence[str] | None = None
) -> list[Fold]:
    """Each device of `groups` (or of `devices`) held out in turn: the constants derived from every other device's
    rows (`groups` and `extra`, data-only devices such as vidur's A40), the norms chosen on the other devices'
    `groups`, and the held-out device's groups predicted with them."""
    f = facts([*groups, *extra])
    everyone = {g.device for g in [*groups, *extra]}
    folds = []
    for device in devices or sorted({g.device for g in groups}):
        train = [g for g in groups if g.device != device]
        constants = choose_norms(train, derive(f, everyone - {device}), evaluate)
        held = [g for g in groups if g.device == device]
        folds.append(Fold(device, constants, list(evaluate(held, constants))))
    return folds


def in_sample(groups: Sequence[Group], extra: Sequence[Group], evaluate: Evaluate) -> Constants:
    """The rules applied to every device's rows: what they choose with nothing held out (to compare with `SHIPPED`)."""
    f = facts([*groups, *extra])
    return choose_norms(groups, derive(f, {g.device for g in [*groups, *extra]}), evaluate)
