"""Ingestion throughput: results per second stored by POST /v1/benchmarks into PostgreSQL, in 10 000-result batches.

    .venv/bin/python -m bench.ingest [--batches 10] [--batch-size 10000] [--warmup 1] [--database-url URL]

Starts `ridgeline serve` (one process) on PostgreSQL — by default a throw-away schema in the test database at
127.0.0.1:5432 (`RIDGELINE_TEST_POSTGRES_URL` overrides it), dropped at the end — makes an upload key, and posts
`--batches` runs of `--batch-size` results one after another (a mix of matmuls, attention and elementwise ops, each
batch with its own Idempotency-Key). A batch's time runs from sending the request to the 201: JSON parsing,
validation, the predictions, and the insert in one transaction. Prints the median and worst batch and the overall
rate, then checks the count of stored rows.

Target (issue 6): ≥ 20 000 results/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import create_engine, func, select, text

from bench.estimate_sweep import free_port, ridgeline_command, wait_healthy

ADMIN_URL = os.environ.get("RIDGELINE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def batch(index: int, size: int) -> dict[str, Any]:
    """A run of `size` results: 80 % matmuls over a grid of shapes, 10 % attention, 10 % elementwise."""
    results: list[dict[str, Any]] = []
    for i in range(size):
        j = index * size + i
        if i % 10 == 8:
            op: dict[str, Any] = {
                "kind": "attention", "batch": 1 + j % 8, "heads": 32, "kv_heads": 8, "head_dim": 128,
                "q_len": 1, "kv_len": 128 * (1 + j % 64),
            }  # fmt: skip
        elif i % 10 == 9:
            op = {"kind": "elementwise", "elements": 4096 * (1 + j % 1000), "inputs": 2}
        else:
            op = {"kind": "matmul", "m": 1 + j % 4096, "n": 1024 * (1 + j % 8), "k": 4096, "dtype": "bf16"}
        results.append({"op": op, "median_s": 1e-5 * (1 + j % 97), "p10_s": 9e-6, "p90_s": 2e-3, "repeats": 20})
    return {
        "hardware": "a100-sxm-80gb",
        "host": "bench-ingest",
        "software": {"cuda": "12.4", "jax": "0.4.35"},
        "timing_scope": "kernel",
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1, help="untimed batches first (default 1)")
    parser.add_argument("--database-url", default=None, help="PostgreSQL URL (default: a throw-away test schema)")
    args = parser.parse_args(argv)

    schema = None
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    url = args.database_url
    if url is None:
        schema = f"rl_bench_{uuid.uuid4().hex[:8]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = f"{ADMIN_URL}?options={quote(f'-csearch_path={schema}')}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RIDGELINE_DATABASE_URL": url, "RIDGELINE_LOG_LEVEL": "warning",
           "RIDGELINE_HEAVY_REQUESTS_PER_WINDOW": "0"}  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="ridgeline-ingest-"))
    log = (workdir / "server.log").open("w")
    proc = subprocess.Popen([*ridgeline_command(), "serve", "--port", str(port)], env=env, stdout=log, stderr=log)
    try:
        wait_healthy(base, proc)
        made = subprocess.run(
            [*ridgeline_command(), "keys", "create", "--name", "bench-ingest", "--database-url", url],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip
        key = made.stdout.strip().splitlines()[-1]
        bodies = [json.dumps(batch(i, args.batch_size)).encode() for i in range(args.warmup + args.batches)]
        headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
        times: list[float] = []
        with httpx.Client(base_url=base, timeout=120) as client:
            for i, content in enumerate(bodies):
                start = time.perf_counter()
                headers["Idempotency-Key"] = f"batch-{i}"
                response = client.post("/v1/benchmarks", content=content, headers=headers)
                elapsed = time.perf_counter() - start
                if response.status_code != 201:
                    print(response.text[:2000], file=sys.stderr)
                    return 1
                if i >= args.warmup:
                    times.append(elapsed)
        engine = create_engine(url)
        with engine.connect() as conn:
            stored = conn.execute(select(func.count()).select_from(text("benchmark_results"))).scalar_one()
        engine.dispose()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        if schema is not None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    n = args.batch_size
    median = statistics.median(times)
    print(f"POST /v1/benchmarks, {args.batches} batches of {n} results into PostgreSQL (after {args.warmup} warm-up)")
    print(f"  per batch: median {median * 1e3:.0f} ms, worst {max(times) * 1e3:.0f} ms")
    overall = n * len(times) / sum(times)
    print(f"  throughput: median batch {n / median:,.0f} results/s, overall {overall:,.0f} results/s")
    expected = n * (args.batches + args.warmup)
    print(f"  stored rows: {stored} (expected {expected})")
    return 0 if stored == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
