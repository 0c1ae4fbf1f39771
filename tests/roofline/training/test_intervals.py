"""Prediction intervals of training steps: every op (forward, backward, recomputation, the optimizer's passes) and
collective at its band's edge together, the step rebuilt at each edge (what overlap hides moves with them). The
tables are made by hand, so each figure follows from the step's own parts."""

from __future__ import annotations

from dataclasses import replace

import pytest

import roofline
from roofline.intervals import ANY, Band, IntervalTable
from tests.roofline.training.test_training import gpt, run


def banded(est_run: roofline.TrainingRun, bands: dict[str, tuple[float, float]]) -> roofline.TrainingRun:
    table = IntervalTable({key: Band(low, high, 1000, 5) for key, (low, high) in bands.items()})
    return replace(est_run, system=replace(est_run.system, intervals=table))


def test_without_a_table_a_step_has_no_interval() -> None:
    est = roofline.estimate_training(run())
    assert est.step_s_p10 is None and est.step_s_p90 is None


def test_one_band_moves_a_single_device_step_by_it() -> None:
    # One device: no collectives, no bubble; the step is the micro-batches' compute and the optimizer.
    plain = roofline.estimate_training(run())
    est = roofline.estimate_training(banded(run(), {f"{ANY}/{ANY}": (0.5, 2.0)}))
    assert est.step_s == plain.step_s  # the table never moves the estimate
    assert est.step_s_p10 == pytest.approx(0.5 * est.step_s, rel=1e-12)
    assert est.step_s_p90 == pytest.approx(2.0 * est.step_s, rel=1e-12)


def test_the_families_of_a_steps_ops() -> None:
    # Matmuls × 0.9 … × 1.1 (the projections, the FFN, the LM head and their backward GEMMs; unfused attention's
    # two batched GEMMs too), everything else × 0.5 … × 3.
    r = run(attention="naive")
    est = roofline.estimate_training(banded(r, {"matmul/*": (0.9, 1.1), f"{ANY}/{ANY}": (0.5, 3.0)}))
    gemms = sum(o.forward_s + o.backward_s + o.recompute_s for o in est.ops if o.name in (
        "qkv_projection", "output_projection", "ffn_up", "ffn_down", "lm_head", "attention_scores", "attention_values",
    ))  # fmt: skip
    rest = est.forward_s + est.backward_s + est.recompute_s - gemms
    assert est.step_s == pytest.approx(gemms + rest + est.optimizer_s, rel=1e-12)
    assert est.step_s_p10 == pytest.approx(0.9 * gemms + 0.5 * (rest + est.optimizer_s), rel=1e-12)
    assert est.step_s_p90 == pytest.approx(1.1 * gemms + 3.0 * (rest + est.optimizer_s), rel=1e-12)


def test_collectives_take_their_own_band() -> None:
    # Tensor parallelism 4, nothing overlapped: the all-reduces are exposed whole at every edge, at the collectives'
    # band (× 0.8 … × 1.25), the kernels at theirs (× 0.5 … × 2).
    r = run(gpt(), parallelism=roofline.TrainingParallelism(tensor=4))
    est = roofline.estimate_training(banded(r, {f"{ANY}/{ANY}": (0.5, 2.0), "collective/*": (0.8, 1.25)}))
    comm = est.communication_exposed_s
    assert comm > 0
    kernels = est.step_s - comm
    assert est.step_s_p10 == pytest.approx(0.8 * comm + 0.5 * kernels, rel=1e-12)
    assert est.step_s_p90 == pytest.approx(1.25 * comm + 2.0 * kernels, rel=1e-12)
