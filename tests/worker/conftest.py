"""The worker's tests. JAX must see several CPU devices for the collectives, which XLA reads once, at start-up:
ask before anything imports JAX (the same flag `ridgeline-worker` sets for itself)."""

from __future__ import annotations

import os

from worker.cli import DEFAULT_CPU_DEVICES, prepare_jax_environment

prepare_jax_environment(DEFAULT_CPU_DEVICES, os.environ)
