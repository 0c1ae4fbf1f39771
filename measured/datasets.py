"""Measured datasets as Ridgeline ops: the parsers of the tables in the repository's `validation/` folder, shared by
the accuracy report (`python -m bench.validate`) and the importer (`ridgeline benchmarks import`).

Each parser turns a table into `Group`s: measured rows of one source and op family whose ops share a template,
with the sizes as arrays (one element per row), so the core evaluates a whole group in one call. The data and their
licences: validation/README.md and each source's validation/<source>/README.md. A table `name.csv` may be stored
gzip-compressed as `name.csv.gz`: `resolve` and `open_text` accept either name.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from schemas.ops import (
    Activation,
    Attention,
    Elementwise,
    Embedding,
    LayerNorm,
    Matmul,
    MoeLayer,
    Op,
    RmsNorm,
    Rotary,
    Softmax,
)

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "validation"


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
    device: str = "a100-sxm-80gb"  # the catalogue profile the rows were measured on


def data_dir(path: Path | None = None) -> Path:
    """The validation data directory, or `MissingData` saying where it was looked for."""
    root = Path(path) if path is not None else DATA_DIR
    if not (root / "README.md").is_file():
        raise MissingData(f"measured validation data not found at {root} (expected a folder with its README.md)")
    return root


def resolve(path: Path) -> Path:
    """`path` itself, or its gzip-compressed copy `path.gz`; `MissingData` if neither is a file."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    raise MissingData(f"missing validation file {path} (or {path.name}.gz)")


def open_text(path: Path, errors: str = "strict") -> io.TextIOWrapper:
    """A table as text, decompressed when it is stored as `.gz` (found by `resolve`)."""
    found = resolve(path)
    if found.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(found, "rb"), encoding="utf-8", errors=errors, newline="")
    return io.TextIOWrapper(found.open("rb"), encoding="utf-8", errors=errors, newline="")


def tables(folder: Path, pattern: str) -> list[Path]:
    """The tables under `folder` matching `pattern` (e.g. `*/*/mlp.csv`), stored plain or as `.gz`, sorted."""
    found = set(folder.glob(pattern)) | {p.with_name(p.name[:-3]) for p in folder.glob(pattern + ".gz")}
    return sorted(found)


def _csv_rows(path: Path, header: bool = True) -> list[dict[str, str]] | list[list[str]]:
    with open_text(path) as f:
        if header:
            return list(csv.DictReader(f))
        return [[cell.strip() for cell in row] for row in csv.reader(f) if row]


def dict_rows(path: Path) -> list[dict[str, str]]:
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
    groups = aiconfigurator_gemm(base / "gemm_perf.csv")
    for phase in ("context", "generation"):
        groups.extend(aiconfigurator_attention(base / f"{phase}_attention_perf.csv", phase))
    return groups


# The newer generations' aiconfigurator tables (TensorRT-LLM 1.3.0rc20, CUDA-graph replay as on A100): folder →
# catalogue profile. GB200 has collectives only (no GEMM or attention table), so it is not here.
AICONFIGURATOR_DEVICES = {
    "aiconfigurator-b200": "b200",
    "aiconfigurator-l40s": "l40s",
    "aiconfigurator-rtx-pro-6000": "rtx-pro-6000-server",
}


def aiconfigurator_generations(root: Path) -> list[Group]:
    """The bf16 and quantised GEMMs and the bf16 attention of every device in `AICONFIGURATOR_DEVICES`, each group
    tagged with it."""
    groups: list[Group] = []
    for folder, device in AICONFIGURATOR_DEVICES.items():
        base = root / folder
        found = aiconfigurator_gemm(base / "gemm_perf.csv")
        found.extend(aiconfigurator_quantized_gemm(base / "gemm_perf.csv"))
        found.extend(aiconfigurator_moe(base / "moe_perf.csv"))
        for phase in ("context", "generation"):
            found.extend(aiconfigurator_attention(base / f"{phase}_attention_perf.csv", phase, warm=True))
        for group in found:
            group.device = device
            if group.family.startswith("gemm"):
                group.scope = "aiconfigurator-gemm"  # the collector cycles weight copies (bench.validate's scope)
        groups.extend(found)
    return groups


def aiconfigurator_gemm(path: Path, rows: list[dict[str, str]] | None = None) -> list[Group]:
    """`gemm_perf.csv` (or those of its `rows` given): its bf16 rows (the quantised variants are not plain GEMMs)."""
    gemm = [r for r in (dict_rows(path) if rows is None else rows) if r["gemm_dtype"] == "bfloat16"]
    m, n, k = col(gemm, "m"), col(gemm, "n"), col(gemm, "k")
    return [
        Group(
            "aiconfigurator", "gemm",
            [Part(Matmul(m=1, n=1, k=1, dtype="bf16"), {"m": m, "n": n, "k": k})],
            col(gemm, "latency") * 1e-3,
            [f"m={a:.0f} n={b:.0f} k={c:.0f}" for a, b, c in zip(m, n, k, strict=True)], "aiconfigurator",
        )
    ]  # fmt: skip


# aiconfigurator's quantised GEMM rows (TensorRT-LLM's PyTorch-flow `Linear` with a quantised checkpoint: a bf16 input
# quantised inside the timed call, bf16 output; validation/aiconfigurator-b200/README.md) → the matmul's quantization
# and the report's family.
QUANTIZED_GEMMS = {"fp8": ("fp8_tensor", "gemm-fp8"), "fp8_block": ("fp8_block", "gemm-fp8-block"),
                   "nvfp4": ("nvfp4", "gemm-fp4")}  # fmt: skip


def aiconfigurator_quantized_gemm(path: Path) -> list[Group]:
    """`gemm_perf.csv`: its fp8 (dynamic per-tensor), fp8_block and nvfp4 rows, one group each the table has."""
    rows = dict_rows(path)
    groups = []
    for gemm_dtype, (quantization, family) in QUANTIZED_GEMMS.items():
        sub = [r for r in rows if r["gemm_dtype"] == gemm_dtype]
        if not sub:
            continue
        m, n, k = col(sub, "m"), col(sub, "n"), col(sub, "k")
        op = Matmul(m=1, n=1, k=1, dtype="bf16", quantization=quantization)
        labels = [f"m={a:.0f} n={b:.0f} k={c:.0f}" for a, b, c in zip(m, n, k, strict=True)]
        groups.append(Group("aiconfigurator", family, [Part(op, {"m": m, "n": n, "k": k})],
                            col(sub, "latency") * 1e-3, labels, "aiconfigurator"))  # fmt: skip
    return groups


# aiconfigurator's MoE rows (validation/aiconfigurator-b200/README.md): `moe_dtype` → the experts' quantization.
MOE_QUANTIZATIONS = {"bfloat16": "none", "fp8": "fp8_tensor", "fp8_block": "fp8_block", "nvfp4": "nvfp4",
                     "w4a8_mxfp4_mxfp8": "w4a8_mxfp4_mxfp8", "w4a16_mxfp4": "w4a16_mxfp4"}  # fmt: skip
# The MoE op's size fields → moe_perf.csv's columns.
MOE_COLUMNS = {"tokens": "num_tokens", "hidden": "hidden_size", "inter": "inter_size", "top_k": "topk",
               "experts": "num_experts", "tensor": "moe_tp_size", "expert": "moe_ep_size"}  # fmt: skip


def aiconfigurator_moe(path: Path) -> list[Group]:
    """`moe_perf.csv`: one rank's fused-MoE layer (TensorRT-LLM 1.3.0rc20, CUDA-graph replay). `num_tokens` are the
    tokens entering the layer; the rank holds num_experts / moe_ep_size experts of inter_size / moe_tp_size each.
    `*_nongated` kernel sources run an ungated FFN (squared ReLU); `balanced` routing is round-robin, `power_law_α`
    draws the experts' loads from a power law and times the most-loaded rank (`roofline.ops.moe`)."""
    rows = dict_rows(path)
    variants = sorted({(r["moe_dtype"], r["kernel_source"].endswith("nongated"), r["distribution"]) for r in rows})
    groups = []
    for moe_dtype, nongated, distribution in variants:
        sub = [r for r in rows if (r["moe_dtype"], r["kernel_source"].endswith("nongated"), r["distribution"])
               == (moe_dtype, nongated, distribution)]  # fmt: skip
        routing, alpha = ("balanced", 1.2) if distribution == "balanced" else ("power_law", float(distribution[10:]))
        op = MoeLayer(tokens=1, hidden=1, inter=1, top_k=1, experts=1, gated=not nongated,
                      quantization=MOE_QUANTIZATIONS[moe_dtype], routing=routing, alpha=alpha)  # fmt: skip
        sizes = {field: col(sub, column) for field, column in MOE_COLUMNS.items()}
        labels = [
            f"{moe_dtype} {distribution} T={r['num_tokens']} h={r['hidden_size']} i={r['inter_size']} "
            f"k={r['topk']} E={r['num_experts']} tp={r['moe_tp_size']} ep={r['moe_ep_size']}"
            + (" nongated" if nongated else "")
            for r in sub
        ]
        groups.append(Group("aiconfigurator", "moe", [Part(op, sizes)], col(sub, "latency") * 1e-3, labels,
                            "aiconfigurator"))  # fmt: skip
    return groups


def aiconfigurator_attention(
    path: Path, phase: str, warm: bool = False, rows: list[dict[str, str]] | None = None
) -> list[Group]:
    """`context_attention_perf.csv` (phase "context") or `generation_attention_perf.csv` ("generation"), or those of
    its `rows` given; `warm`: its collector replays each call on the same buffers (timing scope
    `aiconfigurator-<phase>-warm`). Its bf16 rows with a bf16 cache.

    `window_size` > 0 is sliding-window attention over that many keys (the local layers of gpt-oss, 128, and of
    Gemma-like models, 1 024 and 8 192; TensorRT-LLM's `attention_window_size`); 0 is full causal attention."""
    family = f"attention-{phase}"
    groups: list[Group] = []
    rows = dict_rows(path) if rows is None else rows
    rows = [r for r in rows if r["attn_dtype"] == "bfloat16" and r["kv_cache_dtype"] == "bfloat16"]
    variants = sorted({(int(r["num_key_value_heads"]), int(r.get("window_size") or 0)) for r in rows})
    for kvh, window in variants:
        sub = [r for r in rows if int(r["num_key_value_heads"]) == kvh and int(r.get("window_size") or 0) == window]
        b, h, d = col(sub, "batch_size"), col(sub, "num_heads"), col(sub, "head_dim")
        if phase == "context":
            # Causal prefill of batch_size sequences of isl tokens (step is 0).
            q = kv = col(sub, "isl")
        else:
            # One new token (isl = 1) against `step` cached tokens: it attends to those and to itself.
            q, kv = col(sub, "isl"), col(sub, "step") + col(sub, "isl")
        parts = attention_parts(phase, b, h, kvh, d, q, kv, window or None)
        suffix = f" w={window}" if window else ""
        labels = [
            f"b={x:.0f} h={y:.0f} kv_h={kvh} d={z:.0f} q={u:.0f} kv={v:.0f}{suffix}"
            for x, y, z, u, v in zip(b, h, d, q, kv, strict=True)
        ]
        measured = col(sub, "latency") * 1e-3
        scope = f"aiconfigurator-{phase}" + ("-warm" if warm else "")
        groups.append(Group("aiconfigurator", family, parts, measured, labels, scope))
    return groups


def attention_parts(
    phase: str,
    b: np.ndarray,
    h: np.ndarray,
    kvh: int,
    d: np.ndarray,
    q: np.ndarray,
    kv: np.ndarray,
    window: int | None = None,
) -> list[Part]:
    """The kernels of one TensorRT-LLM attention call (fused QKV in, RoPE and KV-cache append included).

    Context: a pre-processing kernel reads the fused QKV of the new tokens, rotates Q and K and writes Q and the
    new K, V into the cache (b·q·(h + 2·kv_h)·d elements in and out), then the fused flash-attention kernel.
    Generation: the decode kernel (masked MHA / XQA) applies RoPE and appends the one new K, V itself.
    """
    att = Attention(
        batch=1, heads=kvh, kv_heads=kvh, head_dim=128, q_len=1, kv_len=1, causal=True, dtype="bf16", window=window
    )
    values = {"batch": b, "heads": h, "head_dim": d, "q_len": q, "kv_len": kv}
    if phase == "generation":
        # TensorRT-LLM's decode kernels: XQA packs the query heads of a K/V head in one thread block, masked MHA
        # (groups over 32) runs a block per query head that re-reads the shared K/V (`roofline.ops`,
        # DECODE_MAX_PACKED_GROUP): the core picks between them from the shape.
        values["kv_heads"] = np.full_like(h, kvh)
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
    files = tables(root / "vidur" / "compute" / "a100", "*/*/mlp.csv")
    if not files:
        raise MissingData(f"no vidur A100 tables under {root / 'vidur' / 'compute' / 'a100'}")
    return [group for path in files for group in vidur_table(path)]


def vidur_table(path: Path) -> list[Group]:
    """One `<org>/<model>/mlp.csv`: the model is the name of its folder."""
    groups: list[Group] = []
    model = path.parent.name
    rows = dict_rows(path)
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
            Group("vidur", "gemm", [Part(mm, {"m": t, "n": nn, "k": kk})], measured(name), _tag(labels, name), "vidur")
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
    return [group for name in LLMCOMPASS_TABLES for group in llmcompass_table(base / f"{name}_A100.csv")]


def llmcompass_table(path: Path) -> list[Group]:
    """One of `matmul_A100.csv`, `softmax_A100.csv`, `layernorm_A100.csv`, `gelu_A100.csv`, by its name."""
    name = path.name.split("_")[0].lower()
    if name not in LLMCOMPASS_TABLES:
        raise ValueError(
            f"{path.name}: not an LLMCompass table ({', '.join(f'{t}_A100.csv' for t in LLMCOMPASS_TABLES)})"
        )
    return LLMCOMPASS_TABLES[name](path)


def _llmcompass_matmul(path: Path) -> list[Group]:
    rows = _list_rows(path)
    m, n, k = (np.array([float(r[i]) for r in rows]) for i in range(3))
    return [
        Group(
            "llmcompass", "gemm", [Part(Matmul(m=1, n=1, k=1, dtype="fp16"), {"m": m, "n": n, "k": k})],
            np.array([_number(r[3], "ms") for r in rows]) * 1e-3,
            [f"m={a:.0f} n={b:.0f} k={c:.0f}" for a, b, c in zip(m, n, k, strict=True)], "llmcompass",
        )
    ]  # fmt: skip


def _llmcompass_softmax(path: Path) -> list[Group]:
    # PyTorch's softmax over rows of at most 1024 elements (≤ 4 KB) is its one-pass warp softmax (online max and
    # sum in registers); longer rows go to its block softmax, which reads the input three times (max, sum of
    # exponentials, normalise) and writes once (aten/src/ATen/native/cuda/SoftMax.cu, host_softmax).
    rows = _list_rows(path)
    r_, c_, thr = (np.array([float(r[i]) for r in rows]) for i in range(3))
    groups = []
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
    return groups


def _llmcompass_layernorm(path: Path) -> list[Group]:
    rows = _list_rows(path)
    r_, c_, thr = (np.array([float(r[i]) for r in rows]) for i in range(3))
    return [
        Group(
            "llmcompass", "layernorm", [Part(LayerNorm(rows=1, cols=1, dtype="fp16"), {"rows": r_, "cols": c_})],
            r_ * c_ / (thr * 1e9), [f"layernorm {a:.0f}×{b:.0f}" for a, b in zip(r_, c_, strict=True)],
            "llmcompass-layernorm",
        )
    ]  # fmt: skip


def _llmcompass_gelu(path: Path) -> list[Group]:
    rows = _list_rows(path)
    e, thr = (np.array([float(r[i]) for r in rows]) for i in range(2))
    return [
        Group(
            "llmcompass", "activation", [Part(Activation(elements=1, function="gelu", dtype="fp16"), {"elements": e})],
            e / (thr * 1e9), [f"gelu {a:.0f}" for a in e], "llmcompass-gelu",
        )
    ]  # fmt: skip


LLMCOMPASS_TABLES: dict[str, Callable[[Path], list[Group]]] = {
    "matmul": _llmcompass_matmul,
    "softmax": _llmcompass_softmax,
    "layernorm": _llmcompass_layernorm,
    "gelu": _llmcompass_gelu,
}


# --- XLA ---------------------------------------------------------------------------------------------------------

# OpenXLA's measured matmul table (validation/xla): device column → catalogue profile, XLA element type → dtype.
XLA_DEVICES = {"sm_100_B200": "b200", "gfx950": "mi355x"}
XLA_TYPES = {"bf16": "bf16", "f16": "fp16", "f32": "fp32", "f8e4m3fn": "fp8", "f8e5m2": "fp8"}
XLA_FAMILIES = {"bf16": "gemm", "fp16": "gemm", "fp8": "gemm-fp8", "fp32": "gemm-fp32"}


def xla(root: Path) -> list[Group]:
    """`xla/matmul_perf_table.csv`: one group per device and type signature (`lhs x rhs -> out`). Its f32 rows run
    under XLA's default precision, as the table measured them (TF32 on B200, fp32 on gfx950: `Matmul.precision`)."""
    rows = dict_rows(root / "xla" / "matmul_perf_table.csv")
    by_key: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in rows:
        by_key.setdefault((r["device"], r["types"]), []).append(r)
    groups: list[Group] = []
    for (device, types), sub in by_key.items():
        operands, out = types.split("->")
        lhs, rhs = operands.split("x")
        dtype, out_dtype = XLA_TYPES[lhs], XLA_TYPES[out]
        if XLA_TYPES[rhs] != dtype:
            raise ValueError(f"xla: mixed operand types {types!r} are not one dtype")
        b, m, n, k = col(sub, "b"), col(sub, "m"), col(sub, "n"), col(sub, "k")
        op = Matmul(m=1, n=1, k=1, dtype=dtype, out_dtype=out_dtype)
        labels = [f"{types} b={w:.0f} m={x:.0f} n={y:.0f} k={z:.0f}" for w, x, y, z in zip(b, m, n, k, strict=True)]
        part = Part(op, {"m": m, "n": n, "k": k, "batch": b})
        measured = col(sub, "time_us") * 1e-6
        groups.append(Group("xla", XLA_FAMILIES[dtype], [part], measured, labels, "xla", XLA_DEVICES[device]))
    return groups
