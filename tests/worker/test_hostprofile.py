"""A host's measured profile: its slug, the figures derived from the ceilings, and its life on the service."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

import adapters
from schemas.benchmarks import BenchmarkResultCreate, TimingScope
from schemas.hardware import HardwareCreate, source_for
from service import auth
from service.db import make_engine, make_sessionmaker
from tests.conftest import LiveServer
from worker.client import RidgelineClient
from worker.hostprofile import Ceilings, HostFacts, build_profile, host_slug, publish, replacement_patch
from worker.results import Measurement, validate_op
from worker.suites.matmul import matmul_op
from worker.timing import Stats

HOST = HostFacts(
    hostname="Build_01.example.com",
    description="AMD EPYC",
    vendor="amd",
    cores=2,
    memory_bytes=8 << 30,
    llc_bytes=32 << 20,
    l1d_bytes=32 << 10,
    vector_bytes=64,
    date="2026-11-25",
    software="jax 0.10.2",
)
STREAM = {"kind": "reduction", "rows": 1, "cols": 1 << 24, "dtype": "fp32"}
# Medians of the order this 2-core development machine measures (docs/worker.md).
DISPATCH_S, PEAK_S, BF16_S, STREAM_S = 40e-6, 3.0e-3, 3.2e-3, 3.04e-3


def measured(op: dict[str, Any], median_s: float, role: str) -> Measurement:
    stats = Stats(median_s, median_s * 0.9, median_s * 1.2, 100)
    return Measurement("ceilings", role, validate_op(op), stats, notes={"ceiling": role})


def ceilings(with_bf16: bool = True) -> Ceilings:
    found = Ceilings.of(
        [
            measured(matmul_op(32, 32, 32, "fp32"), DISPATCH_S, "dispatch"),
            measured(matmul_op(512, 512, 512, "fp32"), PEAK_S, "matmul_peak"),
            *([measured(matmul_op(512, 512, 512, "bf16"), BF16_S, "matmul_peak")] if with_bf16 else []),
            measured(STREAM, STREAM_S, "stream"),
        ]
    )
    assert found is not None
    return found


def predicted_s(doc: dict[str, Any], op: dict[str, Any]) -> float:
    """What `POST /v1/benchmarks` stores as the prediction of a wall-clock measurement of `op` on `doc`."""
    spec = HardwareCreate.model_validate(doc)
    hw = adapters.scoped_core(spec, spec.slug, TimingScope.wall_clock)
    result = BenchmarkResultCreate.model_validate({"op": op, "median_s": 1.0, "p10_s": 1.0, "p90_s": 1.0})
    return float(adapters.predict(hw, [result.op], spec=spec).time_s[0])


def test_host_slugs_by_hand() -> None:
    assert host_slug("vm") == "host-vm-cpu"
    assert host_slug("Build_01.example.com") == "host-build_01.example.com-cpu"  # slugs allow '.', '_' and '-'
    assert host_slug("my host (2)") == "host-my-host-2-cpu"
    assert host_slug("") == "host-unknown-cpu"
    long_a, long_b = "a" * 100 + "x", "a" * 100 + "y"
    assert len(host_slug(long_a)) == 64 and host_slug(long_a).endswith("-cpu")  # schemas.limits.SLUG_LENGTH
    assert host_slug(long_a) != host_slug(long_b)


def test_incomplete_ceilings_build_nothing() -> None:
    dispatch = measured(matmul_op(32, 32, 32, "fp32"), DISPATCH_S, "dispatch")
    stream = measured(STREAM, STREAM_S, "stream")
    assert Ceilings.of([dispatch, stream]) is None  # no fp32 peak
    assert Ceilings.of([dispatch, measured(matmul_op(512, 512, 512, "fp32"), PEAK_S, "matmul_peak")]) is None


def test_the_profile_predicts_its_own_ceilings_back() -> None:
    doc = build_profile(ceilings(), HOST)
    # The defining property: every measured figure is the one at which the service's prediction of its ceiling
    # measurement is the measured median.
    assert predicted_s(doc, STREAM) == pytest.approx(STREAM_S, rel=1e-6)
    assert predicted_s(doc, matmul_op(512, 512, 512, "fp32")) == pytest.approx(PEAK_S, rel=1e-6)
    assert predicted_s(doc, matmul_op(512, 512, 512, "bf16")) == pytest.approx(BF16_S, rel=1e-6)
    assert predicted_s(doc, matmul_op(32, 32, 32, "fp32")) == pytest.approx(DISPATCH_S, rel=1e-6)


def test_the_measured_figures_by_hand() -> None:
    doc = build_profile(ceilings(), HOST)
    launch_s = doc["overheads"]["kernel_launch_s"]
    # The 32³ product's own work (65 536 FLOPs, 12 KiB) is a few µs at most: the fixed cost is nearly its median.
    assert DISPATCH_S - 5e-6 < launch_s < DISPATCH_S
    # The sum reads 4 × 2²⁴ bytes once; its math (2²⁴ adds at ~100 GFLOP/s, 0.17 ms) overlaps the 3 ms of reads
    # (roofline.kernel_time's p = 3 norm adds (0.17/3)³ ≈ 0.02 %): B ≈ 67 108 864 B / (3.04 ms − L).
    assert doc["memory"]["device"]["bandwidth_bytes_per_s"] == pytest.approx(
        4 * 2**24 / (STREAM_S - launch_s), rel=1e-3
    )
    # The peak is above the achieved 2·512³ / (3 ms − L) ≈ 90.6 GFLOP/s: the model also spends part of the 3 ms
    # waiting on each wave's first k-step and output store (roofline.ops.K_STEP).
    achieved = 2 * 512**3 / (PEAK_S - launch_s)
    peaks = doc["compute"]["matrix_flops_per_s"]
    assert achieved < peaks["fp32"] < 2 * achieved
    assert doc["compute"]["vector_flops_per_s"] == {"fp32": peaks["fp32"]}
    assert doc["efficiency"] == {"matmul": 1.0, "vector": 1.0, "memory": 1.0, "interconnect": 1.0}


def test_the_profile_says_where_each_figure_came_from() -> None:
    doc = build_profile(ceilings(with_bf16=False), HOST)
    spec = HardwareCreate.model_validate(doc)
    assert spec.slug == "host-build_01.example.com-cpu" and spec.kind == "cpu" and spec.vendor == "amd"
    assert set(spec.compute.matrix_flops_per_s) == {"fp32"}
    assert spec.compute.units == 2 and spec.compute.matrix_unit is not None
    assert spec.compute.matrix_unit.alignment_bytes == 64
    assert (spec.memory.cache and spec.memory.cache.capacity_bytes) == 32 << 20
    assert (spec.memory.local and spec.memory.local.capacity_bytes) == 32 << 10
    assert spec.memory.device.capacity_bytes == 8 << 30
    titles = {s.key: s.title for s in spec.sources}
    assert titles["MEASURED"].startswith("measured by ridgeline-worker ceilings on 2026-11-25")
    fs = spec.figure_sources
    for path in ("compute.matrix_flops_per_s.fp32", "memory.device.bandwidth_bytes_per_s", "overheads.kernel_launch_s",
                 "efficiency.matmul"):  # fmt: skip
        assert source_for(path, fs) == "MEASURED", path
    for path in ("compute.units", "memory.device.capacity_bytes", "memory.cache.capacity_bytes"):
        assert source_for(path, fs) == "HOST-OS", path
    assert "40 µs" in spec.notes[0] and "3 ms" in spec.notes[0]  # the medians the figures came from


def test_a_replacement_patch_removes_what_the_new_profile_lacks() -> None:
    old = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}
    new = {"b": {"c": 5}, "e": [3]}
    assert replacement_patch(old, new) == {"a": None, "b": {"c": 5, "d": None}, "e": [3]}


def catalogue_key(server: LiveServer) -> str:
    """A catalogue key on the live server's database (`live_server` serves `live.db` beside its log)."""
    engine = make_engine(f"sqlite:///{server.log.parent / 'live.db'}")
    try:
        with make_sessionmaker(engine)() as session:
            key = auth.create_key(session, "host-profile", auth.Scope.catalogue).key
            session.commit()
        return key
    finally:
        engine.dispose()


@pytest.mark.slow  # a live server
def test_publish_creates_then_replaces_one_profile(live_server: LiveServer) -> None:
    first = build_profile(ceilings(), HOST)
    with RidgelineClient(live_server.url, catalogue_key(live_server), retry=None) as client:
        assert publish(client, first) == "created"
        created = httpx.get(f"{live_server.url}/v1/hardware/{first['slug']}").json()
        assert created["compute"]["matrix_flops_per_s"].keys() == {"fp32", "bf16"}
        # A later run without a bf16 peak and on a host whose L1d is unknown: the stale figures go.
        second = build_profile(ceilings(with_bf16=False), HostFacts(**{**HOST.__dict__, "l1d_bytes": None}))
        assert publish(client, second) == "updated"
    stored = httpx.get(f"{live_server.url}/v1/hardware/{first['slug']}").json()
    assert stored["compute"]["matrix_flops_per_s"] == second["compute"]["matrix_flops_per_s"]
    # The replacement is the profile's second version; the first is kept, as results predicted with it name it.
    assert stored["version"] == 2
    kept = httpx.get(f"{live_server.url}/v1/hardware/{first['slug']}/versions/1").json()
    assert kept["compute"]["matrix_flops_per_s"] == first["compute"]["matrix_flops_per_s"]
    assert stored["memory"].get("local") is None and "memory.local" not in stored["figure_sources"]
    assert stored["created_at"] <= stored["updated_at"]
    hosts = httpx.get(f"{live_server.url}/v1/hardware", params={"kind": "cpu", "limit": 100}).json()["items"]
    assert [h["slug"] for h in hosts if h["slug"].startswith("host-")] == [first["slug"]]
    # The service now predicts the fp32 ceiling on the stored profile as the worker did.
    estimate = httpx.post(
        f"{live_server.url}/v1/estimate/ops",
        json={"hardware": first["slug"], "ops": [matmul_op(512, 512, 512, "fp32")]},
    ).json()
    assert math.isclose(estimate["items"][0]["time_s"], PEAK_S, rel_tol=1e-6)
