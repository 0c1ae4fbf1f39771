"""Hardware profiles (`schemas.hardware`) as the core's `roofline.Hardware`, with a request's options applied."""

from __future__ import annotations

import roofline
from schemas.benchmarks import TimingScope
from schemas.estimates import EstimateContext, Options
from schemas.hardware import HardwareSpec

# Kernel-time scopes (profiler sums, graph replays) have no host launch in them: their per-kernel fixed cost is
# the shortest kernel the device runs (`roofline.KERNEL_FLOOR_S`), never more than the profile's launch cost.
# Wall-clock numbers keep the profile's kernel_launch_s, or the run's own host cost (`adapters.predict_measured`).
KERNEL_FLOOR_S = roofline.KERNEL_FLOOR_S

# The core profiles of recent (profile, options) pairs: a catalogue profile's parse is cached per process
# (`service.catalogue.service.cached_spec`), so most requests ask again for the same one, and building its core
# profile is a measurable share of the op endpoint's budget (bench/throughput.py). Each entry holds its profile, so
# the id in the key cannot be reused while it is there; profiles and `roofline.Hardware` are never changed in place.
_CORE: dict[tuple[object, ...], tuple[HardwareSpec, roofline.Hardware]] = {}
_CORE_ENTRIES = 256


def to_core(spec: HardwareSpec, ctx: EstimateContext) -> roofline.Hardware:
    """The core's view of a profile with the request's options (efficiencies, launch overhead, cache state) applied."""
    o = ctx.options
    # Every option `_to_core` reads:
    key = (id(spec), o.launch_overhead_s, o.matmul_efficiency, o.vector_efficiency, o.memory_efficiency, o.cache)
    hit = _CORE.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    hw = _to_core(spec, o)
    if len(_CORE) >= _CORE_ENTRIES:
        _CORE.clear()
    _CORE[key] = (spec, hw)
    return hw


def _to_core(spec: HardwareSpec, o: Options) -> roofline.Hardware:
    c, mem = spec.compute, spec.memory
    mu = c.matrix_unit
    return roofline.Hardware(
        name=spec.name,
        units=c.units,
        matrix_flops_per_s={str(k): v for k, v in c.matrix_flops_per_s.items()},
        vector_flops_per_s={str(k): v for k, v in c.vector_flops_per_s.items()},
        memory_bytes_per_s=float(mem.device.bandwidth_bytes_per_s or 0.0),
        memory_capacity_bytes=float(mem.device.capacity_bytes),
        launch_s=spec.overheads.kernel_launch_s if o.launch_overhead_s is None else o.launch_overhead_s,
        eff_matmul=o.matmul_efficiency or spec.efficiency.matmul,
        eff_vector=o.vector_efficiency or spec.efficiency.vector,
        eff_memory=o.memory_efficiency or spec.efficiency.memory,
        special_function_ops_per_s=c.special_function_ops_per_s,
        cache_bytes=float(mem.cache.capacity_bytes) if mem.cache else 0.0,
        cache_bandwidth_bytes_per_s=mem.cache.bandwidth_bytes_per_s if mem.cache else None,
        local_bytes_per_unit=float(mem.local.capacity_bytes) if mem.local else 0.0,
        tiles=tuple((t.m, t.n) for t in mu.tile_candidates) if mu else ((64, 64),),
        concurrent_tiles_per_unit=mu.concurrent_tiles_per_unit if mu else 1,
        alignment_bytes=mu.alignment_bytes if mu else 16,
        memory_latency_s=mem.device.latency_s,
        threads_per_unit=c.threads_per_unit,
        architecture=c.architecture,
        kind=str(spec.kind),
        clock_hz=c.clock_hz,
        warm_cache=o.cache == "warm",
    )


def cache_state(hw: roofline.Hardware) -> str:
    """The `options.cache` value a core profile was built with, as estimates report it in `assumptions.cache`."""
    return "warm" if hw.warm_cache else "cold"


def scope_launch_s(spec: HardwareSpec, scope: TimingScope) -> float:
    """The per-kernel fixed cost a prediction of a measurement in this timing scope uses."""
    if scope is TimingScope.wall_clock:
        return spec.overheads.kernel_launch_s
    return min(spec.overheads.kernel_launch_s, KERNEL_FLOOR_S)


def scoped_core(spec: HardwareSpec, slug: str, scope: TimingScope) -> roofline.Hardware:
    """The core profile a measurement in `scope` is predicted on: the profile's, with the scope's fixed cost."""
    ctx = EstimateContext(hardware=slug, options=Options(launch_overhead_s=scope_launch_s(spec, scope)))
    return to_core(spec, ctx)
