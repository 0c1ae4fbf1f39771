"""Prediction intervals of serving estimates (docs/model/intervals.md#runs-and-serving): the iteration surface at
the ops' band edges, each kind of iteration's factor at its mean mix, the simulated schedule held."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from roofline.inference import InferenceRun, Parallelism, Workload
from roofline.intervals import ANY, Band, IntervalTable
from roofline.serving import (
    Deployment,
    EngineSpec,
    Requests,
    Scheduler,
    ServingConfigError,
    SurfaceCache,
    Targets,
    estimate_serving,
    operating_point,
    prepare,
)
from tests.roofline.models import LLAMA_3_8B
from tests.roofline.profiles import system


def banded(low: float, high: float, **bands: tuple[float, float]) -> InferenceRun:
    table = {f"{ANY}/{ANY}": Band(low, high, 1000, 5)}
    table |= {key.replace("_", "-") + "/*": Band(lo, hi, 1000, 5) for key, (lo, hi) in bands.items()}
    hw = replace(system("h100-sxm"), intervals=IntervalTable(table))
    return InferenceRun(LLAMA_3_8B, hw, Workload.uniform(1, 1, 1), Parallelism())


def closed(n: int, prompt: int, output: int, concurrency: int) -> Requests:
    return Requests(np.full(n, prompt), np.full(n, output), None, concurrency)


@pytest.mark.parametrize("graphs", [True, False])
def test_one_band_for_every_op_moves_every_figure_by_it(graphs: bool) -> None:
    # One device (no collectives), no fixed iteration cost: every iteration of the band's surfaces is exactly
    # half and twice the central one, so each mean and the run's length move by that factor, throughputs by its
    # inverse. With CUDA graphs the replayed decode iteration is scaled like its eager one.
    spec = EngineSpec(banded(0.5, 2.0), Scheduler(cuda_graphs=graphs))
    req = closed(300, 1024, 128, 16)
    ready = prepare(spec, req)
    assert ready.front.surface.band is not None
    low, high = ready.front.surface.band
    for n, c in ((1.0, 2000.0), (16.0, 16 * 1100.0), (200.0, 200 * 4000.0)):
        assert low.decode_time(n, c) == pytest.approx(0.5 * ready.front.surface.decode_time(n, c), rel=1e-9)
        assert high.decode_time(n, c) == pytest.approx(2.0 * ready.front.surface.decode_time(n, c), rel=1e-9)
    est = estimate_serving(spec, req, prepared=ready)
    assert est.band is not None
    for factors in (est.band.ttft, est.band.tpot, est.band.e2e, est.band.duration):
        assert factors == pytest.approx((0.5, 2.0), rel=1e-9)


def test_time_to_first_token_takes_the_prefill_iterations_band() -> None:
    # Decode attention × 0.9 … × 1.1, everything else × 0.5 … × 2: the iterations with prefill chunks are all the
    # "everything else" band but for their decoding sequences' attention; pure-decode ones lean on decode attention
    # as their context grows. Time to first token comes from the first kind, per output token from the mix.
    spec = EngineSpec(banded(0.5, 2.0, attention_decode=(0.9, 1.1)), Scheduler())
    est = estimate_serving(spec, closed(300, 1024, 1024, 32))
    assert est.band is not None
    ttft, tpot = est.band.ttft, est.band.tpot
    assert 0.5 <= ttft[0] < tpot[0] < 0.9 and 1.1 < tpot[1] < ttft[1] <= 2.0
    assert est.band.e2e == est.band.duration == tpot  # aggregated: the run's mix


def test_without_a_table_there_is_no_band() -> None:
    spec = EngineSpec(InferenceRun(LLAMA_3_8B, system("h100-sxm"), Workload.uniform(1, 1, 1), Parallelism()),
                      Scheduler())  # fmt: skip
    est = estimate_serving(spec, closed(50, 512, 32, 4))
    assert est.band is None


def test_a_plan_with_a_margin_checks_the_upper_edge_and_sizes_on_the_lower() -> None:
    # Every op × 0.5 … × 2, one device: every latency's upper edge is twice it, a unit's throughput half.
    dep = Deployment(EngineSpec(banded(0.5, 2.0), Scheduler(max_num_seqs=16)))
    prompt, output = np.array([1024]), np.array([128])
    targets = Targets(ttft_s=1.0, tpot_s=0.05, e2e_s=10.0)
    plain = operating_point(dep, prompt, output, targets, SurfaceCache(8192, 16, 1152))
    robust = operating_point(dep, prompt, output, replace(targets, margin="interval"), SurfaceCache(8192, 16, 1152))
    assert robust.band is not None and robust.band.tpot == pytest.approx((0.5, 2.0), rel=1e-9)
    for a, b in zip(plain.checks, robust.checks, strict=True):
        assert b.predicted == pytest.approx(2.0 * a.predicted, rel=1e-9), a.objective
    assert robust.requests_per_s == pytest.approx(plain.requests_per_s / 2.0, rel=1e-9)
    assert robust.ttft_s == plain.ttft_s  # the simulation is the same; only what is checked moves
    with pytest.raises(ServingConfigError) as err:
        Targets(margin="p90")
    assert err.value.field == "objectives.margin"
