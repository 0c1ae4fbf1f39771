"""No client starves the rest, with real processes (issue 40 §2): `ridgeline serve` saturated by the issue's
worst-case serving estimates from many clients at once answers `/healthz` and `GET /v1/hardware` fast, never says
the database is unreachable, and once the heavy requests have had their answers its CPU goes idle (the work stopped
with the answer, where before it ran on for minutes).

The clients are told apart by the address their proxy names (`X-Forwarded-For`, which `ridgeline serve` trusts from
127.0.0.1, as uvicorn does by default), so the per-client limits do not turn them away: the server-wide slots do.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, free_port, ridgeline_command
from tests.service.test_heavy import WORST

pytestmark = pytest.mark.slow  # a real server, saturated

CLIENTS = 22
REQUEST_TIMEOUT_S = 4.0
SAMPLES = 15
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """The process's CPU time (user + system, all threads), from /proc/PID/stat (fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def latency_s(client: httpx.Client, path: str) -> float:
    start = time.perf_counter()
    answer = client.get(path)
    elapsed = time.perf_counter() - start
    assert answer.status_code == 200, answer.text
    return elapsed


def test_cheap_endpoints_stay_fast_while_heavy_ones_are_saturated_and_the_work_ends_with_the_answers(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "RIDGELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'live.db'}",
        "RIDGELINE_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S),
        "RIDGELINE_LOG_LEVEL": "warning",
    }
    server = LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp_path)
    server.wait_healthy()
    statuses: Counter[tuple[int, str]] = Counter()
    lock = threading.Lock()
    stop = threading.Event()
    last_answer = [0.0]

    def heavy_client(i: int) -> None:
        headers = {"X-Forwarded-For": f"198.51.100.{i + 1}"}
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not stop.is_set():
                answer = client.post("/v1/estimate/serving", json=WORST, headers=headers)
                with lock:
                    statuses[(answer.status_code, answer.json().get("error", ""))] += 1
                    last_answer[0] = time.monotonic()

    threads = [threading.Thread(target=heavy_client, args=(i,)) for i in range(CLIENTS)]
    try:
        idle_before = cpu_s(server.proc.pid)
        for thread in threads:
            thread.start()
        # Saturated: both heavy slots computing (the process burns CPU) and clients turned away for want of one.
        deadline = time.monotonic() + 60
        while statuses[(503, "unavailable")] < CLIENTS // 2:
            assert time.monotonic() < deadline, statuses
            time.sleep(0.05)
        with httpx.Client(base_url=server.url, timeout=10) as cheap:
            turned_away = statuses[(503, "unavailable")]
            cpu_start, wall_start = cpu_s(server.proc.pid), time.monotonic()
            health = [latency_s(cheap, "/healthz") for _ in range(SAMPLES)]
            hardware = [latency_s(cheap, "/v1/hardware?limit=5") for _ in range(SAMPLES)]
            busy = (cpu_s(server.proc.pid) - cpu_start) / (time.monotonic() - wall_start)
        print(
            f"\nsaturated ({busy:.2f} cores busy): /healthz median {statistics.median(health) * 1e3:.1f} ms "
            f"(max {max(health) * 1e3:.1f}), GET /v1/hardware median {statistics.median(hardware) * 1e3:.1f} ms "
            f"(max {max(hardware) * 1e3:.1f})"
        )
        assert statistics.median(health) < 0.1, health
        assert statistics.median(hardware) < 0.1, hardware
        # The heavy slots were full while the cheap requests were answered (heavy ones were turned away for want of
        # one meanwhile) and computing (the process burnt CPU; how much depends on what else the host runs).
        assert statuses[(503, "unavailable")] > turned_away
        assert busy > 0.1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    # Every heavy answer: a timeout (the worst case needs more than 4 s), or no slot (503 unavailable) — never the
    # database unreachable, never a 500.
    assert set(statuses) <= {(503, "timeout"), (503, "unavailable")}, statuses
    assert statuses[(503, "timeout")] >= 2
    # Once the last heavy request had its answer, the process goes idle: the stopped computations do not run on.
    settled = time.monotonic()
    before = cpu_s(server.proc.pid)
    time.sleep(2.0)  # a window to measure CPU time over, not a wait for a condition
    spent = cpu_s(server.proc.pid) - before
    print(
        f"after the last answer ({settled - last_answer[0]:.2f} s before): {spent:.2f} CPU s in the next 2 s; "
        f"answers {dict(statuses)}; CPU s before the load {idle_before:.2f}"
    )
    assert spent < 0.2
    server.stop()
