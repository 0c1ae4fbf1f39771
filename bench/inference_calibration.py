"""A calibration fitted on LLMCompass's op-level A100 tables, for `bench.validate_inference --calibrated`.

The same path an upload and `POST /v1/calibrations` take, without a database: the tables are parsed by the importer
(`measured.importer.parse`, formats `llmcompass` and `llmcompass-allreduce`), predicted by the service's
own batch evaluator (`adapters.predict`) on the catalogue profile in the data's timing scope, described by
`adapters.describe` and fitted per op family and dtype by `roofline.calibration.fit` on every row (nothing held out:
the layer being validated is a different measurement). The result is an unsaved calibration, applied to the inference
run by the service's `adapters.RunCorrector`, as `options.calibration` would apply it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter

import adapters
from hardware_db import load_hardware
from measured.importer import parse
from roofline.calibration import fit
from schemas.benchmarks import ResultOp

TABLES = (
    ("llmcompass", "matmul_A100.csv"),
    ("llmcompass", "softmax_A100.csv"),
    ("llmcompass", "layernorm_A100.csv"),
    ("llmcompass", "gelu_A100.csv"),
    ("llmcompass-allreduce", "allreduce_A100x4_nvlink_transcribed.csv"),
)
_OPS: TypeAdapter[list[Any]] = TypeAdapter(list[ResultOp])


def calibration(root: Path, hardware: str) -> tuple[adapters.Fitted, dict[str, int]]:
    """A calibration of `hardware` (never stored) fitted on the LLMCompass tables under `root`, and the rows per
    group."""
    spec = next(h for h in load_hardware() if h.slug == hardware)
    docs: list[dict[str, Any]] = []
    measured: list[float] = []
    time_s: list[float] = []
    overhead_s: list[float] = []
    for fmt, name in TABLES:
        parsed = parse(fmt, root / "llmcompass-a100" / name)
        ops = _OPS.validate_python([r["op"] for r in parsed.results])
        preds = adapters.predict(adapters.scoped_core(spec, hardware, parsed.timing_scope), ops, spec=spec)
        docs += _OPS.dump_python(ops, mode="json")
        measured += [float(r["median_s"]) for r in parsed.results]
        time_s += preds.time_s.tolist()
        overhead_s += preds.overhead_s.tolist()
    meas, physical = np.asarray(measured), np.asarray(time_s)
    work = physical - np.nan_to_num(np.asarray(overhead_s))
    by_group: dict[str, list[int]] = {}
    for i, doc in enumerate(docs):
        if doc["kind"] not in adapters.UNCALIBRATED and np.isfinite(work[i]) and work[i] > 0:
            by_group.setdefault(adapters.group_of(doc), []).append(i)
    groups: dict[str, Any] = {}
    counts = {}
    for name, indices in sorted(by_group.items()):
        idx = np.asarray(indices)
        keys, features, names = adapters.describe([docs[i] for i in indices])
        known = sorted(set(keys))
        correction = fit(features, work[idx], meas[idx], adapters.variant_codes(keys, known))
        if correction is not None:
            groups[name] = {"correction": correction.to_json(), "variants": known, "features": names}
            counts[name] = len(indices)
    return adapters.Fitted.parse(1, 1, hardware, {"groups": groups}), counts


def corrector(root: Path, hardware: str) -> tuple[adapters.RunCorrector, dict[str, int]]:
    fitted, counts = calibration(root, hardware)
    return adapters.RunCorrector([fitted]), counts
