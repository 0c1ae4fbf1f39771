"""A real local Ray cluster for the job tests: `ray start --head --block` on free ports (so that it never meets
another cluster on the machine), two CPUs, no dashboard; stopped by terminating that one process, which takes its
raylet, GCS and workers with it (never `ray stop`, which stops every cluster of the user)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
PIECE = "ray::ridgeline_piece"  # the title of a Ray worker process while it runs a job's piece (ray.remote name)


class RayCluster:
    def __init__(self, cpus: int = 2) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp"))  # Ray's sockets need a short path
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        ray = Path(sys.executable).with_name("ray")
        ports = {
            name: free_port()
            for name in (
                "dashboard-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                "metrics-export-port", "runtime-env-agent-port", "node-manager-port", "object-manager-port",
            )
        }  # fmt: skip
        args = [str(ray), "start", "--head", "--block", f"--port={self.port}", f"--num-cpus={cpus}",
                "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={self.dir}",
                *(f"--{k}={v}" for k, v in ports.items())]  # fmt: skip
        # Without token authentication: a driver that joins a cluster by its address reads RAY_AUTH_MODE when Ray is
        # imported, and this test process imported it long before (docs/operations.md says how production sets it).
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
        self.log = (self.dir / "start.log").open("w")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while not any(self.dir.glob("session_*/sockets/raylet*")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "start.log").read_text()
                self.stop()
                pytest.fail(f"ray start failed:\n{log}")
            time.sleep(0.1)

    def running(self, title: str = PIECE) -> list[int]:
        return running(self.proc.pid, title)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _descendants(root: int) -> set[int]:
    """The processes whose parent chain reaches `root`."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    out = set()
    for pid in parents:
        p = pid
        while p in parents and p > 1:
            if p == root:
                out.add(pid)
                break
            p = parents[p]
    return out


def running(root: int, title: str = PIECE) -> list[int]:
    """`root`'s descendant processes whose title starts with `title`: Ray retitles a worker process while it runs a
    task (`ray::<task name>`; idle, `ray::IDLE`)."""
    found = []
    for pid in _descendants(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cmdline.startswith(title):
            found.append(pid)
    return found
