"""The suites, each selectable by name: `ridgeline-worker run --suite ceilings,matmul`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from worker.results import TimingScope
from worker.suites._base import Case, Context, SkipCase, Target, dtypes_for, primary_dtype
from worker.suites.attention import plan_attention
from worker.suites.collectives import plan_collectives
from worker.suites.fusion import plan_c_relu_ab, plan_elementwise
from worker.suites.gpu_triton import plan_triton, triton_available
from worker.suites.matmul import dispatch_probe, plan_ceilings, plan_matmul
from worker.suites.norms import plan_norms
from worker.suites.train import plan_train

__all__ = [
    "SUITES",
    "Case",
    "Context",
    "SkipCase",
    "Suite",
    "Target",
    "dtypes_for",
    "plan",
    "primary_dtype",
    "triton_available",
]


@dataclass(frozen=True)
class Suite:
    name: str
    summary: str
    plan: Callable[[Target], list[Case]]


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite("ceilings", "peak matmul FLOP/s and device-to-device copy bandwidth", plan_ceilings),
        Suite("matmul", "matmul sweep over shapes and dtypes, with tile, wave and alignment cliffs", plan_matmul),
        Suite("elementwise", "relu(A@B) and elementwise chains, jitted (fused) against eager (seed 000, ex. 1)",
              plan_elementwise),
        Suite("c_relu_ab", "C @ relu(A @ B), KV_HEAD 128, jitted and eager (seed 000, ex. 2)", plan_c_relu_ab),
        Suite("norms", "softmax, layer norm, RMS norm, row reduction, activations", plan_norms),
        Suite("attention", "attention naive against flash (XLA, cuDNN, Pallas), MHA/GQA, prefill and decode",
              plan_attention),
        Suite("collectives", "shard_map psum, all_gather, psum_scatter, all_to_all over the local devices",
              plan_collectives),
        Suite("triton", "Triton matmul, fused chain and flash attention (NVIDIA GPUs; do_bench)", plan_triton),
        Suite("train", "one training step (forward, backward, AdamW) of a small transformer, jitted", plan_train),
    )
}  # fmt: skip


def plan(names: list[str], target: Target) -> list[Case]:
    """The cases of the named suites, in the order given; on an accelerator, the dispatch probe first."""
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite {', '.join(unknown)}; known: {', '.join(SUITES)}")
    cases: list[Case] = []
    for name in names:
        cases.extend(SUITES[name].plan(target))
    if target.accelerator and any(case.timing_scope is TimingScope.wall_clock for case in cases):
        # First, so that every wall-clock batch of the run carries the host's per-call cost (a CPU's is in its
        # measured host profile instead: worker.hostprofile).
        cases.insert(0, dispatch_probe(target))
    return cases
