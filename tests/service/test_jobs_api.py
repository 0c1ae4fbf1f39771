"""Jobs over HTTP without running them (this process's runner is off, `tests/conftest.py`): submitting through
`POST /v1/jobs` and `Prefer: respond-async`, a plan too big for a request becoming a job, Idempotency-Key, reading,
listing, cancelling, access, and bad input naming the field. Running them on Ray: test_jobs_ray.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.jobs import JobRead
from tests.conftest import bearer, make_key
from tests.service.test_plan_api import BASE
from tests.service.test_serving_api import BASE as SERVING
from tests.service.test_training_plan_api import SMALL as TRAINING

pytestmark = pytest.mark.databases  # storage, idempotency and concurrency: SQLite and PostgreSQL

ASYNC = {"Prefer": "respond-async"}


def submitted(response: Any) -> dict[str, Any]:
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    JobRead.model_validate(job)
    assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
    return job


def test_prefer_respond_async_answers_202_with_the_job(client: TestClient) -> None:
    response = client.post("/v1/plan", json=BASE, headers=ASYNC)
    job = submitted(response)
    assert response.headers["Preference-Applied"] == "respond-async"
    assert (job["kind"], job["state"], job["attempts"]) == ("plan", "queued", 0)
    assert job["result"] is None and job["error"] is None
    assert job["progress"] == {"done": 0, "total": 0, "elapsed_s": None, "remaining_s": None}
    assert client.get(response.headers["Location"]).json() == job
    # RFC 7240 §2: preferences are comma-separated, with parameters, in any case.
    response = client.post("/v1/plan", json=BASE, headers={"Prefer": "wait=10, Respond-Async"})
    assert submitted(response)["id"] != job["id"]
    # Without the preference the same request is answered at once.
    assert client.post("/v1/plan", json=BASE).status_code == 200


@pytest.mark.parametrize(
    ("path", "kind", "body"),
    [("/v1/plan/training", "plan_training", TRAINING), ("/v1/estimate/serving", "estimate_serving", SERVING)],
)
def test_the_other_long_endpoints_take_the_preference(
    client: TestClient, path: str, kind: str, body: dict[str, Any]
) -> None:
    response = client.post(path, json=body, headers=ASYNC)
    job = submitted(response)
    assert job["kind"] == kind and response.headers["Preference-Applied"] == "respond-async"


def test_a_plan_past_a_request_s_size_runs_as_a_job_unasked(client: TestClient) -> None:
    # 2 profiles × 4 tensor widths × 16 batches × 12 budgets = 1 536 candidates (aggregated): past the 1 500 a request
    # answers (schemas.limits.MAX_SERVING_PLAN_CANDIDATES), within a job's 20 000.
    search = {"tensor": [1, 2, 4, 8], "max_num_seqs": list(range(8, 136, 8)),
              "max_num_batched_tokens": [2048 + 512 * i for i in range(12)]}  # fmt: skip
    response = client.post("/v1/plan", json={**BASE, "search": search})
    job = submitted(response)
    assert "Preference-Applied" not in response.headers  # not asked: the 202 itself says it became a job
    assert job["state"] == "queued"


def test_post_jobs_takes_a_kind_and_its_endpoint_s_body(client: TestClient) -> None:
    response = client.post("/v1/jobs", json={"kind": "plan", "body": BASE})
    job = submitted(response)
    assert "Preference-Applied" not in response.headers
    assert client.get(f"/v1/jobs/{job['id']}").json()["kind"] == "plan"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "fleet", "body": BASE}, "body.kind"),
        ({"kind": "plan"}, "body.body"),
        ({"kind": "plan", "body": {**BASE, "max_results": 0}}, "body.body.max_results"),
        ({"kind": "plan", "body": {**BASE, "search": {"tensor": [1, 1]}}}, "body.body.search.tensor"),
        ({"kind": "plan", "body": BASE, "extra": 1}, "body.extra"),
    ],
)
def test_bad_input_names_the_field(client: TestClient, body: dict[str, Any], field: str) -> None:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["detail"]]


def test_a_plan_past_a_job_s_size_is_still_a_422(client: TestClient) -> None:
    # 16 profiles × 8 tensor widths = 128 engines (the most allowed) × 20 batches × 8 budgets = 20 480 candidates:
    # over the 20 000 a job may have (schemas.limits.MAX_JOB_PLAN_CANDIDATES).
    search = {"tensor": list(range(1, 9)), "max_num_seqs": list(range(8, 168, 8)),
              "max_num_batched_tokens": [2048 * i for i in range(1, 9)]}  # fmt: skip
    body = {**BASE, "hardware": ["h100-sxm"] * 16, "prices": {}, "search": search}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"] == "body.search"
    assert "20480 candidates" in response.json()["detail"][0]["message"]


def test_an_idempotency_key_returns_the_same_job(client: TestClient) -> None:
    key = f"plan-{uuid.uuid4().hex}"
    first = submitted(client.post("/v1/plan", json=BASE, headers={**ASYNC, "Idempotency-Key": key}))
    again = client.post("/v1/jobs", json={"kind": "plan", "body": BASE}, headers={"Idempotency-Key": key})
    assert submitted(again)["id"] == first["id"] and again.headers["Idempotent-Replayed"] == "true"
    other = client.post("/v1/plan", json={**BASE, "max_results": 3}, headers={**ASYNC, "Idempotency-Key": key})
    assert other.status_code == 409 and first["id"] in other.json()["message"]
    # The key is the caller's: another API key's same Idempotency-Key is another job.
    mine = submitted(client.post("/v1/plan", json=BASE, headers={**ASYNC, "Idempotency-Key": key,
                                                                  **bearer(make_key(client, "upload"))}))  # fmt: skip
    assert mine["id"] != first["id"]


def test_jobs_are_listed_by_kind_and_state_newest_first(client: TestClient) -> None:
    auth = bearer(make_key(client, "upload"))  # a fresh key: its jobs alone
    plans = [submitted(client.post("/v1/plan", json=BASE, headers={**ASYNC, **auth}))["id"] for _ in range(3)]
    serving = submitted(client.post("/v1/jobs", json={"kind": "estimate_serving", "body": SERVING}, headers=auth))["id"]
    client.delete(f"/v1/jobs/{plans[0]}", headers=auth)
    page = client.get("/v1/jobs", headers=auth).json()
    assert page["total"] == 4 and [j["id"] for j in page["items"]] == [serving, *plans[::-1]]
    page = client.get("/v1/jobs", params={"kind": "plan", "state": "queued", "limit": 1, "offset": 1},
                      headers=auth).json()  # fmt: skip
    assert (page["total"], [j["id"] for j in page["items"]]) == (2, [plans[1]])
    assert client.get("/v1/jobs", params={"state": "cancelled"}, headers=auth).json()["total"] == 1
    response = client.get("/v1/jobs", params={"state": "done"})
    assert response.status_code == 422 and response.json()["detail"][0]["field"] == "query.state"


def test_cancelling_a_queued_job_and_who_may(client: TestClient) -> None:
    owner = bearer(make_key(client, "upload"))
    job = submitted(client.post("/v1/plan", json=BASE, headers={**ASYNC, **owner}))
    assert client.delete(f"/v1/jobs/{job['id']}", headers=bearer(make_key(client, "catalogue"))).status_code == 403
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 403  # no key: only for jobs submitted without one
    response = client.delete(f"/v1/jobs/{job['id']}", headers=owner)
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    assert response.json()["finished_at"] is not None
    # Cancelling a finished job changes nothing; an admin may cancel anyone's.
    again = client.delete(f"/v1/jobs/{job['id']}", headers=bearer(make_key(client, "admin")))
    assert again.status_code == 200 and again.json() == response.json()
    anonymous = submitted(client.post("/v1/plan", json=BASE, headers=ASYNC))
    assert client.delete(f"/v1/jobs/{anonymous['id']}").json()["state"] == "cancelled"


def test_an_unknown_job_is_a_404(client: TestClient) -> None:
    assert client.get(f"/v1/jobs/{'0' * 32}").status_code == 404
    assert client.delete(f"/v1/jobs/{'0' * 32}").status_code == 404
    response = client.get("/v1/jobs/not-hex")
    assert response.status_code == 422 and response.json()["detail"][0]["field"] == "path.job_id"
