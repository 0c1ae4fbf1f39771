"""The command line: configuration from flags and environment, dry runs, exit statuses."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from worker.cli import EX_TEMPFAIL, build_parser, default_spool_dir, main, prepare_jax_environment


def test_settings_come_from_the_environment_and_flags_win() -> None:
    env = {"RIDGELINE_URL": "http://ridgeline:8000", "RIDGELINE_TOKEN": "rl_x", "RIDGELINE_SPOOL_DIR": "/var/spool/rw"}
    args = build_parser(env).parse_args(["run", "--suite", "matmul"])
    assert (args.server, args.token, args.spool_dir) == ("http://ridgeline:8000", "rl_x", Path("/var/spool/rw"))
    args = build_parser(env).parse_args(["run", "--server", "http://other", "--token", "t", "--quick"])
    assert (args.server, args.token, args.size) == ("http://other", "t", "quick")
    assert build_parser({}).parse_args(["flush"]).server is None


def test_the_default_spool_is_in_the_user_cache() -> None:
    assert default_spool_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/ridgeline-worker/spool")
    assert default_spool_dir({"RIDGELINE_SPOOL_DIR": "/s", "XDG_CACHE_HOME": "/c"}) == Path("/s")


def test_virtual_cpu_devices_are_requested_unless_the_user_chose() -> None:
    env = {"XLA_FLAGS": "--xla_dump_to=/tmp/x"}
    prepare_jax_environment(8, env)
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=8"
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    prepare_jax_environment(8, env)
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"


def test_dry_run_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dry-run", "--quick", "--suite", "c_relu_ab"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 8 and {line["suite"] for line in lines} == {"c_relu_ab"}
    assert lines[0]["op"]["kind"] == "chain"


def test_an_unknown_suite_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["run", "--suite", "nope", "--spool-dir", str(tmp_path)]) == 2


def test_flush_needs_a_server(tmp_path: Path) -> None:
    assert main(["flush", "--spool-dir", str(tmp_path)]) == 2


@pytest.mark.parametrize("size", ["0", "10001"])
def test_a_batch_must_fit_one_upload(tmp_path: Path, size: str) -> None:
    assert main(["run", "--batch-size", size, "--spool-dir", str(tmp_path)]) == 2


@pytest.mark.slow  # runs the worker's suites
def test_without_a_server_results_wait_in_the_spool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.jsonl"
    status = main(["run", "--quick", "--suite", "ceilings", "--spool-dir", str(tmp_path / "spool"),
                   "--results-out", str(out), "--rotate-mb", "1"])  # fmt: skip
    assert status == EX_TEMPFAIL
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["suite"] for r in records] == ["ceilings"] * 5
    # The bf16 peak is kept for the host profile: no service, so no profile known to predict bf16 with.
    assert [r["name"] for r in records if r.get("uploaded") is False] == ["peak matmul 512³ bf16"]
    records = [r for r in records if r.get("uploaded", True)]
    spooled = [json.loads(p.read_text()) for p in (tmp_path / "spool" / "pending").glob("*.json")]
    assert len(spooled) == 1
    payload = spooled[0]["payload"]
    # Not resolved (no service): the device's own description, for the service to map at flush time.
    assert payload["hardware"] and payload["timing_scope"] == "wall_clock"
    assert payload["results"] == [{k: r[k] for k in ("op", "median_s", "p10_s", "p90_s", "repeats")} for r in records]
    err = capsys.readouterr().err
    assert "ridgeline-worker flush" in err
    assert "host profile host-" in err and "not published (no service)" in err


def test_suites_lists_every_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suites"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [
        "ceilings",
        "matmul",
        "elementwise",
        "c_relu_ab",
        "norms",
        "attention",
        "collectives",
        "triton",
        "train",
    ]


@pytest.mark.slow  # runs the worker's suites
def test_a_sigterm_rewrapped_by_c_code_still_stops_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM arriving inside C code (numpy's dtype lookup) can come back out as a SystemError instead of the handler's
    exception (CI, 2026-11-28: "_ScalarMeta.__numpy_dtype__ returned a result with an exception set"), which the
    loop counts as a failed case. The run must still stop there, spool what it measured (nothing, here) and exit
    128 + 15."""
    import os
    import signal

    from worker import suites

    real_plan = suites.SUITES["ceilings"].plan

    def plan(target: Any) -> list[Any]:
        cases = real_plan(target)
        first = cases[0]

        def interrupted(ctx: Any) -> Any:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.0)
            except BaseException as err:  # the handler's Terminated, as C code would rewrap it
                raise SystemError("returned a result with an exception set") from err
            raise AssertionError("no SIGTERM arrived")

        return [dataclasses.replace(first, run=interrupted), *cases[1:]]

    monkeypatch.setitem(suites.SUITES, "ceilings", dataclasses.replace(suites.SUITES["ceilings"], plan=plan))
    status = main(["run", "--quick", "--suite", "ceilings", "--spool-dir", str(tmp_path / "spool")])
    assert status == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "SIGTERM: stopped after 0 of 5 cases" in err  # the interrupted case is not counted as failed
