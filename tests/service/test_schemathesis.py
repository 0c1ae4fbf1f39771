"""Schemathesis against the live OpenAPI document of a real `ridgeline serve`: every operation, generated valid and
invalid requests, no 5xx, every response documented, of its declared content type and shaped as its schema says.

The server runs in a subprocess over a temporary SQLite database (as `tests/worker/test_e2e.py` runs it), with an
admin key made by `ridgeline keys create` so that the write endpoints are exercised past their 401, and one small
benchmark run uploaded so that the reads (runs, accuracy, roofline charts, calibrations) have data to work on.

Schemathesis runs through its command line (`schemathesis run`), its stable interface: the pytest plugin of 4.x
reaches into pytest's private `Node._nodeid`, which pytest 9 removed. Examples are bounded per operation and the
run is deterministic (`--generation-deterministic`): the same cases every time. It runs in parts (`PARTS`)
that xdist spreads over the cores.
Checks: `not_a_crash` (schemathesis_hooks.py) is `not_a_server_error` but for the 503 `timeout` and `unavailable`
the service answers by design when loaded; with the documented statuses, content types and response schemas.
A failure prints schemathesis' report: each failing operation, the check, and a curl command that reproduces it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, free_port, ridgeline_command

pytestmark = [pytest.mark.slow, pytest.mark.longest]  # every operation fuzzed through a live server: minutes

# Per operation: the fuzzing phase generates up to this many cases (valid and invalid); the examples and coverage
# phases add each schema's own examples and boundary values (just past a maximum, a missing field, a wrong type).
MAX_EXAMPLES = 20
CHECKS = "not_a_crash,status_code_conformance,content_type_conformance,response_schema_conformance"

UPLOAD = {
    "hardware": "h100-sxm",
    "host": "schemathesis",
    "timing_scope": "kernel",
    "software": {"cuda": "12.4"},
    "results": [
        {"op": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}, "median_s": 1.1e-3},
        {"op": {"kind": "softmax", "rows": 4096, "cols": 4096}, "median_s": 5.2e-5},
        {"op": {"kind": "collective", "collective": "all_reduce", "bytes": 1 << 20, "devices": 8}, "median_s": 2e-5},
    ],
}


def _ridgeline(*args: str, url: str) -> str:
    done = subprocess.run(
        [*ridgeline_command(), *args, "--database-url", url], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def schemathesis_command() -> list[str]:
    script = Path(sys.executable).with_name("schemathesis")
    return [str(script)] if script.exists() else [sys.executable, "-m", "schemathesis.cli"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(base URL, admin key, temporary directory) of a live server with the catalogue and one uploaded run."""
    tmp = tmp_path_factory.mktemp("schemathesis")
    url = f"sqlite:///{tmp / 'live.db'}"
    _ridgeline("db", "upgrade", url=url)
    key = _ridgeline("keys", "create", "--name", "schemathesis", "--scope", "admin", url=url).strip().splitlines()[-1]
    port = free_port()
    # Every request carries the admin key, so the heavy requests' rate per client is off. Heavy work stops at the
    # request's deadline (service.heavy): a 1 s limit keeps the plans and charts it fuzzes from computing for 30 s each
    # (a plan stops at 0.75 s and answers what it has; schemathesis checks the answer's shape, not its search).
    # A request answered 503 at its limit computes on until its next stop check; 8 in flight per client keeps the
    # sequential requests from being turned away (429) by their predecessors' leftovers on a loaded machine. Jobs are
    # stored, not run: the fuzzer checks the HTTP contract (a valid plan past a request's size is a 202), and a Ray
    # cluster running its random plans would only slow it (tests/service/test_jobs_ray.py runs jobs).
    env = {
        **os.environ,
        "RIDGELINE_DATABASE_URL": url,
        "RIDGELINE_HEAVY_REQUESTS_PER_WINDOW": "0",
        "RIDGELINE_HEAVY_PER_CLIENT": "8",
        "RIDGELINE_REQUEST_TIMEOUT_S": "1",
        "RIDGELINE_RUN_JOBS": "false",
    }
    live = LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp)
    live.wait_healthy()
    # The first GET /openapi.json builds the document (seconds on a loaded machine); schemathesis gives its load 10 s.
    # Built once here, the server answers it from its cache.
    assert httpx.get(f"{live.url}/openapi.json", timeout=300).status_code == 200
    try:
        uploaded = httpx.post(
            f"{live.url}/v1/benchmarks", json=UPLOAD, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        assert uploaded.status_code == 201, uploaded.text
        yield live.url, key, tmp
    finally:
        live.stop()


# The operations are fuzzed in parts, each its own test (and its own server where xdist puts them on different
# workers), so that the run is spread over the cores: the plans and their charts compute up to the request limit on
# many generated bodies, and in one test they were the suite's longest path. Each part's path regex; "rest" is every
# operation the others leave, and `test_parts_cover_every_operation` holds that each operation is in exactly one part.
PARTS = {
    "plan": r"^/v1/plan(/training)?$",
    "frontier-svg": r"^/v1/plan/frontier\.svg$",
    "frontier-png": r"^/v1/plan/frontier\.png$",
    "estimates-and-charts": r"^/v1/(estimate|roofline)/",
}


def _selection(part: str) -> list[str]:
    if part in PARTS:
        return ["--include-path-regex", PARTS[part]]
    return ["--exclude-path-regex", "|".join(f"({regex})" for regex in PARTS.values())]


def _operations(document: dict[str, dict[str, object]], part: str) -> int:
    methods = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
    if part in PARTS:
        paths = [path for path in document if re.search(PARTS[part], path)]
    else:
        paths = [path for path in document if not any(re.search(regex, path) for regex in PARTS.values())]
    return sum(1 for path in paths for method in document[path] if method in methods)


def test_parts_cover_every_operation() -> None:
    from service.app import create_app

    documented = create_app().openapi()["paths"]
    parts = [*PARTS, "rest"]
    counts = {part: _operations(documented, part) for part in parts}
    assert all(count > 0 for count in counts.values()), counts
    assert sum(counts.values()) == sum(len(methods) for methods in documented.values()) >= 29, counts


@pytest.mark.parametrize("part", [*PARTS, "rest"])
def test_every_operation(server: tuple[str, str, Path], part: str) -> None:
    # Imported here, not at the top (every test process collects this module, and it is slow to import); imported,
    # not `pytest.importorskip`: the dev extra installs it, and a missing schemathesis must fail CI.
    import schemathesis

    assert schemathesis.__version__.startswith("4."), schemathesis.__version__  # the flags below are 4.x's
    base_url, key, tmp = server
    command = [
        *schemathesis_command(),
        "run",
        f"{base_url}/openapi.json",
        *_selection(part),
        "--checks",
        CHECKS,
        "--mode",
        "all",  # valid requests and invalid ones: bad input must be a documented 4xx, never a 5xx
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--suppress-health-check",
        "all",
        "--header",
        f"Authorization: Bearer {key}",
        "--no-color",
    ]
    # The hooks file gives schemathesis a serializer for the trace upload's JSON Lines body.
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(Path(__file__).with_name("schemathesis_hooks.py"))}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False, cwd=tmp, env=env)
    assert done.returncode == 0, done.stdout[-20_000:] + done.stderr[-5_000:]
    # Every operation of the part was selected and tested (the summary says e.g. "Selected: 3/33", "Tested: 3").
    selected = re.search(r"Selected: (\d+)/(\d+)", done.stdout)
    tested = re.search(r"Tested: (\d+)", done.stdout)
    assert selected and tested, done.stdout[-5_000:]
    documented = httpx.get(f"{base_url}/openapi.json", timeout=30).json()["paths"]
    assert int(selected.group(2)) == sum(len(methods) for methods in documented.values()), done.stdout[-5_000:]
    assert int(selected.group(1)) == int(tested.group(1)) == _operations(documented, part), done.stdout[-5_000:]
