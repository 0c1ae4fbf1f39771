"""What a suite is: a plan of cases (op object + how to measure it) made without touching the device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.device import Device
from worker.results import TimingScope, validate_op
from worker.suites._skip import SkipCase
from worker.timing import Stats, TimingPolicy

if TYPE_CHECKING:
    from worker.suites._jax import JaxRuntime

__all__ = ["Case", "Context", "SkipCase", "Target", "dtypes_for", "primary_dtype"]


@dataclass(frozen=True)
class Target:
    """What a plan depends on: the device, the size class, and what the service's profile can estimate."""

    device: Device
    size: str = "quick"  # "quick" (CI, seconds) or "full" (the real sweep: large on accelerators, moderate on CPUs)
    local_devices: int = 1  # devices a collective spans (virtual CPU devices on a host without accelerators)
    profile_dtypes: frozenset[str] | None = None  # dtypes the matched profile has a peak for; None: unknown
    has_triton: bool = False

    @property
    def quick(self) -> bool:
        return self.size == "quick"

    @property
    def accelerator(self) -> bool:
        return self.device.platform in ("gpu", "tpu")

    def pick(self, quick: Any, cpu: Any, accelerator: Any) -> Any:
        """The size table for this target."""
        if self.quick:
            return quick
        return accelerator if self.accelerator else cpu


def dtypes_for(target: Target) -> list[str]:
    """Matrix dtypes to sweep on this device, narrowest first, limited to those its profile can estimate.

    NVIDIA: bf16, fp16, tf32 from Ampere (sm_80), fp8 from Ada/Hopper (sm_89), fp32. AMD: bf16, fp16, fp32.
    TPU: bf16 and fp32 (multi-pass on the MXU). CPU: fp32 (bf16 on a CPU is emulated and says little).
    """
    device = target.device
    if device.platform == "cpu":
        found = ["fp32"]
    elif device.platform == "tpu":
        found = ["bf16", "fp32"]
    elif device.vendor == "nvidia":
        sm = device.sm_version() or (8, 0)
        found = ["bf16", "fp16"] if sm >= (8, 0) else ["fp16"]
        if sm >= (8, 9):
            found.insert(0, "fp8")
        if sm >= (8, 0):
            found.append("tf32")
        found.append("fp32")
    else:
        found = ["bf16", "fp16", "fp32"]
    if target.profile_dtypes is not None:
        found = [d for d in found if d in target.profile_dtypes] or found[:1]
    return found


def primary_dtype(target: Target) -> str:
    """The dtype most work runs in: bf16 on accelerators, fp32 on CPUs."""
    preferred = "fp32" if target.device.platform == "cpu" else "bf16"
    have = dtypes_for(target)
    return preferred if preferred in have else have[-1]


@dataclass
class Context:
    """What a case needs while it runs; the JAX runtime is made on first use (importing JAX takes a second)."""

    target: Target
    policy: TimingPolicy
    seed: int = 0
    # The ceilings' policy (the CLI's is `policy.for_ceilings()`: longer, as a host profile is built from them);
    # None: the run's policy.
    ceiling_policy: TimingPolicy | None = None
    _jax: JaxRuntime | None = None

    @property
    def jax(self) -> JaxRuntime:
        if self._jax is None:
            from worker.suites._jax import JaxRuntime

            self._jax = JaxRuntime(self.policy, self.seed)
        return self._jax


@dataclass(frozen=True)
class Case:
    """One measurement: the op object it is held against and the function that times it."""

    suite: str
    name: str
    op: dict[str, Any]
    run: Callable[[Context], Stats]
    timing_scope: TimingScope = TimingScope.wall_clock
    notes: dict[str, Any] = field(default_factory=dict)
    # False: measured for the host's profile, the run's host cost and the results file only: the service's profile
    # for this device cannot predict the op (a bf16 product on a profile without a bf16 peak would make the batch a
    # 422), or the op is the dispatch probe that the run's predictions are built on.
    upload: bool = True

    def __post_init__(self) -> None:
        # Validated while planning, so an op the service would refuse is a bug found before anything runs.
        object.__setattr__(self, "op", validate_op(self.op))
