"""scripts/device_e2e.sh, the whole worker loop on one machine, run here on the CPU: the service on SQLite, an upload
key, `ridgeline-worker run` uploading over HTTP, and what the service then holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.slow  # the worker loop end to end, with a live server

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_e2e.sh"


def test_the_loop_runs_end_to_end_and_the_service_holds_every_result(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "PORT": str(free_port())}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(out), "cpu-generic", "matmul", "quick"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (out / "worker.jsonl").read_text().splitlines()]
    sent = [r for r in records if r.get("uploaded", True)]
    # The quick matmul suite on a CPU: ten products, every one sent, no dispatch probe (a CPU's per-call cost is in
    # its host profile), and the service holds each with a prediction.
    assert len(sent) == len(records) == 10
    runs = json.loads((out / "runs.json").read_text())
    assert runs["total"] == 1 and runs["items"][0]["results"] == 10 and runs["items"][0]["host_overhead_s"] is None
    accuracy = json.loads((out / "accuracy.json").read_text())
    assert accuracy["raw"]["count"] == 10
    assert "all 10 results: median error" in done.stdout
