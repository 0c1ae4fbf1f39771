"""Throughput and latency of the estimate endpoints against a constant endpoint of the same app, in one run.

    .venv/bin/python -m bench.throughput [--rounds 5] [--duration 5] [--connections 8] [--workers 2]
                                         [--database-url postgresql://postgres@127.0.0.1:5432/test]

Starts `ridgeline serve --workers 2` (access log and metrics on, as shipped) on SQLite in a temporary directory, waits
for /healthz, and drives it with `wrk` (a C client: a Python client on the same 2 cores would spend more CPU than the
server's routing and be what is measured; Debian: `apt-get install wrk`). Every endpoint gets the same client and
settings (one client thread, `--connections` keep-alive connections, `--duration` seconds), after one untimed warm-up
run each; the endpoints are interleaved within each round (the order rotates from round to round), so a machine that
gets busier or quieter during the run moves every endpoint alike. Printed per endpoint, as the median over rounds:
requests/s, p50 and p99 latency (wrk's, request sent to response received), and the op/trivial throughput ratio
(median of the per-round ratios).

    trivial      GET  /v1/system/ping          a constant (async; no database): HTTP, routing and middleware alone
    op           POST /v1/estimate/op          bf16 matmuls on a100-sxm-80gb: the GEMMs of Llama 3 8B (QKV, output,
                                               gate/up, down projections; n, k from its config) at 6 token counts
                                               (decode 1 and 16, prefill 256–8192), 24 bodies in turn
    inference    POST /v1/estimate/inference   Llama 3 8B on one H100: batch 8, 1024 + 128 tokens
    collective   POST /v1/estimate/collective  all_reduce of 16 MB on 8 A100s (the profile's NVSwitch)

Every endpoint's requests go through the same Lua `request()` that hands out pre-formatted requests in turn (the
trivial and the other endpoints one body repeated), so the client costs the same per request for each; the op bodies
differ from request to request, so nothing the server might remember about one body answers the next.

Target (issue 8): op / trivial ≥ 0.5.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.estimate_sweep import free_port, ridgeline_command, wait_healthy


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    path: str
    bodies: tuple[dict[str, Any] | None, ...] = (None,)


# Llama 3 8B's GEMMs (hidden 4096, 32 query and 8 KV heads of 128: QKV n = 6144; FFN 14 336; Meta's config.json):
# (n, k) of the QKV, output, gate/up (fused, n = 2·14 336) and down projections.
LLAMA3_8B_GEMMS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
TOKENS = (1, 16, 256, 1024, 4096, 8192)  # decode at batch 1 and 16; prefill chunks
OP_BODIES = tuple(
    {"hardware": "a100-sxm-80gb", "op": {"kind": "matmul", "m": m, "n": n, "k": k, "dtype": "bf16"}}
    for m in TOKENS
    for n, k in LLAMA3_8B_GEMMS
)

ENDPOINTS = (
    Endpoint("trivial", "GET", "/v1/system/ping"),
    Endpoint("op", "POST", "/v1/estimate/op", OP_BODIES),
    Endpoint(
        "inference",
        "POST",
        "/v1/estimate/inference",
        (
            {
                "model": "llama-3-8b",
                "hardware": "h100-sxm",
                "devices": 1,
                "workload": {"batch": 8, "prompt_tokens": 1024, "output_tokens": 128},
            },
        ),
    ),
    Endpoint(
        "collective",
        "POST",
        "/v1/estimate/collective",
        ({"op": "all_reduce", "bytes": 16e6, "hardware": "a100-sxm-80gb", "devices": 8},),
    ),
)


@dataclass(frozen=True)
class Sample:
    requests_per_s: float
    p50_s: float
    p99_s: float
    requests: int = 0
    cpu_s: float = 0.0  # the server's CPU time (every process of it) over the run

    @property
    def cpu_per_request_s(self) -> float:
        return self.cpu_s / self.requests if self.requests else float("nan")


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not match:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> Sample:
    """Requests/s and the 50th and 99th latency percentiles from `wrk --latency` output; refuses errors."""
    if "Non-2xx or 3xx responses" in output or re.search(r"Socket errors: .*(read|write|timeout) [1-9]", output):
        raise SystemExit(f"wrk saw failed requests:\n{output}")
    count = re.search(r"^\s+(\d+) requests in", output, re.MULTILINE)
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.MULTILINE)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.MULTILINE)
    if not (count and rps and p50 and p99):
        raise SystemExit(f"cannot read wrk's output:\n{output}")
    return Sample(float(rps.group(1)), _seconds(p50.group(1)), _seconds(p99.group(1)), int(count.group(1)))


def _descendants(pid: int) -> list[int]:
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in task.read_text().split():
            out += _descendants(int(child))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and all its descendants (Linux /proc): the server's cost, which other work
    on the machine does not change the way it changes requests/s."""
    ticks = 0
    for p in _descendants(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return ticks / os.sysconf("SC_CLK_TCK")


LUA_REQUESTS = 24  # requests each script formats up front and hands out in turn, the same count for every endpoint


def lua_script(endpoint: Endpoint, directory: Path) -> Path:
    """wrk's requests: `LUA_REQUESTS` pre-formatted requests (method, JSON body, content type) handed out in turn by
    `request()`, cycling through the endpoint's bodies: the same client work per request for every endpoint."""
    path = directory / f"{endpoint.name}.lua"
    # Formatted in init(), after wrk has set the Host header (a request formatted at load time has none: a 400).
    lines = ["local requests = {}", "function init(args)"]
    for index in range(LUA_REQUESTS):
        body = endpoint.bodies[index % len(endpoint.bodies)]
        if body is None:
            lines.append(f'  requests[{index + 1}] = wrk.format("{endpoint.method}", "{endpoint.path}")')
        else:
            text = json.dumps(json.dumps(body))  # a Lua string literal of the JSON text
            lines.append(
                f'  requests[{index + 1}] = wrk.format("{endpoint.method}", "{endpoint.path}", '
                f'{{["Content-Type"] = "application/json"}}, {text})'
            )
    lines += [
        "end",
        "local next = 0",
        "function request()",
        f"  next = next % {LUA_REQUESTS} + 1",
        "  return requests[next]",
        "end",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_wrk(url: str, endpoint: Endpoint, script: Path, duration_s: int, connections: int, server: int) -> Sample:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration_s}s", "--latency", "-s", str(script)]
    command.append(url + endpoint.path)
    before = cpu_seconds(server)
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    sample = parse_wrk(done.stdout)
    return dataclasses.replace(sample, cpu_s=cpu_seconds(server) - before)


def check_answers(url: str) -> None:
    """Each endpoint answers 200 before anything is timed (a fast 4xx would flatter the figures)."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for endpoint in ENDPOINTS:
            for body in endpoint.bodies:
                response = client.request(endpoint.method, endpoint.path, json=body)
                if response.status_code != 200:
                    raise SystemExit(f"{endpoint.name}: {response.status_code} {response.text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=5, help="seconds per endpoint per round")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="server worker processes")
    parser.add_argument(
        "--database-url",
        help="the server's database (default: a new SQLite file, the embedded default); a PostgreSQL URL measures "
        "the scale-out setting (the server migrates it and loads the catalogue; PostgreSQL's own CPU is not counted)",
    )
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("bench.throughput needs wrk (Debian: apt-get install wrk)")

    results: dict[str, list[Sample]] = {e.name: [] for e in ENDPOINTS}
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ridgeline-bench-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [
            *ridgeline_command(), "serve", "--port", str(port), "--workers", str(args.workers),
            "--database-url", args.database_url or f"sqlite:///{tmp}/bench.db",
        ]  # fmt: skip
        log = Path(tmp) / "server.log"
        with log.open("w") as log_file:
            # A bench is one client sending many requests: the heavy requests' rate per client (service.heavy) is off.
            env = {**os.environ, "RIDGELINE_HEAVY_REQUESTS_PER_WINDOW": "0"}
            proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
            try:
                wait_healthy(url, proc)
                pid = proc.pid
                check_answers(url)
                scripts = {e.name: lua_script(e, Path(tmp)) for e in ENDPOINTS}
                for endpoint in ENDPOINTS:  # warm-up: imports, caches, connection pools of both workers
                    run_wrk(url, endpoint, scripts[endpoint.name], 2, args.connections, pid)
                for index in range(args.rounds):
                    order = ENDPOINTS[index % len(ENDPOINTS) :] + ENDPOINTS[: index % len(ENDPOINTS)]
                    round_samples = {}
                    for endpoint in order:
                        sample = run_wrk(url, endpoint, scripts[endpoint.name], args.duration, args.connections, pid)
                        round_samples[endpoint.name] = sample
                        results[endpoint.name].append(sample)
                    ratios.append(round_samples["op"].requests_per_s / round_samples["trivial"].requests_per_s)
                    line = ", ".join(f"{name} {s.requests_per_s:.0f}/s" for name, s in round_samples.items())
                    print(f"round {index + 1}: {line}", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)

    database = (args.database_url or "sqlite").split(":", 1)[0]
    print(
        f"\n{database}, {args.workers} worker processes, wrk 1 thread × {args.connections} connections, "
        f"{args.duration} s per endpoint per round, median of {args.rounds} rounds:"
    )
    print(f"{'endpoint':<12} {'requests/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'server CPU ms/request':>22}")
    cpu = {}
    for name, samples in results.items():
        rps = statistics.median(s.requests_per_s for s in samples)
        p50 = statistics.median(s.p50_s for s in samples) * 1e3
        p99 = statistics.median(s.p99_s for s in samples) * 1e3
        cpu[name] = statistics.median(s.cpu_per_request_s for s in samples)
        print(f"{name:<12} {rps:>11.0f} {p50:>8.2f} {p99:>8.2f} {cpu[name] * 1e3:>22.2f}")
    ratio = statistics.median(ratios)
    print(f"op / trivial throughput: {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)}; target ≥ 0.5)")
    # What the ratio would be on a machine with nothing else running: the server's CPU per request.
    print(f"trivial / op server CPU per request: {cpu['trivial'] / cpu['op']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
