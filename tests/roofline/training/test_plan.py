"""The training planner (`roofline.plan_training`): its best layout against a brute force of the same space, layouts
that cannot fit kept out (bounds worked by hand from ZeRO's 16 bytes per parameter), and its counts by hand."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

import roofline
from tests.roofline.profiles import system
from tests.roofline.training.test_training import gpt

SMALL_SPACE = roofline.PlanSpace(
    tensor=(1, 2, 4), pipeline=(1, 2), virtual_stages=(2,),
    sharding=(roofline.Sharding(0), roofline.Sharding(1), roofline.Sharding(3)), micro_batch=(1, 2),
)  # fmt: skip


def base(model: roofline.Transformer, global_batch: int = 16) -> roofline.TrainingRun:
    return roofline.TrainingRun(model, system("h100-sxm"), sequence=2048, micro_batch=1, global_batch=global_batch)


def brute_force(run: roofline.TrainingRun, devices: int, space: roofline.PlanSpace) -> list[roofline.TrainingEstimate]:
    """Every combination of the space's axes, each estimated on its own (no shared cache), kept if valid and fits."""
    found = []
    for t, sp, p, schedule, v, sharding, mb, recompute in itertools.product(
        space.tensor, space.sequence_parallel, space.pipeline, space.schedules, space.virtual_stages, space.sharding,
        space.micro_batch, space.recompute,
    ):  # fmt: skip
        if devices % (t * p):
            continue
        chunks = v if schedule == "interleaved" else 1
        par = roofline.TrainingParallelism(
            tensor=t, pipeline=p, data=devices // (t * p), sequence_parallel=sp, schedule=schedule,
            virtual_stages=chunks,
        )  # fmt: skip
        candidate = replace(run, parallelism=par, sharding=sharding, micro_batch=mb, recompute=recompute)
        try:
            est = roofline.estimate_training(candidate)
        except roofline.TrainingConfigError:
            continue
        if est.memory.fits:
            found.append(est)
    return found


def test_the_best_layout_is_never_slower_than_any_valid_layout_that_fits() -> None:
    # A 4.8 B-parameter GPT (24 layers of 12·h², h = 4096) on 8 H100s: unsharded it needs 16 bytes × 4.8e9 = 77 GB
    # of states before activations, so some layouts fit and some do not.
    run = base(gpt(layers=24, hidden=4096, heads=32, vocab=51200))
    plan = roofline.plan_training(run, [8], SMALL_SPACE, top=1000)
    every = brute_force(run, 8, SMALL_SPACE)
    assert plan.ranked and plan.pruned_memory > 0
    best = plan.ranked[0].estimate
    assert best.step_s == min(e.step_s for e in every)
    assert all(best.step_s <= e.step_s for e in every)
    steps = [e.estimate.step_s for e in plan.ranked]
    assert steps == sorted(steps)
    assert all(e.estimate.memory.fits for e in plan.ranked)
    assert len(plan.ranked) == plan.evaluated <= len(every)  # the brute force counts equal steps more than once
    assert plan.searched == plan.invalid + plan.pruned_memory + plan.evaluated


def test_a_layout_that_cannot_fit_is_never_returned() -> None:
    # GPT-3 175B's layers alone are 12·h²·L = 12 × 12288² × 96 = 1.739e11 parameters. On 8 devices every layout
    # splits them at most 8 ways between tensor × pipeline × the ZeRO group (t·p·d = 8), so each device keeps at
    # least 16 bytes × 1.739e11 / 8 = 348 GB of weights, gradients and Adam states (ZeRO §3): more than 80 GB.
    run = base(gpt(layers=96, hidden=12288, heads=96, vocab=51200), global_batch=8)
    plan = roofline.plan_training(run, [8], roofline.PlanSpace())
    assert plan.ranked == () and plan.evaluated == 0
    assert plan.pruned_memory == plan.searched - plan.invalid > 0
    assert plan.smallest_memory_bytes is not None
    assert plan.smallest_memory_bytes >= 16 * 12 * 12288**2 * 96 / 8


def test_an_unsharded_layout_whose_states_exceed_the_device_is_pruned() -> None:
    # 4.8 B parameters: 12 × 4096² × 24 = 4.83e9 in the layers, × 16 bytes = 77.3 GB; with the 51 200 × 4096
    # embedding (0.21e9) and activations the unsharded single-replica layout (t = p = 1, ZeRO 0) exceeds 80 GB.
    run = base(gpt(layers=24, hidden=4096, heads=32, vocab=51200))
    plan = roofline.plan_training(run, [8], SMALL_SPACE, top=1000)
    for e in plan.ranked:
        par = e.run.parallelism
        assert e.estimate.memory.total_bytes <= 80e9
        assert (par.tensor, par.pipeline, e.run.sharding.stage) != (1, 1, 0)


def test_the_counts_by_hand() -> None:
    # 6 devices, tensor 1, 2 or 4 (2 and 4 with and without SP), one stage, ZeRO 0 or 1, micro-batch 1, no
    # recomputation: 5 layouts × 2 shardings = 10. Tensor 4 does not divide 6: 2 × 2 = 4 invalid (devices).
    # Tensor 1 (data 6) and 2 (data 3) divide the global batch of 12: 2 + 4 = 6 timed; a 0.2 B model fits.
    space = roofline.PlanSpace(
        tensor=(1, 2, 4), pipeline=(1,), sharding=(roofline.Sharding(0), roofline.Sharding(1)), micro_batch=(1,),
        recompute=("none",),
    )  # fmt: skip
    plan = roofline.plan_training(base(gpt(), global_batch=12), [6], space)
    assert (plan.searched, plan.invalid, plan.pruned_memory, plan.evaluated) == (10, 4, 0, 6)
    assert plan.invalid_fields == {"devices": 4}
    assert "6 devices are not whole replicas" in plan.reasons["devices"]


def test_a_device_count_past_the_fabrics_is_invalid_for_every_layout() -> None:
    # tests/roofline/profiles.py: the A100 profile's fabric is its 8-GPU NVSwitch node, with no scale-out fabric.
    run = replace(base(gpt()), system=system("a100-sxm-80gb"))
    plan = roofline.plan_training(run, [16], SMALL_SPACE)
    assert plan.invalid == plan.searched > 0 and set(plan.invalid_fields) == {"devices"}


def test_device_hours_rank_by_step_times_devices() -> None:
    run = base(gpt(), global_batch=64)
    plan = roofline.plan_training(run, [8, 16, 32], SMALL_SPACE, top=50, rank="device_hours")
    costs = [e.estimate.step_s * e.estimate.devices for e in plan.ranked]
    assert costs == sorted(costs)
    assert {e.estimate.devices for e in plan.ranked} <= {8, 16, 32}


def test_the_shared_cache_gives_the_same_estimate_bit_for_bit() -> None:
    cache = roofline.training.StepCache()
    run = base(gpt())
    for par, mb in [
        (roofline.TrainingParallelism(tensor=2, data=4, sequence_parallel=True), 1),
        (roofline.TrainingParallelism(tensor=2, pipeline=2, data=2), 2),
        (roofline.TrainingParallelism(tensor=2, data=4, sequence_parallel=True), 2),
        (roofline.TrainingParallelism(tensor=2, data=4, sequence_parallel=True), 1),
    ]:
        r = replace(run, parallelism=par, micro_batch=mb, sharding=roofline.Sharding(1))
        assert roofline.estimate_training(r, cache) == roofline.estimate_training(r)


def test_an_unknown_ranking_names_the_field() -> None:
    with pytest.raises(roofline.TrainingConfigError) as err:
        roofline.plan_training(base(gpt()), [8], SMALL_SPACE, rank="cost")
    assert err.value.field == "rank_by"


def test_a_stopped_search_counts_the_layouts_it_left_unfinished() -> None:
    # The space of test_the_counts_by_hand on 6 devices, asked before each layout it times: tensor 1 (asked first:
    # go on; 2 shardings timed), tensor 2 without SP (asked second: stop), tensor 2 with SP (stopped): 2 + 2
    # configurations unfinished. Tensor 4 does not divide 6: its 4 are invalid without a question. Searched 2 + 4.
    space = roofline.PlanSpace(
        tensor=(1, 2, 4), pipeline=(1,), sharding=(roofline.Sharding(0), roofline.Sharding(1)), micro_batch=(1,),
        recompute=("none",),
    )  # fmt: skip
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) >= 2

    plan = roofline.plan_training(base(gpt(), global_batch=12), [6], space, should_stop=stop)
    assert (plan.searched, plan.invalid, plan.evaluated, plan.unfinished) == (6, 4, 2, 4)
    assert len(calls) == 2 and all(e.run.parallelism.tensor == 1 for e in plan.ranked)
    never = roofline.plan_training(base(gpt(), global_batch=12), [6], space, should_stop=lambda: False)
    assert (never.searched, never.evaluated, never.unfinished) == (10, 6, 0)
