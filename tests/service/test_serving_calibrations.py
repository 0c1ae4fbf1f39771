"""POST /v1/calibrations with kind serving: fitted on stored load tests, kept with its held-out error, applied by
`options.calibration` in /v1/estimate/serving; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from service.orm import ServingBenchmark, ServingCalibration, utcnow
from tests.conftest import bearer, make_key

pytestmark = pytest.mark.databases

LOAD = {"concurrency": 4, "requests": 40, "prompt_tokens": {"value": 256}, "output_tokens": {"value": 64}}
ESTIMATE = {"model": "llama-3-8b", "hardware": "h100-sxm", "load": LOAD}
# Load tests whose measured means are 15 ms + 1.2 × predicted + 1 ms (TTFT) and 1.1 × predicted + 1 ms (TPOT).
PREDICTED = [(0.02, 0.005), (0.04, 0.006), (0.08, 0.008), (0.16, 0.010)]


@pytest.fixture
def admin(client: TestClient) -> Iterator[dict[str, str]]:
    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        for ttft, tpot in PREDICTED:
            session.add(ServingBenchmark(
                format="vllm", model="llama-3-8b", hardware="h100-sxm", hardware_version=1, engine="vllm",
                engine_version="0.11.0", deployment={}, load={},
                measured={"ttft_s": {"mean": 0.016 + 1.2 * ttft}, "tpot_s": {"mean": 1.1 * tpot + 0.001}},
                predicted={"ttft_s": {"mean": ttft}, "tpot_s": {"mean": tpot}}, request_sha256="x" * 64,
                created_at=utcnow(),
            ))  # fmt: skip
        session.commit()
    yield bearer(make_key(client, "admin"))
    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        session.execute(delete(ServingBenchmark))
        session.execute(delete(ServingCalibration))
        session.commit()


def test_a_serving_calibration_is_fitted_and_applied(client: TestClient, admin: dict[str, str]) -> None:
    r = client.post("/v1/calibrations", json={"kind": "serving", "hardware": "h100-sxm", "engine": "vllm"},
                    headers=admin)  # fmt: skip
    assert r.status_code == 201, r.text
    cal = r.json()
    assert cal["kind"] == "serving" and cal["load_tests"] == 4
    assert cal["parameters"] == pytest.approx(
        {"first_token_s": 0.015, "iteration_host_s": 0.001, "prefill_factor": 1.2, "decode_factor": 1.1}
    )
    assert cal["after"]["tpot"]["median_ape"] == pytest.approx(0.0, abs=1e-9)
    assert client.get(f"/v1/calibrations/serving/{cal['id']}").json()["parameters"] == cal["parameters"]
    assert client.get("/v1/calibrations/serving", params={"hardware": "h100-sxm"}).json()["total"] == 1

    raw = client.post("/v1/estimate/serving", json=ESTIMATE).json()
    body = ESTIMATE | {"options": {"calibration": "latest"}}
    calibrated = client.post("/v1/estimate/serving", json=body).json()
    # TTFT' = 0.015 + 1.2 × TTFT + 0.001; TPOT' = 1.1 × TPOT + 0.001
    assert calibrated["ttft_s"]["mean"] == pytest.approx(0.016 + 1.2 * raw["ttft_s"]["mean"])
    assert calibrated["tpot_s"]["mean"] == pytest.approx(0.001 + 1.1 * raw["tpot_s"]["mean"])
    assert calibrated["assumptions"]["calibration"].startswith(f"serving calibration {cal['id']} (h100-sxm, vllm")
    by_id = client.post("/v1/estimate/serving", json=ESTIMATE | {"options": {"calibration": cal["id"]}}).json()
    assert by_id["tpot_s"]["mean"] == calibrated["tpot_s"]["mean"]
    other = client.post("/v1/estimate/serving", json=ESTIMATE | {"hardware": "a100-sxm-80gb",
                                                                  "options": {"calibration": cal["id"]}})  # fmt: skip
    assert other.status_code == 422 and other.json()["detail"][0]["field"] == "body.options.calibration"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "serving", "hardware": "h100-sxm", "engine": "sglang"}, "body.engine"),  # no sglang load tests
        ({"kind": "serving", "hardware": "h100-sxm", "dtype": "bf16"}, "body.dtype"),  # an op calibration's field
        ({"hardware": "h100-sxm", "engine": "vllm"}, "body.engine"),  # a serving field on an op calibration
    ],
)
def test_a_serving_calibration_refuses_naming_the_field(
    client: TestClient, admin: dict[str, str], body: dict[str, object], field: str
) -> None:
    r = client.post("/v1/calibrations", json=body, headers=admin)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field
