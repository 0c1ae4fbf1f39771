"""Serving calibrations on measured deployments: for every deployment group (model, hardware, engine, mode,
precision, layout) with at least 5 rows, 3 rows are "uploaded" (chosen at random, seeded) and the others predicted
with the serving calibration fitted on those 3 (`adapters.fit_serving`, what `POST /v1/calibrations` with kind
serving fits); the error on the predicted rows, before and after.

    python -m bench.serving_calibration [--limit N] [--seed S] [--json]

Rows and predictions: `bench.validate_serving.silicon_rows` (the shipped defaults, nothing calibrated).
Issue 42's target: median error on the predicted rows TTFT ≤ 12 %, TPOT ≤ 6 %.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any

import numpy as np

import adapters
from bench.validate_serving import silicon_rows
from measured.datasets import data_dir

UPLOADED, GROUP_MIN = 3, 5
TARGETS = {"ttft": 0.12, "tpot": 0.06}


def evaluate(rows: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["model"], r["system"], r["backend"], r["mode"], r["precision"], r["layout"])].append(r)
    rng = np.random.default_rng(seed)
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    used = 0
    for key, members in sorted(groups.items()):
        if len(members) < GROUP_MIN:
            continue
        used += 1
        pick = set(rng.choice(len(members), UPLOADED, replace=False).tolist())
        cols = {k: np.array([m[k] for m in members]) for k in ("pred_ttft_s", "ttft_s", "pred_tpot_s", "tpot_s")}
        train = np.array([i in pick for i in range(len(members))])
        fit = adapters.fit_serving(cols["pred_ttft_s"][train], cols["ttft_s"][train], cols["pred_tpot_s"][train],
                                   cols["tpot_s"][train])  # fmt: skip
        test = ~train
        name = f"{key[3]} {key[2]}"
        for label in (name, "all"):
            d = by[label]
            d["ttft_before"] += np.abs(cols["pred_ttft_s"][test] / cols["ttft_s"][test] - 1).tolist()
            d["tpot_before"] += np.abs(cols["pred_tpot_s"][test] / cols["tpot_s"][test] - 1).tolist()
            d["ttft_after"] += np.abs(fit.ttft(cols["pred_ttft_s"][test]) / cols["ttft_s"][test] - 1).tolist()
            d["tpot_after"] += np.abs(fit.tpot(cols["pred_tpot_s"][test]) / cols["tpot_s"][test] - 1).tolist()
    out = {name: {"rows": len(d["ttft_before"])} | {k: float(np.median(v)) for k, v in d.items()}
           for name, d in sorted(by.items())}  # fmt: skip
    return {"groups": used, "rows": len(rows), "errors": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="an evenly spaced sample of the silicon rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows, _ = silicon_rows(data_dir(None), args.limit)
    result = evaluate(rows, args.seed)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        return 0
    print(f"{result['groups']} deployment groups of ≥ {GROUP_MIN} rows ({result['rows']} rows simulated); "
          f"{UPLOADED} per group uploaded, the rest predicted")  # fmt: skip
    print(f"{'':24} {'rows':>5} {'TTFT before':>12} {'after':>7} {'TPOT before':>12} {'after':>7}")
    for name, e in result["errors"].items():
        print(f"{name:24} {e['rows']:5d} {e['ttft_before']:12.1%} {e['ttft_after']:7.1%} {e['tpot_before']:12.1%} "
              f"{e['tpot_after']:7.1%}")  # fmt: skip
    print(f"targets (median, predicted rows): TTFT ≤ {TARGETS['ttft']:.0%}, TPOT ≤ {TARGETS['tpot']:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
