"""Responses are encoded by orjson (service.encoding), and what reaches the encoder is plain JSON: no numpy, no NaN.

orjson without OPT_SERIALIZE_NUMPY raises TypeError on a numpy value, so a numpy scalar that leaks into a response
is a 500 that the API tests see, not a number quietly written some other way. NaN and ±∞, which orjson (like
pydantic) would write as null, are a 422 naming the field. Every example body of every estimate endpoint is sent here
and everything the encoder is handed is checked to be dicts, lists, str, int, float, bool and None only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

import adapters
import roofline
from schemas.collectives import CollectiveRead, CollectiveRequest
from schemas.estimates import EstimateOpsRead, EstimateRead
from schemas.inference import InferenceRead, InferenceRequest
from schemas.plan import PlanRequest
from schemas.training import TrainingRequest
from schemas.training_plan import TrainingPlanRequest
from service import encoding
from service.collectives import service as collectives
from service.encoding import ORJSONResponse
from service.examples import (
    COLLECTIVE_EXAMPLES,
    ESTIMATE_OP_EXAMPLES,
    ESTIMATE_OPS_EXAMPLES,
    INFERENCE_BATCH_EXAMPLES,
    INFERENCE_EXAMPLES,
    PLAN_EXAMPLES,
    TRAINING_EXAMPLES,
    TRAINING_PLAN_EXAMPLES,
)
from service.inference import service as inference
from service.plan import service as planner
from service.training import service as training

PLAIN = (str, int, float, bool, type(None))
MATMUL = {"hardware": "a100-sxm-80gb", "op": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}}


def plain_json_problems(value: Any, path: str = "response") -> Iterator[str]:
    """Paths of anything in `value` that is not a plain JSON type (exact types: np.float64 is a float subclass)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                yield f"{path}: key {key!r} of type {type(key).__name__}"
            yield from plain_json_problems(item, f"{path}.{key}")
    elif type(value) is list:
        for index, item in enumerate(value):
            yield from plain_json_problems(item, f"{path}.{index}")
    elif type(value) not in PLAIN:
        yield f"{path}: {type(value).__module__}.{type(value).__name__}"
    elif type(value) is float and not math.isfinite(value):
        yield f"{path}: {value}"


def numpy_in(value: Any, path: str = "model") -> Iterator[str]:
    """Paths of numpy values in a model's python-mode dump (free-form fields such as `details` keep what they get)."""
    if type(value).__module__.split(".")[0] == "numpy":
        yield f"{path}: {type(value).__name__}"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from numpy_in(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from numpy_in(item, f"{path}.{index}")


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Everything handed to the encoder while the test runs."""
    seen: list[Any] = []
    real = encoding.dumps

    def spy(content: Any, *, check: bool = True) -> bytes:
        seen.append(content)
        return real(content, check=check)

    monkeypatch.setattr(encoding, "dumps", spy)
    return seen


# --- the encoder itself ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [np.float64(1.5), np.float32(1.5), np.int64(3), np.bool_(True), np.arange(3.0), np.array(2.0)],
    ids=["float64", "float32", "int64", "bool", "array", "0-d array"],
)
def test_a_numpy_value_is_refused_by_the_encoder(value: Any) -> None:
    # np.float64 is a subclass of float: json.dumps would write it, orjson without OPT_SERIALIZE_NUMPY does not.
    with pytest.raises(TypeError):
        ORJSONResponse({"details": {"x": value}})


def test_plain_values_encode_compactly_and_null_stays_null() -> None:
    body = ORJSONResponse({"time_s": 1.5e-3, "tiles": None, "tile": [256, 128], "bound": "compute", "ok": True}).body
    assert body == b'{"time_s":0.0015,"tiles":null,"tile":[256,128],"bound":"compute","ok":true}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_a_422_naming_the_field_never_a_silent_null(bad: float) -> None:
    with pytest.raises(adapters.InvalidField) as raised:  # answered as a 422 (service.errors)
        encoding.dumps({"items": [{"time_s": 1.0}, {"time_s": 2.0, "details": {"raw_time_s": bad}}]})
    assert raised.value.field == "response.items.1.details.raw_time_s"
    assert raised.value.kind == "non_finite_result"


def test_the_error_envelope_goes_through_the_encoder(client: TestClient, encoded: list[Any]) -> None:
    response = client.get("/v1/hardware/no-such-profile")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    detail = {
        "field": "path.slug",
        "message": "no hardware profile 'no-such-profile': GET /v1/hardware lists them",
        "type": "not_found",
    }
    assert encoded == [
        {
            "error": "not_found",
            "message": "No hardware profile with slug 'no-such-profile' (path.slug); GET /v1/hardware lists them.",
            "detail": [detail],
        }
    ]


# --- what the endpoints hand the encoder ----------------------------------------------------------------------------


def _examples(examples: dict[str, Any]) -> list[dict[str, Any]]:
    return [example["value"] for example in examples.values()]


ENDPOINT_EXAMPLES = [
    ("/v1/estimate/op", body) for body in _examples(ESTIMATE_OP_EXAMPLES)
] + [
    ("/v1/estimate/ops", body) for body in _examples(ESTIMATE_OPS_EXAMPLES)
] + [
    ("/v1/estimate/inference", body) for body in _examples(INFERENCE_EXAMPLES)
] + [
    ("/v1/estimate/inference/batch", body) for body in _examples(INFERENCE_BATCH_EXAMPLES)
] + [
    ("/v1/estimate/collective", body) for body in _examples(COLLECTIVE_EXAMPLES)
] + [
    ("/v1/estimate/training", body) for body in _examples(TRAINING_EXAMPLES)
] + [
    ("/v1/plan/training", body) for body in _examples(TRAINING_PLAN_EXAMPLES)
] + [("/v1/plan", body) for body in _examples(PLAN_EXAMPLES)]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body"), ENDPOINT_EXAMPLES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(ENDPOINT_EXAMPLES)]
)
def test_every_example_response_reaches_the_encoder_as_plain_json(
    client: TestClient, encoded: list[Any], path: str, body: dict[str, Any]
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    assert len(encoded) == 1
    assert list(plain_json_problems(encoded[0])) == []
    assert response.json() == encoded[0]  # what was checked is what was sent


def test_the_op_answer_is_exactly_an_estimate_read(client: TestClient) -> None:
    # The endpoint skips FastAPI's validation of its answer (service.estimates.service.estimate_op): this is that check.
    response = client.post("/v1/estimate/op", json=MATMUL)
    assert response.status_code == 200, response.text
    body = response.json()
    assert list(body) == list(EstimateRead.model_fields)
    assert EstimateRead.model_validate(body).model_dump(mode="json") == body


@pytest.mark.parametrize(
    ("path", "examples", "model"),
    [
        ("/v1/estimate/inference", INFERENCE_EXAMPLES, InferenceRead),
        ("/v1/estimate/collective", COLLECTIVE_EXAMPLES, CollectiveRead),
    ],
    ids=["inference", "collective"],
)
def test_the_inference_and_collective_answers_are_exactly_their_models(
    client: TestClient, path: str, examples: dict[str, Any], model: type[BaseModel]
) -> None:
    # These endpoints encode the model their service built without FastAPI's second validation of the answer
    # (service.deps.in_unit_of_work): this is that check, on every example.
    for body in _examples(examples):
        response = client.post(path, json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert list(answer) == list(model.model_fields)
        assert model.model_validate(answer).model_dump(mode="json") == answer


def test_a_sweep_answer_is_exactly_an_estimate_ops_read(client: TestClient) -> None:
    sweep = {"op": MATMUL["op"], "vary": {"m": [1, 128, 4096]}}
    response = client.post("/v1/estimate/ops", json={"hardware": "a100-sxm-80gb", "sweep": sweep})
    assert response.status_code == 200, response.text
    body = response.json()
    assert EstimateOpsRead.model_validate(body).model_dump(mode="json") == body
    assert [item["tile"] is not None for item in body["items"]] == [True, True, True]


def NEVER() -> bool:  # noqa: N802 - a constant callable: the heavy services' `should_stop` that never stops
    return False


def _session(client: TestClient) -> Any:
    app: Any = client.app
    return app.state.sessionmaker()


@pytest.mark.parametrize(
    ("build", "run", "examples"),
    [
        (CollectiveRequest.model_validate, collectives.estimate, COLLECTIVE_EXAMPLES),
        (InferenceRequest.model_validate, inference.estimate, INFERENCE_EXAMPLES),
        (PlanRequest.model_validate, lambda s, b: planner.document(planner.read(s, b), b, NEVER)[0], PLAN_EXAMPLES),
        (TrainingRequest.model_validate, training.estimate, TRAINING_EXAMPLES),
        (
            TrainingPlanRequest.model_validate,
            lambda s, b: training.plan_document(training.read_plan(s, b), b, NEVER)[0],
            TRAINING_PLAN_EXAMPLES,
        ),
    ],
    ids=["collective", "inference", "plan", "training", "training-plan"],
)
def test_the_services_build_their_models_without_numpy(
    client: TestClient,
    build: Callable[[Any], BaseModel],
    run: Callable[[Any, Any], BaseModel],
    examples: dict[str, Any],
) -> None:
    # Before any encoder: a numpy scalar in a free-form field (`details: dict[str, Any]`) would pass pydantic's JSON
    # mode as a number; the services convert at their edge instead, and this holds them to it.
    with _session(client) as session:
        for body in _examples(examples):
            model = run(session, build(body))
            assert list(numpy_in(model.model_dump())) == []


def test_a_numpy_leak_is_a_500_that_tests_see(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    real = adapters.with_assumptions

    def leaky(est: roofline.Estimate, hw: roofline.Hardware, name: str) -> roofline.Estimate:
        out = real(est, hw, name)
        out.assumptions["leak"] = np.float64(1.0)
        return out

    monkeypatch.setattr(adapters, "with_assumptions", leaky)
    response = client.post("/v1/estimate/op", json=MATMUL)
    assert response.status_code == 500
    assert response.json()["error"] == "internal_error"


def _overflowing(point: int) -> Callable[..., roofline.Estimate]:
    """The core's `single`, with one point's time made infinite (the input limits keep real inputs from doing this)."""
    real = roofline.single

    def single(*args: Any, **kwargs: Any) -> roofline.Estimate:
        est = real(*args, **kwargs)
        time_s = np.array(est.time_s, dtype=np.float64, copy=True)
        time_s.reshape(-1)[point] = np.inf
        return dataclasses.replace(est, time_s=time_s)

    return single


def test_an_estimate_that_overflows_is_a_422_naming_the_field(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(roofline, "single", _overflowing(0))
    response = client.post("/v1/estimate/op", json=MATMUL)
    assert response.status_code == 422, response.text
    assert [(d["field"], d["type"]) for d in response.json()["detail"]] == [("response.time_s", "non_finite_result")]


def test_a_sweep_point_that_overflows_is_a_422_naming_the_point(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(roofline, "single", _overflowing(2))
    sweep = {"op": MATMUL["op"], "vary": {"m": [1, 128, 4096, 8192]}}
    response = client.post("/v1/estimate/ops", json={"hardware": "a100-sxm-80gb", "sweep": sweep})
    assert response.status_code == 422, response.text
    assert [d["field"] for d in response.json()["detail"]] == ["response.items.2.time_s"]


def test_the_largest_inputs_the_limits_allow_give_finite_numbers(client: TestClient) -> None:
    # schemas/limits.py: dimensions ≤ 2²⁴ and figures ≥ 1e-15 (efficiencies ≥ 1e-6) keep every time finite. A batched
    # 2²⁴-cubed matmul on a profile whose memory is patched down to 1e-15 B/s at efficiency 1e-6:
    # FLOPs 2·2⁹⁶ ≈ 1.6e29; bytes 2·2²⁴·3·2⁴⁸ = 6·2⁷² ≈ 2.8e22 (bf16 A, B and C); memory time 2.8e22 / (1e-21 × 0.90,
    # a product's operand stream: roofline.MATMUL_STREAM_EFFICIENCY) ≈ 3.1e43 s.
    dim = 1 << 24
    body = {
        "hardware": "a100-sxm-80gb",
        "hardware_patch": {"memory": {"device": {"bandwidth_bytes_per_s": 1e-15}}},
        "options": {"matmul_efficiency": 1e-6, "memory_efficiency": 1e-6},
        "op": {"kind": "matmul", "m": dim, "n": dim, "k": dim, "batch": dim},
    }
    response = client.post("/v1/estimate/op", json=body)
    assert response.status_code == 200, response.text
    r = response.json()
    assert r["flops"] == pytest.approx(2.0 * 2.0**96)
    assert r["bytes"] == pytest.approx(6.0 * 2.0**72)
    assert r["memory_time_s"] == pytest.approx(6.0 * 2.0**72 / (1e-21 * 0.90))
    assert math.isfinite(r["time_s"]) and r["time_s"] >= r["memory_time_s"]
