"""Latency of a 10 000-point matmul sweep in one POST /v1/estimate/ops, against a real `ridgeline serve`.

    .venv/bin/python -m bench.estimate_sweep [--repeat 20] [--warmup 3] [--m-values 100] [--n-values 100] [--list]

With `--list` the same 10 000 matmuls go as a list of separate ops (`{"ops": [...]}`) instead of a sweep: the
service groups ops of one kind and settings into one vectorised call, so a list should cost about what the sweep
does plus the validation of 10 000 op objects.

Starts `ridgeline serve` on SQLite in a temporary directory on a free port, waits for /healthz, posts the sweep
`--warmup` times untimed and `--repeat` times timed (one request at a time, keep-alive), and prints the median and
p90 latency (request sent → whole response body received), and separately the client's time to parse the JSON
(Python's json; a client with a faster parser pays less). The server-side share is the mean of the service's own
`ridgeline_http_request_duration_seconds` histogram for the route over the timed requests (read from /metrics before
and after): validation, the core and rendering the response, without the socket transfer.

Target (issue 3): median < 250 ms on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROUTE = "/v1/estimate/ops"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ridgeline_command() -> list[str]:
    script = Path(sys.executable).with_name("ridgeline")
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ridgeline serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("ridgeline serve did not become healthy in time")


@contextmanager
def local_server(extra: tuple[str, ...] = (), database_url: str | None = None) -> Iterator[tuple[str, int]]:
    """`ridgeline serve` on a free port (SQLite in a temporary directory unless `database_url`), healthy; yields its
    URL and process id, and stops it on the way out."""
    with tempfile.TemporaryDirectory(prefix="ridgeline-bench-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [*ridgeline_command(), "serve", "--port", str(port), *extra,
                   "--database-url", database_url or f"sqlite:///{tmp}/bench.db"]  # fmt: skip
        with (Path(tmp) / "server.log").open("w") as log_file:
            # A bench is one client sending many heavy requests: the per-client rate (service.heavy) is off.
            env = {**os.environ, "RIDGELINE_HEAVY_REQUESTS_PER_WINDOW": "0"}
            proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
            try:
                wait_healthy(url, proc)
                yield url, proc.pid
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


def route_seconds(client: httpx.Client, route: str = ROUTE) -> tuple[float, float]:
    """(sum, count) of the server's latency histogram for `route`."""
    text = client.get("/metrics").text
    found = {}
    for stat in ("sum", "count"):
        pattern = rf'^ridgeline_http_request_duration_seconds_{stat}\{{[^}}]*route="{re.escape(route)}"[^}}]*\}} (\S+)$'
        match = re.search(pattern, text, re.MULTILINE)
        found[stat] = float(match.group(1)) if match else 0.0
    return found["sum"], found["count"]


def body(m_values: int, n_values: int, hardware: str) -> dict[str, Any]:
    return {
        "hardware": hardware,
        "sweep": {
            "op": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"},
            "vary": {"m": [64 * (i + 1) for i in range(m_values)], "n": [64 * (j + 1) for j in range(n_values)]},
        },
    }


def list_body(m_values: int, n_values: int, hardware: str) -> dict[str, Any]:
    grid = body(m_values, n_values, hardware)["sweep"]
    return {
        "hardware": hardware,
        "ops": [{**grid["op"], "m": m, "n": n} for m in grid["vary"]["m"] for n in grid["vary"]["n"]],
    }


@dataclass(frozen=True)
class Timed:
    """`repeat` posts of one payload, after `warmup` untimed: latencies (ms, request sent → whole response received),
    the server-side mean (ms, the route's latency histogram over the timed posts) and the last response."""

    ms: list[float]
    server_ms: float
    response: httpx.Response


def time_posts(client: httpx.Client, route: str, payload: dict[str, Any], repeat: int, warmup: int) -> Timed:
    for _ in range(warmup):
        client.post(route, json=payload).raise_for_status()
    before = route_seconds(client, route)
    latencies = []
    response = None
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.post(route, json=payload)
        latencies.append(time.perf_counter() - start)
        response.raise_for_status()
    after = route_seconds(client, route)
    assert response is not None
    server = 1e3 * (after[0] - before[0]) / (after[1] - before[1]) if after[1] > before[1] else float("nan")
    return Timed([1e3 * t for t in latencies], server, response)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    # Nearest-rank: the smallest value with at least q of the samples at or below it.
    rank = max(1, int(-(-q * len(ordered) // 1)))
    return ordered[rank - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--m-values", type=int, default=100)
    parser.add_argument("--n-values", type=int, default=100)
    parser.add_argument("--hardware", default="a100-sxm-80gb")
    parser.add_argument("--list", action="store_true", help="send the grid as a list of ops, not a sweep")
    args = parser.parse_args(argv)

    payload = (list_body if args.list else body)(args.m_values, args.n_values, args.hardware)
    points = args.m_values * args.n_values
    with local_server() as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(args.warmup):
            response = client.post(ROUTE, json=payload)
            response.raise_for_status()
            assert len(response.json()["items"]) == points
        before = route_seconds(client)
        latencies, parse, sizes = [], [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            response = client.post(ROUTE, json=payload)
            received = time.perf_counter()
            items = response.json()["items"]
            parse.append(time.perf_counter() - received)
            latencies.append(received - start)
            response.raise_for_status()
            assert len(items) == points
            sizes.append(len(response.content))
        after = route_seconds(client)

    ms = [1e3 * t for t in latencies]
    median, p90 = statistics.median(ms), percentile(ms, 0.9)
    shape = "list of ops" if args.list else "sweep"
    print(f"{points}-point matmul {shape} on {args.hardware}, one POST {ROUTE}, {args.repeat} runs after {args.warmup}")
    print(f"  response: {statistics.median(sizes) / 1e6:.2f} MB of JSON")
    print(f"  latency: median {median:.1f} ms, p90 {p90:.1f} ms, min {min(ms):.1f} ms, max {max(ms):.1f} ms")
    print(f"  client json.loads of the body: median {1e3 * statistics.median(parse):.1f} ms (not in the latency)")
    if after[1] > before[1]:
        server = 1e3 * (after[0] - before[0]) / (after[1] - before[1])
        print(f"  server-side (middleware histogram, mean): {server:.1f} ms = {100 * server / median:.0f} % of median")
    print(f"  target < 250 ms: {'met' if median < 250 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
