"""POST/GET /v1/calibrations over HTTP, on SQLite and PostgreSQL, with a correction planted in synthetic uploads.

The ops are bf16 elementwise ops (1 input, 1 output, 1 FLOP per element) on the A100 profile, timed as graph
replays (2.5 µs fixed cost per kernel in the model). Their modelled work — time less fixed cost — comes from
/v1/estimate/ops; the "measured" time is planted as 4 µs + 1.25 · work: a device with a slower launch and 80 % of
the modelled throughput, which the fit must find.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.test_benchmarks import bearer, elementwise, keys, run_body, upload

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL

__all__ = ["keys"]  # the fixture, used by name

SIZES = np.unique(np.geomspace(1e5, 1e8, 60).astype(int)).tolist()


def work_s(client: TestClient, sizes: list[int]) -> list[float]:
    """The model's time less its fixed cost, per op."""
    response = client.post(
        "/v1/estimate/ops",
        json={"hardware": "a100-sxm-80gb", "ops": [elementwise(e) for e in sizes], "options": {"launch_overhead_s": 0}},
    )
    assert response.status_code == 200, response.text
    return [item["time_s"] - item["overhead_s"] for item in response.json()["items"]]


def planted(client: TestClient, sizes: list[int]) -> list[float]:
    return [4e-6 + 1.25 * w for w in work_s(client, sizes)]


def upload_planted(client: TestClient, key: str, sizes: list[int] = SIZES) -> dict[str, Any]:
    body = run_body([{"op": elementwise(e), "median_s": t} for e, t in zip(sizes, planted(client, sizes), strict=True)])
    response = upload(client, key, body)
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


def calibrate(client: TestClient, key: str, **body: Any) -> Any:
    return client.post("/v1/calibrations", json={"hardware": "a100-sxm-80gb", **body}, headers=bearer(key))


def test_fit_recovers_the_planted_correction(client: TestClient, keys: dict[str, str]) -> None:
    run = upload_planted(client, keys["upload"])
    assert calibrate(client, keys["upload"]).status_code == 403  # fitting needs an admin key
    assert client.post("/v1/calibrations", json={"hardware": "a100-sxm-80gb"}).status_code == 401

    response = calibrate(client, keys["admin"], op_families=["elementwise"], holdout_fraction=0.25, seed=7)
    assert response.status_code == 201, response.text
    cal = response.json()
    assert (cal["version"], cal["op_families"]) == (1, ["elementwise"])
    (group,) = cal["groups"]
    assert (group["family"], group["dtype"]) == ("elementwise", "bf16")
    assert group["train"] + group["holdout"] == 60 and group["holdout"] == 15
    assert group["launch_s"] == pytest.approx(4e-6, rel=1e-6)
    assert group["utilisation"] == pytest.approx([1.25, 0, 0], abs=1e-6)
    # Before: the raw model, 2.5 µs + work, against 4 µs + 1.25 · work: always too fast.
    assert group["before"]["bias"] < -0.15 and group["before"]["count"] == 15
    assert group["after"]["p90_ape"] < 1e-6
    assert sum(group["methods"].values()) == 15
    assert client.get(f"/v1/calibrations/{cal['id']}").json() == cal

    # Every stored result now carries its calibrated prediction, which is the planted time.
    items = client.get(f"/v1/benchmarks/{run['id']}", params={"limit": 100}).json()["items"]
    for item in items:
        assert item["calibration_id"] == cal["id"]
        assert item["calibrated_s"] == pytest.approx(item["median_s"], rel=1e-6)

    # A later upload is calibrated as it is stored.
    later = upload(client, keys["upload"], run_body([{"op": elementwise(3_000_000), "median_s": 1e-5}])).json()
    assert (later["calibrated"], later["calibration_id"]) == (1, cal["id"])
    item = client.get(f"/v1/benchmarks/{later['id']}").json()["items"][0]
    assert item["calibrated_s"] == pytest.approx(planted(client, [3_000_000])[0], rel=1e-6)


def test_a_held_out_share_of_no_results_still_fits(client: TestClient, keys: dict[str, str]) -> None:
    # Found by schemathesis (a 500): 5e-324 of the results rounds to none held out; the fit uses them all (this
    # upload's, and any earlier test's on the same database).
    upload_planted(client, keys["upload"])
    response = calibrate(client, keys["admin"], op_families=["elementwise"], holdout_fraction=5e-324)
    assert response.status_code == 201, response.text
    (group,) = response.json()["groups"]
    assert group["holdout"] == 0 and group["train"] >= len(SIZES)
    assert group["before"]["count"] == group["after"]["count"] == 0


def test_versions_count_per_hardware(client: TestClient, keys: dict[str, str]) -> None:
    upload_planted(client, keys["upload"])
    first = calibrate(client, keys["admin"]).json()
    second = calibrate(client, keys["admin"], seed=1).json()
    assert (first["version"], second["version"]) == (1, 2)
    listed = client.get("/v1/calibrations", params={"hardware": "a100-sxm-80gb"}).json()
    assert [c["id"] for c in listed["items"]] == [second["id"], first["id"]]


def test_nothing_to_fit_is_a_422_and_unknown_ids_404(client: TestClient, keys: dict[str, str]) -> None:
    response = calibrate(client, keys["admin"])
    assert response.status_code == 422 and "No predicted results" in response.json()["message"]
    upload_planted(client, keys["upload"], SIZES[:5])
    response = calibrate(client, keys["admin"])
    assert response.status_code == 422 and "Too few" in response.json()["message"]
    assert client.post("/v1/calibrations", json={"hardware": "nope"}, headers=bearer(keys["admin"])).status_code == 404
    assert client.get("/v1/calibrations/999999").status_code == 404
    bad = calibrate(client, keys["admin"], holdout_fraction=1.0)
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "body.holdout_fraction"


def test_estimates_take_a_calibration(client: TestClient, keys: dict[str, str]) -> None:
    upload_planted(client, keys["upload"])
    cal = calibrate(client, keys["admin"], op_families=["elementwise"]).json()

    def estimate(elements: int, calibration: Any) -> Any:
        body = {"hardware": "a100-sxm-80gb", "op": elementwise(elements), "options": {"calibration": calibration}}
        return client.post("/v1/estimate/op", json=body)

    raw = estimate(3_000_000, "none").json()
    assert raw["assumptions"]["calibration"] == "none"
    for choice in ("latest", cal["id"]):
        response = estimate(3_000_000, choice)
        assert response.status_code == 200, response.text
        got = response.json()
        # The raw estimate keeps the profile's 5 µs launch; the calibrated one is 4 µs + 1.25 · work.
        assert got["details"]["raw_time_s"] == pytest.approx(raw["time_s"], rel=1e-12)
        assert got["time_s"] == pytest.approx(planted(client, [3_000_000])[0], rel=1e-6)
        info = got["assumptions"]["calibration"]
        assert (info["id"], info["version"], info["method"]) == (cal["id"], 1, "interpolated")
    # Far outside the measured sizes: the physical model, and it says so.
    far = estimate(1 << 40, "latest").json()
    assert far["time_s"] == far["details"]["raw_time_s"]
    assert far["assumptions"]["calibration"]["method"] == "physical"
    # A family the calibration does not cover: the physical model too.
    gemm = {"hardware": "a100-sxm-80gb", "op": {"kind": "matmul", "m": 64, "n": 64, "k": 64}}
    covered = client.post("/v1/estimate/op", json=gemm | {"options": {"calibration": "latest"}}).json()
    assert covered["assumptions"]["calibration"]["method"] == "physical"
    assert estimate(1000, 999_999).status_code == 404
    # Lists and sweeps: each item calibrated, with its own method.
    listed = client.post(
        "/v1/estimate/ops",
        json={
            "hardware": "a100-sxm-80gb",
            "ops": [elementwise(3_000_000), {"kind": "matmul", "m": 64, "n": 64, "k": 64}],
            "options": {"calibration": "latest"},
        },
    )
    assert listed.status_code == 200, listed.text
    first, second = listed.json()["items"]
    assert first["time_s"] == pytest.approx(planted(client, [3_000_000])[0], rel=1e-6)
    assert first["assumptions"]["calibration"]["method"] == "interpolated"
    assert second["assumptions"]["calibration"]["method"] == "physical"
    assert second["time_s"] == second["details"]["raw_time_s"]
    swept = client.post(
        "/v1/estimate/ops",
        json={
            "hardware": "a100-sxm-80gb",
            "sweep": {"op": elementwise(1), "vary": {"elements": [3_000_000, 30_000_000]}},
            "options": {"calibration": cal["id"]},
        },
    ).json()
    expected = planted(client, [3_000_000, 30_000_000])
    assert [i["time_s"] for i in swept["items"]] == pytest.approx(expected, rel=1e-6)
    assert {i["assumptions"]["calibration"]["id"] for i in swept["items"]} == {cal["id"]}


def test_latest_without_a_calibration_is_the_physical_model(client: TestClient, keys: dict[str, str]) -> None:
    body = {"hardware": "h100-sxm", "op": elementwise(1000), "options": {"calibration": "latest"}}
    got = client.post("/v1/estimate/op", json=body).json()
    assert got["assumptions"]["calibration"]["method"] == "physical"
    assert "no calibration" in got["assumptions"]["calibration"]["note"]


def test_latest_is_per_op_family(client: TestClient, keys: dict[str, str]) -> None:
    """A newer calibration of matmuls only leaves elementwise ops with the older one that covers them."""
    upload_planted(client, keys["upload"])
    gemms = [{"op": {"kind": "matmul", "m": 64 * i, "n": 1024, "k": 1024}, "median_s": 2e-5 * i} for i in range(1, 21)]
    upload(client, keys["upload"], run_body(gemms))
    older = calibrate(client, keys["admin"], op_families=["elementwise"]).json()
    newer = calibrate(client, keys["admin"], op_families=["matmul"]).json()
    assert (older["version"], newer["version"]) == (1, 2)
    body = {"hardware": "a100-sxm-80gb", "ops": [elementwise(3_000_000), gemms[4]["op"]]}
    items = client.post("/v1/estimate/ops", json=body | {"options": {"calibration": "latest"}}).json()["items"]
    assert [i["assumptions"]["calibration"]["id"] for i in items] == [older["id"], newer["id"]]
    assert items[0]["time_s"] == pytest.approx(planted(client, [3_000_000])[0], rel=1e-6)
    # An upload is calibrated the same way, result by result.
    run = upload(client, keys["upload"], run_body([{"op": op, "median_s": 1e-4} for op in body["ops"]])).json()
    assert (run["calibrated"], run["calibration_id"]) == (2, newer["id"])
    stored = client.get(f"/v1/benchmarks/{run['id']}").json()["items"]
    assert [s["calibration_id"] for s in stored] == [older["id"], newer["id"]]


def test_collectives_calibrate_per_collective(client: TestClient, keys: dict[str, str]) -> None:
    """All-reduces on 8 A100s measured at 1.5x the model (which has no fixed-cost part for collectives)."""
    sizes = [1 << p for p in range(10, 30)]
    ops = [{"kind": "collective", "collective": "all_reduce", "bytes": b, "devices": 8, "dtype": "fp16"} for b in sizes]
    first = upload(client, keys["upload"], run_body([{"op": op, "median_s": 1.0} for op in ops])).json()
    predicted = [i["predicted_s"] for i in client.get(f"/v1/benchmarks/{first['id']}").json()["items"]]
    planted_run = [{"op": op, "median_s": 1.5 * t} for op, t in zip(ops, predicted, strict=True)]
    upload(client, keys["upload"], run_body(planted_run, software={"planted": "1"}))
    # Only the second run is planted: calibrate on it alone.
    cal = calibrate(client, keys["admin"], op_families=["collective"], software="planted").json()
    (group,) = cal["groups"]
    assert (group["family"], group["dtype"], cal["op_families"]) == ("collective.all_reduce", "fp16", ["collective"])
    assert group["utilisation"][0] == pytest.approx(1.5, rel=1e-6) and group["after"]["p90_ape"] < 1e-6


def test_a_calibration_narrows_the_interval_to_its_own_spread(client: TestClient, keys: dict[str, str]) -> None:
    """The planted times are exactly 4 µs + 1.25 · work, which the fit recovers: measured / fitted is 1 at every
    training point, so a calibrated estimate's interval closes on its time. Where the physical model stands (far
    outside the measured sizes) the shipped interval stays."""
    upload_planted(client, keys["upload"])
    calibrate(client, keys["admin"], op_families=["elementwise"])

    def estimate(elements: int, calibration: str) -> Any:
        body = {"hardware": "a100-sxm-80gb", "op": elementwise(elements), "options": {"calibration": calibration}}
        response = client.post("/v1/estimate/op", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    raw, got = estimate(3_000_000, "none"), estimate(3_000_000, "latest")
    assert raw["time_s_p90"] / raw["time_s_p10"] > 1.05  # the shipped band of elementwise ops
    assert got["time_s_p10"] == pytest.approx(got["time_s"], rel=1e-5)
    assert got["time_s_p90"] == pytest.approx(got["time_s"], rel=1e-5)
    assert got["assumptions"]["interval"]["source"].startswith("the applied calibration")
    far_raw, far = estimate(1 << 40, "none"), estimate(1 << 40, "latest")
    assert (far["time_s_p10"], far["time_s_p90"]) == (far_raw["time_s_p10"], far_raw["time_s_p90"])
