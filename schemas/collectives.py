"""Collective estimates: `POST /v1/estimate/collective`.

Byte convention (nccl-tests, doc/PERFORMANCE.md): `bytes` is the gathered output of each rank for all_gather, the
total input of each rank for reduce_scatter and all_reduce, each rank's whole send buffer for all_to_all (1/n of it
goes to every rank), the buffer for broadcast and reduce, and the message for send_recv. Bus bandwidth is
algbw × 2(n−1)/n for all_reduce, × (n−1)/n for all_gather, reduce_scatter and all_to_all, × 1 otherwise.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from schemas import limits
from schemas.common import Fraction, InputModel, PositiveFloat
from schemas.estimates import HardwareRef

NonNegativeFloat = Annotated[float, Field(ge=0, le=limits.MAX_SECONDS, allow_inf_nan=False)]
Devices = Annotated[int, Field(ge=2, le=limits.MAX_DEVICES)]
MessageBytes = Annotated[float, Field(gt=0, le=limits.MAX_MESSAGE_BYTES, allow_inf_nan=False)]
BYTES_DESCRIPTION = (
    "Message size in bytes, nccl-tests convention: the gathered output (all_gather), each rank's total input "
    "(reduce_scatter, all_reduce), each rank's whole send buffer (all_to_all), the buffer (broadcast, reduce), "
    "the message (send_recv)."
)


class CollectiveOp(StrEnum):
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    all_reduce = "all_reduce"
    all_to_all = "all_to_all"
    broadcast = "broadcast"
    reduce = "reduce"
    send_recv = "send_recv"


class Algorithm(StrEnum):
    auto = "auto"
    ring = "ring"
    tree = "tree"
    halving_doubling = "halving_doubling"
    direct = "direct"
    hierarchical = "hierarchical"
    in_switch = "in_switch"


class Timing(StrEnum):
    alpha_beta = "alpha_beta"
    per_hop_max = "per_hop_max"
    nccl_protocols = "nccl_protocols"


class LinkOverrides(InputModel):
    """Figures of one fabric. On a switch, bandwidth is per device (all its ports); on a ring or torus, per link.
    Bandwidths are per direction."""

    link_bandwidth_bytes_per_s: PositiveFloat | None = Field(default=None, description="Per direction.")
    hop_latency_s: NonNegativeFloat | None = Field(default=None, description="One step: a hop or a handshake.")
    efficiency: Fraction | None = Field(default=None, description="Fraction of bandwidth reached; default 1.")
    launch_s: NonNegativeFloat | None = Field(default=None, description="Fixed cost per collective call.")
    timing: Timing | None = Field(
        default=None,
        description="How steps add up. alpha_beta: steps·latency + bytes/bandwidth; per_hop_max: transfers "
        "synchronised by the hardware (TPU ICI), max(steps·latency, bytes/bandwidth); nccl_protocols: a library "
        "(NCCL/RCCL), the faster of LL (half the bytes are payload) and Simple (a fence and a flag per step). "
        "Default: alpha_beta on a switch, per_hop_max on a ring or torus.",
    )
    in_switch_reduction: bool = Field(default=False, description="The switch reduces (NVLS, SHARP).")


class TorusAxis(InputModel):
    size: int = Field(ge=1, le=limits.MAX_DEVICES)
    wraparound: bool = Field(default=False, description="A full ring along this axis (both directions usable).")


class FlatTopology(LinkOverrides):
    kind: Literal["ring", "torus", "switch"]
    devices: Devices | None = Field(default=None, description="Ring or switch: number of devices.")
    bidirectional: bool = Field(default=True, description="Ring: both directions of every link carry data.")
    axes: list[TorusAxis] | None = Field(default=None, min_length=1, max_length=8, description="Torus: the axes.")
    collective_axes: list[Annotated[int, Field(ge=0, le=7)]] | None = Field(
        default=None, min_length=1, max_length=8, description="Torus: indices of the axes the collective runs over."
    )

    @field_validator("axes")
    @classmethod
    def _slice_size(cls, axes: list[TorusAxis] | None) -> list[TorusAxis] | None:
        devices = math.prod(axis.size for axis in axes or [])
        if devices > limits.MAX_DEVICES:
            raise ValueError(f"the axes make a torus of {devices} devices; at most {limits.MAX_DEVICES} are allowed")
        return axes

    def device_count(self) -> int:
        return math.prod(axis.size for axis in self.axes or []) if self.kind == "torus" else self.devices or 0

    @model_validator(mode="after")
    def _shape(self) -> FlatTopology:
        if self.kind == "torus":
            if self.axes is None:
                raise ValueError("a torus needs axes")
            if self.devices is not None:
                raise ValueError("a torus takes axes, not devices")
        else:
            if self.devices is None:
                raise ValueError(f"a {self.kind} needs devices")
            if self.axes is not None or self.collective_axes is not None:
                raise ValueError(f"axes and collective_axes are for a torus, not a {self.kind}")
        return self


class HierarchicalTopology(InputModel):
    """G devices per node on `inner`, N nodes on `outer` (its link is each device's share of the scale-out
    fabric, e.g. one NIC per GPU)."""

    kind: Literal["hierarchical"]
    inner: FlatTopology
    outer: FlatTopology

    @field_validator("outer")
    @classmethod
    def _size(cls, outer: FlatTopology, info: ValidationInfo) -> FlatTopology:
        inner = info.data.get("inner")
        devices = outer.device_count() * (inner.device_count() if inner is not None else 1)
        if devices > limits.MAX_DEVICES:
            raise ValueError(f"inner × outer is {devices} devices; at most {limits.MAX_DEVICES} are allowed")
        return outer


TopologySpec = Annotated[FlatTopology | HierarchicalTopology, Field(discriminator="kind")]


class CollectiveRequest(InputModel):
    """A collective on `devices` devices of a hardware profile's own fabric, or on an explicit `topology`."""

    op: CollectiveOp
    bytes: MessageBytes = Field(description=BYTES_DESCRIPTION)
    algorithm: Algorithm = Field(default=Algorithm.auto, description="auto: the fastest that applies (named).")
    hardware: HardwareRef | None = None
    hardware_patch: dict[str, Any] | None = Field(
        default=None, description="JSON Merge Patch applied to the profile first."
    )
    devices: Devices | None = Field(
        default=None,
        description="With hardware: participants. Within the scale-up domain they share it; beyond, they form "
        "nodes of the domain's size joined by the scale-out fabric (a two-level hierarchy).",
    )
    topology: TopologySpec | None = None
    link_bandwidth_bytes_per_s: PositiveFloat | None = Field(
        default=None, description="Topology: per direction (per device on a switch, per link on a ring or torus)."
    )
    hop_latency_s: NonNegativeFloat | None = Field(default=None, description="Topology: latency of one step.")
    efficiency: Fraction | None = Field(
        default=None, description="Fraction of link bandwidth reached; default the profile's interconnect efficiency."
    )
    launch_s: NonNegativeFloat | None = Field(default=None, description="Fixed cost per collective call.")

    @model_validator(mode="wrap")
    @classmethod
    def _name_fields_as_sent(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError as err:
            raise _plain_paths(err) from None

    @model_validator(mode="after")
    def _participants(self) -> CollectiveRequest:
        if (self.hardware is None) == (self.topology is None):
            raise ValueError("give either hardware (with devices) or topology")
        if self.hardware is not None and self.devices is None:
            raise ValueError("devices is required with hardware")
        if self.topology is not None and (self.devices is not None or self.hardware_patch is not None):
            raise ValueError("devices and hardware_patch go with hardware, not with topology")
        return self


def _plain_paths(err: ValidationError) -> ValidationError:
    """Paths as the client wrote them: without the union tags pydantic inserts (`hardware.profile.memory` →
    `hardware.memory`, `topology.hierarchical.inner` → `topology.inner`)."""
    tags = {"slug", "profile", "ring", "torus", "switch", "hierarchical"}
    errors: list[InitErrorDetails] = []
    for e in err.errors():
        loc = tuple(
            part for i, part in enumerate(e["loc"]) if not (i == 1 and e["loc"][0] in ("hardware", "topology")
                                                           and part in tags)
        )  # fmt: skip
        if e["type"] in ("union_tag_invalid", "union_tag_not_found") and loc[:1] == ("topology",):
            loc = (*loc, "kind")  # the field at fault is the discriminator
        detail = InitErrorDetails(type=e["type"], loc=loc, input=e["input"])
        if "ctx" in e:
            detail["ctx"] = e["ctx"]
        errors.append(detail)
    try:
        return ValidationError.from_exception_data(err.title, errors)
    except (KeyError, TypeError, ValueError):
        return err


class CollectivePhase(BaseModel):
    name: str = Field(description="reduce_scatter, all_gather across nodes, one_shot…")
    fabric: str
    steps: int = Field(description="Latency steps (hops or handshakes).")
    bytes_per_link: float = Field(description="Bytes on the busiest link (or port), per direction.")
    latency_s: float
    bandwidth_s: float
    time_s: float


class CollectiveRead(BaseModel):
    op: CollectiveOp
    bytes: float
    devices: int
    time_s: float
    time_s_p10: float | None = Field(
        default=None,
        description="The prediction interval's low end: the 10th percentile (or its family's wider level) of measured "
        "/ predicted over the collectives the validation measured on other devices, by message size "
        "(docs/model/intervals.md).",
    )
    time_s_p90: float | None = Field(default=None, description="The prediction interval's high end.")
    algbw_bytes_per_s: float = Field(description="bytes / time_s.")
    busbw_bytes_per_s: float = Field(description="algbw × the nccl-tests factor of the op.")
    bound: Literal["latency", "bandwidth"]
    latency_s: float = Field(description="Launch plus every step's latency.")
    bandwidth_s: float = Field(description="Bytes on the busiest link over its bandwidth, summed over phases.")
    steps: int
    bytes_per_link: float
    algorithm: Algorithm
    protocol: Literal["ll", "simple", "alpha_beta", "hardware"] = Field(
        description="ll / simple: a library's low-latency (half the bytes are payload) or full-bandwidth protocol "
        "(a fence and a flag per step); alpha_beta: latency + bytes / bandwidth; hardware: hardware-synchronised "
        "transfers (TPU ICI), max(latency, bytes / bandwidth) per hop."
    )
    formula: str
    source: str
    schedule: list[CollectivePhase]
    alternatives: dict[str, float] = Field(
        description="Time of every algorithm considered (its faster protocol), seconds."
    )
    assumptions: dict[str, Any]
