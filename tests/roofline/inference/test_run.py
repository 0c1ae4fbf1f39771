"""Whole runs (`roofline.estimate_inference`, `roofline.estimate_inferences`): runs evaluated together, totals, the
GPipe pipeline timeline, inputs that cannot be built, and corrections (calibration) of every op group."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import roofline
import roofline.inference as inf
from tests.roofline.inference import rows
from tests.roofline.models import MODELS
from tests.roofline.profiles import system


def test_runs_evaluated_together_equal_runs_evaluated_alone() -> None:
    hw = system("h100-sxm")
    runs = [
        inf.InferenceRun(MODELS[slug], hw, inf.Workload.uniform(b, 512, 64), inf.Parallelism(tensor=t))
        for slug, b, t in (("llama-3-8b", 4, 1), ("llama-3-70b", 16, 4), ("mixtral-8x7b", 8, 2), ("llama-3-8b", 8, 2))
    ]
    together = inf.estimate_inferences(runs)
    for run, est in zip(runs, together, strict=True):
        alone = inf.estimate_inference(run)
        assert est.total_time_s == pytest.approx(alone.total_time_s, rel=1e-12)
        assert [r.time_s for r in est.decode.rows] == pytest.approx([r.time_s for r in alone.decode.rows], rel=1e-12)


def test_totals_are_the_sum_of_their_parts() -> None:
    model = MODELS["llama-3-70b"]
    est = inf.estimate_inference(
        inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(8, 1024, 128), inf.Parallelism(4))
    )
    assert est.total_time_s == est.prefill.time_s + est.decode.time_s
    for phase in (est.prefill, est.decode):
        assert sum(r.time_s for r in phase.rows) == pytest.approx(phase.time_s)
    assert est.decode_mean_step_s == pytest.approx(est.decode.time_s / 127)


def test_pipeline_prefill_is_m_plus_p_minus_1_stage_times() -> None:
    model = MODELS["llama-3-70b"]
    hw = system("h100-sxm")
    wl = inf.Workload.uniform(8, 512, 2)
    est = inf.estimate_inference(
        inf.InferenceRun(model, hw, wl, inf.Parallelism(tensor=2, pipeline=4, micro_batches=4))
    )
    assert est.pipeline_bubble_fraction == pytest.approx(3 / 7)  # (p − 1)/(m + p − 1), GPipe
    r = rows(est.prefill)
    work = sum(row.time_s for name, row in r.items() if name not in ("pipeline_bubble", "pipeline_send"))
    tau = work / 4  # each device runs its quarter of the layers for each of the 4 micro-batches
    assert r["pipeline_bubble"].time_s == pytest.approx(3 * tau)
    assert est.prefill.time_s == pytest.approx((4 + 4 - 1) * tau + r["pipeline_send"].time_s)
    assert r["pipeline_send"].calls == 3
    # Weights: 80 layers over 4 stages (20 each), the LM head on the last; all split 2 ways.
    alone = inf.estimate_inference(inf.InferenceRun(model, hw, wl, inf.Parallelism(tensor=2)))
    assert est.memory.weights_bytes < alone.memory.weights_bytes / 3.5


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"parallelism": inf.Parallelism(tensor=3)}, "parallelism.tensor"),
        ({"parallelism": inf.Parallelism(tensor=16)}, "parallelism.tensor"),
        ({"parallelism": inf.Parallelism(expert=2)}, "parallelism.expert"),
        ({"parallelism": inf.Parallelism(pipeline=81)}, "parallelism.pipeline"),
        ({"precision": inf.Precision("bf16", "fp8", "bf16")}, "dtypes.activations"),
        ({"attention": "sparse"}, "implementation.attention"),
    ],
)
def test_runs_that_cannot_be_built_name_the_input(change: dict[str, object], field: str) -> None:
    run = inf.InferenceRun(MODELS["llama-3-70b"], system("a100-sxm-80gb"), inf.Workload.uniform(1, 8, 2))
    with pytest.raises(inf.InferenceConfigError) as err:
        inf.estimate_inferences([run, replace(run, **change)])  # type: ignore[arg-type]
    assert err.value.field == field
    assert err.value.index == 1


# --- corrections (calibration) -------------------------------------------------------------------------------------


def test_a_corrector_sees_every_op_group_once_and_its_times_are_what_is_summed() -> None:
    """A corrector that doubles every op's and collective's time: the pipeline timeline is homogeneous in the op
    times (max(m·τ, p·(τ + send)), (m + p − 1)·τ + (p − 1)·send), so every phase, row, step and communication figure
    doubles exactly, and the raw figures are the uncorrected run's."""
    seen: list[inf.OpGroup] = []

    def double(group: inf.OpGroup) -> inf.Corrected:
        seen.append(group)
        assert group.work_s.shape == group.time_s.shape and np.all(group.work_s <= group.time_s)
        return inf.Corrected(2 * group.time_s, np.ones(group.time_s.size, dtype=np.int64), f"x2 {group.op}")

    model = MODELS["llama-3-70b"]
    plain = system("h100-sxm")
    doubled = replace(plain, correct=double)
    wl = inf.Workload(np.array([512, 300]), np.array([40, 9]), np.array([5, 3]))  # two kinds of request
    par = inf.Parallelism(tensor=2, pipeline=4, micro_batches=4)
    raw, got = (
        inf.estimate_inference(inf.InferenceRun(model, s, wl, par, decode_samples=16)) for s in (plain, doubled)
    )
    # One call per group of alike ops (not per layer or step): a few dozen, collectives included.
    assert 0 < len(seen) < 40 and {g.op for g in seen} >= {"matmul", "attention", "layernorm", "collective"}
    reduce = next(g for g in seen if g.op == "collective" and g.static["collective"] == "all_reduce")
    assert reduce.static == {"collective": "all_reduce", "devices": 2, "dtype": "bf16"}
    for phase in ("prefill", "decode"):
        a, b = getattr(raw, phase), getattr(got, phase)
        assert b.time_s == pytest.approx(2 * a.time_s, rel=1e-12) and b.raw_time_s == pytest.approx(a.time_s)
        assert a.raw_time_s is None
        for name, row in rows(b).items():
            assert row.time_s == pytest.approx(2 * rows(a)[name].time_s, rel=1e-12), (phase, name)
            assert row.raw_time_s == pytest.approx(rows(a)[name].time_s, rel=1e-12), (phase, name)
            if name not in ("pipeline_send", "pipeline_bubble"):
                assert row.corrections and all(m == 1 and label.startswith("x2 ") for label, m in row.corrections)
        assert b.communication_s["tensor_parallel"] == pytest.approx(2 * a.communication_s["tensor_parallel"])
    assert got.decode_mean_step_s == pytest.approx(2 * (raw.decode_mean_step_s or 0.0), rel=1e-12)


def test_an_engine_all_reduce_is_one_direct_kernel_under_2_mib_over_nvlink() -> None:
    """`tensor_all_reduce="custom"`: one decode step's all-reduces (4 tokens × 8192 × 2 B = 64 KiB, under 2 MiB) run as
    one direct kernel launched as the device's kernels are (5 µs on the H100 profile), under half NCCL's ring; the
    prefill's (4 × 1024 × 8192 × 2 B = 64 MiB) stay the library's; the L4's PCIe server keeps the library's."""
    assert inf.CUSTOM_ALL_REDUCE_MAX_BYTES == 2 * 1024 * 1024
    calls = 2 * 80  # two all-reduces a layer; one decode step (2 output tokens: the prefill writes the first)
    for slug, nvlink in (("h100-sxm", True), ("l4", False)):
        hw = system(slug)
        run = inf.InferenceRun(MODELS["llama-3-70b"], hw, inf.Workload.uniform(4, 1024, 2), inf.Parallelism(tensor=8))
        custom = inf.estimate_inference(replace(run, tensor_all_reduce="custom"))
        library = inf.estimate_inference(run)
        topology = hw.topology(8)
        for message, phase in ((4 * 8192 * 2.0, "decode"), (4 * 1024 * 8192 * 2.0, "prefill")):
            lib = float(roofline.collective("all_reduce", message, topology).time_s)
            direct = float(
                roofline.collective("all_reduce", message, roofline.with_link(topology, launch_s=5e-6), "direct").time_s
            )
            expected = direct if nvlink and phase == "decode" else lib
            for est, each in ((library, lib), (custom, expected)):
                seconds = getattr(est, phase).communication_s["tensor_parallel"]
                assert seconds == pytest.approx(calls * each, rel=1e-9)
            if nvlink and phase == "decode":
                assert direct < 0.5 * lib
    run = inf.InferenceRun(MODELS["llama-3-70b"], system("h100-sxm"), inf.Workload.uniform(1, 8, 2))
    with pytest.raises(inf.InferenceConfigError) as err:
        inf.validate_inference(replace(run, tensor_all_reduce="nvls"))
    assert err.value.field == "implementation.all_reduce"
