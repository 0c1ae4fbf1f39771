"""How jobs scale on Ray (issue 43): a plan over 5 000 candidates as a job on a local Ray cluster of 1 CPU and of
2 CPUs, side by side in one run, and a 100-candidate plan's overhead as a job against the synchronous call.

    .venv/bin/python -m bench.jobs_scaling [--cpus 1 2] [--repeat 1] [--small-repeat 3]

Each cluster size runs in a process of its own (Ray joins one cluster per process): a SQLite database in a temporary
directory, the service app in process (`fastapi.testclient`) with its job runner starting a local cluster of that
many CPUs (`RIDGELINE_RAY_NUM_CPUS`), one untimed job first (the cluster's start and its workers' imports are not the
jobs' cost), then the timed ones: submit (`POST /v1/jobs`) → state `succeeded` (polled every 20 ms), and the
synchronous `POST /v1/plan` of the small plan against its job. Prints one line per size and the ratio of the big
plan's times (1 CPU / 2 CPUs: 2.0 would be perfect; the rest is the serial part — the preparation of the
candidates and the reduction, which checks the best under the traffic — and the pieces' imbalance).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# 2 profiles × 4 tensor widths × 25 batches × 25 chunk budgets = 5 000 candidates (aggregated), 200 engine families.
BIG: dict[str, Any] = {
    "model": "llama-3-8b", "hardware": ["a100-sxm-80gb", "h100-sxm"],
    "traffic": {"requests_per_s": 50, "prompt_tokens": 1024, "output_tokens": 128},
    "objectives": {"ttft_s": 1.0, "tpot_s": 0.05},
    "search": {"tensor": [1, 2, 4, 8], "max_num_seqs": list(range(8, 208, 8)),
               "max_num_batched_tokens": [1024 + 256 * i for i in range(25)]},
    "prices": {"a100-sxm-80gb": 1.8, "h100-sxm": 2.9}, "max_results": 5,
}  # fmt: skip
# 2 × 2 × 5 × 5 = 100 candidates.
SMALL: dict[str, Any] = {
    **BIG,
    "search": {"tensor": [1, 2], "max_num_seqs": [16, 32, 64, 128, 256],
               "max_num_batched_tokens": [2048, 3072, 4096, 6144, 8192]},
}  # fmt: skip
WARM: dict[str, Any] = {**BIG, "search": {"tensor": [1, 2], "max_num_seqs": [16], "max_num_batched_tokens": [2048]}}


def _job(client: Any, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Seconds from submit to `succeeded`, and the job (with `pieces_s`: seconds until every piece had finished,
    as its progress shows, the rest being the reduction and the rendering)."""
    start = time.perf_counter()
    response = client.post("/v1/jobs", json={"kind": "plan", "body": body})
    assert response.status_code == 202, response.text
    location = response.headers["Location"]
    pieces = None
    while True:
        job: dict[str, Any] = client.get(location).json()
        p = job["progress"]
        if pieces is None and p["total"] and p["done"] == p["total"]:
            pieces = time.perf_counter() - start
        if job["state"] not in ("queued", "running"):
            break
        time.sleep(0.02)
    took = time.perf_counter() - start
    job["pieces_s"] = pieces if pieces is not None else took
    if job["state"] != "succeeded":
        raise SystemExit(f"job {job['state']}: {job['error']}")
    return took, job


def run_one(cpus: int, repeat: int, small_repeat: int) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from service import migrate
    from service.app import create_app
    from service.catalogue.load import load_catalogue
    from service.db import make_engine, make_sessionmaker
    from service.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        migrate.upgrade(url)
        engine = make_engine(url)
        load_catalogue(make_sessionmaker(engine))
        engine.dispose()
        # One client sends everything: the heavy rate is off, as in the other benches (service.heavy).
        app = create_app(Settings(database_url=url, ray_num_cpus=cpus, job_poll_s=0.05, heavy_requests_per_window=0))
        with TestClient(app) as client:
            _job(client, WARM)  # the cluster starts, its workers import the service
            big = [_job(client, BIG) for _ in range(repeat)]
            sync, small = [], []
            for _ in range(small_repeat):
                start = time.perf_counter()
                response = client.post("/v1/plan", json=SMALL)
                sync.append(time.perf_counter() - start)
                assert response.status_code == 200, response.text
                small.append(_job(client, SMALL)[0])
        app.state.engine.dispose()
    result = big[0][1]["result"]
    return {
        "cpus": cpus, "big_s": statistics.median(t for t, _ in big), "big_candidates": result["candidates"],
        "big_pieces_s": statistics.median(j["pieces_s"] for _, j in big),
        "big_evaluated": result["evaluated"], "big_pruned": result["pruned"],
        "small_sync_s": statistics.median(sync), "small_job_s": statistics.median(small),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of the 5 000-candidate plan per size")
    parser.add_argument("--small-repeat", type=int, default=3, help="timed runs of the 100-candidate plan")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one cluster size
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.repeat, args.small_repeat)))
        return
    rows = []
    for cpus in args.cpus:
        command = [sys.executable, "-m", "bench.jobs_scaling", "--one", str(cpus), "--repeat", str(args.repeat),
                   "--small-repeat", str(args.small_repeat)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{cpus} CPUs failed:\n{done.stdout}\n{done.stderr[-4000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{'CPUs':>4} {'5 000-candidate job':>20} {'its pieces':>11} {'100 sync':>9} {'100 job':>8} {'overhead':>9}")
    for r in rows:
        overhead = r["small_job_s"] - r["small_sync_s"]
        print(f"{r['cpus']:>4} {r['big_s']:>19.2f}s {r['big_pieces_s']:>10.2f}s {r['small_sync_s']:>8.3f}s "
              f"{r['small_job_s']:>7.3f}s {overhead * 1e3:>7.0f}ms")  # fmt: skip
    r0 = rows[0]
    print(f"big plan: {r0['big_candidates']} candidates, {r0['big_evaluated']} simulated, {r0['big_pruned']} pruned")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        print(f"ratio {a['cpus']} CPU / {b['cpus']} CPUs: {a['big_s'] / b['big_s']:.2f}x "
              f"(its pieces: {a['big_pieces_s'] / b['big_pieces_s']:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
