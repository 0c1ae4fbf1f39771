"""Ridgeline's predictions against timings measured on real A100s (issue 3's accuracy report).

    .venv/bin/python -m bench.validate [--data PATH] [--json PATH] [--worst 5]

Loads the measured tables in the repository's `validation/` folder, builds each measured op as a `schemas.ops` object,
evaluates it on the `a100-sxm-80gb` catalogue profile through the service's own mapping
(`adapters.to_core` and `adapters.evaluate`), and prints, per source and op family, the number of points, the
median and p90 absolute percentage error, the bias (median signed error: + means Ridgeline predicts slower than
measured) and the worst cases.

The data and their licences (see `validation/README.md` and each source's README):
- aiconfigurator-a100: NVIDIA ai-dynamo/aiconfigurator @095f58a5, Apache-2.0 (TensorRT-LLM 1.0.0 kernels, bf16).
- vidur: microsoft/vidur @7d475133, MIT (fp16 Sarathi-Serve layers, torch profiler kernel sums).
- llmcompass-a100: PrincetonUniversity/LLMCompass @2e015fd2, BSD-3-Clause (PyTorch fp16, host wall-clock).
- xla: OpenXLA via ROCm/xla @dc660322, Apache-2.0 (XLA's matmul table on B200 and gfx950 = MI355X: bf16, fp16, fp8
  and f32 at XLA's default precision, kernel time).

Timing scopes differ (validation/README.md). Each is honoured by fixed costs, never by a per-shape fit: the per-kernel
fixed cost goes in as the estimate option `launch_overhead_s`, and a measured call that runs more kernels than the
op's model has its own fixed cost on top (`Scope`):
- aiconfigurator (CUDA-graph replays) times kernels only, with the graph's gaps between them: the smallest bf16
  GEMMs in its table (m ≤ 16, n = k = 32: no measurable work) take 2.5 µs, the shortest a kernel runs there.
- vidur (torch-profiler sums of kernel durations) has no gaps at all: its shortest kernels, the residual `add` of
  one or two tokens, take 1-2 µs; 2 µs per kernel.
- LLMCompass times `op(); torch.cuda.synchronize()` on the host: launch and synchronisation come on top of the kernel.
  Each of its series flattens at small sizes, where the GPU does no measurable work: that plateau is the call's fixed
  cost (softmax 13.1 µs, within the ~10-20 µs of validation/README.md; its layer norm and GELU series sit at 52 and 47
  µs from 128 KB to 8 MB, a heavier host path for those two calls). GELU's kernel time adds to its plateau (from 8 M
  elements on); the layer norm's runs under it (`Scope.floor_s`): its 8 × 12288 rows take 48 µs although the kernel
  alone takes several microseconds (vidur's kernel-only timings of the same PyTorch kernel).
- TensorRT-LLM's attention op (aiconfigurator) is several kernels (QKV pre-processing with RoPE and the KV-cache
  append, the attention kernel, workspace set-up, the split-KV combine) in one call; its smallest shapes take
  13.3 µs (context, 1 × 16 tokens) and 10.4 µs (generation, 1 sequence, 2 cached tokens). The part of that
  plateau the modelled kernels do not cover is the call's fixed cost.
- The cache state (the estimate option `cache`): every table is predicted cold except the attention tables of
  TensorRT-LLM 1.3's collector (B200, L40S, RTX Pro 6000), which replays one call on the same buffers: a call whose
  bytes fit in L2 runs from there (their decode caches up to the L2's size read at 2-2.7× GDDR bandwidth; scopes
  `aiconfigurator-{context,generation}-warm`, docs/decisions/0035).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import roofline
from adapters import evaluate
from bench import loo
from hardware_db import load_hardware
from measured.datasets import (  # the parsers, shared with `ridgeline benchmarks import`
    DATA_DIR,
    Group,
    MissingData,
    aiconfigurator,
    aiconfigurator_generations,
    data_dir,
    llmcompass,
    vidur,
    xla,
)
from schemas.hardware import HardwareCreate

HARDWARE = "a100-sxm-80gb"


@dataclass(frozen=True)
class Scope:
    """What one measured number covers: `launch_s` per kernel (the `launch_overhead_s` option) and `call_s` once
    per measured call, for the kernels of the call that the op's model does not have. `floor_s`: host work of the
    call that runs while its kernels do (after their launch), so the call never takes less, and a kernel shorter
    than it is hidden: the measured number is the larger of the two."""

    launch_s: float
    call_s: float = 0.0
    floor_s: float = 0.0
    warm_cache: bool = False
    # The harness replays one product over this many copies of its weights (0: not modelled): a row whose input, output
    # and that many weight copies fit in the L2 reads its product's operands from there (`Hardware.warm_operands`).
    weight_copies: float = 0.0
    # Part of the call's fixed cost counted in SM clock cycles (`bench.loo.PLATEAU_CYCLES`), run at the device's clock.
    call_cycles: float = 0.0

    def measured(self, predicted: np.ndarray, clock_hz: float | None = None) -> np.ndarray:
        """The measured number this scope makes of `predicted` kernels (their launches included) on a device of
        `clock_hz`: the call's own fixed cost added, never below its floor."""
        call = self.call_s
        if self.call_cycles:
            if not clock_hz:
                raise ValueError("a fixed cost in clock cycles needs the device's clock")
            call = call + self.call_cycles / clock_hz
        out: np.ndarray = np.maximum(predicted + call, self.floor_s)
        return out


KERNEL_FLOOR_S = roofline.KERNEL_FLOOR_S  # the shortest kernel in a CUDA-graph replay
XLA_FLOOR_S = 4.14e-6  # XLA's matmul table: median of its devices' shortest matmul (4.85 µs B200, 3.44 µs gfx950)


def attention_scopes(c: loo.Constants) -> dict[str, Scope]:
    """aiconfigurator's attention calls: the call's plateau in cycles (A100: 13.3 µs context, 18 753 cycles at
    1 410 MHz; 10.4 µs generation, 14 664 cycles; decision 0047) less its modelled kernels' floors, which the
    prediction already counts: two for context (pre-processing, flash attention), one for generation (the decode
    kernel applies RoPE and appends K, V itself)."""
    floor = c.kernel_floor_s
    return {
        "aiconfigurator-context": Scope(floor, -2 * floor, call_cycles=c.context_plateau_cycles),
        "aiconfigurator-generation": Scope(floor, -floor, call_cycles=c.generation_plateau_cycles),
    }


SCOPES = {
    "aiconfigurator": Scope(KERNEL_FLOOR_S),
    **attention_scopes(loo.SHIPPED),
    "vidur": Scope(2e-6),
    "llmcompass": Scope(13.1e-6),  # softmax 4096 × 32 (256 KB); matmul is the same eager call
    # 32 × 4096 … 4096 × 1024 all take 52-54 µs, and the decode layer's 8 × 12288 rows 48 µs, although PyTorch's
    # layer norm kernel alone takes ~5 µs for one 2560-wide row (vidur's kernel timings; 10 trips of its loads in
    # series, 48 at 12288): the call's extra host work runs under its kernel, which shows once it outlasts it.
    "llmcompass-layernorm": Scope(13.1e-6, floor_s=52e-6),
    "llmcompass-gelu": Scope(47e-6),  # 1 K … 4 M elements all take 47-49 µs
    # XLA's matmul table: kernel time from the profiler (CUPTI / roctracer), no launch; its shortest matmuls (256³,
    # no measurable work) take 4.85 µs on B200 and 3.44 µs on gfx950: an XLA matmul's fixed cost is their median
    # (bench.loo's rule; each device's is derived from the other's leave one device out).
    "xla": Scope(XLA_FLOOR_S),
    # TensorRT-LLM 1.3.0rc20's collector cycles its GEMMs over a few weight copies (validation/aiconfigurator-b200/
    # README.md: "so the working set exceeds L2"); where A, C and `loo.GEMM_WEIGHT_COPIES` copies of the weights fit
    # in the L2, the rows run faster than device memory allows (decisions 0038, 0041).
    "aiconfigurator-gemm": Scope(KERNEL_FLOOR_S, weight_copies=loo.GEMM_WEIGHT_COPIES),
}

# TensorRT-LLM 1.3.0rc20's collector (the newer generations' tables) replays one attention call on the same buffers:
# a call whose bytes fit in L2 runs from there (decode caches up to the L2's size read at 2-2.7x GDDR bandwidth on L40S
# and RTX Pro 6000; decision 0035). Its GEMMs cycle weight copies past the L2 (their README). Each of these scopes has
# a `-warm` twin: the same fixed costs, the cache warm.
WARM_TWINS = ("aiconfigurator-context", "aiconfigurator-generation")


def with_warm_twins(scopes: dict[str, Scope]) -> dict[str, Scope]:
    """`scopes` and the warm twin of each of `WARM_TWINS`."""
    return {**scopes, **{f"{name}-warm": replace(scopes[name], warm_cache=True) for name in WARM_TWINS}}


SCOPES = with_warm_twins(SCOPES)

SOURCES = {
    "aiconfigurator": "NVIDIA ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0): TensorRT-LLM 1.0.0 on A100-SXM4-80GB",
    "vidur": "microsoft/vidur @7d475133 (MIT): Sarathi-Serve fp16 layers on A100, torch-profiler kernel sums",
    "llmcompass": "PrincetonUniversity/LLMCompass @2e015fd2 (BSD-3-Clause): PyTorch fp16 on A100-80GB, host time",
    "xla": "OpenXLA via ROCm/xla @dc660322 (Apache-2.0): XLA's measured matmuls on B200 and gfx950 (MI355X), "
    "kernel time, f32 at XLA's default precision",
}


@dataclass
class Result:
    source: str
    family: str
    measured_s: np.ndarray
    predicted_s: np.ndarray
    labels: list[str]
    device: str = HARDWARE
    # Per row, summed over the call's kernels: seconds of work (time less the per-kernel fixed costs), of math and of
    # memory traffic: the regime a prediction interval is taken from (`bench.intervals`).
    work_s: np.ndarray | None = None
    compute_s: np.ndarray | None = None
    memory_s: np.ndarray | None = None

    @property
    def signed(self) -> np.ndarray:
        out: np.ndarray = (self.predicted_s - self.measured_s) / self.measured_s
        return out


# --- evaluation --------------------------------------------------------------------------------------------------


def load(root: Path | None = None) -> list[Group]:
    """Every measured group, from the three sources; aiconfigurator's on A100 and on the newer generations."""
    base = data_dir(root)
    return [*aiconfigurator(base), *vidur(base), *llmcompass(base), *aiconfigurator_generations(base), *xla(base)]


def hardware(launch_s: float = KERNEL_FLOOR_S, spec: HardwareCreate | None = None) -> roofline.Hardware:
    """The catalogue profile as the service maps it, with the per-kernel fixed cost of a timing scope."""
    if spec is None:
        spec = next(h for h in load_hardware() if h.slug == HARDWARE)
    return loo.core_profile(spec, launch_s)


def predict(group: Group, hw: roofline.Hardware, scopes: dict[str, Scope] | None = None) -> np.ndarray:
    """Seconds for every row of a group: its kernels on `hw` (whose launch cost is the scope's) and the call's."""
    return anatomy(group, hw, scopes)[0]


def anatomy(
    group: Group, hw: roofline.Hardware, scopes: dict[str, Scope] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`predict`'s seconds per row, and the work, math and memory seconds of the call's kernels (`Result`)."""
    scope = (scopes or SCOPES)[group.scope]
    cold = _anatomy(group, hw, scope)
    fits = _copies_fit(group, scope.weight_copies, hw.cache_bytes) if scope.weight_copies > 0.0 else None
    if fits is None or not np.any(fits):
        return cold
    warm = _anatomy(group, replace(hw, warm_operands=True), scope)
    out = tuple(np.where(fits, w, c) for w, c in zip(warm, cold, strict=True))
    return out[0], out[1], out[2], out[3]


def _anatomy(
    group: Group, hw: roofline.Hardware, scope: Scope
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    total = np.zeros_like(group.measured_s)
    work, compute, memory = np.zeros_like(total), np.zeros_like(total), np.zeros_like(total)
    for part in group.parts:
        est = evaluate(hw, part.op, part.overrides)
        total = total + part.count * np.broadcast_to(est.time_s, total.shape)
        work = work + part.count * np.broadcast_to(np.asarray(est.time_s) - est.overhead_s, total.shape)
        compute = compute + part.count * np.broadcast_to(est.compute_s, total.shape)
        memory = memory + part.count * np.broadcast_to(est.memory_s, total.shape)
    return scope.measured(total, hw.clock_hz), work, compute, memory


def _copies_fit(group: Group, copies: float, cache_bytes: float) -> np.ndarray:
    """Per row of a GEMM group: whether its bf16 input (m·k) and output (m·n) and `copies` copies of its weights (k·n
    at the product's stored width) fit in `cache_bytes`."""
    part = group.parts[0]
    m, n, k = (np.asarray(part.overrides[x], dtype=np.float64) for x in ("m", "n", "k"))
    quantization = str(getattr(part.op, "quantization", "none"))
    weight = 2.0 if quantization == "none" else roofline.QUANTIZATIONS[quantization].weight_bytes
    fits: np.ndarray = 2.0 * m * k + 2.0 * m * n + copies * weight * k * n <= cache_bytes
    return fits


def run(
    groups: Sequence[Group],
    scopes: dict[str, Scope] | None = None,
    adjust: Callable[[roofline.Hardware], roofline.Hardware] | None = None,
) -> list[Result]:
    """Predict every group on its device's catalogue profile and pool the results per (source, family, device).

    `scopes` replaces `SCOPES` and `adjust` changes each core profile: the leave-one-device-out run
    (`bench.loo`) re-derives both without the device it reports."""
    scopes = scopes or SCOPES
    specs = {h.slug: h for h in load_hardware()}
    cores: dict[tuple[str, str], roofline.Hardware] = {}
    pooled: dict[tuple[str, str, str], list[tuple[np.ndarray, ...]]] = {}
    labels: dict[tuple[str, str, str], list[str]] = {}
    for g in groups:
        if (g.scope, g.device) not in cores:
            scope = scopes[g.scope]
            core = hardware(scope.launch_s, specs[g.device])
            core = core if adjust is None else adjust(core)
            cores[(g.scope, g.device)] = replace(core, warm_cache=True) if scope.warm_cache else core
        predicted, work, compute, memory = anatomy(g, cores[(g.scope, g.device)], scopes)
        if not np.all(np.isfinite(predicted) & (predicted > 0)):
            raise ValueError(f"{g.source} / {g.family} on {g.device}: a prediction is not a positive finite time")
        key = (g.source, g.family, g.device)
        pooled.setdefault(key, []).append((g.measured_s, predicted, work, compute, memory))
        labels.setdefault(key, []).extend(g.labels)
    results = []
    for (source, family, device), parts in pooled.items():
        measured, predicted, work, compute, memory = (np.concatenate(column) for column in zip(*parts, strict=True))
        results.append(
            Result(source, family, measured, predicted, labels[(source, family, device)], device, work, compute, memory)
        )
    return results


def summary(result: Result, worst: int = 5) -> dict[str, Any]:
    signed = result.signed
    ape = np.abs(signed)
    order = np.argsort(-ape)[:worst]
    return {
        "source": result.source,
        "family": result.family,
        "device": result.device,
        "count": int(ape.size),
        "median_ape": float(np.median(ape)),
        "p90_ape": float(np.percentile(ape, 90)),
        "bias": float(np.median(signed)),
        "worst": [
            {
                "case": result.labels[i],
                "measured_s": float(result.measured_s[i]),
                "predicted_s": float(result.predicted_s[i]),
                "error": float(signed[i]),
            }
            for i in order
        ],
    }


def report(root: Path | None = None, worst: int = 5) -> list[dict[str, Any]]:
    """The accuracy report: one summary per source, op family and device."""
    return [summary(r, worst) for r in run(load(root))]


# --- leave one device out (issue 21) -----------------------------------------------------------------------------


def scopes_of(c: loo.Constants) -> dict[str, Scope]:
    """`SCOPES` rebuilt from a set of constants (`bench.loo`): a fixed cost no rule could derive (LLMCompass's, with
    the A100 held out) falls back to the profile's own kernel launch cost, as a host-timed call of an unknown harness
    would be predicted. A scope with no rule keeps its shipped value (add its rule to `bench.loo` when one is chosen
    from data)."""
    launch = next(h for h in load_hardware() if h.slug == HARDWARE).overheads.kernel_launch_s
    floor = c.kernel_floor_s
    call = launch if c.llmcompass_call_s is None else c.llmcompass_call_s
    return with_warm_twins(
        {
            **SCOPES,
            "aiconfigurator": Scope(floor),
            "aiconfigurator-gemm": Scope(floor, weight_copies=c.gemm_weight_copies),
            **attention_scopes(c),
            "vidur": Scope(c.vidur_launch_s),
            "llmcompass": Scope(call),
            "llmcompass-layernorm": Scope(call, floor_s=c.llmcompass_layernorm_floor_s or 0.0),
            "llmcompass-gelu": Scope(launch if c.llmcompass_gelu_call_s is None else c.llmcompass_gelu_call_s),
            "xla": Scope(floor if c.xla_floor_s is None else c.xla_floor_s),
        }
    )


def evaluate_with(groups: Sequence[Group], c: loo.Constants) -> list[Result]:
    """`run` with every constant of a set (`bench.loo.Evaluate`)."""
    return run(groups, scopes_of(c), c.adjust)


def leave_one_device_out(root: Path | None = None) -> dict[str, Any]:
    """Every (source, family, device) figure twice: in sample (the shipped constants) and with every constant chosen
    from data re-derived without that device (`bench.loo`), with the constants of each fold."""
    base = data_dir(root)
    groups = load(base)
    extra = loo.a40_groups(base)
    shipped = {(r.source, r.family, r.device): r for r in run(groups)}
    folds = loo.leave_one_device_out(groups, extra, evaluate_with)
    rows = []
    for fold in folds:
        for r in fold.results:
            inside = summary(shipped[(r.source, r.family, r.device)], 0)
            out = summary(r, 0)  # type: ignore[arg-type]
            rows.append({
                "source": r.source, "family": r.family, "device": r.device, "count": out["count"],
                "in_sample": {k: inside[k] for k in ("median_ape", "p90_ape", "bias")},
                "loo": {k: out[k] for k in ("median_ape", "p90_ape", "bias")},
            })  # fmt: skip
    constants = {
        "shipped": _constants(loo.SHIPPED),
        # The rules on the A100's rows alone, the data the shipped constants were chosen on: does each rule say
        # what was chosen by hand?
        "a100 only": _constants(loo.in_sample([g for g in groups if g.device == HARDWARE], [], evaluate_with)),
        "all devices": _constants(loo.in_sample(groups, extra, evaluate_with)),
        **{f"without {fold.device}": _constants(fold.constants) for fold in folds},
    }
    return {"rows": rows, "constants": constants, "folds": folds}


def _constants(c: loo.Constants) -> dict[str, Any]:
    names = [f for f in loo.Constants.__dataclass_fields__ if f != "sources"]
    out = {}
    for name in names:
        # A table of constants (the narrow products' efficiencies) records where each entry came from.
        parts = [f"{key.split('.', 1)[1]}: {src}" for key, src in c.sources.items() if key.startswith(name + ".")]
        out[name] = {"value": getattr(c, name), "from": c.sources.get(name) or "; ".join(parts) or "shipped"}
    return out


def render_loo(doc: dict[str, Any]) -> Iterator[str]:
    yield "Leave one device out: each device's rows predicted with every constant chosen from data re-derived"
    yield "without that device (bench/loo.py, docs/decisions/0027); in-sample = the shipped constants"
    yield (
        f"{'source':<15}{'family':<22}{'device':<21}{'count':>7}{'in-sample':>11}{'LOO':>8}{'p90 in':>9}{'p90 LOO':>9}"
        f"{'bias LOO':>10}"
    )
    for r in doc["rows"]:
        i, o = r["in_sample"], r["loo"]
        yield (
            f"{r['source']:<15}{r['family']:<22}{r['device']:<21}{r['count']:>7}{i['median_ape']:>11.1%}"
            f"{o['median_ape']:>8.1%}{i['p90_ape']:>9.1%}{o['p90_ape']:>9.1%}{o['bias']:>+10.1%}"
        )
    worst: dict[str, dict[str, Any]] = {}
    for r in doc["rows"]:
        if r["family"] not in worst or r["loo"]["median_ape"] > worst[r["family"]]["loo"]["median_ape"]:
            worst[r["family"]] = r
    yield ""
    yield "Worst device per family (LOO median):"
    for family, r in worst.items():
        devices = sorted({x["device"] for x in doc["rows"] if x["family"] == family})
        note = "" if len(devices) > 1 else "  (one device has this family)"
        yield f"  {family:<22}{r['loo']['median_ape']:>7.1%}  {r['device']} ({r['source']}){note}"
    yield ""
    yield "Constants per fold (value; the devices it was derived from):"
    for name in doc["constants"]["shipped"]:
        cells = []
        for fold, values in doc["constants"].items():
            v, src = values[name]["value"], values[name]["from"]
            if v is None:
                shown = "none"
            elif isinstance(v, (tuple, list)):  # the narrow products' efficiencies: (key, value) pairs
                shown = ", ".join(f"{key} {value:g}" for key, value in v)
            else:
                shown = (
                    f"{v * 1e6:.2f} µs"
                    if name.endswith("_s")
                    else f"{v:,.0f}"
                    if name.endswith("_cycles")
                    else f"{v:g}"
                )
            cells.append(f"{fold}: {shown}" + ("" if fold == "shipped" else f" [{src}]"))
        yield f"  {name}"
        for cell in cells:
            yield f"    {cell}"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def render(rows: Sequence[dict[str, Any]]) -> Iterator[str]:
    yield "Ridgeline against measured timings, per catalogue profile; error = predicted / measured − 1"
    yield f"{'source':<15}{'family':<22}{'device':<15}{'count':>7}{'median':>9}{'p90':>9}{'bias':>9}"
    for r in rows:
        yield (
            f"{r['source']:<15}{r['family']:<22}{r['device']:<15}{r['count']:>7}{r['median_ape']:>9.1%}"
            f"{r['p90_ape']:>9.1%}{r['bias']:>+9.1%}"
        )
    for r in rows:
        yield ""
        yield f"{r['source']} / {r['family']} / {r['device']}: worst {len(r['worst'])}"
        for w in r["worst"]:
            yield (
                f"  {w['case']:<52} measured {_us(w['measured_s']):>14}  predicted {_us(w['predicted_s']):>14}"
                f"  {w['error']:+.0%}"
            )
    yield ""
    yield "Data: " + "; ".join(SOURCES.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validate", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help=f"validation data directory (default {DATA_DIR})")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON to this path")
    parser.add_argument("--worst", type=int, default=5, help="worst cases listed per family (default 5)")
    parser.add_argument(
        "--leave-one-device-out",
        action="store_true",
        help="re-derive every constant chosen from data without each device in turn and print both figures",
    )
    args = parser.parse_args(argv)
    if args.leave_one_device_out:
        try:
            doc = leave_one_device_out(args.data)
        except MissingData as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for line in render_loo(doc):
            print(line)
        if args.json is not None:
            out = {"rows": doc["rows"], "constants": doc["constants"]}
            args.json.write_text(json.dumps(out, indent=2, allow_nan=False) + "\n")
        return 0
    try:
        rows = report(args.data, args.worst)
    except MissingData as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in render(rows):
        print(line)
    if args.json is not None:
        doc = {
            "hardware": HARDWARE,
            "scopes": {
                name: {"launch_overhead_s": sc.launch_s, "call_s": sc.call_s, "floor_s": sc.floor_s}
                for name, sc in SCOPES.items()
            },
            "sources": SOURCES,
            "families": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
