"""Ridgeline's predictions against timings measured on real A100s (issue 3's accuracy report).

    .venv/bin/python -m bench.validate [--data PATH] [--json PATH] [--worst 5]

Loads the measured tables in `../shared/validation` (relative to the repository root; never copied into the
repository), builds each measured op as a `schemas.ops` object, evaluates it on the `a100-sxm-80gb` catalogue
profile through the service's own mapping (`service.estimates.service.to_core` and `evaluate`), and prints, per
source and op family, the number of points, the median and p90 absolute percentage error, the bias (median signed
error: + means Ridgeline predicts slower than measured) and the worst cases.

The data and their licences (see `../shared/validation/README.md`):
- aiconfigurator-a100: NVIDIA ai-dynamo/aiconfigurator @095f58a5, Apache-2.0 (TensorRT-LLM 1.0.0 kernels, bf16).
- vidur: microsoft/vidur @7d475133, MIT (fp16 Sarathi-Serve layers, torch profiler kernel sums).
- llmcompass-a100: PrincetonUniversity/LLMCompass @2e015fd2, BSD-3-Clause (PyTorch fp16, host wall-clock).

Timing scopes differ (the README's table). Each is honoured by fixed costs, never by a per-shape fit: the per-kernel
fixed cost goes in as the estimate option `launch_overhead_s`, and a measured call that runs more kernels than the
op's model has its own fixed cost on top (`Scope`):
- aiconfigurator (CUDA-graph replays) times kernels only, with the graph's gaps between them: the smallest bf16
  GEMMs in its table (m ≤ 16, n = k = 32: no measurable work) take 2.5 µs, the shortest a kernel runs there.
- vidur (torch-profiler sums of kernel durations) has no gaps at all: its shortest kernels, the residual `add` of
  one or two tokens, take 1-2 µs; 2 µs per kernel.
- LLMCompass times `op(); torch.cuda.synchronize()` on the host: launch and synchronisation come on top of the
  kernel. Each of its series flattens at small sizes, where the GPU does no measurable work: that plateau is the
  call's fixed cost (softmax 13.1 µs, within the README's ~10-20 µs; its layer norm and GELU series sit at 52 and
  47 µs from 128 KB to 8 MB, a heavier host path for those two calls).
- TensorRT-LLM's attention op (aiconfigurator) is several kernels (QKV pre-processing with RoPE and the KV-cache
  append, the attention kernel, workspace set-up, the split-KV combine) in one call; its smallest shapes take
  13.3 µs (context, 1 × 16 tokens) and 10.4 µs (generation, 1 sequence, 2 cached tokens). The part of that
  plateau the modelled kernels do not cover is the call's fixed cost.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import roofline
from hardware_db import load_hardware
from schemas.estimates import EstimateContext, Options
from schemas.hardware import HardwareCreate
from schemas.ops import Activation, Attention, Elementwise, Embedding, LayerNorm, Matmul, Op, RmsNorm, Rotary, Softmax
from service.estimates.service import evaluate, to_core

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO.parent / "shared" / "validation"
HARDWARE = "a100-sxm-80gb"


@dataclass(frozen=True)
class Scope:
    """What one measured number covers: `launch_s` per kernel (the `launch_overhead_s` option) and `call_s` once
    per measured call, for the kernels of the call that the op's model does not have."""

    launch_s: float
    call_s: float = 0.0


KERNEL_FLOOR_S = 2.5e-6  # aiconfigurator: the shortest kernel in a CUDA-graph replay (1×32×32 GEMM)
SCOPES = {
    "aiconfigurator": Scope(KERNEL_FLOOR_S),
    # 13.3 µs plateau − the two modelled kernels (pre-processing, flash attention) at 2.5 µs each.
    "aiconfigurator-context": Scope(KERNEL_FLOOR_S, 13.3e-6 - 2 * KERNEL_FLOOR_S),
    # 10.4 µs plateau − the one modelled kernel (the decode kernel applies RoPE and appends K, V itself).
    "aiconfigurator-generation": Scope(KERNEL_FLOOR_S, 10.4e-6 - KERNEL_FLOOR_S),
    "vidur": Scope(2e-6),
    "llmcompass": Scope(13.1e-6),  # softmax 4096 × 32 (256 KB); matmul is the same eager call
    "llmcompass-layernorm": Scope(52e-6),  # 32 × 4096 … 4096 × 1024 all take 52-54 µs
    "llmcompass-gelu": Scope(47e-6),  # 1 K … 4 M elements all take 47-49 µs
}

SOURCES = {
    "aiconfigurator": "NVIDIA ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0): TensorRT-LLM 1.0.0 on A100-SXM4-80GB",
    "vidur": "microsoft/vidur @7d475133 (MIT): Sarathi-Serve fp16 layers on A100, torch-profiler kernel sums",
    "llmcompass": "PrincetonUniversity/LLMCompass @2e015fd2 (BSD-3-Clause): PyTorch fp16 on A100-80GB, host time",
}


class MissingData(RuntimeError):
    """The measured data is not where the validation expects it."""


@dataclass
class Part:
    """One op of a measured region, evaluated over arrays of its numeric fields (one element per measured row)."""

    op: Op
    overrides: dict[str, np.ndarray] = field(default_factory=dict)
    count: float = 1.0  # the region runs this op this many times


@dataclass
class Group:
    """Measured rows of one source and op family that share their op templates: evaluated in one call per part."""

    source: str
    family: str
    parts: list[Part]
    measured_s: np.ndarray
    labels: list[str]
    scope: str


@dataclass
class Result:
    source: str
    family: str
    measured_s: np.ndarray
    predicted_s: np.ndarray
    labels: list[str]

    @property
    def signed(self) -> np.ndarray:
        out: np.ndarray = (self.predicted_s - self.measured_s) / self.measured_s
        return out


def data_dir(path: Path | None = None) -> Path:
    """The validation data directory, or `MissingData` saying where it was looked for."""
    root = Path(path) if path is not None else DATA_DIR
    if not (root / "README.md").is_file():
        raise MissingData(
            f"measured validation data not found at {root} (expected ../shared/validation relative to the "
            f"repository root, with its README.md); it is never copied into the repository"
        )
    return root


def _csv_rows(path: Path, header: bool = True) -> list[dict[str, str]] | list[list[str]]:
    if not path.is_file():
        raise MissingData(f"missing validation file {path}")
    with path.open(newline="") as f:
        if header:
            return list(csv.DictReader(f))
        return [[cell.strip() for cell in row] for row in csv.reader(f) if row]


def _dict_rows(path: Path) -> list[dict[str, str]]:
    rows = _csv_rows(path, header=True)
    return [r for r in rows if isinstance(r, dict)]


def _list_rows(path: Path) -> list[list[str]]:
    rows = _csv_rows(path, header=False)
    return [r for r in rows if isinstance(r, list)]


def col(rows: Sequence[dict[str, str]], name: str) -> np.ndarray:
    return np.array([float(r[name]) for r in rows], dtype=np.float64)


# --- aiconfigurator ---------------------------------------------------------------------------------------------


def aiconfigurator(root: Path) -> list[Group]:
    base = root / "aiconfigurator-a100"
    groups: list[Group] = []
    gemm = [r for r in _dict_rows(base / "gemm_perf.csv") if r["gemm_dtype"] == "bfloat16"]
    m, n, k = col(gemm, "m"), col(gemm, "n"), col(gemm, "k")
    groups.append(
        Group(
            "aiconfigurator", "gemm",
            [Part(Matmul(m=1, n=1, k=1, dtype="bf16"), {"m": m, "n": n, "k": k})],
            col(gemm, "latency") * 1e-3,
            [f"m={a:.0f} n={b:.0f} k={c:.0f}" for a, b, c in zip(m, n, k, strict=True)], "aiconfigurator",
        )
    )  # fmt: skip
    for phase, family in (("context", "attention-context"), ("generation", "attention-generation")):
        rows = _dict_rows(base / f"{phase}_attention_perf.csv")
        rows = [r for r in rows if r["attn_dtype"] == "bfloat16" and r["kv_cache_dtype"] == "bfloat16"]
        for kvh in sorted({int(r["num_key_value_heads"]) for r in rows}):
            sub = [r for r in rows if int(r["num_key_value_heads"]) == kvh]
            b, h, d = col(sub, "batch_size"), col(sub, "num_heads"), col(sub, "head_dim")
            if phase == "context":
                # Causal prefill of batch_size sequences of isl tokens (step is 0).
                q = kv = col(sub, "isl")
            else:
                # One new token (isl = 1) against `step` cached tokens: it attends to those and to itself.
                q, kv = col(sub, "isl"), col(sub, "step") + col(sub, "isl")
            parts = attention_parts(phase, b, h, kvh, d, q, kv)
            labels = [
                f"b={x:.0f} h={y:.0f} kv_h={kvh} q={u:.0f} kv={v:.0f}" for x, y, u, v in zip(b, h, q, kv, strict=True)
            ]
            measured = col(sub, "latency") * 1e-3
            groups.append(Group("aiconfigurator", family, parts, measured, labels, f"aiconfigurator-{phase}"))
    return groups


XQA_MAX_GROUP = 32


def attention_parts(
    phase: str, b: np.ndarray, h: np.ndarray, kvh: int, d: np.ndarray, q: np.ndarray, kv: np.ndarray
) -> list[Part]:
    """The kernels of one TensorRT-LLM attention call (fused QKV in, RoPE and KV-cache append included).

    Context: a pre-processing kernel reads the fused QKV of the new tokens, rotates Q and K and writes Q and the
    new K, V into the cache (b·q·(h + 2·kv_h)·d elements in and out), then the fused flash-attention kernel.
    Generation: the decode kernel (masked MHA / XQA) applies RoPE and appends the one new K, V itself.
    """
    att = Attention(batch=1, heads=kvh, kv_heads=kvh, head_dim=128, q_len=1, kv_len=1, causal=True, dtype="bf16")
    values = {"batch": b, "heads": h, "head_dim": d, "q_len": q, "kv_len": kv}
    if phase == "generation":
        # TensorRT-LLM's XQA decode kernel shares one K/V head among at most XQA_MAX_GROUP query heads; larger groups
        # fall back to the masked-MHA kernel, one thread block per query head, each reading its K/V head: the
        # traffic of MHA. (The measured table's cliff: 32 query heads per K/V head run at GQA cost, 48 and more at
        # 20-75x it.) Described to the model as what that kernel reads: as many K/V heads as query heads.
        values["kv_heads"] = np.where(h / kvh > XQA_MAX_GROUP, h, kvh)
        att = att.model_copy(update={"kv_heads": 1})
    parts = [Part(att, values)]
    if phase == "context":
        pre = Elementwise(elements=1, inputs=1, outputs=1, flops_per_element=3.0, dtype="bf16")
        parts.append(Part(pre, {"elements": b * q * (h + 2 * kvh) * d}))
    return parts


# --- vidur -------------------------------------------------------------------------------------------------------

# Model families in vidur's table whose blocks differ from Llama's: Phi-2 uses LayerNorm (with bias), a GELU (tanh)
# MLP and a parallel attention/MLP block whose output is attention + MLP + residual (two residual adds per block,
# and no post-attention norm); the others are Llama-like (RMSNorm, SwiGLU, sequential block).
LAYERNORM_MODELS = ("phi-2",)


def vidur(root: Path) -> list[Group]:
    groups: list[Group] = []
    files = sorted((root / "vidur" / "compute" / "a100").glob("*/*/mlp.csv"))
    if not files:
        raise MissingData(f"no vidur A100 tables under {root / 'vidur' / 'compute' / 'a100'}")
    for path in files:
        model = path.parent.name
        rows = _dict_rows(path)
        t, tp = col(rows, "num_tokens"), col(rows, "num_tensor_parallel_workers")
        heads, kv_heads, hidden = col(rows, "n_head"), col(rows, "n_kv_head"), col(rows, "n_embd")
        ffn, vocab = col(rows, "n_expanded_embd"), col(rows, "vocab_size")
        gated = np.array([r["use_gated_mlp"] == "True" for r in rows])
        if len(set(gated.tolist())) != 1:
            raise ValueError(f"{path}: mixed gated and non-gated rows")
        g = 2.0 if gated[0] else 1.0
        hd = hidden / heads
        parallel_block = model.lower() in LAYERNORM_MODELS
        labels = [f"{model} T={a:.0f} tp={b:.0f}" for a, b in zip(t, tp, strict=True)]
        bias = ["bias"] if parallel_block else []

        def measured(op: str, rows: list[dict[str, str]] = rows) -> np.ndarray:
            return col(rows, f"time_stats.{op}.median") * 1e-3

        gemms = {
            "attn_pre_proj": (hidden, (heads + 2 * kv_heads) * hd / tp),
            "attn_post_proj": (heads * hd / tp, hidden),
            "mlp_up_proj": (hidden, g * ffn / tp),
            "mlp_down_proj": (ffn / tp, hidden),
        }
        for name, (kk, nn) in gemms.items():
            mm = Matmul(m=1, n=1, k=1, dtype="fp16", epilogue=bias)
            groups.append(
                Group(
                    "vidur", "gemm", [Part(mm, {"m": t, "n": nn, "k": kk})], measured(name), _tag(labels, name), "vidur"
                )
            )
        # Sarathi-Serve's own CUDA kernels (rms_norm, rotary_embedding, silu_and_mul, from vLLM) load one element per
        # thread per loop trip; so does PyTorch's index_select behind the embedding. Phi-2's LayerNorm and GELU and
        # the residual add are PyTorch's vectorized kernels.
        norm: Op = (
            LayerNorm(rows=1, cols=1, dtype="fp16")
            if parallel_block
            else RmsNorm(rows=1, cols=1, dtype="fp16", memory_access="scalar")
        )
        family = "layernorm" if parallel_block else "rmsnorm"
        norms = ["input_layernorm"] + ([] if parallel_block else ["post_attention_layernorm"])
        for name in norms:
            groups.append(
                Group(
                    "vidur", family, [Part(norm, {"rows": t, "cols": hidden})], measured(name), _tag(labels, name),
                    "vidur",
                )
            )  # fmt: skip
        rope = Rotary(tokens=1, heads=1, head_dim=1, dtype="fp16", memory_access="scalar")
        groups.append(
            Group(
                "vidur", "rope",
                [Part(rope, {"tokens": t, "heads": (heads + kv_heads) / tp, "head_dim": hd})],
                measured("attn_rope"), _tag(labels, "attn_rope"), "vidur",
            )
        )  # fmt: skip
        act = (
            Activation(elements=1, function="swiglu", dtype="fp16", memory_access="scalar")
            if gated[0]
            else Activation(elements=1, function="gelu_tanh", dtype="fp16")
        )
        groups.append(
            Group(
                "vidur", "activation", [Part(act, {"elements": t * ffn / tp})], measured("mlp_act"),
                _tag(labels, "mlp_act"), "vidur",
            )
        )  # fmt: skip
        add = Elementwise(elements=1, inputs=2, outputs=1, flops_per_element=1.0, dtype="fp16")
        groups.append(
            Group(
                "vidur", "elementwise",
                [Part(add, {"elements": t * hidden}, count=2.0 if parallel_block else 1.0)],
                measured("add"), _tag(labels, "add"), "vidur",
            )
        )  # fmt: skip
        emb = Embedding(tokens=1, hidden=1, vocab=1, dtype="fp16", memory_access="scalar")
        groups.append(
            Group(
                "vidur", "embedding", [Part(emb, {"tokens": t, "hidden": hidden, "vocab": vocab / tp})],
                measured("emb"), _tag(labels, "emb"), "vidur",
            )
        )  # fmt: skip
    return groups


def _tag(labels: list[str], op: str) -> list[str]:
    return [f"{label} {op}" for label in labels]


# --- LLMCompass --------------------------------------------------------------------------------------------------


def _number(text: str, unit: str) -> float:
    text = text.strip()
    if not text.endswith(unit):
        raise ValueError(f"expected a value in {unit}, got {text!r}")
    return float(text[: -len(unit)])


def llmcompass(root: Path) -> list[Group]:
    base = root / "llmcompass-a100"
    rows = _list_rows(base / "matmul_A100.csv")
    m, n, k = (np.array([float(r[i]) for r in rows]) for i in range(3))
    groups = [
        Group(
            "llmcompass", "gemm", [Part(Matmul(m=1, n=1, k=1, dtype="fp16"), {"m": m, "n": n, "k": k})],
            np.array([_number(r[3], "ms") for r in rows]) * 1e-3,
            [f"m={a:.0f} n={b:.0f} k={c:.0f}" for a, b, c in zip(m, n, k, strict=True)], "llmcompass",
        )
    ]  # fmt: skip
    # PyTorch's softmax over rows of at most 1024 elements (≤ 4 KB) is its one-pass warp softmax (online max and
    # sum in registers); longer rows go to its block softmax, which reads the input three times (max, sum of
    # exponentials, normalise) and writes once (aten/src/ATen/native/cuda/SoftMax.cu, host_softmax).
    rows = _list_rows(base / "softmax_A100.csv")
    r_, c_, thr = (np.array([float(r[i]) for r in rows]) for i in range(3))
    for online in (True, False):
        pick = (c_ <= 1024) == online
        groups.append(
            Group(
                "llmcompass", "softmax",
                [Part(Softmax(rows=1, cols=1, dtype="fp16", online=online), {"rows": r_[pick], "cols": c_[pick]})],
                (r_ * c_ / (thr * 1e9))[pick],
                [f"softmax {a:.0f}×{b:.0f}" for a, b in zip(r_[pick], c_[pick], strict=True)], "llmcompass",
            )
        )  # fmt: skip
    rows = _list_rows(base / "layernorm_A100.csv")
    r_, c_, thr = (np.array([float(r[i]) for r in rows]) for i in range(3))
    groups.append(
        Group(
            "llmcompass", "layernorm", [Part(LayerNorm(rows=1, cols=1, dtype="fp16"), {"rows": r_, "cols": c_})],
            r_ * c_ / (thr * 1e9), [f"layernorm {a:.0f}×{b:.0f}" for a, b in zip(r_, c_, strict=True)],
            "llmcompass-layernorm",
        )
    )  # fmt: skip
    rows = _list_rows(base / "gelu_A100.csv")
    e, thr = (np.array([float(r[i]) for r in rows]) for i in range(2))
    groups.append(
        Group(
            "llmcompass", "activation", [Part(Activation(elements=1, function="gelu", dtype="fp16"), {"elements": e})],
            e / (thr * 1e9), [f"gelu {a:.0f}" for a in e], "llmcompass-gelu",
        )
    )  # fmt: skip
    return groups


# --- evaluation --------------------------------------------------------------------------------------------------


def load(root: Path | None = None) -> list[Group]:
    """Every measured group, from the three sources."""
    base = data_dir(root)
    return [*aiconfigurator(base), *vidur(base), *llmcompass(base)]


def hardware(launch_s: float = KERNEL_FLOOR_S, spec: HardwareCreate | None = None) -> roofline.Hardware:
    """The catalogue profile as the service maps it, with the per-kernel fixed cost of a timing scope."""
    if spec is None:
        spec = next(h for h in load_hardware() if h.slug == HARDWARE)
    ctx = EstimateContext(hardware=HARDWARE, options=Options(launch_overhead_s=launch_s))
    return to_core(spec, ctx)


def predict(group: Group, hw: roofline.Hardware) -> np.ndarray:
    """Seconds for every row of a group: its kernels on `hw` (whose launch cost is the scope's) and the call's."""
    total = np.zeros_like(group.measured_s)
    for part in group.parts:
        est = evaluate(hw, part.op, part.overrides)
        total = total + part.count * np.broadcast_to(est.time_s, total.shape)
    out: np.ndarray = total + SCOPES[group.scope].call_s
    return out


def run(groups: Sequence[Group], spec: HardwareCreate | None = None) -> list[Result]:
    """Predict every group and pool the results per (source, family)."""
    if spec is None:
        spec = next(h for h in load_hardware() if h.slug == HARDWARE)
    cores = {name: hardware(scope.launch_s, spec) for name, scope in SCOPES.items()}
    pooled: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, list[str]]]] = {}
    for g in groups:
        predicted = predict(g, cores[g.scope])
        if not np.all(np.isfinite(predicted) & (predicted > 0)):
            raise ValueError(f"{g.source} / {g.family}: a prediction is not a positive finite time")
        pooled.setdefault((g.source, g.family), []).append((g.measured_s, predicted, g.labels))
    return [
        Result(
            source, family,
            np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            [label for p in parts for label in p[2]],
        )
        for (source, family), parts in pooled.items()
    ]  # fmt: skip


def summary(result: Result, worst: int = 5) -> dict[str, Any]:
    signed = result.signed
    ape = np.abs(signed)
    order = np.argsort(-ape)[:worst]
    return {
        "source": result.source,
        "family": result.family,
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
    """The accuracy report: one summary per source and op family."""
    return [summary(r, worst) for r in run(load(root))]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def render(rows: Sequence[dict[str, Any]]) -> Iterator[str]:
    yield f"Ridgeline ({HARDWARE}) against measured A100 timings; error = predicted / measured − 1"
    yield f"{'source':<15}{'family':<22}{'count':>7}{'median':>9}{'p90':>9}{'bias':>9}"
    for r in rows:
        yield (
            f"{r['source']:<15}{r['family']:<22}{r['count']:>7}{r['median_ape']:>9.1%}{r['p90_ape']:>9.1%}"
            f"{r['bias']:>+9.1%}"
        )
    for r in rows:
        yield ""
        yield f"{r['source']} / {r['family']}: worst {len(r['worst'])}"
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
    args = parser.parse_args(argv)
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
            "scopes": {name: {"launch_overhead_s": sc.launch_s, "call_s": sc.call_s} for name, sc in SCOPES.items()},
            "sources": SOURCES,
            "families": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
