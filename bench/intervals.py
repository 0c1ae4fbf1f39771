"""The prediction intervals' table, generated from the leave-one-device-out residuals of the op validation.

    .venv/bin/python -m bench.intervals            # regenerate adapters/intervals.json and bench/loo.json
    .venv/bin/python -m bench.intervals --check    # exit 1 if either is not what the data give now

Every row of `bench.validate` is predicted with the constants re-derived without its device (`bench.loo`); its
residual is measured / predicted. The table holds, per op family (as the API names ops: `matmul`,
`attention-prefill`, …) and regime (`roofline.intervals.regime`), the 10th and 90th percentiles of those residuals,
every device weighing the same, and the pooled bands a family or regime falls back to (`roofline.intervals`).

Coverage, the check of the table: each device in turn is held out of the table as well (the bands built from the
other devices' residuals only), and the share of its measurements inside their p10-p90 interval is counted. About
80 % is the aim. The same run's leave-one-device-out accuracy per (source, family, device) and the coverage go to
bench/loo.json, which `bench.report` renders into docs/validation.md. docs/model/intervals.md says what the numbers
mean.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import roofline
from bench import loo, validate, validate_collectives
from measured.datasets import DATA_DIR, MissingData, data_dir
from roofline.intervals import ANY, COLLECTIVE, QUANTILES, Band, IntervalTable, band_of, collective_regime, regime

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "adapters" / "intervals.json"
FIGURES_PATH = REPO / "bench" / "loo.json"  # the LOO accuracy and the coverage, for bench.report

# bench.validate's families as the API names the op (adapters.interval_family).
FAMILIES = {
    "gemm": "matmul",
    "attention-context": "attention-prefill",
    "attention-generation": "attention-decode",
    "rope": "rotary",
}


@dataclass
class Residuals:
    """Every validation row, predicted leave one device out: its family, regime, device and measured / predicted."""

    family: np.ndarray
    regime: np.ndarray
    device: np.ndarray
    ratio: np.ndarray


def folds(root: Path | None = None) -> list[loo.Fold]:
    """Every device held out in turn (`bench.loo`), its rows predicted by `bench.validate`'s evaluation."""
    base = data_dir(root)
    return loo.leave_one_device_out(validate.load(base), loo.a40_groups(base), validate.evaluate_with)


def residuals(found: Sequence[loo.Fold]) -> Residuals:
    family, reg, device, ratio = [], [], [], []
    for fold in found:
        for r in fold.results:
            assert isinstance(r, validate.Result) and r.work_s is not None  # bench.validate's results carry these
            family.append(np.full(r.measured_s.size, FAMILIES.get(r.family, r.family)))
            # Regime from the work, math and memory seconds (no fixed costs: overhead 0).
            reg.append(np.asarray(regime(r.work_s, 0.0, r.compute_s, r.memory_s)))
            device.append(np.full(r.measured_s.size, r.device))
            ratio.append(r.measured_s / r.predicted_s)
    return Residuals(*(np.concatenate(x) for x in (family, reg, device, ratio)))


# `bench.validate_collectives`' datasets → the device each measured (A100 PCIe pairs apart from the SXM nodes).
COLLECTIVE_DEVICES = {
    "aiconfigurator-nccl": "a100-sxm-80gb", "aiconfigurator-custom": "a100-sxm-80gb", "llmcompass": "a100-sxm-80gb",
    "vidur-a100_dgx": "a100-sxm-80gb", "vidur-a100_dgx-2nodes": "a100-sxm-80gb",
    "vidur-a100_pairwise_nvlink": "a100-pcie-80gb", "tpu7x": "tpu7x",
    **{dataset: slug for dataset, (_, slug) in validate_collectives.GENERATIONS.items()},
}  # fmt: skip


def collective_residuals(root: Path | None = None) -> Residuals:
    """Every measured collective of `bench.validate_collectives`, predicted by the shipped collective model (its
    constants come from published bus bandwidths and NCCL's source, not from these tables: decision 0027, save
    NCCL 2.13.4's LL fractions, chosen on A100, and TPU7x's ICI efficiency), family `collective`, regime by size."""
    found = list(validate_collectives.rows(validate_collectives.data_dir(root)))
    predicted = np.asarray(validate_collectives.predict(found))
    measured = np.array([r.measured_s for r in found])
    size = np.array([r.bytes for r in found])
    device = np.array([COLLECTIVE_DEVICES[r.dataset] for r in found])
    reg = np.array([collective_regime(float(r.bytes), roofline.fabric_class(r.topology)) for r in found])
    return Residuals(np.full(size.size, COLLECTIVE), reg, device, measured / predicted)


def combined(*parts: Residuals) -> Residuals:
    return Residuals(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("family", "regime", "device", "ratio")))


# The lower quantiles a family's band may take, narrowest first (the upper one is 1 − it), and the share of a new
# device's rows its interval is meant to hold (issue 21: "about 80 % of held-out measurements").
LEVELS = (0.10, 0.09, 0.08, 0.07, 0.06, 0.05, 0.04, 0.03, 0.02)
TARGET_COVERAGE = 0.80


def pooled(res: Residuals, keep: np.ndarray) -> dict[str, Band]:
    """The pooled bands (`*/regime`, `*/*`) of the rows `keep` selects, at `QUANTILES`: the ops' only (a collective
    is no fallback for a kernel)."""
    ops = keep & (res.family != COLLECTIVE)
    out = {}
    for g in [*sorted(set(res.regime[ops].tolist())), ANY]:
        pick = ops & ((res.regime == g) if g != ANY else True)
        if pick.any():
            out[f"{ANY}/{g}"] = band_of(res.ratio[pick], res.device[pick], QUANTILES[0])
    return out


def table(
    res: Residuals, keep: np.ndarray | None = None, levels: dict[str, float] | None = None,
    families: set[str] | None = None, shared: dict[str, Band] | None = None,
) -> IntervalTable:  # fmt: skip
    """The bands of the rows `keep` selects (all by default): per family and regime, per family, per regime, all.
    A family's bands are at its `levels` quantile (default `QUANTILES`); the pooled bands (`*/…`) at `QUANTILES`.
    `families`: only those families' own bands (the pooled ones always), for a coverage check that needs no others;
    `shared`: the pooled bands of the same rows, made once (`pooled`)."""
    keep = np.ones(res.ratio.size, dtype=bool) if keep is None else keep
    levels = levels or {}
    bands: dict[str, Band] = {}
    names = sorted(set(res.family[keep].tolist()))
    for f in (n for n in names if families is None or n in families):
        low = levels.get(f, QUANTILES[0])
        mine = keep & (res.family == f)
        for g in [*sorted(set(res.regime[mine].tolist())), ANY]:
            pick = mine & ((res.regime == g) if g != ANY else True)
            if pick.any():
                bands[f"{f}/{g}"] = band_of(res.ratio[pick], res.device[pick], low)
    bands.update(shared if shared is not None else pooled(res, keep))
    shown = {f: q for f, q in sorted(levels.items()) if q != QUANTILES[0] and (families is None or f in families)}
    return IntervalTable(bands, "python -m bench.intervals", shown)


def inside(
    res: Residuals, tab: IntervalTable, rows: np.ndarray, family: str
) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """For `rows` of `family`: whether each falls inside its interval from `tab` (the band of its family and regime),
    the width p90 / p10, the bands used."""
    inside = np.zeros(rows.sum(), dtype=bool)
    width = np.zeros(rows.sum())
    used = set()
    for g in sorted(set(res.regime[rows].tolist())):
        cell = res.regime[rows] == g
        key, band = tab.band(family, g)
        used.add(key)
        low, high = band.bounds(1.0)
        r = res.ratio[rows][cell]
        inside[cell] = (r >= low) & (r <= high)
        width[cell] = high / low
    return inside, width, used


def choose_levels(res: Residuals, keep: np.ndarray | None = None) -> dict[str, float]:
    """Per family, the narrowest of `LEVELS` whose bands hold `TARGET_COVERAGE` of a new device's rows: each device
    of `keep` in turn is held out, the bands are built from the others at every level, and a level is taken when the
    mean over the family's devices of the share inside reaches the target (the widest level where none does). A
    family measured on fewer than two devices of `keep` keeps `QUANTILES` (no device to hold out against another)."""
    keep = np.ones(res.ratio.size, dtype=bool) if keep is None else keep
    devices = sorted(set(res.device[keep].tolist()))
    shares: dict[str, dict[float, list[float]]] = {}
    for device in devices:
        held = keep & (res.device == device)
        mine = set(res.family[held].tolist())
        shared = pooled(res, keep & ~held)
        for q in LEVELS:
            tab = table(res, keep & ~held, dict.fromkeys(mine, q), families=mine, shared=shared)
            for f in mine:
                shares.setdefault(f, {}).setdefault(q, []).append(
                    float(inside(res, tab, held & (res.family == f), f)[0].mean())
                )
    levels = {}
    for f, by_level in sorted(shares.items()):
        if len(by_level[LEVELS[0]]) < 2:
            continue
        levels[f] = next((q for q in LEVELS if np.mean(by_level[q]) >= TARGET_COVERAGE), LEVELS[-1])
    return levels


def coverage(res: Residuals) -> list[dict[str, Any]]:
    """Per family and held-out device: the share of its rows inside the p10-p90 interval of a table built without it
    (its families' levels chosen without it too, `choose_levels`), the level, the bands it took (its own family's, or
    a pooled one) and the median width p90 / p10."""
    out = []
    for device in sorted(set(res.device.tolist())):
        held = res.device == device
        levels = choose_levels(res, ~held)
        without = table(res, ~held, levels)
        for f in sorted(set(res.family[held].tolist())):
            rows = held & (res.family == f)
            held_in, width, used = inside(res, without, rows, f)
            out.append({
                "family": f, "device": device, "rows": int(rows.sum()), "coverage": round(float(held_in.mean()), 4),
                "width": round(float(np.median(width)), 4), "level": levels.get(f, QUANTILES[0]), "bands": sorted(used),
            })  # fmt: skip
    return out


def generate(root: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped table (adapters/intervals.json) and the figures bench.report shows (bench/loo.json): each
    device's leave-one-device-out accuracy per source and family, and the intervals' coverage."""
    found = folds(root)
    res = combined(residuals(found), collective_residuals(root))
    levels = choose_levels(res)
    figures = {
        "generated_by": "python -m bench.intervals",
        "loo": [
            {k: summary_row[k] for k in ("source", "family", "device", "count", "median_ape", "p90_ape", "bias")}
            for fold in found
            for summary_row in (validate.summary(r, 0) for r in fold.results)  # type: ignore[arg-type]
        ],
        "coverage": coverage(res),
    }
    figures["coverage_by_family"] = summary(figures["coverage"])
    return table(res, levels=levels).to_json(), _rounded(figures)


def _rounded(doc: Any) -> Any:
    """Fractions to four decimals (bench.report's DIGITS): stable across numpy builds."""
    if isinstance(doc, float):
        return round(doc, 4)
    if isinstance(doc, dict):
        return {k: _rounded(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_rounded(v) for v in doc]
    return doc


def summary(cov: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per family: the mean over its held-out devices of their coverage (each device the same weight)."""
    by: dict[str, list[float]] = {}
    for c in cov:
        by.setdefault(c["family"], []).append(c["coverage"])
    return {f: round(float(np.mean(v)), 4) for f, v in by.items()}


def render(doc: dict[str, Any]) -> Iterator[str]:
    yield "Prediction intervals (p10-p90 of measured / predicted, leave one device out; adapters/intervals.json)"
    yield "Levels (a family's lower quantile where wider than 0.10): " + (
        ", ".join(f"{f} {q:.2f}" for f, q in doc.get("levels", {}).items()) or "none"
    )
    yield f"{'band':<28}{'p10':>8}{'p90':>8}{'rows':>8}{'devices':>9}"
    for key, b in doc["bands"].items():
        yield f"{key:<28}{b['low']:>8.3f}{b['high']:>8.3f}{b['rows']:>8}{b['devices']:>9}"
    yield ""
    yield "Coverage: each device held out of the table too; share of its rows inside p10-p90 (aim ~80 %)"
    yield f"{'family':<20}{'device':<21}{'rows':>7}{'inside':>8}{'p90/p10':>9}{'level':>7}  band"
    for c in doc["coverage"]:
        yield (
            f"{c['family']:<20}{c['device']:<21}{c['rows']:>7}{c['coverage']:>8.1%}{c['width']:>9.2f}"
            f"{c['level']:>7.2f}  " + ", ".join(c["bands"])
        )
    yield ""
    yield "Per family (mean over held-out devices): " + "; ".join(
        f"{f} {v:.1%}" for f, v in summary(doc["coverage"]).items()
    )


def _text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.intervals", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help=f"validation data directory (default {DATA_DIR})")
    parser.add_argument("--table", type=Path, default=TABLE, help=f"the shipped table (default {TABLE})")
    parser.add_argument("--figures", type=Path, default=FIGURES_PATH, help=f"LOO figures (default {FIGURES_PATH})")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if either file is out of date")
    args = parser.parse_args(argv)
    try:
        doc, figures = generate(args.data)
    except MissingData as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in render({**doc, **figures}):
        print(line)
    outputs = {args.table: _text(doc), args.figures: _text(figures)}
    if args.check:
        stale = [str(path) for path, text in outputs.items() if (path.read_text() if path.is_file() else None) != text]
        if stale:
            print(f"out of date: {', '.join(stale)}: run python -m bench.intervals", file=sys.stderr)
            return 1
        return 0
    for path, text in outputs.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
