"""Who may write what (issue 40 §1), on SQLite and PostgreSQL: every write needs a key whose scope allows it (upload ⊂
catalogue ⊂ admin), a key changes or deletes only what it made unless it is an admin key, reads are open unless the
operator closes them, anonymous answers name no key, a profile that stored results refer to is not deleted, and a
changed profile is a new version that the results predicted before keep."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from hardware_db import load_yaml
from hardware_db._loader import MODELS_DIR
from service.app import create_app
from service.examples import _HARDWARE, TRACE_UPLOAD_EXAMPLES
from service.orm import BenchmarkResult, BenchmarkRun, Calibration
from service.settings import Settings
from tests.conftest import bearer, make_key

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL

SLUG = "write-access-gpu"
MODEL = {**load_yaml(MODELS_DIR / "llama-3-8b.yaml"), "slug": "write-access-8b", "family": "write-access"}
TRACE: dict[str, Any] = TRACE_UPLOAD_EXAMPLES["application/json"]["chat-burst"]["value"]
# 2²⁸ bf16 elements, two inputs and one output: a streaming op, 6·2²⁸ bytes and 2²⁸ FLOPs (one per element).
ELEMENTS = 1 << 28
STREAM = {"kind": "elementwise", "elements": ELEMENTS, "inputs": 2, "outputs": 1, "dtype": "bf16"}


@pytest.fixture
def keys(client: TestClient) -> Iterator[dict[str, str]]:
    """Two catalogue keys (`a` makes things, `b` is another party), an upload key and an admin key; the runs and
    calibrations the test stored are removed afterwards (the client fixture removes entries and traces)."""
    yield {name: make_key(client, scope) for name, scope in
           (("a", "catalogue"), ("b", "catalogue"), ("upload", "upload"), ("admin", "admin"))}  # fmt: skip
    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        session.execute(delete(BenchmarkResult))
        session.execute(delete(BenchmarkRun))
        session.execute(delete(Calibration))
        session.commit()


def profile(slug: str = SLUG, bandwidth: float = 5e12) -> dict[str, Any]:
    doc = copy.deepcopy(_HARDWARE)
    doc["slug"] = slug
    doc["memory"]["device"]["bandwidth_bytes_per_s"] = bandwidth
    return doc


def error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code, body
    message: str = body["message"]
    return message


def run(client: TestClient, key: str, results: list[dict[str, Any]], hardware: str = SLUG) -> dict[str, Any]:
    body = {"hardware": hardware, "host": "write-access", "timing_scope": "kernel", "results": results}
    response = client.post("/v1/benchmarks", json=body, headers=bearer(key))
    assert response.status_code == 201, response.text
    stored: dict[str, Any] = client.get(f"/v1/benchmarks/{response.json()['id']}", headers=bearer(key)).json()
    return stored


# --- the matrix: no key 401, a scope below the write's 403, another key's entry 403, admin allowed -----------------


@pytest.mark.parametrize(("collection", "doc", "patch"), [
    ("hardware", profile(), {"memory": {"device": {"bandwidth_bytes_per_s": 6e12}}}),
    ("models", MODEL, {"max_context_tokens": 16384}),
])  # fmt: skip
def test_catalogue_writes(
    client: TestClient, keys: dict[str, str], collection: str, doc: dict[str, Any], patch: dict[str, Any]
) -> None:
    path, item = f"/v1/{collection}", f"/v1/{collection}/{doc['slug']}"
    error(client.post(path, json=doc), 401, "unauthorized")
    message = error(client.post(path, json=doc, headers=bearer(keys["upload"])), 403, "forbidden")
    assert "needs catalogue (or admin)" in message
    assert client.get(item).status_code == 404  # nothing stored by either
    assert client.post(path, json=doc, headers=bearer(keys["a"])).status_code == 201

    for method, body in (("PATCH", patch), ("DELETE", None)):
        error(client.request(method, item, json=body), 401, "unauthorized")
        error(client.request(method, item, json=body, headers=bearer(keys["upload"])), 403, "forbidden")
        message = error(client.request(method, item, json=body, headers=bearer(keys["b"])), 403, "forbidden")
        assert "made with another API key" in message and "test-catalogue-" not in message  # the owner unnamed
    assert client.get(item).json()["version"] == 1  # none of them changed it

    mine = client.patch(item, json=patch, headers=bearer(keys["a"]))
    assert mine.status_code == 200 and mine.json()["version"] == 2
    theirs = client.patch(item, json={"name": "Renamed by the admin"}, headers=bearer(keys["admin"]))
    assert theirs.status_code == 200 and theirs.json()["version"] == 3
    assert client.delete(item, headers=bearer(keys["admin"])).status_code == 204
    assert client.get(item).status_code == 404


def test_a_key_deletes_its_own_entry(client: TestClient, keys: dict[str, str]) -> None:
    assert client.post("/v1/models", json=MODEL, headers=bearer(keys["a"])).status_code == 201
    assert client.delete(f"/v1/models/{MODEL['slug']}", headers=bearer(keys["a"])).status_code == 204


def test_builtin_entries_stay_read_only_even_to_admin(client: TestClient, keys: dict[str, str]) -> None:
    admin = bearer(keys["admin"])
    error(client.patch("/v1/hardware/h100-sxm", json={"name": "x"}, headers=admin), 403, "read_only")
    error(client.delete("/v1/models/gpt2", headers=admin), 403, "read_only")
    error(client.delete("/v1/hardware/h100-sxm"), 401, "unauthorized")  # the key first: nothing said to anyone


def test_trace_writes(client: TestClient, keys: dict[str, str]) -> None:
    error(client.post("/v1/traces", json=TRACE), 401, "unauthorized")
    made = client.post("/v1/traces", json=TRACE, headers=bearer(keys["upload"]))
    assert made.status_code == 201, made.text
    item = f"/v1/traces/{made.json()['id']}"
    # Another key sending the same requests gets the stored trace, which stays the first key's.
    assert client.post("/v1/traces", json=TRACE, headers=bearer(keys["b"])).status_code == 200
    error(client.delete(item), 401, "unauthorized")
    error(client.delete(item, headers=bearer(keys["b"])), 403, "forbidden")
    assert client.delete(item, headers=bearer(keys["admin"])).status_code == 204
    assert client.get(item).status_code == 404

    again = client.post("/v1/traces", json=TRACE, headers=bearer(keys["upload"])).json()["id"]
    assert client.delete(f"/v1/traces/{again}", headers=bearer(keys["upload"])).status_code == 204


def test_uploads_and_calibrations(client: TestClient, keys: dict[str, str]) -> None:
    results = [{"op": STREAM, "median_s": 4e-4}]
    body = {"hardware": "h100-sxm", "host": "write-access", "timing_scope": "kernel", "results": results}
    error(client.post("/v1/benchmarks", json=body), 401, "unauthorized")
    for key in ("upload", "a", "admin"):  # catalogue and admin keys may upload too
        assert client.post("/v1/benchmarks", json=body, headers=bearer(keys[key])).status_code == 201, key
    fit = {"hardware": "h100-sxm"}
    error(client.post("/v1/calibrations", json=fit), 401, "unauthorized")
    for key in ("upload", "a"):
        assert "this needs admin" in error(client.post("/v1/calibrations", json=fit, headers=bearer(keys[key])), 403,
                                           "forbidden")  # fmt: skip


def test_anonymous_answers_name_no_key(client: TestClient, keys: dict[str, str]) -> None:
    made = client.post(
        "/v1/benchmarks",
        json={
            "hardware": "h100-sxm",
            "host": "h",
            "timing_scope": "kernel",
            "results": [{"op": STREAM, "median_s": 1}],
        },
        headers=bearer(keys["upload"]),
    ).json()["id"]
    name = "test-upload-"  # make_key's names: test-{scope}-{random}
    for path in ("/v1/benchmarks", f"/v1/benchmarks/{made}"):
        assert name not in client.get(path).text
        assert name not in client.get(path, headers=bearer(keys["b"])).text  # another key: not its own run
        assert name in client.get(path, headers=bearer(keys["upload"])).text
        assert name in client.get(path, headers=bearer(keys["admin"])).text
    error(client.get("/v1/benchmarks", headers=bearer("rl_nope_nope")), 401, "unauthorized")


def test_reads_can_require_a_key(settings: Settings, keys: dict[str, str]) -> None:
    app = create_app(settings.model_copy(update={"read_requires_key": True}))
    try:
        with TestClient(app, raise_server_exceptions=False) as gated:
            reads = [
                ("GET", "/v1/hardware/h100-sxm", None),
                ("GET", "/v1/models", None),
                ("GET", "/v1/traces", None),
                ("GET", "/v1/benchmarks", None),
                ("GET", "/v1/accuracy", None),
                ("GET", "/v1/calibrations", None),
                ("POST", "/v1/estimate/op", {"hardware": "h100-sxm", "op": STREAM}),
            ]
            for method, path, body in reads:
                error(gated.request(method, path, json=body), 401, "unauthorized")
                assert gated.request(method, path, json=body, headers=bearer(keys["upload"])).status_code == 200, path
            assert gated.get("/healthz").status_code == 200  # probes stay open
            operation = gated.get("/openapi.json").json()["paths"]["/v1/estimate/op"]["post"]
            assert "401" in operation["responses"]
    finally:
        app.state.engine.dispose()


# --- a profile that results refer to: never deleted, and versioned when changed ----------------------------------


def test_a_profile_that_runs_refer_to_cannot_be_deleted(client: TestClient, keys: dict[str, str]) -> None:
    assert client.post("/v1/hardware", json=profile(), headers=bearer(keys["a"])).status_code == 201
    for _ in range(3):
        run(client, keys["a"], [{"op": STREAM, "median_s": 4e-4}])
    for key in ("a", "admin"):
        message = error(client.delete(f"/v1/hardware/{SLUG}", headers=bearer(keys[key])), 409, "conflict")
        assert message.startswith(
            f"Cannot delete hardware profile '{SLUG}': stored data refers to it (3 benchmark runs)"
        )
    assert client.get(f"/v1/hardware/{SLUG}").status_code == 200
    # A user model: nothing stored refers to a model today, so its owner may delete it (204).
    assert client.post("/v1/models", json=MODEL, headers=bearer(keys["a"])).status_code == 201
    assert client.delete(f"/v1/models/{MODEL['slug']}", headers=bearer(keys["a"])).status_code == 204


def predicted_stream_s(bandwidth: float) -> float:
    """The core's prediction of STREAM on `profile(bandwidth)` in the kernel timing scope: memory 6·2²⁸ B /
    (bandwidth × 0.9 memory efficiency) and math 2²⁸ FLOP / (67e12 fp32 vector peak, which bf16 elementwise runs at,
    × 0.8), combined by the core's smooth maximum (roofline._estimate.OVERLAP_NORM = 3), plus the kernel scope's
    fixed cost, 2.5 µs (`adapters.scope_launch_s`: at most the profile's 5 µs launch)."""
    memory_s = 6 * ELEMENTS / (bandwidth * 0.9)
    math_s = ELEMENTS / (67e12 * 0.8)
    return 2.5e-6 + float((memory_s**3 + math_s**3) ** (1 / 3))


def test_a_changed_profile_leaves_old_results_on_their_version(client: TestClient, keys: dict[str, str]) -> None:
    a = bearer(keys["a"])
    assert client.post("/v1/hardware", json=profile(bandwidth=5e12), headers=a).status_code == 201
    measured = 4.0e-4
    first = run(client, keys["a"], [{"op": STREAM, "median_s": measured}])
    assert first["hardware_version"] == 1
    p1 = first["items"][0]["predicted_s"]
    assert p1 == pytest.approx(predicted_stream_s(5e12), rel=1e-6)  # 360.4 µs

    patched = client.patch(f"/v1/hardware/{SLUG}", json={"memory": {"device": {"bandwidth_bytes_per_s": 2.5e12}}},
                           headers=a)  # fmt: skip
    assert patched.status_code == 200 and patched.json()["version"] == 2
    second = run(client, keys["a"], [{"op": STREAM, "median_s": measured}])
    assert second["hardware_version"] == 2
    p2 = second["items"][0]["predicted_s"]
    assert p2 == pytest.approx(predicted_stream_s(2.5e12), rel=1e-6)  # 718.3 µs: half the bandwidth

    # The first run keeps its prediction and its version, whose figures are kept.
    again = client.get(f"/v1/benchmarks/{first['id']}").json()
    assert again["hardware_version"] == 1 and again["items"][0]["predicted_s"] == p1
    old = client.get(f"/v1/hardware/{SLUG}/versions/1").json()
    assert old["version"] == 1 and old["memory"]["device"]["bandwidth_bytes_per_s"] == 5e12
    assert client.get(f"/v1/hardware/{SLUG}/versions/2").json()["memory"]["device"]["bandwidth_bytes_per_s"] == 2.5e12
    error(client.get(f"/v1/hardware/{SLUG}/versions/3"), 404, "not_found")

    # Accuracy reads each result against its own prediction: |360.4 / 400 − 1| = 9.9 % on version 1, and
    # |718.3 / 400 − 1| = 79.6 % on version 2; never the first measurement against the new figures.
    def median_ape(**params: Any) -> float:
        report = client.get("/v1/accuracy", params={"hardware": SLUG, **params}).json()
        value: float = report["raw"]["median_ape"]
        return value

    assert median_ape(hardware_version=1) == pytest.approx(abs(predicted_stream_s(5e12) / measured - 1), rel=1e-6)
    assert median_ape(hardware_version=2) == pytest.approx(abs(predicted_stream_s(2.5e12) / measured - 1), rel=1e-6)
    assert client.get("/v1/benchmarks", params={"hardware": SLUG, "hardware_version": 1}).json()["total"] == 1


def test_a_calibration_is_fitted_on_and_applied_to_its_own_version(client: TestClient, keys: dict[str, str]) -> None:
    a, admin = bearer(keys["a"]), bearer(keys["admin"])
    assert client.post("/v1/hardware", json=profile(), headers=a).status_code == 201
    # 16 streaming ops of 2¹⁸…2³³ elements: enough to fit the elementwise bf16 group (8 in the training part).
    results = [{"op": {**STREAM, "elements": 1 << (18 + i)}, "median_s": 1e-5 * 2**i} for i in range(16)]
    run(client, keys["a"], results)
    client.patch(f"/v1/hardware/{SLUG}", json={"name": "Version 2"}, headers=a)
    # Every result was predicted with version 1: a calibration of version 2 has nothing to learn from.
    message = error(client.post("/v1/calibrations", json={"hardware": SLUG}, headers=admin), 422, "validation_error")
    assert f"No predicted results to calibrate on for '{SLUG}' (version 2)" in message

    run(client, keys["a"], results)
    fitted = client.post("/v1/calibrations", json={"hardware": SLUG, "holdout_fraction": 0.25}, headers=admin)
    assert fitted.status_code == 201, fitted.text
    assert fitted.json()["hardware_version"] == 2
    calibration_id = fitted.json()["id"]
    first, second = client.get("/v1/benchmarks", params={"hardware": SLUG}).json()["items"][::-1]
    stamped = {
        n: [r["calibration_id"] for r in client.get(f"/v1/benchmarks/{item['id']}").json()["items"]]
        for n, item in (("v1", first), ("v2", second))
    }
    assert stamped["v1"] == [None] * 16 and stamped["v2"] == [calibration_id] * 16  # only its own version's results

    estimate = {"hardware": SLUG, "op": STREAM, "options": {"calibration": calibration_id}}
    assert client.post("/v1/estimate/op", json=estimate).status_code == 200
    client.patch(f"/v1/hardware/{SLUG}", json={"name": "Version 3"}, headers=a)
    # Version 3's estimates are not corrected by a calibration of version 2: "latest" finds none, and naming it is a
    # 422 that says why.
    latest = client.post("/v1/estimate/op", json={**estimate, "options": {"calibration": "latest"}}).json()
    assert latest["assumptions"]["calibration"]["method"] == "physical"
    response = client.post("/v1/estimate/op", json=estimate)
    message = error(response, 422, "validation_error")
    assert f"was fitted on version 2 of '{SLUG}', which is now at version 3" in message
    assert response.json()["detail"][0]["field"] == "body.options.calibration"
