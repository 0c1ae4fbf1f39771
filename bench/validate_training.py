"""Ridgeline's training-step model against Megatron-LM iteration times measured on A100s (issue 22).

    .venv/bin/python -m bench.validate_training [--data PATH] [--json PATH]

The measurement (validation/training, Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", arXiv 2205.05198, Table 5): GPT models of 22 B to 1 T parameters on 8 to 512 A100-80GB GPUs of NVIDIA's
Selene (DGX A100 nodes), fp16, sequence 2048, vocabulary 51 200, each with full activation recomputation and with
selective recomputation plus sequence parallelism; the configurations (tensor, pipeline, data, micro-batch, global
batch, interleaved stages) are the paper's Table 3.

The prediction is `roofline.estimate_training` with shipped defaults, nothing fitted to this table:
- the device is the `a100-sxm-80gb` catalogue profile (`adapters.to_core`), its NVSwitch node the profile's own
  fabric (`adapters.device_topology`); across nodes, the DGX A100's 8 × 200 Gb/s HDR InfiniBand, 25 GB/s per GPU per
  direction, 5 µs per step, as bench/validate_collectives.py states and cites (the catalogue profile has no scale-out
  fabric);
- the model is the paper's GPT: learned positions, biases, GELU FFN of 4·h, tied embeddings, layer norms, dropout;
- attention is unfused (`attention="naive"`): Megatron-LM in 2022 ran QKᵀ and the attention over V as batched
  GEMMs around its fused scale-mask-softmax and a dropout kernel (the ops of the paper's §4.1 and Table 1);
- the schedule is 1F1B, interleaved where the paper's Table 3 gives more than one model chunk per device;
- Megatron-LM's defaults for what overlaps: nothing (no gradient reduction to overlap at data parallelism 1).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import roofline
from adapters import interval_table, to_core
from bench.validate_collectives import Machines
from hardware_db import load_hardware
from measured.datasets import MissingData, data_dir, open_text, resolve
from schemas.estimates import EstimateContext

HARDWARE = "a100-sxm-80gb"
FILE = "training/megatron_2205.05198.csv"
NODE = 8  # GPUs per DGX A100 node
SOURCE = "Korthikanti et al., arXiv 2205.05198, Table 5 (Megatron-LM on Selene, A100-80GB)"
MEDIAN_TARGET, WORST_TARGET = 0.10, 0.20


def gpt(row: dict[str, str]) -> roofline.Transformer:
    """The paper's GPT block (Korthikanti §2, as GPT-3 and Megatron-LM's `GPTModel`)."""
    hidden, heads = int(row["hidden"]), int(row["heads"])
    return roofline.Transformer(
        layers=int(row["layers"]), hidden=hidden, heads=heads, kv_heads=heads, head_dim=hidden // heads,
        ffn=4 * hidden, gated=False, activation="gelu", vocab=int(row["vocab"]), tied_embeddings=True,
        position_table=int(row["seq_len"]), bias=True,
    )  # fmt: skip


@functools.cache
def system() -> roofline.System:
    spec = next(h for h in load_hardware() if h.slug == HARDWARE)
    machines = Machines(spec)

    @functools.cache
    def topology(devices: int) -> roofline.Topology:
        return machines.dgx(devices, NODE) if devices > NODE else machines.node(devices)

    core = to_core(spec, EstimateContext(hardware=HARDWARE))
    return roofline.System(core, topology, intervals=interval_table())  # the shipped bands, as the API answers


def run_of(row: dict[str, str]) -> roofline.TrainingRun:
    v = int(row["interleave"])
    par = roofline.TrainingParallelism(
        tensor=int(row["tensor"]), pipeline=int(row["pipeline"]), data=int(row["data"]),
        sequence_parallel=row["sequence_parallel"] == "true", schedule="interleaved" if v > 1 else "1f1b",
        virtual_stages=v,
    )  # fmt: skip
    return roofline.TrainingRun(
        gpt(row), system(), int(row["seq_len"]), int(row["micro_batch"]), int(row["global_batch"]), par,
        precision=roofline.TrainingPrecision(compute=row["dtype"]), recompute=row["recompute"], attention="naive",
    )  # fmt: skip


def report(path: Path | None = None) -> dict[str, Any]:
    """Measured and predicted iteration time per row, and the error summary per recomputation setting."""
    root = data_dir(path)
    with open_text(resolve(root / FILE)) as f:
        table = list(csv.DictReader(f))
    rows: list[dict[str, Any]] = []
    for row in table:
        est = roofline.estimate_training(run_of(row))
        measured = float(row["iteration_s"])
        rows.append(
            {
                "model": row["model"], "gpus": int(row["gpus"]), "recompute": row["recompute"],
                "sequence_parallel": row["sequence_parallel"] == "true", "measured_s": measured,
                "predicted_s": est.step_s, "error": est.step_s / measured - 1.0, "mfu": est.mfu, "hfu": est.hfu,
                "p10_s": est.step_s_p10, "p90_s": est.step_s_p90,
                "inside": bool((est.step_s_p10 or 0.0) <= measured <= (est.step_s_p90 or 0.0)),
                "bubble_s": est.bubble_s, "communication_exposed_s": est.communication_exposed_s,
                "memory_gb": est.memory.total_bytes / 1e9,
            }
        )  # fmt: skip
    settings: dict[str, dict[str, Any]] = {}
    for name in sorted({r["recompute"] for r in rows}):
        errors = [abs(r["error"]) for r in rows if r["recompute"] == name]
        median, worst = statistics.median(errors), max(errors)
        settings[name] = {
            "rows": len(errors), "median_abs_error": median, "worst_abs_error": worst,
            "meets_target": median <= MEDIAN_TARGET and worst <= WORST_TARGET,
        }  # fmt: skip
    coverage = sum(r["inside"] for r in rows) / len(rows) if rows else float("nan")
    return {"source": SOURCE, "hardware": HARDWARE, "rows": rows, "settings": settings, "coverage": coverage,
            "target": {"median": MEDIAN_TARGET, "worst": WORST_TARGET}}  # fmt: skip


def render(doc: dict[str, Any]) -> Iterator[str]:
    yield (
        f"{'model':<14}{'GPUs':>5}  {'recompute':<18}{'measured':>9}{'predicted':>10}{'error':>8}{'MFU':>7}{'HFU':>7}"
        f"  {'p10-p90':>15}"
    )
    for r in doc["rows"]:
        setting = r["recompute"] + (" + SP" if r["sequence_parallel"] else "")
        yield (
            f"{r['model']:<14}{r['gpus']:>5}  {setting:<18}{r['measured_s']:>8.2f}s{r['predicted_s']:>9.2f}s"
            f"{r['error']:>+8.1%}{r['mfu']:>7.1%}{r['hfu']:>7.1%}  {r['p10_s']:>6.2f}-{r['p90_s']:.2f}s"
            f"{'' if r['inside'] else ' (outside)'}"
        )
    yield ""
    yield f"measured step inside the prediction interval (p10-p90): {doc['coverage']:.0%} of {len(doc['rows'])} rows"
    for name, s in doc["settings"].items():
        verdict = "meets" if s["meets_target"] else "misses"
        yield (
            f"{name}: median |error| {s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} ({verdict} the"
            f" target: median ≤ {MEDIAN_TARGET:.0%}, worst ≤ {WORST_TARGET:.0%})"
        )
    yield f"Data: {doc['source']}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validate_training", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="validation data (default validation/)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON to this path")
    args = parser.parse_args(argv)
    try:
        doc = report(args.data)
    except MissingData as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in render(doc):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
