"""Serving accuracy against measured deployments, shipped defaults, nothing calibrated.

    python -m bench.validate_serving [--json] [--limit N] [--rows]

- `validation/aiconfigurator-serving/silicon_sample.csv.gz`: B200 and GB200 deployments (TensorRT-LLM, SGLang,
  vLLM; aggregated and disaggregated) at a closed-loop concurrency, measured mean time to first token and per output
  token. Each row is simulated as a closed loop of that concurrency on the row's layout (tensor × attention
  data-parallel ranks × pipeline, expert parallelism; disaggregated: its prefill and decode pools) with the backend's
  own scheduler defaults (`ENGINES`). Rows whose model or device the catalogue cannot express are counted and
  listed, not dropped silently.
- `validation/trtllm-perf-overview/max_throughput.csv`: `trtllm-bench throughput` (every request queued at once)
  on B200, GB200 and RTX Pro 6000: simulated as a closed loop whose concurrency is the whole request count.

Beside each figure, the static model's error on the same rows (`/v1/estimate/inference`: the batch prefilled
together, its mean decode step).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import adapters
import roofline
from hardware_db import load_hardware, load_models
from measured.datasets import data_dir, open_text, resolve
from roofline.serving import EngineSpec, Requests, Scheduler
from schemas.estimates import EstimateContext

SILICON = "aiconfigurator-serving/silicon_sample.csv"
OVERVIEW = "trtllm-perf-overview/max_throughput.csv"
TARGETS = {"tpot": 0.15, "ttft": 0.25, "throughput": 0.15}

# Hugging Face ids and perf-overview names → catalogue slugs.
MODELS = {
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "llama-3.3-70b": "llama-3.1-70b",
    "llama-3.1-405b": "llama-3.1-405b", "llama-3.1-8b": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b", "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
    "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1", "nvidia/DeepSeek-R1-NVFP4": "deepseek-r1",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3", "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3",
    "llama-4-scout": "llama-4-scout", "llama-4-maverick": "llama-4-maverick",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5", "moonshotai/Kimi-K2.5": "kimi-k2.5",
}  # fmt: skip
DEVICES = {"b200_sxm": "b200", "b200": "b200", "gb200": "gb200", "rtx-pro-6000": "rtx-pro-6000-server"}

# Each backend's scheduler defaults, from its own sources:
# - TensorRT-LLM (PyTorch backend, `llmapi/llm_args.py`): max_num_tokens 8192, max_batch_size 2048, KV
#   `free_gpu_memory_fraction` 0.9, tokens_per_block 32, capacity scheduler GUARANTEED_NO_EVICT (reserve). Its
#   chunked prefill is off by default, but the measured deployments do not record their options and prompts of
#   8 192 tokens beside running requests cannot enter a budget of 8 192 whole: chunked, as `enable_chunked_prefill`.
# - vLLM V1 (`vllm/engine/arg_utils.py`): chunked prefill on, max_num_batched_tokens 8192 and max_num_seqs 1024 for
#   the API server on large-memory GPUs, gpu_memory_utilization 0.9, block size 16, preemption by recompute.
# - SGLang (`sglang/srt/server_args.py`): chunked_prefill_size 8192 on large GPUs, page size 1 (token-level pool),
#   mem_fraction_static ~0.85-0.9 (0.9 used), retraction (preemption) when the pool runs out.
ENGINES = {
    "trtllm": Scheduler("chunked", 2048, 8192, 0, 32, "reserve"),
    "vllm": Scheduler("chunked", 1024, 8192, 0, 16, "on_demand"),
    "sglang": Scheduler("chunked", 4096, 8192, 0, 1, "on_demand"),
}
PRECISIONS = {
    "fp8": roofline.Precision("fp8", "fp8", "fp8"),
    "fp4": roofline.Precision("fp4", "fp4", "fp8"),
    "bf16": roofline.Precision("bf16", "bf16", "bf16"),
    "": roofline.Precision("bf16", "bf16", "bf16"),
    "int4": roofline.Precision("int4", "bf16", "bf16"),
}
# 4-bit checkpoints whose self-attention block stays bf16 (`roofline.Precision.attention`): DeepSeek-R1's and
# Kimi-K2.5's NVFP4 ones (their `exclude_modules`, as aiconfigurator-core 0.12's `sdk/models/deepseek.py` reads them;
# its note: "Kimi-K2.5/R1 NVFP4 exclude the whole self_attn block") and gpt-oss's own (its model card: MXFP4 for the
# MoE weights only). DeepSeek-V3.1-NVFP4 excludes only q/kv and keeps o_proj NVFP4: not expressible by one attention
# type, left all fp4 (2 rows).
# FP8 checkpoints scaled in blocks (`roofline.Precision.fp8_scaling`): DeepSeek-V3's and DeepSeek-R1's, 128 × 128
# weight blocks and 1 × 128 activation groups (DeepSeek-V3 technical report §3.3, "fine-grained quantization"). The
# others' scaling is not on file (MiniMax-M2.5's config was not read): per tensor.
FP8_BLOCK_SCALED = {"deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"}
FP4_ATTENTION_BF16 = {
    "deepseek-ai/DeepSeek-R1", "nvidia/DeepSeek-R1-NVFP4", "deepseek-ai/DeepSeek-V3", "moonshotai/Kimi-K2.5",
    "openai/gpt-oss-120b",
}  # fmt: skip


@functools.cache
def _models() -> dict[str, roofline.Transformer]:
    return {m.slug: adapters.transformer(m, None) for m in load_models()}


@functools.cache
def _systems() -> dict[str, roofline.System]:
    out = {}
    for spec in load_hardware():
        out[spec.slug] = adapters.inference_system(spec, EstimateContext(hardware=spec.slug), None)
    return out


def _int(value: str, default: int = 1) -> int:
    return int(value) if value not in ("", None) else default


class Unexpressible(Exception):
    pass


def _engine(model: str, device: str, precision: str, backend: str, tp: int, adp: int, pp: int, ep: int,
            workers: int) -> EngineSpec:  # fmt: skip
    slug, dev = MODELS.get(model), DEVICES.get(device)
    if slug is None or slug not in _models():
        raise Unexpressible(f"model {model} not in the catalogue")
    if dev is None or dev not in _systems():
        raise Unexpressible(f"device {device} not in the catalogue")
    if precision not in PRECISIONS:
        raise Unexpressible(f"precision {precision}")
    m = _models()[slug]
    if m.moe is None:
        ep = 1
    par = roofline.Parallelism(tensor=tp, pipeline=pp, data=adp, expert=ep)
    prec = PRECISIONS[precision]
    if precision == "fp4" and model in FP4_ATTENTION_BF16:
        prec = replace(prec, attention="bf16")
    if precision == "fp8" and model in FP8_BLOCK_SCALED:
        prec = replace(prec, fp8_scaling="block")
    # Every backend runs its own all-reduce kernels by default (TensorRT-LLM's AUTO strategy, vLLM's and SGLang's
    # custom all-reduce): `tensor_all_reduce="custom"`.
    run = roofline.InferenceRun(
        m, _systems()[dev], roofline.Workload.uniform(1, 1, 1), par, prec, tensor_all_reduce="custom"
    )
    try:
        roofline.validate_inference(run)
    except roofline.InferenceConfigError as err:
        raise Unexpressible(f"layout: {err}") from None
    return EngineSpec(run, ENGINES[backend], workers)


def _simulate(front: EngineSpec, back: EngineSpec | None, isl: int, osl: int, concurrency: int, requests: int
              ) -> roofline.serving.ServingEstimate:  # fmt: skip
    sched = front.scheduler
    if sched.kind == "continuous" and isl > sched.max_num_batched_tokens:
        front = replace(front, scheduler=replace(sched, max_num_batched_tokens=isl))
    req = Requests(np.full(requests, isl), np.full(requests, osl), None, concurrency)
    try:
        return roofline.serving.estimate_serving(front, req, back=back)
    except roofline.serving.ServingConfigError as err:
        raise Unexpressible(f"engine: {err}") from None


def _static(front: EngineSpec, isl: int, osl: int, batch: int) -> tuple[float, float, tuple[float, float] | None]:
    """The static model: the batch prefilled together (time to first token), its mean decode step and that step's
    prediction interval."""
    run = replace(front.run, workload=roofline.Workload.uniform(max(1, batch), isl, osl))
    est = roofline.estimate_inference(run)
    return est.prefill.time_s, est.decode_mean_step_s or 0.0, est.decode_mean_step_s_band


def _inside(value: float, mean: float, factors: tuple[float, float] | None) -> bool | None:
    """Whether a measured value falls in an estimate's p10-p90 (factors on its mean); None without an interval."""
    return None if factors is None else mean * factors[0] <= value <= mean * factors[1]


def agg_layout(row: dict[str, str]) -> tuple[int, int, int]:
    """(tensor, attention data-parallel, expert) of an aggregated row. aiconfigurator's schema has tensor ×
    attention-DP = MoE tensor × MoE expert = the worker's GPUs (its `sdk/config_adapter/inferencex.py`,
    `_worker`). Some source files instead wrote the product of the engine's `tp` and `ep` as the width, with MoE
    tensor = `tp`: the same measurement appears once as tensor 4, MoE 1 × 4 and once as tensor 16, MoE 4 × 4 (and
    attention-DP 8, MoE 1 × 8 against attention-DP 64, MoE 8 × 8). A row whose MoE layout is both tensor- and
    expert-split with that product as its width, and whose expert group fits in its MoE tensor width (TensorRT-LLM
    and SGLang place the expert group inside the engine's GPUs), is read as that engine: MoE tensor GPUs with expert
    parallelism over them (docs/decisions/0024-serving-validation-columns.md). Tensor 8 as MoE 2 × 4 stays."""
    # 0 or empty: the dimension is not used (the gap-analysis files write attention-DP 0 for dense models).
    tp, adp, ep = (max(1, _int(row[k])) for k in ("tp_size", "attention_dp_size", "moe_ep_size"))
    moe_tp = max(1, _int(row["moe_tp_size"]))
    if row["backend"] != "vllm" and moe_tp > 1 and ep > 1 and moe_tp % ep == 0 and tp * adp == moe_tp * ep:
        return (moe_tp, 1, ep) if adp == 1 else (1, moe_tp, ep)
    return tp, adp, expert_group(tp, moe_tp, ep)


def _layout(row: dict[str, str]) -> str:
    """The deployment's layout as the table records it (its parallelism columns), to group rows by deployment."""
    keys = ("tp_size", "attention_dp_size", "pp_size", "moe_tp_size", "moe_ep_size")
    sides = ("",) if row["mode"] == "agg" else ("prefill_", "decode_")
    return " / ".join(",".join(row.get(side + k, "") for k in (*keys, "num_workers")) for side in sides)


def agg_replicas(row: dict[str, str], concurrency: int) -> int:
    """Aggregated workers: aiconfigurator's `batch_size` is the concurrency per attention rank of one worker,
    concurrency / (replicas × attention-DP) (`sdk/config_adapter/inferencex.py`, `_worker`); 1 where that is not a
    whole number (the gap-analysis files run 2 to 32 replicas of one layout; every other row has 1)."""
    per = _int(row["batch_size"], 0) * max(1, _int(row["attention_dp_size"]))
    return concurrency // per if per and concurrency % per == 0 and concurrency >= per else 1


def expert_group(tp: int, moe_tp: int, moe_ep: int) -> int:
    """The core's expert parallelism for a MoE layout of `moe_tp` × `moe_ep` GPUs. The core splits experts over the
    tensor group, or over an expert group; experts split wider than the attention's tensor group (attention data
    parallelism with tensor-parallel experts: tensor 1, attention-DP 8, MoE 8 × 1) are spread over that whole group
    as expert parallelism: the same weight bytes on each device, each expert whole on one device instead of split."""
    return moe_tp * moe_ep if moe_tp * moe_ep > tp else moe_ep


def silicon_rows(root: Path, limit: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    with open_text(resolve(root / SILICON)) as f:
        table = list(csv.DictReader(f))
    if limit:
        table = table[:: max(1, len(table) // limit)]
    rows, skipped = [], []
    for row in table:
        found = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
        c = int(found.group(1)) if found else _int(row["batch_size"], 0)  # agg rows: batch_size is the concurrency
        if c < 1:
            skipped.append({"id": row["id"], "model": row["model_path"], "why": "no concurrency recorded"})
            continue
        isl, osl = int(row["isl"]), int(row["osl"])
        be, mode = row["backend"], row["mode"]
        try:
            if mode == "agg":
                tp, adp, ep = agg_layout(row)
                front = _engine(row["model_path"], row["system"], row["precision"], be, tp, adp,
                                _int(row["pp_size"]), ep, agg_replicas(row, c))  # fmt: skip
                back = None
            elif not row["prefill_num_workers"] or not row["decode_num_workers"]:
                # Without worker counts the prefill and decode widths are totals over an unknown number of workers
                # (12 … 72 GPUs, equal on both sides), and identical columns were measured differently.
                raise Unexpressible("disaggregated row without worker counts: the per-worker layout is not recorded")
            else:
                front = _engine(row["model_path"], row["system"], row["precision"], be, _int(row["prefill_tp_size"]),
                                _int(row["prefill_attention_dp_size"]), _int(row["prefill_pp_size"]),
                                expert_group(_int(row["prefill_tp_size"]), _int(row["prefill_moe_tp_size"]),
                                             _int(row["prefill_moe_ep_size"])),
                                _int(row["prefill_num_workers"]))  # fmt: skip
                back = _engine(row["model_path"], row["system"], row["precision"], be, _int(row["decode_tp_size"]),
                               _int(row["decode_attention_dp_size"]), _int(row["decode_pp_size"]),
                               expert_group(_int(row["decode_tp_size"]), _int(row["decode_moe_tp_size"]),
                                            _int(row["decode_moe_ep_size"])),
                               _int(row["decode_num_workers"]))  # fmt: skip
            est = _simulate(front, back, isl, osl, c, max(4 * c, 64))
            engines = front.replicas * front.run.parallelism.data
            s_ttft, s_tpot, s_band = _static(back or front, isl, osl, -(-c // engines))
        except Unexpressible as why:
            skipped.append({"id": row["id"], "model": row["model_path"], "why": str(why)})
            continue
        ttft, tpot = float(row["silicon_ttft_ms"]) / 1e3, float(row["silicon_tpot_ms"]) / 1e3
        rows.append({
            "id": row["id"], "model": row["model_path"], "system": row["system"], "backend": be, "mode": mode,
            "precision": row["precision"], "isl": isl, "osl": osl, "concurrency": c, "layout": _layout(row),
            "ttft_s": ttft, "tpot_s": tpot, "pred_ttft_s": est.ttft_s.mean, "pred_tpot_s": est.tpot_s.mean,
            "ttft_error": est.ttft_s.mean / ttft - 1.0, "tpot_error": est.tpot_s.mean / tpot - 1.0,
            "static_ttft_error": s_ttft / ttft - 1.0, "static_tpot_error": s_tpot / tpot - 1.0,
            "tpot_inside": _inside(tpot, est.tpot_s.mean, est.band.tpot if est.band else None),
            "ttft_inside": _inside(ttft, est.ttft_s.mean, est.band.ttft if est.band else None),
            "static_tpot_inside": _inside(tpot, s_tpot, (s_band[0] / s_tpot, s_band[1] / s_tpot) if s_band else None),
        })  # fmt: skip
    return rows, skipped


def overview_rows(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    with open_text(resolve(root / OVERVIEW)) as f:
        table = list(csv.DictReader(f))
    rows, skipped = [], []
    for row in table:
        isl, osl = int(row["isl"]), int(row["osl"])
        tp, pp = int(row["tensor"]), int(row["pipeline"])
        n = 1000
        try:
            front = _engine(row["model"], row["gpu"], row["precision"], "trtllm", tp, 1, pp, tp, 1)
            est = _simulate(front, None, isl, osl, n, n)
            kv = front.run  # the static model at the largest batch that fits
            batch = roofline.estimate_inference(replace(kv, workload=roofline.Workload.uniform(1, isl, osl)))
            b = max(1, min(n, batch.max_batch_that_fits))
            s_ttft, s_tpot, _ = _static(front, isl, osl, b)
            static_tps = b * osl / (s_ttft + s_tpot * (osl - 1))
        except Unexpressible as why:
            skipped.append({"id": f"{row['model']} {row['gpu']} tp{tp} pp{pp} {isl}/{osl}", "model": row["model"],
                            "why": str(why)})  # fmt: skip
            continue
        measured = float(row["output_tokens_per_s"])
        band = est.band.duration if est.band else None
        rate = (1.0 / band[1], 1.0 / band[0]) if band else None  # a throughput's edges: over the duration's
        rows.append({
            "model": row["model"], "gpu": row["gpu"], "tensor": tp, "pipeline": pp, "precision": row["precision"],
            "isl": isl, "osl": osl, "measured": measured, "predicted": est.output_tokens_per_s,
            "error": est.output_tokens_per_s / measured - 1.0, "static_error": static_tps / measured - 1.0,
            "inside": _inside(measured, est.output_tokens_per_s, rate),
        })  # fmt: skip
    return rows, skipped


def _coverage(flags: list[bool | None]) -> float:
    """The share of rows whose measurement fell inside the estimate's p10-p90 (NaN when none has an interval)."""
    known = [f for f in flags if f is not None]
    return sum(known) / len(known) if known else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def _bias(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summary(silicon: list[dict[str, Any]], overview: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in silicon:
        groups[f"{r['mode']} {r['backend']}"].append(r)
        groups["all"].append(r)
    out: dict[str, Any] = {"silicon": {}, "overview": {}}
    for name, rs in sorted(groups.items()):
        out["silicon"][name] = {
            "rows": len(rs),
            "tpot": _median([r["tpot_error"] for r in rs]), "tpot_bias": _bias([r["tpot_error"] for r in rs]),
            "ttft": _median([r["ttft_error"] for r in rs]), "ttft_bias": _bias([r["ttft_error"] for r in rs]),
            "static_tpot": _median([r["static_tpot_error"] for r in rs]),
            "static_ttft": _median([r["static_ttft_error"] for r in rs]),
            "tpot_coverage": _coverage([r["tpot_inside"] for r in rs]),
            "ttft_coverage": _coverage([r["ttft_inside"] for r in rs]),
            "static_tpot_coverage": _coverage([r["static_tpot_inside"] for r in rs]),
        }  # fmt: skip
    by_gpu: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in overview:
        by_gpu[r["gpu"]].append(r)
        by_gpu["all"].append(r)
    for name, rs in sorted(by_gpu.items()):
        out["overview"][name] = {
            "rows": len(rs), "throughput": _median([r["error"] for r in rs]),
            "bias": _bias([r["error"] for r in rs]), "static": _median([r["static_error"] for r in rs]),
            "coverage": _coverage([r["inside"] for r in rs]),
        }  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--limit", type=int, default=None, help="an evenly spaced sample of the silicon rows")
    args = ap.parse_args(argv)
    root = data_dir(None)
    silicon, skipped = silicon_rows(root, args.limit)
    overview, skipped_o = overview_rows(root)
    result = summary(silicon, overview)
    result["skipped"] = {"silicon": len(skipped), "overview": len(skipped_o)}
    why: dict[str, int] = defaultdict(int)
    for s in skipped + skipped_o:
        why[f"{s['model']}: {s['why']}"] += 1
    result["skipped_reasons"] = dict(sorted(why.items()))
    if args.json:
        json.dump(result | ({"rows": silicon, "overview_rows": overview} if args.rows else {}), sys.stdout, indent=1)
        return 0
    print(f"{'silicon (closed loop)':28} {'rows':>5} {'TPOT':>7} {'bias':>7} {'TTFT':>7} {'bias':>7}   "
          f"{'static TPOT':>11} {'static TTFT':>11}")  # fmt: skip
    for name, s in result["silicon"].items():
        print(f"{name:28} {s['rows']:5d} {s['tpot']:7.1%} {s['tpot_bias']:+7.1%} {s['ttft']:7.1%} "
              f"{s['ttft_bias']:+7.1%}   {s['static_tpot']:11.1%} {s['static_ttft']:11.1%}")  # fmt: skip
    print(f"targets: TPOT ≤ {TARGETS['tpot']:.0%}, TTFT ≤ {TARGETS['ttft']:.0%} median per mode and backend")
    print(f"\n{'p10-p90 coverage':28} {'rows':>5} {'TPOT':>7} {'TTFT':>7}   {'static TPOT':>11}")
    for name, s in result["silicon"].items():
        print(f"{name:28} {s['rows']:5d} {s['tpot_coverage']:7.1%} {s['ttft_coverage']:7.1%}   "
              f"{s['static_tpot_coverage']:11.1%}")  # fmt: skip
    print(f"\n{'trtllm max throughput':28} {'rows':>5} {'error':>7} {'bias':>7}   {'static':>7} {'p10-p90':>8}")
    for name, s in result["overview"].items():
        print(f"{name:28} {s['rows']:5d} {s['throughput']:7.1%} {s['bias']:+7.1%}   {s['static']:7.1%} "
              f"{s['coverage']:8.1%}")  # fmt: skip
    print(f"\nnot expressible: {len(skipped)} silicon rows, {len(skipped_o)} overview rows")
    for reason, count in result["skipped_reasons"].items():
        print(f"  {count:5d}  {reason}")
    if args.rows:
        for r in silicon:
            print(f"{r['id'][:60]:60} ttft {r['ttft_s']*1e3:8.1f} → {r['pred_ttft_s']*1e3:8.1f} ms  tpot "
                  f"{r['tpot_s']*1e3:6.2f} → {r['pred_tpot_s']*1e3:6.2f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
