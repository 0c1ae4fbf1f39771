"""How long the plan page takes: its API call plus drawing the answer, in headless Chromium.

    .venv/bin/python -m bench.ui_plan [--repeat 5]

Starts `ridgeline serve` on SQLite in a temporary directory, times `GET /ui/plan` (the server-rendered page, median
of 20 requests), opens it in headless Chromium (`bench.chromium`) and submits its form as it stands (the README's
planner example: llama-3-70b on four profiles, 20 requests/s of 2048 + 256 tokens) once untimed, then `--repeat`
times. The page measures each submit itself (`ridgeline.timing`): the API call (fetch sent to its JSON parsed) and
the call plus drawing the table, the frontier and the commands. Printed: each submit and the medians.

Target (issue 45): the page answers as fast as its API call plus rendering: drawing ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.chromium import Page, chromium
from bench.estimate_sweep import free_port, ridgeline_command, wait_healthy


def _submit(page: Page, form: str = "plan-form") -> dict[str, float]:
    page.click(f"#{form} button[type=submit]")
    state = page.wait_for(
        f"(s => s === 'done' || s === 'error' ? s : '')(document.getElementById('{form}').dataset.state)"
    )
    if state != "done":
        raise RuntimeError(page.eval(f"document.getElementById('{form}').innerText"))
    timing: dict[str, float] = page.eval("ridgeline.timing")
    return timing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_plan", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="ridgeline-ui-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RIDGELINE_DATABASE_URL": f"sqlite:///{workdir / 'ui.db'}", "RIDGELINE_LOG_LEVEL": "warning"}
    log = (workdir / "server.log").open("w")
    proc = subprocess.Popen([*ridgeline_command(), "serve", "--port", str(port)], env=env, stdout=log, stderr=log)
    try:
        wait_healthy(base, proc)
        with httpx.Client(base_url=base, timeout=60) as client:
            client.get("/ui/plan").raise_for_status()
            page_ms = []
            for _ in range(20):
                start = time.perf_counter()
                client.get("/ui/plan").raise_for_status()
                page_ms.append((time.perf_counter() - start) * 1e3)
        print(f"GET /ui/plan (server-rendered page): median {statistics.median(page_ms):.1f} ms over 20")
        with chromium() as page:
            page.goto(f"{base}/ui/plan")
            _submit(page)  # warm-up, untimed: the process's first plan also imports and fills caches
            runs = []
            for i in range(args.repeat):
                t = _submit(page)
                runs.append(t)
                print(f"submit {i + 1}: API call {t['api_ms']:.0f} ms, call + drawing {t['total_ms']:.0f} ms "
                      f"(drawing {t['total_ms'] - t['api_ms']:.1f} ms)")  # fmt: skip
        api = statistics.median(r["api_ms"] for r in runs)
        total = statistics.median(r["total_ms"] for r in runs)
        drawing = statistics.median(r["total_ms"] - r["api_ms"] for r in runs)
        print(f"median over {args.repeat}: API call {api:.0f} ms, call + drawing {total:.0f} ms, "
              f"drawing {drawing:.1f} ms")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
