"""The Ray cluster of the job tests: one per test session (its start costs seconds), shared through an xdist group."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray

from tests.service.raycluster import RayCluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    cluster = RayCluster(cpus=2)
    yield cluster
    ray.shutdown()  # this process's driver, if a test joined it, before its cluster goes
    cluster.stop()
