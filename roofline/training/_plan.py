"""The search for the fastest training layout that fits: data × tensor (with or without sequence parallelism) ×
pipeline (1F1B or interleaved) × sharding × micro-batch × recomputation on one or more device counts.

Candidates are cut in three passes, cheapest first: a layout whose degrees do not divide the devices, or that
`validate_training` rejects, is invalid (counted by the field at fault); one whose closed-form memory
(`training_memory`, microseconds) exceeds the device's is pruned; only the rest are timed, through one `StepCache`,
so each layer shape's ops and each collective are costed once for the whole search. Every timed step is the same
`estimate_training` the single-step endpoint runs."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from roofline._stop import StopCheck, never
from roofline.training._config import Sharding, TrainingConfigError, TrainingParallelism, TrainingRun, validate_training
from roofline.training._memory import training_memory
from roofline.training._results import TrainingEstimate
from roofline.training._step import StepCache, estimate_training

RANKINGS = ("time", "device_hours")


@dataclass(frozen=True)
class PlanSpace:
    """The axes searched. `sequence_parallel` applies where tensor > 1, schedules where pipeline > 1 and shardings
    where data > 1: elsewhere a layout is one step (without sequence parallelism, 1F1B, the first sharding listed),
    searched once. `virtual_stages` are the chunks per device tried under the interleaved schedule."""

    tensor: tuple[int, ...] = (1, 2, 4, 8)
    sequence_parallel: tuple[bool, ...] = (False, True)
    pipeline: tuple[int, ...] = (1, 2, 4, 8)
    schedules: tuple[str, ...] = ("1f1b", "interleaved")
    virtual_stages: tuple[int, ...] = (2,)
    context: tuple[int, ...] = (1,)
    sharding: tuple[Sharding, ...] = (Sharding(0), Sharding(1), Sharding(2), Sharding(3))
    micro_batch: tuple[int, ...] = (1, 2, 4, 8)
    recompute: tuple[str, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class PlanEntry:
    """One layout that fits, with its step."""

    run: TrainingRun
    estimate: TrainingEstimate

    @property
    def device_seconds(self) -> float:
        return self.estimate.step_s * self.estimate.devices


@dataclass(frozen=True)
class TrainingPlan:
    """The `top` fastest layouts that fit (or with the fewest device-hours), best first, and what the search saw:
    `searched` layouts = `invalid` + `pruned_memory` + `evaluated`; `unfinished` were not searched (`should_stop`
    answered true first). `invalid_fields` counts the invalid ones by the input at fault; `reasons` keeps one
    message per field."""

    ranked: tuple[PlanEntry, ...]
    searched: int
    invalid: int
    pruned_memory: int
    evaluated: int
    invalid_fields: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    smallest_memory_bytes: float | None = None
    unfinished: int = 0


def _layouts(space: PlanSpace) -> Iterator[tuple[int, bool, int, str, int, int]]:
    """(tensor, sequence parallel, pipeline, schedule, virtual stages, context), each step once: one tensor device
    has no sequence to split and one stage no schedule to choose."""
    schedules = [("1f1b", 1)] if "1f1b" in space.schedules else []
    if "interleaved" in space.schedules:
        schedules += [("interleaved", v) for v in space.virtual_stages]
    for t in space.tensor:
        for sp, p in itertools.product(space.sequence_parallel if t > 1 else (False,), space.pipeline):
            for (schedule, v), c in itertools.product(schedules if p > 1 else [("1f1b", 1)], space.context):
                yield t, sp, p, schedule, v, c


class _Tally:
    """What the search saw, and the layouts that fit with their steps."""

    def __init__(self) -> None:
        self.searched = self.invalid = self.pruned = self.unfinished = 0
        self.fields: Counter[str] = Counter()
        self.reasons: dict[str, str] = {}
        self.smallest: float | None = None
        self.entries: list[PlanEntry] = []

    def reject(self, count: int, field_: str, message: str) -> None:
        self.searched += count
        self.invalid += count
        self.fields[field_] += count
        self.reasons.setdefault(field_, message)

    def prune(self, total_bytes: float) -> None:
        self.searched += 1
        self.pruned += 1
        self.smallest = total_bytes if self.smallest is None else min(self.smallest, total_bytes)

    def keep(self, entry: PlanEntry) -> None:
        self.searched += 1
        self.entries.append(entry)


def _fabric_error(base: TrainingRun, devices: int) -> tuple[str, str] | None:
    """Why no layout of `devices` devices can communicate on the profile's fabrics (None: they can)."""
    topology = base.system.topology
    if devices < 2:
        return None
    if topology is None:
        return "hardware", "the profile has no interconnect for a collective"
    try:
        topology(devices)
    except ValueError as err:
        return "devices", str(err)
    return None


def _shardings(par: TrainingParallelism, space: PlanSpace) -> tuple[Sharding, ...]:
    """A data group of one shards nothing: every sharding is the same step as the first listed."""
    return space.sharding if par.data > 1 else space.sharding[:1]


def _search_layout(
    base: TrainingRun, par: TrainingParallelism, space: PlanSpace, cache: StepCache, tally: _Tally
) -> None:
    """Every sharding, micro-batch and recomputation of one layout: invalid, pruned for memory, or timed."""
    shardings = _shardings(par, space)
    for sharding, mb, recompute in itertools.product(shardings, space.micro_batch, space.recompute):
        run = replace(base, parallelism=par, sharding=sharding, micro_batch=mb, recompute=recompute)
        try:
            validate_training(run)
            memory = training_memory(run)
            if not memory.fits:
                tally.prune(memory.total_bytes)
                continue
            tally.keep(PlanEntry(run, estimate_training(run, cache)))
        except TrainingConfigError as err:
            tally.reject(1, err.field, err.message)


def plan_training(
    base: TrainingRun, devices: Sequence[int], space: PlanSpace, top: int = 10, rank: str = "time",
    should_stop: StopCheck = never,
) -> TrainingPlan:  # fmt: skip
    """Search `space` on each device count of `devices` for the layouts of `base` (its model, system, sequence,
    global batch, precision, optimizer, overlap and attention) that fit in memory, ranked by step time (`time`) or
    by device-seconds per step (`device_hours`), ties to fewer devices then less memory. Raises
    `TrainingConfigError` for an unknown ranking. `should_stop` is asked before each layout is timed: once it answers
    true, the layouts not yet timed are counted `unfinished` and the plan ranks what it has."""
    if rank not in RANKINGS:
        raise TrainingConfigError("rank_by", f"one of {', '.join(RANKINGS)}")
    # The search ranks on the step alone; the prediction intervals are made for the ranked entries only.
    banded, base = base.system, replace(base, system=replace(base.system, intervals=None))
    cache, tally = StepCache(), _Tally()
    per_layout = len(space.sharding) * len(space.micro_batch) * len(space.recompute)
    layouts = list(_layouts(space))
    stopped = False
    for n in devices:
        fabric = _fabric_error(base, n)
        if fabric is not None:  # no layout of n devices can communicate
            tally.reject(per_layout * len(layouts), *fabric)
            continue
        for t, sp, p, schedule, v, c in layouts:
            if n % (t * p * c):  # no data degree makes this layout n devices: every combination of it is invalid
                tally.reject(
                    per_layout, "devices", f"{n} devices are not whole replicas of tensor × pipeline × context"
                )
                continue
            par = TrainingParallelism(tensor=t, pipeline=p, data=n // (t * p * c), context=c, sequence_parallel=sp,
                                      schedule=schedule, virtual_stages=v)  # fmt: skip
            if stopped or should_stop():
                stopped = True
                tally.unfinished += len(_shardings(par, space)) * len(space.micro_batch) * len(space.recompute)
                continue
            _search_layout(base, par, space, cache, tally)

    def order(e: PlanEntry) -> tuple[float, ...]:
        first = e.estimate.step_s if rank == "time" else e.device_seconds
        return (first, float(e.estimate.devices), e.estimate.memory.total_bytes)

    entries = sorted(tally.entries, key=order)
    ranked = entries[:top]
    if banded.intervals is not None:
        ranked = [PlanEntry(e.run, estimate_training(replace(e.run, system=banded))) for e in ranked]
    return TrainingPlan(
        ranked=tuple(ranked), searched=tally.searched, invalid=tally.invalid, pruned_memory=tally.pruned,
        evaluated=len(entries), invalid_fields=dict(tally.fields), reasons=tally.reasons,
        smallest_memory_bytes=tally.smallest, unfinished=tally.unfinished,
    )  # fmt: skip
