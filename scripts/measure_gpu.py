"""Time GEMMs and prefill attention on a lent NVIDIA GPU, in aiconfigurator's table format, for `bench.heldout`.

Run on the GPU machine (PyTorch and a CUDA GPU there; nothing of Ridgeline's is imported):

    python3 scripts/measure_gpu.py OUT_DIR [--budget-s 200]

It writes, into OUT_DIR:
- `gemm_perf.csv`: bf16 GEMMs (`torch.matmul`, cuBLAS: the kernel TensorRT-LLM's PyTorch-flow bf16 `Linear` runs) and
  fp8 per-tensor GEMMs (`torch._scaled_mm`, cuBLASLt), at a deterministic sample of the shapes of
  `validation/aiconfigurator-b200/gemm_perf.csv`; the fp8 rows time the product alone (`gemm_dtype` fp8_gemm_only) and
  with PyTorch's dynamic per-tensor quantisation of the bf16 input in the timed call (`fp8_torch_quant`);
- `context_attention_perf.csv`: causal bf16 prefill through `scaled_dot_product_attention` with the cuDNN backend
  (`kernel_source` cudnn) and the FlashAttention-2 backend (flash), at a sample of the full-attention rows of
  `validation/aiconfigurator-b200/context_attention_perf.csv`;
- `generation_attention_perf.csv`: decode attention (one query against the cache) through the FlashAttention-2
  backend at a sample of the B200 generation table's full-attention bf16 rows (`--only decode` times these alone);
- `device.json`: what the device and the driver report, and the two ceilings (a device-to-device copy, an
  8192³ bf16 product) measured first.

Timing follows aiconfigurator's collector (validation/aiconfigurator-b200/README.md): a CUDA graph of repeated calls,
replayed; GEMMs cycle copies of the weight past the L2, attention replays one call on the same buffers. The median of
the replays over the calls in the graph is a row's latency, in milliseconds. Inputs are random (never zeros).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # PyTorch is there on the GPU machine only; the helpers above it are tested without it
    import torch

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "validation" / "aiconfigurator-b200"
GEMM_COLUMNS = ["framework", "version", "device", "op_name", "kernel_source", "gemm_dtype", "m", "n", "k", "latency"]
ATTENTION_COLUMNS = ["framework", "version", "device", "op_name", "kernel_source", "batch_size", "isl", "num_heads",
                     "num_key_value_heads", "head_dim", "window_size", "beam_width", "attn_dtype", "kv_cache_dtype",
                     "step", "latency"]  # fmt: skip
FP8_MAX = 448.0  # e4m3's largest finite value (OCP FP8 formats specification)


def rows(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt") as f:
        return list(csv.DictReader(f))


def sample(items: list[Any], count: int) -> list[Any]:
    """`count` items spread evenly over `items` (deterministic)."""
    if len(items) <= count:
        return items
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def graph_time(calls: list[Any], replays: int = 5) -> float:
    """Median seconds per call of a CUDA graph that runs `calls` in order, over `replays` replays (3 for a graph
    of one call)."""
    import torch

    replays = 3 if len(calls) == 1 else replays
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls[:2]:  # warm-up outside the graph: cuBLAS picks its algorithm, workspaces get allocated
            call()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del graph
    times.sort()
    return float(times[len(times) // 2] / len(calls))


def copies_for(nbytes: int, l2: int) -> int:
    """Weight copies so that one pass over them is at least three L2s (at most 16)."""
    return max(1, min(16, math.ceil(3 * l2 / max(nbytes, 1))))


def repeats(m: int, n: int, k: int, copies: int) -> int:
    """Passes over the weight copies in one graph: at least 8 calls, or one pass for a product of milliseconds."""
    guess_s = 2 * m * n * k / 6e14 + 2 * (m * k + k * n + m * n) / 3e12  # a rough H100-class rate, to bound the run
    return 1 if guess_s > 2e-3 else max(1, math.ceil(8 / copies))


def fp8_gemm(a: torch.Tensor, w: torch.Tensor, one: torch.Tensor) -> torch.Tensor:
    import torch

    return torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def quant_fp8_gemm(x: torch.Tensor, w: torch.Tensor, one: torch.Tensor) -> torch.Tensor:
    """Dynamic per-tensor quantisation of the bf16 input (its absolute maximum to e4m3's), then the fp8 product."""
    import torch

    scale = x.abs().amax().float() / FP8_MAX
    return torch._scaled_mm((x / scale).to(torch.float8_e4m3fn), w.t(), scale_a=scale, scale_b=one,
                            out_dtype=torch.bfloat16)  # fmt: skip


def ceilings(l2: int) -> dict[str, float]:
    """An 8192³ bf16 product, then a 2 GiB device-to-device copy (bytes read plus written). The products come first
    and run for about a second, so the clocks have left idle before either is timed."""
    import torch

    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(500):
        torch.matmul(a, b)
    mm_s = graph_time([partial(torch.matmul, a, b)] * 5)
    n = 1 << 30  # 2 GiB of bf16 each way
    src = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    copy_s = graph_time([partial(dst.copy_, src)] * 10)
    torch.cuda.empty_cache()
    return {"copy_bytes_per_s": 2 * n * 2 / copy_s, "bf16_8192_flops_per_s": 2 * 8192**3 / mm_s}


def gemm_rows(device: str, l2: int, deadline: float, count: int, fp8_count: int, write: Any) -> int:
    import torch

    shapes = sorted({(int(r["m"]), int(r["n"]), int(r["k"])) for r in rows(TABLES / "gemm_perf.csv.gz")
                     if r["gemm_dtype"] == "bfloat16"})  # fmt: skip
    done = 0
    version = torch.__version__
    for m, n, k in sample(shapes, count):
        if time.monotonic() > deadline:
            break
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        ws = [torch.randn(k, n, dtype=torch.bfloat16, device="cuda") for _ in range(copies_for(k * n * 2, l2))]
        calls = [partial(torch.matmul, x, w) for w in ws] * repeats(m, n, k, len(ws))
        write(["PyTorch", version, device, "gemm", "cublas", "bfloat16", m, n, k, graph_time(calls) * 1e3])
        done += 1
    torch.cuda.empty_cache()
    fp8 = torch.float8_e4m3fn
    one = torch.ones((), dtype=torch.float32, device="cuda")
    for m, n, k in sample(shapes, fp8_count):
        if time.monotonic() > deadline:
            break
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        xq = (x.float() / (x.abs().amax().float() / FP8_MAX)).to(fp8)
        wts = [(torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.1).to(fp8)
               for _ in range(copies_for(k * n, l2))]  # fmt: skip
        reps = repeats(m, n, k, len(wts))

        try:
            only = graph_time([partial(fp8_gemm, xq, w, one) for w in wts] * reps)
            with_quant = graph_time([partial(quant_fp8_gemm, x, w, one) for w in wts] * reps)
        except RuntimeError as error:
            print(f"fp8 {m}x{n}x{k}: {error}", file=sys.stderr)
            continue
        write(["PyTorch", version, device, "gemm", "cublaslt", "fp8_gemm_only", m, n, k, only * 1e3])
        write(["PyTorch", version, device, "gemm", "cublaslt", "fp8_torch_quant", m, n, k, with_quant * 1e3])
        done += 1
    torch.cuda.empty_cache()
    return done


def attention_rows(device: str, deadline: float, count: int, write: Any) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    table = [
        r
        for r in rows(TABLES / "context_attention_perf.csv.gz")
        if r["attn_dtype"] == "bfloat16" and r["kv_cache_dtype"] == "bfloat16" and int(r["window_size"]) == 0
    ]
    configs = sorted({(int(r["batch_size"]), int(r["isl"]), int(r["num_heads"]), int(r["num_key_value_heads"]),
                       int(r["head_dim"])) for r in table})  # fmt: skip
    configs = [c for c in configs if c[4] <= 256]  # the cuDNN and flash backends stop at head_dim 256
    done = 0
    for b, s, h, kvh, d in sample(configs, count):
        if time.monotonic() > deadline:
            break
        q = torch.randn(b, h, s, d, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(b, kvh, s, d, dtype=torch.bfloat16, device="cuda")
        v = torch.randn(b, kvh, s, d, dtype=torch.bfloat16, device="cuda")
        for source, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    t = graph_time([partial(sdpa, q, k, v, is_causal=True, enable_gqa=kvh != h)] * 3)
            except RuntimeError as error:
                print(f"attention {source} b{b} s{s} h{h}/{kvh} d{d}: {str(error)[:200]}", file=sys.stderr)
                if kvh == h:
                    continue
                # A backend without grouped heads: K and V repeated to every query head (more bytes read).
                source += "_expanded"
                ke, ve = k.repeat_interleave(h // kvh, dim=1), v.repeat_interleave(h // kvh, dim=1)
                try:
                    with sdpa_kernel(backend):
                        t = graph_time([partial(sdpa, q, ke, ve, is_causal=True)] * 3)
                except RuntimeError as error2:
                    print(f"  expanded: {str(error2)[:200]}", file=sys.stderr)
                    continue
            write(["PyTorch", torch.__version__, device, "context_attention", source, b, s, h, kvh, d, 0, 1,
                   "bfloat16", "bfloat16", 0, t * 1e3])  # fmt: skip
        done += 1
    torch.cuda.empty_cache()
    return done


def decode_rows(device: str, deadline: float, count: int, write: Any) -> int:
    """One new token per sequence against `step` cached ones and itself: `scaled_dot_product_attention` with a single
    query over contiguous K and V (FlashAttention-2's split-KV kernel), at a sample of the full-attention bf16 rows
    of `validation/aiconfigurator-b200/generation_attention_perf.csv` whose K and V fit in 16 GB."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    table = [
        r
        for r in rows(TABLES / "generation_attention_perf.csv.gz")
        if r["attn_dtype"] == "bfloat16" and r["kv_cache_dtype"] == "bfloat16" and int(r["window_size"]) == 0
    ]
    configs = sorted({(int(r["batch_size"]), int(r["step"]) + 1, int(r["num_heads"]), int(r["num_key_value_heads"]),
                       int(r["head_dim"])) for r in table})  # fmt: skip
    configs = [c for c in configs if 2 * 2 * c[0] * c[1] * c[3] * c[4] <= 16e9 and c[4] <= 256]
    done = 0
    for b, kv, h, kvh, d in sample(configs, count):
        if time.monotonic() > deadline:
            break
        q = torch.randn(b, h, 1, d, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(b, kvh, kv, d, dtype=torch.bfloat16, device="cuda")
        v = torch.randn(b, kvh, kv, d, dtype=torch.bfloat16, device="cuda")
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                t = graph_time([partial(sdpa, q, k, v, enable_gqa=kvh != h)] * 3)
        except RuntimeError as error:
            print(f"decode b{b} kv{kv} h{h}/{kvh} d{d}: {str(error)[:200]}", file=sys.stderr)
            continue
        write(["PyTorch", torch.__version__, device, "generation_attention", "flash", b, 1, h, kvh, d, 0, 1,
               "bfloat16", "bfloat16", kv - 1, t * 1e3])  # fmt: skip
        done += 1
    torch.cuda.empty_cache()
    return done


def writer(path: Path, columns: list[str]) -> Any:
    f = path.open("w", newline="")
    out = csv.writer(f)
    out.writerow(columns)

    def write(row: list[Any]) -> None:
        out.writerow(row)
        f.flush()

    return write


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget-s", type=float, default=200.0, help="seconds for the GEMMs and attention together")
    parser.add_argument("--gemms", type=int, default=1500)
    parser.add_argument("--fp8", type=int, default=400)
    parser.add_argument("--attention", type=int, default=300)
    parser.add_argument("--decode", type=int, default=300)
    parser.add_argument("--only", choices=["decode"], help="time only this part (and the ceilings)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    query = "--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu,driver_version"
    smi = subprocess.run(["nvidia-smi", query, "--format=csv"], capture_output=True, text=True)
    info: dict[str, Any] = {"name": props.name, "sms": props.multi_processor_count, "l2_bytes": l2,
                            "memory_bytes": props.total_memory, "torch": torch.__version__,
                            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                            "nvidia_smi_before": smi.stdout}  # fmt: skip
    start = time.monotonic()
    info.update(ceilings(l2))
    print(json.dumps(info, indent=1), flush=True)
    device = f"NVIDIA {props.name.removeprefix('NVIDIA ')}"
    budget = args.budget_s
    if args.only is None:
        gemm_write = writer(args.out / "gemm_perf.csv", GEMM_COLUMNS)
        n_gemm = gemm_rows(device, l2, start + 0.5 * budget, args.gemms, args.fp8, gemm_write)
        print(f"gemm shapes {n_gemm} in {time.monotonic() - start:.0f} s", flush=True)
        att_write = writer(args.out / "context_attention_perf.csv", ATTENTION_COLUMNS)
        n_att = attention_rows(device, start + 0.8 * budget, args.attention, att_write)
        print(f"attention configs {n_att} in {time.monotonic() - start:.0f} s", flush=True)
    decode_write = writer(args.out / "generation_attention_perf.csv", ATTENTION_COLUMNS)
    n_decode = decode_rows(device, start + budget, args.decode, decode_write)
    print(f"decode configs {n_decode} in {time.monotonic() - start:.0f} s", flush=True)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                          "--format=csv"], capture_output=True, text=True)  # fmt: skip
    info["nvidia_smi_after"] = smi.stdout
    (args.out / "device.json").write_text(json.dumps(info, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
