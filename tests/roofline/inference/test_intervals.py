"""Prediction intervals of whole runs: with a table of bands (`roofline.intervals.IntervalTable`) on the system, every
op's time carries its band and the phases their sums, every op at the same edge together (docs/model/intervals.md).
The tables here are made by hand, so each figure follows from the op rows by arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest

import roofline.inference as inf
from roofline.intervals import ANY, Band, IntervalTable
from tests.roofline.inference import rows
from tests.roofline.models import MODELS
from tests.roofline.profiles import system


def table(bands: dict[str, tuple[float, float]]) -> IntervalTable:
    """Bands from many rows and devices (so none is widened), keyed `family/regime`."""
    return IntervalTable({key: Band(low, high, 1000, 5) for key, (low, high) in bands.items()})


def run(model: str, tp: int, intervals: IntervalTable | None, pipeline: int = 1) -> inf.InferenceEstimate:
    sys_ = replace(system("h100-sxm"), intervals=intervals)
    par = inf.Parallelism(tensor=tp, pipeline=pipeline, micro_batches=4 if pipeline > 1 else None)
    return inf.estimate_inference(inf.InferenceRun(MODELS[model], sys_, inf.Workload.uniform(8, 1024, 64), par))


def test_without_a_table_a_run_carries_no_interval() -> None:
    est = run("llama-3-8b", 1, None)
    assert est.prefill.time_s_p10 is None and est.decode.time_s_p90 is None
    assert est.total_time_s_band is None and est.decode_mean_step_s_band is None
    assert all(r.time_s_p10 is None for r in est.decode.rows)


def test_one_band_for_every_op_scales_a_single_device_run_by_it() -> None:
    # Every family and regime × 0.5 … × 2: one device, no collectives, so each phase is exactly half and twice.
    est = run("llama-3-8b", 1, table({f"{ANY}/{ANY}": (0.5, 2.0)}))
    plain = run("llama-3-8b", 1, None)
    assert est.total_time_s == plain.total_time_s  # the table never moves the estimate itself
    for phase in (est.prefill, est.decode):
        assert phase.time_s_p10 == pytest.approx(0.5 * phase.time_s, rel=1e-12)
        assert phase.time_s_p90 == pytest.approx(2.0 * phase.time_s, rel=1e-12)
    assert est.total_time_s_band == pytest.approx((0.5 * est.total_time_s, 2.0 * est.total_time_s), rel=1e-12)
    assert est.decode_mean_step_s_band == pytest.approx(
        (0.5 * est.decode.time_s / 63, 2.0 * est.decode.time_s / 63), rel=1e-12
    )


def test_a_band_never_excludes_the_estimate() -> None:
    # A band wholly above 1 (the model too fast everywhere) still holds the estimate: p10 = t.
    est = run("llama-3-8b", 1, table({f"{ANY}/{ANY}": (1.2, 1.5)}))
    assert est.prefill.time_s_p10 == pytest.approx(est.prefill.time_s, rel=1e-12)
    assert est.prefill.time_s_p90 == pytest.approx(1.5 * est.prefill.time_s, rel=1e-12)


def test_each_family_takes_its_own_band() -> None:
    # Decode attention × 0.8 … × 1.25, matmuls × 0.9 … × 1.1, the rest (norms, activations …) × 0.5 … × 3.
    bands = {"attention-decode/*": (0.8, 1.25), "matmul/*": (0.9, 1.1), f"{ANY}/{ANY}": (0.5, 3.0)}
    est = run("llama-3-8b", 1, table(bands))
    by = rows(est.decode)
    assert by["attention"].time_s_p10 == pytest.approx(0.8 * by["attention"].time_s, rel=1e-12)
    for name in ("qkv_projection", "output_projection", "ffn_up", "ffn_down", "lm_head"):
        assert by[name].time_s_p90 == pytest.approx(1.1 * by[name].time_s, rel=1e-12), name
    assert by["attention_norm"].time_s_p90 == pytest.approx(3.0 * by["attention_norm"].time_s, rel=1e-12)
    # The phase's edges are the sums of its rows' edges: every op at the same quantile together.
    assert est.decode.time_s_p10 == pytest.approx(sum(r.time_s_p10 or 0.0 for r in est.decode.rows), rel=1e-12)
    assert est.decode.time_s_p90 == pytest.approx(sum(r.time_s_p90 or 0.0 for r in est.decode.rows), rel=1e-12)
    # The prefill's attention is prefill attention: with no band of its own it takes the pooled one.
    pre = rows(est.prefill)
    assert pre["attention"].time_s_p90 == pytest.approx(3.0 * pre["attention"].time_s, rel=1e-12)


def test_collectives_take_their_own_band() -> None:
    # Kernels × 0.5 … × 2, collectives × 0.8 … × 1.25 (their own family: never the kernels' pooled band).
    est = run("llama-3-70b", 4, table({f"{ANY}/{ANY}": (0.5, 2.0), "collective/*": (0.8, 1.25)}))
    for phase in (est.prefill, est.decode):
        by = rows(phase)
        comm = by["tensor_parallel_all_reduce"]
        assert comm.time_s_p10 == pytest.approx(0.8 * comm.time_s, rel=1e-12)
        assert comm.time_s_p90 == pytest.approx(1.25 * comm.time_s, rel=1e-12)
        kernels = phase.time_s - comm.time_s
        assert phase.time_s_p10 == pytest.approx(0.8 * comm.time_s + 0.5 * kernels, rel=1e-12)
        assert phase.time_s_p90 == pytest.approx(1.25 * comm.time_s + 2.0 * kernels, rel=1e-12)


def test_a_pipeline_timeline_is_rebuilt_at_each_edge() -> None:
    # GPipe's prefill, 4 micro-batches over 4 stages: (m + p − 1) = 7 stage times τ = (kernels K + all-reduces C) / 4,
    # plus the sends; at p10 the kernels are halved, the all-reduces and sends at 0.8 of their time.
    est = run("llama-3-70b", 2, table({f"{ANY}/{ANY}": (0.5, 2.0), "collective/*": (0.8, 1.25)}), pipeline=4)
    by = rows(est.prefill)
    send, comm = by["pipeline_send"].time_s, by["tensor_parallel_all_reduce"].time_s
    kernels = sum(r.time_s for n, r in by.items() if n not in ("pipeline_send", "pipeline_bubble")) - comm
    assert est.prefill.time_s == pytest.approx(7 * (kernels + comm) / 4 + send, rel=1e-12)
    assert est.prefill.time_s_p10 == pytest.approx(7 * (0.5 * kernels + 0.8 * comm) / 4 + 0.8 * send, rel=1e-12)
    assert est.prefill.time_s_p90 == pytest.approx(7 * (2.0 * kernels + 1.25 * comm) / 4 + 1.25 * send, rel=1e-12)
    assert by["pipeline_send"].time_s_p10 == pytest.approx(0.8 * send, rel=1e-12)
    assert by["pipeline_bubble"].time_s_p10 == pytest.approx(3 * (0.5 * kernels + 0.8 * comm) / 4, rel=1e-12)
