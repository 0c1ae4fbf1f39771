"""options.calibration on /v1/estimate/inference, its batch and /v1/plan, over HTTP on SQLite and PostgreSQL.

Synthetic measured timings are planted on the A100 profile as graph replays, whose predictions use a 2.5 µs fixed
cost per kernel (adapters.KERNEL_FLOOR_S): every bf16 matmul call is "measured" at exactly 1.25 ×
(2.5 µs + w) and every bf16 layer norm at 2 × (2.5 µs + w), w being the modelled work (the prediction less its fixed
cost). For a one-kernel op that is 1.25 × (or 2 ×) its prediction; a split-K matmul has a second kernel (its
reduction), whose launch the planted time leaves out. Calibration's parametric layer (roofline/calibration.py) fits
measured ≈ L + w · u(z), so the fit is exact: L = 1.25 · 2.5 µs = 3.125 µs and u ≡ 1.25 for the matmuls, L = 5 µs and
u ≡ 2 for the norms. The residuals are 0, so interpolation between neighbours multiplies by exp(0) = 1.

An inference run's op row of n calls is then n · L + u · (raw − overhead): each call L + u · w, summed. With the run
at 2.5 µs per kernel (`options.launch_overhead_s`) a one-kernel op is exactly u × its raw time (every norm row 2 ×,
every matmul row without split-K 1.25 ×); attention, not calibrated, is unchanged, and the phases are the sums. With
the profile's own 5 µs launch the same formula holds: the correction replaces the model's fixed cost by the fitted L.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.test_benchmarks import bearer, keys, run_body, upload

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL

__all__ = ["keys"]  # the fixture, used by name

A100 = "a100-sxm-80gb"
GRAPH_LAUNCH_S = 2.5e-6  # the fixed cost of a graph-replay prediction on the A100 (min(5 µs, 2.5 µs))
MATMUL_RATIO, NORM_RATIO = 1.25, 2.0
MATMULS = [
    {"kind": "matmul", "m": m, "n": n, "k": k, "dtype": "bf16"}
    for m, n, k in itertools.product([1, 4, 16, 64, 256, 1024, 4096], [256, 1024, 4096, 16384], [256, 1024, 4096])
]
NORMS = [
    {"kind": "layernorm", "rows": r, "cols": c, "dtype": "bf16"}
    for r, c in itertools.product([1, 4, 16, 64, 256, 1024, 4096, 16384], [256, 768, 1024, 4096])
]
MATMUL_ROWS = ("qkv_projection", "output_projection", "ffn_up", "ffn_down", "lm_head")
NORM_ROWS = ("attention_norm", "ffn_norm", "final_norm")
# How each row's calls are corrected. Matmuls with an epilogue (residual add, gelu) are a variant the calibration never
# measured, so they have no neighbours: the parametric layer alone ("fitted"). Plain ones (no bias in this model) and
# the norms have measured neighbours ("interpolated"). Attention and the embedding are not calibrated ("physical").
METHODS = {
    "qkv_projection": "interpolated",
    "lm_head": "interpolated",
    "output_projection": "fitted",
    "ffn_up": "fitted",
    "ffn_down": "fitted",
    **dict.fromkeys(NORM_ROWS, "interpolated"),
}
RUN = {
    "model": "seed-calculator",  # GPT-2-like: layernorm, 24 layers, d 768, 16 heads, vocabulary 50257
    "hardware": A100,
    "workload": {"batch": 10, "prompt_tokens": 128, "output_tokens": 16},
    "options": {"launch_overhead_s": GRAPH_LAUNCH_S},
}


def work_s(client: TestClient, ops: list[dict[str, Any]]) -> list[float]:
    """The model's time less its fixed cost, per op."""
    body = {"hardware": A100, "ops": ops, "options": {"launch_overhead_s": GRAPH_LAUNCH_S}}
    response = client.post("/v1/estimate/ops", json=body)
    assert response.status_code == 200, response.text
    return [item["time_s"] - item["overhead_s"] for item in response.json()["items"]]


@pytest.fixture
def calibration(client: TestClient, keys: dict[str, str]) -> dict[str, Any]:
    """Matmuls measured at 1.25 × and layer norms at 2 × (2.5 µs + work), fitted through the API."""
    results = [
        {"op": op, "median_s": ratio * (GRAPH_LAUNCH_S + w)}
        for ops, ratio in ((MATMULS, MATMUL_RATIO), (NORMS, NORM_RATIO))
        for op, w in zip(ops, work_s(client, ops), strict=True)
    ]
    run = upload(client, keys["upload"], run_body(results))
    assert run.status_code == 201, run.text
    stored = client.get(f"/v1/benchmarks/{run.json()['id']}", params={"limit": 500}).json()["items"]
    # The stored predictions are the graph replay's: one-kernel ops were planted at exactly the ratio × them.
    one_kernel = [s for s in stored if s["op"]["kind"] == "layernorm" or s["op"]["m"] >= 1024]
    assert {round(s["median_s"] / s["predicted_s"], 9) for s in one_kernel} == {MATMUL_RATIO, NORM_RATIO}
    response = client.post(
        "/v1/calibrations",
        json={"hardware": A100, "op_families": ["matmul", "layernorm"], "holdout_fraction": 0.2},
        headers=bearer(keys["admin"]),
    )
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    groups = {g["family"]: g for g in made["groups"]}
    # The fit finds the planted form exactly: L = ratio · 2.5 µs, u ≡ ratio.
    assert groups["matmul"]["launch_s"] == pytest.approx(MATMUL_RATIO * GRAPH_LAUNCH_S, rel=1e-6)
    assert groups["matmul"]["utilisation"] == pytest.approx([MATMUL_RATIO, 0, 0], abs=1e-6)
    assert groups["layernorm"]["launch_s"] == pytest.approx(NORM_RATIO * GRAPH_LAUNCH_S, rel=1e-6)
    assert groups["layernorm"]["utilisation"] == pytest.approx([NORM_RATIO, 0, 0], abs=1e-6)
    return made


def fitted(row: str) -> tuple[float, float]:
    """(L, u) of the family a breakdown row belongs to, worked out above."""
    ratio = MATMUL_RATIO if row in MATMUL_ROWS else NORM_RATIO
    return ratio * GRAPH_LAUNCH_S, ratio


def infer(client: TestClient, body: dict[str, Any], path: str = "/v1/estimate/inference") -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def rows(result: dict[str, Any], phase: str) -> dict[str, dict[str, Any]]:
    return {o["op"]: o for o in result["breakdown"][phase]["ops"]}


def with_calibration(body: dict[str, Any], choice: Any) -> dict[str, Any]:
    return {**body, "options": {**body.get("options", {}), "calibration": choice}}


def test_matmuls_and_norms_scale_by_the_fitted_factor(client: TestClient, calibration: dict[str, Any]) -> None:
    raw = infer(client, RUN)
    assert raw["assumptions"]["calibration"] == "none"
    scaled: set[str] = set()
    for choice in (calibration["id"], "latest"):
        got = infer(client, with_calibration(RUN, choice))
        for phase in ("prefill", "decode"):
            before, after = rows(raw, phase), rows(got, phase)
            assert set(before) == set(after)
            calls = {"prefill": 1, "decode": 15}[phase]  # passes: one prefill, 16 − 1 decode steps
            for name, row in after.items():
                # The physical model is kept beside the correction, and is the uncalibrated answer.
                old = before[name]
                assert row["raw_time_s"] == pytest.approx(old["time_s"], rel=1e-12)
                if name in MATMUL_ROWS or name in NORM_ROWS:
                    launch, u = fitted(name)
                    n = old["calls_per_pass"] * calls
                    expected = n * launch + u * (old["time_s"] - old["overhead_s"])
                    assert row["time_s"] == pytest.approx(expected, rel=1e-6), (phase, name)
                    if old["overhead_s"] == pytest.approx(n * GRAPH_LAUNCH_S):  # one kernel per call
                        assert row["time_s"] == pytest.approx(u * old["time_s"], rel=1e-6), (phase, name)
                        scaled.add(name)
                else:
                    assert row["time_s"] == old["time_s"], name
                assert row["calibration"] == METHODS.get(name, "physical"), name
            # One pipeline stage, one micro-batch: a phase is the sum of its rows, and its raw time the raw sum.
            assert got["breakdown"][phase]["time_s"] == pytest.approx(sum(r["time_s"] for r in after.values()))
            assert got["breakdown"][phase]["raw_time_s"] == pytest.approx(raw["breakdown"][phase]["time_s"])
        assert got["prefill_time_s"] == pytest.approx(got["breakdown"]["prefill"]["time_s"])
        assert got["decode_time_s"] == pytest.approx(got["breakdown"]["decode"]["time_s"])
        assert got["time_per_output_token_s"] == pytest.approx(got["decode_time_s"] / 15)  # 16 outputs, 15 steps
        assert got["total_time_s"] == pytest.approx(got["prefill_time_s"] + got["decode_time_s"])
        assert got["throughput_tokens_per_s"] == pytest.approx(10 * 16 / got["total_time_s"])
        assert scaled >= {*NORM_ROWS, "ffn_up", "ffn_down"}  # rows that are exactly u × their raw time
        # The shipped bands are the physical model's residuals, not the corrected one's: a calibrated run has none.
        assert raw["total_time_s_p10"] < raw["total_time_s"] < raw["total_time_s_p90"]
        assert got["total_time_s_p10"] is None and got["breakdown"]["decode"]["time_s_p90"] is None
        assert got["assumptions"]["interval"] is None

        info = got["assumptions"]["calibration"]
        assert info["requested"] == choice and info["calibrations"] == [{"id": calibration["id"], "version": 1}]
        applied = info["applied"]
        assert set(applied) == {"matmul/bf16", "layernorm/bf16"}
        assert applied["matmul/bf16"]["methods"] == ["fitted", "interpolated"]
        assert sorted(applied["matmul/bf16"]["ops"]["decode"]) == sorted(MATMUL_ROWS)
        assert applied["layernorm/bf16"]["methods"] == ["interpolated"]
        assert sorted(applied["layernorm/bf16"]["ops"]["prefill"]) == sorted(NORM_ROWS)
        # Attention, the embedding gather and the gelu in the matmul epilogue's family: no data, and it says so.
        uncovered = info["not_covered"]
        assert uncovered["attention/bf16"]["ops"] == {"prefill": ["attention"], "decode": ["attention"]}
        assert "no data" in uncovered["attention/bf16"]["note"]
        assert uncovered["embedding/bf16"]["ops"]["decode"] == ["embedding"]
        assert rows(got, "decode")["attention"]["calibration"] == "physical"


def test_the_profiles_own_launch_is_replaced_by_the_fitted_one(client: TestClient, calibration: dict[str, Any]) -> None:
    body = {**RUN, "options": {}}  # the A100's 5 µs per kernel
    raw, got = infer(client, body), infer(client, with_calibration(body, calibration["id"]))
    for phase, passes in (("prefill", 1), ("decode", 15)):
        for name in (*MATMUL_ROWS, *NORM_ROWS):
            row = rows(raw, phase)[name]
            launch, u = fitted(name)
            expected = row["calls_per_pass"] * passes * launch + u * (row["time_s"] - row["overhead_s"])
            assert rows(got, phase)[name]["time_s"] == pytest.approx(expected, rel=1e-6), (phase, name)
            assert rows(got, phase)[name]["time_s"] < u * row["time_s"]  # a 3.125 µs launch, not 1.25 · 5 µs


def test_batch_and_sweep_items_are_calibrated_each(client: TestClient, calibration: dict[str, Any]) -> None:
    sweep = {"base": with_calibration(RUN, "latest"), "vary": {"workload.batch": [1, 10]}}
    items = infer(client, {"sweep": sweep}, "/v1/estimate/inference/batch")["items"]
    single = infer(client, with_calibration(RUN, "latest"))
    assert items[1]["total_time_s"] == pytest.approx(single["total_time_s"], rel=1e-12)
    one = rows(items[0], "decode")["ffn_up"]
    assert one["time_s"] == pytest.approx(MATMUL_RATIO * one["raw_time_s"], rel=1e-6)
    # Items with and without a calibration side by side: only the calibrated one changes.
    mixed = infer(client, {"items": [RUN, with_calibration(RUN, "latest")]}, "/v1/estimate/inference/batch")["items"]
    assert mixed[0]["total_time_s"] == pytest.approx(infer(client, RUN)["total_time_s"], rel=1e-12)
    assert mixed[1]["total_time_s"] == pytest.approx(single["total_time_s"], rel=1e-12)


def test_tensor_parallel_all_reduces_get_the_collective_correction(
    client: TestClient, keys: dict[str, str], calibration: dict[str, Any]
) -> None:
    """All-reduces over 2 A100s measured at 1.5 × the model (no fixed cost in a collective's model: L = 0,
    u ≡ 1.5): the run's tensor-parallel all-reduce row is 1.5 × its raw time, and the matmuls still 1.25 ×."""
    sizes = [1 << p for p in range(10, 30)]
    ops = [{"kind": "collective", "collective": "all_reduce", "bytes": b, "devices": 2, "dtype": "bf16"} for b in sizes]
    first = upload(client, keys["upload"], run_body([{"op": op, "median_s": 1.0} for op in ops])).json()
    predicted = [i["predicted_s"] for i in client.get(f"/v1/benchmarks/{first['id']}").json()["items"]]
    planted = [{"op": op, "median_s": 1.5 * t} for op, t in zip(ops, predicted, strict=True)]
    upload(client, keys["upload"], run_body(planted, software={"planted": "1"}))
    response = client.post(
        "/v1/calibrations",
        json={"hardware": A100, "op_families": ["collective"], "software": "planted"},
        headers=bearer(keys["admin"]),
    )
    assert response.status_code == 201, response.text
    body = with_calibration({**RUN, "parallelism": {"tensor": 2}}, "latest")
    got, raw = infer(client, body), infer(client, {**RUN, "parallelism": {"tensor": 2}})
    for phase in ("prefill", "decode"):
        reduce = rows(got, phase)["tensor_parallel_all_reduce"]
        assert reduce["raw_time_s"] == pytest.approx(rows(raw, phase)["tensor_parallel_all_reduce"]["time_s"])
        assert reduce["time_s"] == pytest.approx(1.5 * reduce["raw_time_s"], rel=1e-6)
        assert rows(got, phase)["ffn_up"]["time_s"] == pytest.approx(1.25 * rows(raw, phase)["ffn_up"]["time_s"])
    assert got["communication"]["tensor_parallel_s"] == pytest.approx(1.5 * raw["communication"]["tensor_parallel_s"])
    applied = got["assumptions"]["calibration"]["applied"]
    assert applied["collective.all_reduce/bf16"]["ops"]["decode"] == ["tensor_parallel_all_reduce"]
    # "latest" per family: the collectives from the newer calibration, the matmuls from the older one.
    assert applied["collective.all_reduce/bf16"]["id"] == response.json()["id"]
    assert applied["matmul/bf16"]["id"] == calibration["id"]


def test_calibration_choices_without_data(client: TestClient, calibration: dict[str, Any]) -> None:
    # "latest" on a profile with no calibration: the physical model, and a note that says so (no error: a plan over
    # several profiles can ask for "latest" on each).
    h100 = infer(client, with_calibration({**RUN, "hardware": "h100-sxm"}, "latest"))
    plain = infer(client, {**RUN, "hardware": "h100-sxm"})
    assert h100["total_time_s"] == plain["total_time_s"]
    assert h100["assumptions"]["calibration"]["method"] == "physical"
    assert "no calibration for 'h100-sxm'" in h100["assumptions"]["calibration"]["note"]
    # Another profile's calibration named by id: a 422 naming the field; an unknown id a 404 naming it.
    wrong = client.post(
        "/v1/estimate/inference", json=with_calibration({**RUN, "hardware": "h100-sxm"}, calibration["id"])
    )
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["field"] == "body.options.calibration"
    assert "a100-sxm-80gb" in wrong.json()["message"]
    missing = client.post("/v1/estimate/inference", json=with_calibration(RUN, 999_999))
    assert missing.status_code == 404 and missing.json()["detail"][0]["field"] == "body.options.calibration"
    batch = client.post("/v1/estimate/inference/batch", json={"items": [RUN, with_calibration(RUN, 999_999)]})
    assert batch.status_code == 404 and batch.json()["detail"][0]["field"] == "body.items.1.options.calibration"
