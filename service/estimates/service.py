"""Rules for op estimates: which profile, which options and which calibration; the mapping to the core and back is
`adapters`'. No formulas here."""

from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.estimates import EstimateContext, EstimateOpRequest, EstimateOpsRequest, Sweep
from schemas.hardware import HardwareSpec
from service import encoding
from service.calibrations import service as calibrations
from service.catalogue import service as catalogue
from service.catalogue.loopread import LoopReads
from service.errors import Unprocessable, details_from_validation, validation_message

MAX_ERRORS = 20


# The hot path of the service, written for it (bench/throughput.py):
# - no trip through the thread pool when the answer needs no session: an inline profile, or a catalogue profile whose
#   digest `service.catalogue.loopread` reads on the loop (SQLite in place, PostgreSQL awaited on an async pool) and
#   whose parse is cached. The op itself is computed on the loop: one op, or a chain of at most MAX_CHAIN_OPS ops,
#   is bounded work, and a thread would not run it beside the loop anyway (the GIL);
# - otherwise (calibration, a profile not parsed yet in this process, a reader that cannot answer) one trip, not
#   three: a sync endpoint with SessionDep crosses to a worker thread to open the session, again to run, and again
#   to commit; here the whole unit of work runs in one call (`LoopReads.in_session`: the same unit of work, with the
#   request's deadline, that SessionDep uses);
# - the answer is the item `adapters.item_dict` renders (plain numbers, exactly EstimateRead's fields, checked
#   finite), encoded where it was computed (on the loop, or in the thread), not validated again as a model by FastAPI;
#   tests/service/test_encoding.py validates the answer against EstimateRead.
async def estimate_op(reads: LoopReads, body: EstimateOpRequest) -> bytes:
    """One op on one device, as the JSON of an `EstimateRead`."""
    if body.options.calibration == "none":
        resolved = await catalogue.resolve_hardware_on_loop(reads.digests, body)
        if resolved is not None:
            return encoding.dumps(_op_item(*resolved, body, None))

    def work(session: Session) -> bytes:
        return encoding.dumps(_op_item(*catalogue.resolve_hardware(session, body), body, session))

    return await reads.in_session(work)


def _op_item(spec: HardwareSpec, name: str, body: EstimateOpRequest, session: Session | None) -> dict[str, Any]:
    hw = adapters.to_core(spec, body)
    est = adapters.with_assumptions(adapters.evaluate(hw, body.op), hw, name)
    chosen = None if session is None else _chosen(session, body)
    correction = None
    if chosen is not None:
        doc = body.op.model_dump(mode="json")
        times, info, _ = adapters.calibrate_points(chosen, [doc], est)
        est.assumptions["calibration"] = info
        if times is not None:
            est = adapters.calibrated(est, times)
            correction = adapters.applied_correction(chosen, doc, info)
    return adapters.item_dict(adapters.with_interval(est, adapters.interval_family(body.op), correction))


def _chosen(session: Session, ctx: EstimateContext) -> adapters.Chosen | None:
    """`options.calibration` for the request's profile (a catalogue slug's calibrations; none for an inline or
    patched profile); None for "none"."""
    if ctx.options.calibration == "none":
        return None
    return calibrations.choose(session, catalogue.calibration_slug(ctx), ctx.options.calibration)


def estimate_ops(session: Session, body: EstimateOpsRequest) -> bytes:
    """A list of ops, or one op swept over a grid of sizes, as the JSON of an `EstimateOpsRead`: rendered from plain
    dicts (up to 100 000 items: no model per item), whose numbers `adapters.item_dicts` checked finite column by
    column; the encoder's own walk would cost more than the rest of a large sweep's rendering.
    tests/service/test_estimates_api.py checks that it validates as `EstimateOpsRead` and round-trips."""
    spec, name = catalogue.resolve_hardware(session, body)
    hw = adapters.to_core(spec, body)
    sweep = body.sweep
    if sweep is not None:
        _validate_sweep(sweep)
        est, grid = adapters.sweep(hw, sweep.op, sweep.vary)
        chosen = _chosen(session, body)
        docs = adapters.sweep_docs(sweep.op, grid) if chosen else None
        families: str | list[str] = (
            [adapters.interval_family(sweep.op, q) for q in grid["q_len"]]
            if "q_len" in grid
            else adapters.interval_family(sweep.op)
        )
        items = _items(adapters.with_assumptions(est, hw, name), chosen, docs, families=families)
        return encoding.dumps({"items": items, "grid": grid}, check=False)
    ops = body.ops or []
    batch = adapters.evaluate_ops(hw, ops)
    chosen = _chosen(session, body)
    rows: list[dict[str, Any]] = [{}] * len(ops)
    for group in batch.groups:
        docs = [ops[i].model_dump(mode="json") for i in group.indices] if chosen else None
        est = adapters.with_assumptions(group.estimate, hw, name)
        families = [adapters.interval_family(ops[i]) for i in group.indices]
        for index, row in zip(group.indices, _items(est, chosen, docs, group.indices, families), strict=True):
            rows[index] = row
    return encoding.dumps({"items": rows, "grid": None}, check=False)


def _items(
    est: roofline.Estimate,
    chosen: adapters.Chosen | None,
    docs: list[dict[str, Any]] | None,
    positions: list[int] | None = None,
    families: str | list[str] = "*",
) -> list[dict[str, Any]]:
    """The items of an estimate's points (at `positions` among the response's items), with `options.calibration`
    applied point by point before rendering (`docs`: each point's op as JSON): time_s calibrated, the physical
    model's in details.raw_time_s, and each item's assumptions.calibration saying which calibration and how it
    reached it. Uncalibrated items carry the shipped prediction interval of their `families` (one, or one per point);
    calibrated ones none (a list's calibrations differ point by point: the single-op estimate narrows it)."""
    if chosen is None or docs is None:
        return adapters.item_dicts(adapters.with_interval(est, families), positions=positions)
    times, _, each = adapters.calibrate_points(chosen, docs, est)
    return adapters.item_dicts(adapters.calibrated(est, times), positions=positions, calibration=each)


@functools.cache
def _column(model: type[BaseModel], name: str) -> TypeAdapter[list[Any]]:
    """Validates a list of values of one field of `model`, with that field's constraints."""
    info = model.model_fields[name]
    return TypeAdapter(list[Annotated[info.annotation, info]])  # type: ignore[name-defined]


def _validate_sweep(spec: Sweep) -> None:
    """Every varied value against the op schema's own bounds (Dim, Count, finite…), one column per call, after
    `adapters.check_sweep` has made sure every varied field is a numeric field of the op."""
    adapters.check_sweep(spec.op, spec.vary)
    for name, values in spec.vary.items():
        try:
            _column(type(spec.op), name).validate_python(values)
        except ValidationError as err:
            errors = list(err.errors())[:MAX_ERRORS]  # a 100 000-value column can fail everywhere: name the first
            detail = details_from_validation(errors, ("body", "sweep", "vary", name))
            raise Unprocessable(validation_message(detail), detail) from None
