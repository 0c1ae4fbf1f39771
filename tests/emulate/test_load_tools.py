"""The loop on a CPU, with the real tools: aiperf and GuideLLM (from the package registry) load `ridgeline emulate`,
their own result files are read, agree with the simulation the emulator runs, and upload to
/v1/serving-benchmarks, which holds them against its prediction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import adapters
from hardware_db import load_hardware, load_models
from schemas.serving import ServingRequest
from tests.conftest import bearer, free_port, make_key
from tests.emulate.tools import ROOT, run_aiperf, run_guidellm, word_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("load_tools")]

DEPLOYMENT = {"model": "llama-3-8b", "hardware": "h100-sxm"}
CONCURRENCY, REQUESTS, PROMPT, OUTPUT = 4, 40, 256, 64


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("emulate") / "emulate.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "emulate", "--model", DEPLOYMENT["model"], "--hardware",
         DEPLOYMENT["hardware"], "--port", str(port), "--max-tokens", "1024"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    assert proc.poll() is None, "ridgeline emulate exited"
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def _served(url: str) -> dict[str, float]:
    doc = httpx.get(f"{url}/health", timeout=10).json()
    return {"served": doc["served"], **doc["simulated_sums"]}


@pytest.fixture(scope="module")
def runs(emulator: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, float]]]:
    """Each tool's result file, and the emulator's own simulated means over the requests that tool sent (warm-up
    included: GET /health's sums before and after)."""
    work = tmp_path_factory.mktemp("tools")
    tok = word_tokenizer(work / "tokenizer")
    shape = {"concurrency": CONCURRENCY, "requests": REQUESTS, "prompt": PROMPT, "output": OUTPUT}
    out = {}
    for name, run in (("aiperf", run_aiperf), ("guidellm", run_guidellm)):
        before = _served(emulator)
        path = run(emulator, DEPLOYMENT["model"], tok, work / name, **shape)
        after = _served(emulator)
        n = after["served"] - before["served"]
        out[name] = (path, {k: (after[k] - before[k]) / n for k in ("ttft_s", "tpot_s", "e2e_s")})
    return out


@pytest.fixture(scope="module")
def files(runs: dict[str, tuple[Path, dict[str, float]]]) -> dict[str, Path]:
    return {name: path for name, (path, _) in runs.items()}


@pytest.fixture(scope="module")
def simulated() -> dict[str, Any]:
    """The serving estimate of the deployment under the tools' load: what the emulator runs, offline."""
    load = {"concurrency": CONCURRENCY, "requests": REQUESTS, "prompt_tokens": {"value": PROMPT},
            "output_tokens": {"value": OUTPUT}}  # fmt: skip
    req = ServingRequest.model_validate(DEPLOYMENT | {"load": load})
    hw = next(h for h in load_hardware() if h.slug == DEPLOYMENT["hardware"])
    model = next(m for m in load_models() if m.slug == DEPLOYMENT["model"])
    return adapters.estimate_serving(req, (model, model.slug), (hw, hw.slug, adapters.inference_system(hw, req, None)))


@pytest.mark.parametrize("fmt", ["aiperf", "guidellm"])
def test_each_tool_measured_the_load_it_was_given(files: dict[str, Path], fmt: str) -> None:
    m = adapters.read_load_test(fmt, json.loads(files[fmt].read_text()))
    assert (m.requests, m.concurrency) == (REQUESTS, CONCURRENCY)
    assert (m.mean_prompt_tokens, m.mean_output_tokens) == (PROMPT, OUTPUT)


# How close the emulator's own times (the simulation under the arrivals the tool made) come to the offline
# simulation: the same engine steps, so TPOT and E2E within a few per cent; the offline clients start together and
# stay in step (four prefills in one iteration), a tool's clients drift apart by their own jitter, and each prefill
# meets a different mix: TTFT moves by up to half.
SIM_TPOT, SIM_E2E, SIM_TTFT = 0.05, 0.05, 0.5
# How close a tool's figures come to the emulator's own: each token leaves when the simulation makes it, so what a
# tool adds is its own side, an HTTP round trip and its processes' scheduling, on a CPU shared with the emulator
# (and here with every other test): TPOT within 10 %; TTFT never below the simulated one (a token is not seen
# before it is sent) and above it by the client's time; the throughput lower by the client's time between a
# client's answer and its next request (GuideLLM logs ~10 ms of dispatch delay per request on this machine).
TPOT_NOISE = 0.10
E2E_NOISE = 0.10
THROUGHPUT_NOISE = 0.20
CLIENT_S = 0.030


@pytest.mark.parametrize("fmt", ["aiperf", "guidellm"])
def test_a_load_test_of_the_emulator_agrees_with_the_simulation(
    runs: dict[str, tuple[Path, dict[str, float]]], simulated: dict[str, Any], fmt: str
) -> None:
    path, own = runs[fmt]
    m = adapters.read_load_test(fmt, json.loads(path.read_text()))
    assert m.tpot_s is not None and m.ttft_s is not None
    # The emulator against the offline simulation
    assert own["tpot_s"] == pytest.approx(simulated["tpot_s"]["mean"], rel=SIM_TPOT)
    assert own["e2e_s"] == pytest.approx(simulated["e2e_s"]["mean"], rel=SIM_E2E)
    assert own["ttft_s"] == pytest.approx(simulated["ttft_s"]["mean"], rel=SIM_TTFT)
    # The tool against the emulator
    assert m.tpot_s.mean == pytest.approx(own["tpot_s"], rel=TPOT_NOISE)
    assert m.e2e_s.mean == pytest.approx(own["e2e_s"], rel=E2E_NOISE)
    assert own["ttft_s"] - 0.001 <= m.ttft_s.mean <= own["ttft_s"] + CLIENT_S
    assert m.output_tokens_per_s == pytest.approx(simulated["output_tokens_per_s"], rel=THROUGHPUT_NOISE)


@pytest.mark.parametrize("fmt", ["aiperf", "guidellm"])
def test_the_tools_file_uploads_and_is_compared_with_the_prediction(
    client: TestClient, files: dict[str, Path], simulated: dict[str, Any], fmt: str
) -> None:
    body = {"format": fmt, "result": json.loads(files[fmt].read_text()),
            "deployment": DEPLOYMENT | {"release": {"name": "emulated", "version": "ridgeline"}}}  # fmt: skip
    key = bearer(make_key(client, "upload"))
    r = client.post("/v1/serving-benchmarks", json=body, headers=key | {"Idempotency-Key": f"emulated-{fmt}"})
    assert r.status_code == 201, r.text
    doc = r.json()
    # The load read from the tool's own file: its concurrency, its lengths, its request count.
    assert doc["load"] == {"concurrency": CONCURRENCY, "requests": REQUESTS,
                           "prompt_tokens": {"kind": "fixed", "value": PROMPT},
                           "output_tokens": {"kind": "fixed", "value": OUTPUT}}  # fmt: skip
    # The prediction is the simulation the emulator ran; the errors are the tool's noise above.
    assert doc["predicted"]["tpot_s"]["mean"] == pytest.approx(simulated["tpot_s"]["mean"], rel=1e-12)
    assert abs(doc["error"]["tpot_s"]) < TPOT_NOISE / (1 - TPOT_NOISE)
    assert abs(doc["error"]["e2e_s"]) < E2E_NOISE / (1 - E2E_NOISE)
    groups = client.get("/v1/accuracy").json()["serving"]
    assert ("h100-sxm", "emulated", "llama-3-8b") in {(g["hardware"], g["engine"], g["model"]) for g in groups}
