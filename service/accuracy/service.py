"""Accuracy: predictions against measurements, per hardware, op family, dtype and size bucket, raw and calibrated."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

import adapters
from roofline import intervals
from schemas.calibrations import AccuracyCase, AccuracyGroup, AccuracyRead, ErrorStats, ServingAccuracyGroup
from service.orm import ServingBenchmark
from service.results.repository import ResultColumns, ResultRepository, RunFilters
from service.results.serving import Filters, ServingBenchmarkRepository

MATRIX_FAMILIES = frozenset({"matmul", "attention"})  # sized by FLOPs; the rest by bytes moved


def size_bucket(family: str, flops: float | None, nbytes: float | None) -> str:
    """A decade of the op's work: FLOPs for matrix ops, device-memory bytes for the rest."""
    value, unit = (flops, "FLOP") if family in MATRIX_FAMILIES else (nbytes, "B")
    if value is None or not value > 0:
        return "unknown"
    decade = math.floor(math.log10(value))
    return f"1e{decade}–1e{decade + 1} {unit}"


def _cases(data: ResultColumns, indices: list[int], signed: np.ndarray, worst: int) -> list[AccuracyCase]:
    order = sorted(indices, key=lambda i: -abs(float(signed[i])))[:worst]
    return [
        AccuracyCase(
            result_id=data.id[i],
            run_id=data.run_id[i],
            op=data.op[i],
            measured_s=data.median_s[i],
            predicted_s=data.predicted_s[i],
            calibrated_s=data.calibrated_s[i],
            error=float(signed[i]),
        )
        for i in order
    ]


def report(session: Session, filters: RunFilters, worst: int) -> AccuracyRead:
    data = ResultRepository(session).columns(filters, None)
    measured = np.asarray(data.median_s, dtype=np.float64)
    raw = np.asarray(data.predicted_s, dtype=np.float64)
    calibrated = np.array([np.nan if v is None else v for v in data.calibrated_s], dtype=np.float64)
    signed = raw / measured - 1 if len(measured) else np.zeros(0)
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for i in range(len(measured)):
        family = data.op_kind[i]
        key = (data.hardware[i], family, data.dtype[i], size_bucket(family, data.flops[i], data.bytes[i]))
        groups.setdefault(key, []).append(i)

    def decade(label: str) -> float:
        return float(label[2:].split("–")[0]) if label.startswith("1e") else math.inf

    out = []
    for (hardware, family, dtype, size), indices in sorted(
        groups.items(), key=lambda kv: (*kv[0][:3], decade(kv[0][3]))
    ):
        idx = np.asarray(indices)
        out.append(
            AccuracyGroup(
                hardware=hardware,
                family=family,
                dtype=dtype,
                size=size,
                raw=adapters.error_stats(raw[idx], measured[idx]),
                calibrated=adapters.error_stats(calibrated[idx], measured[idx]),
                worst=_cases(data, indices, signed, worst),
            )
        )
    return AccuracyRead(
        results=len(measured),
        raw=adapters.error_stats(raw, measured),
        calibrated=adapters.error_stats(calibrated, measured),
        groups=out,
        worst=_cases(data, list(range(len(measured))), signed, max(worst, 10)),
        serving=serving_groups(session, filters.hardware),
    )


def _band_family(kind: str, dtype: str, op: dict[str, Any]) -> str:
    """The interval family of a stored op (`adapters.interval_family` on its parsed form): attention by whether it
    decodes one query, a matmul by its quantisation and input type."""
    if kind == "attention":
        return intervals.family(kind, decode=op.get("q_len") == 1)
    return intervals.family(kind, dtype, str(op.get("quantization", "none")))


def points(session: Session, filters: RunFilters, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` results (in id order) as measured, raw and calibrated predicted seconds, with the shipped
    prediction interval of the op's family over every regime (`family/*`: where measured times fall for 80 % of the
    validation's ops, docs/model/intervals.md) as `low` and `high` multipliers of the prediction."""
    data = ResultRepository(session).columns(filters, None)
    table = adapters.interval_table()
    out = []
    for i in range(min(len(data.id), limit)):
        family = _band_family(data.op_kind[i], data.dtype[i], data.op[i])
        key, band = table.band(family, intervals.ANY)
        out.append(
            {
                "id": data.id[i],
                "hardware": data.hardware[i],
                "family": data.op_kind[i],
                "dtype": data.dtype[i],
                "measured_s": data.median_s[i],
                "predicted_s": data.predicted_s[i],
                "calibrated_s": data.calibrated_s[i],
                "band": key,
                "low": band.low,
                "high": band.high,
            }
        )
    return out


def _stats(errors: list[float | None]) -> ErrorStats:
    """`error_stats` of stored signed errors (predicted / measured − 1) as predicted ratios over a measured 1."""
    signed = np.array([np.nan if e is None else e for e in errors], dtype=np.float64)
    return adapters.error_stats(signed + 1.0, np.ones_like(signed))


def serving_groups(session: Session, hardware: str | None) -> list[ServingAccuracyGroup]:
    """The load tests' errors per hardware, engine and model."""
    groups: dict[tuple[str, str, str], list[ServingBenchmark]] = {}
    for row in ServingBenchmarkRepository(session).all(Filters(hardware=hardware)):
        groups.setdefault((row.hardware, row.engine, row.model), []).append(row)
    return [
        ServingAccuracyGroup(
            hardware=hw,
            engine=engine,
            model=model,
            load_tests=len(rows),
            ttft=_stats([r.error_ttft for r in rows]),
            tpot=_stats([r.error_tpot for r in rows]),
            e2e=_stats([r.error_e2e for r in rows]),
            output_tokens_per_s=_stats([r.error_output_tokens_per_s for r in rows]),
        )
        for (hw, engine, model), rows in sorted(groups.items())
    ]
