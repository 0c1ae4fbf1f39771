"""Retries, back-off and idempotency keys of the upload client, against httpx.MockTransport."""

from __future__ import annotations

import random

import httpx
import pytest

from tests.worker.fakes import FakeService
from worker.client import AuthError, Conflict, Rejected, RetryPolicy, RidgelineClient, ServiceUnavailable


def make_client(service: FakeService, attempts: int = 4, sleeps: list[float] | None = None) -> RidgelineClient:
    return RidgelineClient(
        "http://ridgeline.test",
        "rl_secret",
        retry=RetryPolicy(attempts=attempts, base_s=0.5, max_s=4.0),
        transport=service.transport(),
        sleep=(sleeps if sleeps is not None else []).append,
        rng=random.Random(1),
    )


def test_backoff_doubles_with_equal_jitter_and_is_capped() -> None:
    policy = RetryPolicy(attempts=8, base_s=0.5, max_s=4.0)
    rng = random.Random(3)
    for retry, ceiling in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        for _ in range(50):
            assert ceiling / 2 <= policy.delay_s(retry, rng) <= ceiling
    # Jitter: two workers that failed together do not retry together.
    assert policy.delay_s(2, random.Random(1)) != policy.delay_s(2, random.Random(2))


def test_a_transient_failure_is_retried_with_the_same_key_and_bytes() -> None:
    service = FakeService()
    service.status_override = [503, 502]
    sleeps: list[float] = []
    client = make_client(service, sleeps=sleeps)
    answer = client.upload(b'{"results": [1, 2]}', "rlw-abc")
    assert answer.body == {"results": 2} and not answer.replayed
    assert len(service.requests) == 3
    assert {r.headers["idempotency-key"] for r in service.requests} == {"rlw-abc"}
    assert {r.content for r in service.requests} == {b'{"results": [1, 2]}'}
    assert service.requests[0].headers["authorization"] == "Bearer rl_secret"
    assert len(sleeps) == 2 and 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0


def test_an_unreachable_service_fails_after_every_try() -> None:
    service = FakeService()
    service.down = True
    sleeps: list[float] = []
    with pytest.raises(ServiceUnavailable, match="after 4 tries: ConnectError"):
        make_client(service, sleeps=sleeps).upload(b"{}", "k")
    assert len(service.requests) == 4 and len(sleeps) == 3  # no sleep after the last try


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    # The service's rate limiter answers 429 with the seconds until the upload fits (service.ratelimit), possibly
    # longer than the back-off's own cap: waited out in full, up to retry_after_max_s; a date form works too.
    calls = iter([
        httpx.Response(429, headers={"retry-after": "3"}),
        httpx.Response(429, headers={"retry-after": "65"}),
        httpx.Response(503, headers={"retry-after": "100000"}),
        httpx.Response(201, json={"results": 1}),
    ])  # fmt: skip
    sleeps: list[float] = []
    client = RidgelineClient(
        "http://x", transport=httpx.MockTransport(lambda r: next(calls)), sleep=sleeps.append,
        retry=RetryPolicy(attempts=4, base_s=0.1, max_s=10, retry_after_max_s=120),
    )  # fmt: skip
    client.upload(b"{}", "k")
    assert sleeps == [3.0, 65.0, 120.0]


@pytest.mark.parametrize(("status", "error"), [(401, AuthError), (403, AuthError), (422, Rejected), (400, Rejected)])
def test_final_answers_are_not_retried(status: int, error: type[Exception]) -> None:
    service = FakeService()
    service.status_override = [status]
    with pytest.raises(error):
        make_client(service).upload(b"{}", "k")
    assert len(service.requests) == 1


def test_a_conflict_that_lasts_is_final_and_a_passing_one_is_retried() -> None:
    service = FakeService()
    service.status_override = [409, 409, 409, 409]
    with pytest.raises(Conflict):
        make_client(service).upload(b"{}", "k")
    assert len(service.requests) == 4
    service = FakeService()
    service.status_override = [409]  # a concurrent upload with the same key was still running
    assert make_client(service).upload(b'{"results": []}', "k").body == {"results": 0}


def test_rejected_names_the_fields() -> None:
    body = {"error": "validation_error", "message": "m", "detail": [{"field": "body.results.3.op.dtype"}]}
    assert Rejected(422, body, "m").fields() == ["body.results.3.op.dtype"]
    assert Rejected(422, "not json", "m").fields() == []


def test_resolve_maps_a_description_or_says_unknown() -> None:
    client = make_client(FakeService())
    found = client.resolve("AMD EPYC")
    assert found is not None and found.slug == "cpu-generic"
    assert client.resolve("Mystery Accelerator 9000") is None
