"""Every suite's op objects are what the service takes, on every kind of device; the CPU suites really run."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

import adapters
from hardware_db import load_hardware
from schemas.benchmarks import BenchmarkResultCreate, Collective, TrainingStep
from schemas.estimates import EstimateContext
from schemas.ops import Op
from worker.device import Device
from worker.suites import SUITES, Case, Context, Target, dtypes_for, plan
from worker.suites.matmul import wave_edge
from worker.timing import TimingPolicy

CPU = Device("cpu", "amd", "AMD EPYC", compute_units=2, cache_bytes=32 << 20)
H100 = Device("gpu", "nvidia", "NVIDIA H100 80GB HBM3", count=8, source="jax", compute_units=132,
              compute_capability="9.0", cache_bytes=50 << 20)  # fmt: skip
A100 = Device("gpu", "nvidia", "NVIDIA A100-SXM4-80GB", source="jax", compute_units=108, compute_capability="8.0")
MI300X = Device("gpu", "amd", "AMD Instinct MI300X", count=8, source="jax", compute_units=304)
TPU = Device("tpu", "google", "TPU v5 lite", count=4, source="jax")

TARGETS = {
    "cpu-quick": (Target(CPU, "quick", 8), "cpu-generic"),
    "cpu-full": (Target(CPU, "full", 8), "cpu-generic"),
    "h100": (Target(H100, "full", 8, has_triton=True), "h100-sxm"),
    "h100-quick": (Target(H100, "quick", 8, has_triton=True), "h100-sxm"),
    "a100": (Target(A100, "full", 1, has_triton=True), "a100-sxm-80gb"),
    "mi300x": (Target(MI300X, "full", 8), "mi300x"),
    "tpu-v5e": (Target(TPU, "full", 4), "tpu-v5e"),
}
OPS = TypeAdapter(Op)


def all_cases(target: Target) -> list[Case]:
    return plan(list(SUITES), target)


@pytest.mark.parametrize("name", TARGETS)
def test_every_op_validates_against_the_schemas(name: str) -> None:
    target, _ = TARGETS[name]
    cases = all_cases(target)
    assert cases
    for case in cases:
        if case.op["kind"] == "collective":
            Collective.model_validate(case.op)
        elif case.op["kind"] == "training_step":
            assert TrainingStep.model_validate(case.op).model_dump(mode="json") == case.op
        else:
            assert OPS.dump_python(OPS.validate_python(case.op), mode="json") == case.op
        BenchmarkResultCreate.model_validate({"op": case.op, "median_s": 1e-3, "p10_s": 9e-4, "p90_s": 2e-3})
    names = [case.name for case in cases]
    assert len(names) == len(set(names)), "two cases with one name"


@pytest.mark.parametrize("name", ["cpu-quick", "cpu-full", "h100", "a100", "mi300x", "tpu-v5e"])
def test_the_service_can_predict_every_op(client: TestClient, name: str) -> None:
    # An op the profile cannot estimate (bf16 on a CPU, fp8 on an A100) would make its whole upload a 422; a case
    # kept for the host profile only is never sent.
    target, slug = TARGETS[name]
    sent = [case for case in all_cases(target) if case.upload]
    ops = [case.op for case in sent if case.op["kind"] not in ("collective", "training_step")]
    response = client.post("/v1/estimate/ops", json={"hardware": slug, "ops": ops})
    assert response.status_code == 200, response.text[:2000]
    assert len(response.json()["items"]) == len(ops)


@pytest.mark.parametrize("name", ["cpu-quick", "cpu-full", "h100", "a100", "mi300x", "tpu-v5e"])
def test_the_service_can_predict_every_training_step(name: str) -> None:
    # A training step is measured only: an upload stores it with the training core's prediction on the profile
    # (adapters.predict, as POST /v1/benchmarks runs it).
    target, slug = TARGETS[name]
    spec = next(h for h in load_hardware() if h.slug == slug)
    hw = adapters.to_core(spec, EstimateContext(hardware=slug))
    steps = [TrainingStep.model_validate(c.op) for c in all_cases(target) if c.op["kind"] == "training_step"]
    assert len(steps) == 1
    predicted = adapters.predict(hw, steps, spec=spec)
    assert math.isfinite(predicted.time_s[0]) and predicted.time_s[0] > 0


def test_suites_cover_what_issue_7_lists() -> None:
    h100 = all_cases(TARGETS["h100"][0])
    suites = {case.suite for case in h100}
    assert suites == {
        "ceilings",
        "matmul",
        "elementwise",
        "c_relu_ab",
        "norms",
        "attention",
        "collectives",
        "triton",
        "train",
    }
    attention = {(c.op["implementation"], c.name.split(" B")[0]) for c in h100 if c.suite == "attention"}
    assert {impl for impl, _ in attention} == {"naive", "flash"}
    assert {"dot_product_attention xla", "dot_product_attention cudnn", "Pallas (Triton) flash"} <= {
        label for _, label in attention
    }
    collectives = {c.op["collective"] for c in h100 if c.suite == "collectives"}
    assert collectives == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    assert {c.timing_scope for c in h100 if c.suite == "triton"} == {"kernel"}
    # The seed's cliff (1792 → 1793) and this device's own one-wave edge, 2048 on 132 SMs.
    shapes = {(c.op["m"], c.op["dtype"]) for c in h100 if c.suite == "matmul"}
    assert {(1792, "bf16"), (1793, "bf16"), (2048, "bf16"), (2049, "bf16")} <= shapes
    assert {d for _, d in shapes} == {"fp8", "bf16", "fp16", "tf32", "fp32"}


def test_matmuls_record_the_precision_they_ran_at_and_are_predicted_at_its_rate(client: TestClient) -> None:
    """The matmul suite runs fp32 at jax.lax.Precision.HIGHEST (full fp32) and everything else, fusion's products
    too, at JAX's default: each op says so, and the service predicts an fp32 one at the CUDA cores' 67 TF/s on an
    H100, not at the TF32 tensor cores' 494.5 that JAX's default would use."""
    cases = all_cases(TARGETS["h100"][0])
    products = [c for c in cases if c.op["kind"] == "matmul"]
    assert {c.op["precision"] for c in products if c.op["dtype"] == "fp32"} == {"highest"}
    assert {c.op["precision"] for c in products if c.op["dtype"] != "fp32"} == {"default"}
    assert any(c.suite == "elementwise" and c.op["kind"] == "matmul" for c in cases)  # fusion's relu(A @ B)
    fp32 = next(c.op for c in products if c.op["dtype"] == "fp32" and c.op["m"] == 8192)
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": fp32})
    assert response.status_code == 200 and response.json()["assumptions"]["algorithm"] == "fp32"
    assert response.json()["critical_intensity"] == pytest.approx(67e12 / 3.35e12)  # peak over bandwidth


def test_cpu_ceilings_are_what_a_host_profile_is_built_from() -> None:
    for target in (Target(CPU, "quick", 8), Target(CPU, "full", 8)):
        cases = plan(["ceilings"], target)
        roles = [(c.notes.get("ceiling"), c.op["kind"], c.op.get("dtype")) for c in cases]
        assert roles == [
            ("dispatch", "matmul", "fp32"),
            ("matmul_peak", "matmul", "fp32"),
            ("matmul_peak", "matmul", "bf16"),
            ("stream", "reduction", "fp32"),
            (None, "elementwise", "fp32"),  # the copy, kept for the elementwise family
        ]
        # The stream reads 64 MiB, twice this CPU's 32 MiB last-level cache; the dispatch product is 65 536 FLOPs.
        assert cases[3].op["cols"] * 4 == 64 << 20 == 2 * (32 << 20)
        assert 2 * cases[0].op["m"] * cases[0].op["n"] * cases[0].op["k"] == 65_536
    # bf16 is sent only where the device's profile can predict it: not on cpu-generic (fp32, fp64), not when unknown.
    bf16 = [
        c
        for c in plan(["ceilings"], Target(CPU, profile_dtypes=frozenset({"fp32", "fp64"})))
        if c.op["dtype"] == "bf16"
    ]
    assert [c.upload for c in bf16] == [False]
    assert [c.upload for c in plan(["ceilings"], Target(CPU)) if c.op["dtype"] == "bf16"] == [False]
    measured_host = Target(CPU, profile_dtypes=frozenset({"fp32", "bf16"}))
    assert [c.upload for c in plan(["ceilings"], measured_host) if c.op["dtype"] == "bf16"] == [True]
    probe, *rest = plan(["ceilings"], TARGETS["h100"][0])
    assert probe.notes == {"ceiling": "dispatch"} and not probe.upload and all(c.upload for c in rest)


def test_an_accelerator_run_starts_with_its_dispatch_probe() -> None:
    # The host's per-call cost, measured first so that every wall-clock batch carries it: a 32³ product in the
    # device's main dtype (65 536 FLOPs, under 0.1 ns of an H100's bf16 peak), kept, not sent.
    for name in ("h100", "mi300x", "tpu-v5e"):
        first = plan(["norms", "matmul"], TARGETS[name][0])[0]
        assert (first.suite, first.notes, first.upload) == ("ceilings", {"ceiling": "dispatch"}, False)
        assert (first.op["m"], first.op["n"], first.op["k"], first.op["dtype"]) == (32, 32, 32, "bf16")
    # Triton's cases are kernel time (do_bench): no host cost to measure; a CPU's is in its host profile.
    assert [c.notes for c in plan(["triton"], TARGETS["h100"][0]) if c.notes.get("ceiling")] == []
    assert [c.notes.get("ceiling") for c in plan(["norms"], Target(CPU))] == [None] * len(plan(["norms"], Target(CPU)))


def test_wave_edges_by_hand() -> None:
    # A100: 1792 = 7 × 256 = 14 × 128 → 98 tiles ≤ 108 SMs; 1920 → 8 × 15 = 120 tiles: two waves.
    assert wave_edge(108) == 1792
    # H100: 2048 → 8 × 16 = 128 ≤ 132; 2176 → 9 × 17 = 153.
    assert wave_edge(132) == 2048


def test_dtypes_follow_the_device_and_the_profile() -> None:
    assert dtypes_for(Target(CPU)) == ["fp32"]
    assert dtypes_for(Target(A100)) == ["bf16", "fp16", "tf32", "fp32"]  # no fp8 before sm_89
    assert dtypes_for(Target(H100))[0] == "fp8"
    h100_without_fp32 = Target(H100, profile_dtypes=frozenset({"bf16", "fp16", "fp8", "tf32"}))
    assert dtypes_for(h100_without_fp32) == ["fp8", "bf16", "fp16", "tf32"]
    assert not [c for c in all_cases(Target(CPU, "quick", 1)) if c.suite == "collectives"]  # one device: none


def test_no_triton_cases_without_triton_or_an_nvidia_gpu() -> None:
    assert plan(["triton"], Target(H100, has_triton=False)) == []
    assert plan(["triton"], Target(MI300X, has_triton=True)) == []
    assert plan(["triton"], Target(CPU, has_triton=True)) == []


def test_an_unknown_suite_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown suite nope"):
        plan(["matmul", "nope"], Target(CPU))


@pytest.mark.slow  # JAX compiles and times each suite on the CPU
def test_inputs_rotate_past_the_cache_with_random_data() -> None:
    import jax.numpy as jnp
    import numpy as np

    ctx = Context(Target(CPU), TimingPolicy.quick(rotate_bytes=1 << 20))
    sets = ctx.jax.inputs([(64, 128), (128, 32)], "fp32")
    assert len(sets) == math.ceil((1 << 20) / ((64 * 128 + 128 * 32) * 4))  # 1 MiB / 48 KiB → 22 sets
    a0, b0 = sets[0]
    assert a0.shape == (64, 128) and b0.shape == (128, 32) and a0.dtype == jnp.float32
    assert not np.array_equal(np.asarray(sets[0][0]), np.asarray(sets[1][0]))
    values = np.asarray(a0)
    assert np.count_nonzero(values) == values.size and -1 <= values.min() < 0 < values.max() <= 1


def test_jax_devices_here_are_eight_virtual_cpus() -> None:
    import jax

    assert jax.default_backend() == "cpu" and len(jax.devices()) == 8


CPU_SUITES = ["ceilings", "matmul", "elementwise", "c_relu_ab", "norms", "attention", "collectives", "train"]


@pytest.mark.slow  # JAX compiles and times each suite on the CPU
@pytest.mark.parametrize("suite", CPU_SUITES)
def test_cpu_suites_run_and_give_sane_timings(suite: str) -> None:
    target = Target(CPU, "quick", 8)
    # A handful of each suite's quick cases with a tiny rotation: this checks that they run, not how fast.
    policy = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0.0, rotate_bytes=1 << 20, max_sets=4)
    ctx = Context(target, policy)
    cases = SUITES[suite].plan(target)
    for case in cases[:: max(1, len(cases) // 3)][:3]:
        stats = case.run(ctx)
        assert 0 < stats.p10_s <= stats.median_s <= stats.p90_s < 10, case.name
        assert stats.repeats == 3
