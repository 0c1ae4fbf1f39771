"""A planned fleet as the engines take it: `vllm serve` arguments and `trtllm-serve` commands with their
`--extra_llm_api_options` YAML (and, disaggregated, the `trtllm-serve disaggregated` configuration).

Flag and key names, from the engines' sources:
- vLLM `vllm/engine/arg_utils.py` (`EngineArgs`): --tensor-parallel-size, --pipeline-parallel-size,
  --enable-expert-parallel, --max-num-seqs, --max-num-batched-tokens, --enable-chunked-prefill /
  --no-enable-chunked-prefill, --gpu-memory-utilization, --block-size, --kv-cache-dtype, --quantization,
  --max-model-len, --enforce-eager, --kv-transfer-config (disaggregated prefill with the NIXL connector).
- TensorRT-LLM `tensorrt_llm/commands/serve.py` (trtllm-serve) and `tensorrt_llm/llmapi/llm_args.py`
  (`TorchLlmArgs`): tensor_parallel_size, pipeline_parallel_size, moe_expert_parallel_size, enable_attention_dp,
  max_batch_size, max_num_tokens, max_seq_len, enable_chunked_prefill, kv_cache_config (free_gpu_memory_fraction,
  dtype, tokens_per_block, enable_block_reuse), scheduler_config.capacity_scheduler_policy (GUARANTEED_NO_EVICT,
  MAX_UTILIZATION), cuda_graph_config, cache_transceiver_config; the disaggregated server's context_servers /
  generation_servers. The same names aiconfigurator's generator templates emit (ai-dynamo/aiconfigurator 0.12,
  `generator/config/backend_templates`).
- Prefix caching (issue 41): vLLM --enable-prefix-caching / --no-enable-prefix-caching (`EngineArgs`, on by default
  in V1); a host tier as vLLM's CPU offloading connector (`--kv-transfer-config` with `OffloadingConnector` and
  `kv_connector_extra_config.num_cpu_blocks`, vllm/v1/kv_offload); TensorRT-LLM kv_cache_config.enable_block_reuse
  (on by default) and host_cache_size (bytes).
- Speculative decoding: vLLM 0.33 `vllm/config/speculative.py` (`--speculative-config` JSON: method `mtp` or
  `eagle3`, num_speculative_tokens, model for a separate draft); TensorRT-LLM `speculative_config` with
  decoding_type MTP and num_nextn_predict_layers, as aiconfigurator's TensorRT-LLM 1.3 template writes it (its
  EAGLE keys, decoding_type Eagle, max_draft_len and speculative_model_dir, could not be read in its source here).
- LoRA adapters: vLLM 0.33 --enable-lora, --max-loras, --max-lora-rank, --max-cpu-loras (`engine/arg_utils.py`
  1610-1624); TensorRT-LLM's LoRA keys were not read in its source here (a note says so).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

import roofline
from roofline.serving import EngineSpec
from schemas.inference import AllReduceImpl, Dtypes, InferenceDtype
from schemas.models import ModelSpec
from schemas.plan import Role
from schemas.serving import EngineOptions, KvPolicy, SchedulerKind, SpeculativeMethod

EAGLE_DRAFT = "<eagle3-draft-checkpoint>"
NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))
HF = re.compile(r"https://huggingface\.co/([^/]+/[^/]+)")


@dataclass(frozen=True)
class Shape:
    """One engine role of a unit: `workers` engines of tensor × pipeline devices, their batch and token budget."""

    role: Role
    workers: int
    tensor: int
    pipeline: int
    expert: int
    max_num_seqs: int
    max_num_batched_tokens: int


def checkpoint(model: ModelSpec, name: str) -> str:
    """The Hugging Face repository the model's config was read from, else the catalogue name."""
    for source in model.sources:
        match = HF.match(source.url or "")
        if match:
            return match.group(1)
    return name


def _trtllm_kv_fraction(spec: EngineSpec) -> float:
    """TensorRT-LLM sizes its KV pool as a fraction of the memory free once weights are loaded and a max_num_tokens
    pass has run; vLLM's --gpu-memory-utilization is of the whole device. The same pool, as TensorRT-LLM's fraction."""
    m = roofline.serving.pool_memory(spec)
    free = m.capacity - m.model
    return round(min(1.0, max(0.01, m.pool / free)), 3) if free > 0 else 0.01


def _notes(model: ModelSpec, engine: EngineOptions, dtypes: Dtypes, shapes: tuple[Shape, ...]) -> list[str]:
    notes = []
    if engine.scheduler is SchedulerKind.static:
        notes.append("neither engine batches statically: both commands run in-flight batching")
    if engine.kv_policy is KvPolicy.reserve:
        notes.append("vLLM allocates KV blocks on demand and preempts; it has no reserve-ahead policy")
    w = dtypes.weights
    if w in (InferenceDtype.int8, InferenceDtype.int4, InferenceDtype.fp4):
        notes.append(f"{w.value} weights: serve a checkpoint quantised to {w.value} (AWQ/GPTQ/compressed-tensors "
                     "for vLLM, TensorRT Model Optimizer for TensorRT-LLM); the path given is the unquantised "
                     "model's")  # fmt: skip
    elif w is InferenceDtype.fp8:
        notes.append("fp8 weights: vLLM quantises a bf16 checkpoint on load (--quantization fp8); TensorRT-LLM "
                     "serves an FP8 checkpoint (TensorRT Model Optimizer)")  # fmt: skip
    if dtypes.kv_cache is InferenceDtype.int8:
        notes.append("vLLM has no int8 KV cache (fp8 only)")
    if any(s.expert > 1 and s.expert != s.tensor for s in shapes):
        notes.append("vLLM's --enable-expert-parallel spreads experts over all tensor × data ranks; other expert "
                     "widths are TensorRT-LLM's moe_expert_parallel_size only")  # fmt: skip
    if any(s.role is not Role.aggregated for s in shapes):
        notes.append("disaggregated: a router sends each request to a prefill server, then its decode server "
                     "(vLLM: a proxy such as llm-d or Dynamo; TensorRT-LLM: trtllm-serve disaggregated); replace the "
                     "host names in the configuration")  # fmt: skip
    if model.moe is None and any(s.expert > 1 for s in shapes):
        notes.append("expert parallelism on a dense model has no effect")
    if engine.all_reduce is AllReduceImpl.library:
        notes.append("NCCL all-reduce: vLLM's command disables its custom all-reduce; TensorRT-LLM's options leave "
                     "its all-reduce strategy at its default (its own kernels): set it to NCCL")  # fmt: skip
    if engine.prefix_caching and engine.host_cache_bytes > 0:
        notes.append("host tier: vLLM's CPU offloading connector and TensorRT-LLM's host_cache_size as the plan sized "
                     "them; check the keys against your version; a disaggregated vLLM prefill server needs both "
                     "connectors (MultiConnector), which the command leaves to you")  # fmt: skip
    spec = engine.speculative
    if spec is not None:
        notes.append(f"speculative decoding: the plan assumes {spec.accepted_tokens:g} of {spec.draft_tokens} drafts "
                     "kept per iteration; measure the acceptance on your traffic (vLLM's spec_decode metrics) and "
                     "plan again if it differs")  # fmt: skip
        if spec.method is SpeculativeMethod.eagle:
            notes.append(f"EAGLE: replace {EAGLE_DRAFT} with the draft head's checkpoint; TensorRT-LLM's EAGLE keys "
                         "were not read in its source")  # fmt: skip
        if spec.method is SpeculativeMethod.mtp:
            notes.append("MTP needs a checkpoint that ships a multi-token-prediction module (DeepSeek-V3/R1, Kimi-K2, "
                         "GLM-4.5 and others); other models use an EAGLE draft")  # fmt: skip
    return notes


def _vllm(ckpt: str, engine: EngineOptions, dtypes: Dtypes, s: Shape, spec: EngineSpec, max_len: int) -> str:
    args = ["vllm", "serve", ckpt, "--tensor-parallel-size", str(s.tensor)]
    if s.pipeline > 1:
        args += ["--pipeline-parallel-size", str(s.pipeline)]
    if s.expert > 1:
        args.append("--enable-expert-parallel")
    args += ["--max-num-seqs", str(s.max_num_seqs), "--max-num-batched-tokens", str(s.max_num_batched_tokens)]
    chunked = engine.scheduler is SchedulerKind.chunked
    args.append("--enable-chunked-prefill" if chunked else "--no-enable-chunked-prefill")
    args += ["--gpu-memory-utilization", f"{spec.memory_fraction:g}", "--block-size", str(engine.kv_block_tokens)]
    args += ["--max-model-len", str(max_len)]
    if dtypes.weights is InferenceDtype.fp8:
        args += ["--quantization", "fp8"]
    if dtypes.kv_cache is InferenceDtype.fp8:
        args += ["--kv-cache-dtype", "fp8"]
    if not engine.cuda_graphs:
        args.append("--enforce-eager")
    if engine.all_reduce is AllReduceImpl.library:
        args.append("--disable-custom-all-reduce")  # vLLM 0.33 `engine/arg_utils.py`
    draft = engine.speculative
    if draft is not None and s.role is not Role.prefill:
        config: dict[str, Any] = (
            {"method": "mtp"} if draft.method is SpeculativeMethod.mtp else {"method": "eagle3", "model": EAGLE_DRAFT}
        )
        config["num_speculative_tokens"] = draft.draft_tokens
        args += ["--speculative-config", json.dumps(config)]
    if s.role is not Role.decode:  # a decode worker receives its requests' KV whole: nothing to reuse
        args.append("--enable-prefix-caching" if engine.prefix_caching else "--no-enable-prefix-caching")
    lora = spec.scheduler.lora
    if lora is not None:  # the traffic names adapters
        args += ["--enable-lora", "--max-loras", str(lora.max_loras), "--max-lora-rank", str(lora.max_lora_rank),
                 "--max-cpu-loras", str(lora.cpu_slots)]  # fmt: skip
    if s.role is not Role.aggregated:
        args += ["--kv-transfer-config", NIXL]
    elif engine.prefix_caching and engine.host_cache_bytes > 0:
        blocks = roofline.serving.host_blocks(spec, max_len)
        offload = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                   "kv_connector_extra_config": {"num_cpu_blocks": blocks}}  # fmt: skip
        args += ["--kv-transfer-config", json.dumps(offload, separators=(",", ":"))]
    return shlex.join(args)


def _trtllm_options(engine: EngineOptions, dtypes: Dtypes, s: Shape, spec: EngineSpec, max_len: int,
                    moe: bool) -> dict[str, Any]:  # fmt: skip
    doc: dict[str, Any] = {
        "tensor_parallel_size": s.tensor, "pipeline_parallel_size": s.pipeline,
    }  # fmt: skip
    if moe:
        doc["moe_expert_parallel_size"] = s.expert
    doc.update({
        "enable_attention_dp": False, "max_batch_size": s.max_num_seqs, "max_num_tokens": s.max_num_batched_tokens,
        "max_seq_len": max_len, "enable_chunked_prefill": engine.scheduler is SchedulerKind.chunked,
        "kv_cache_config": {
            "free_gpu_memory_fraction": _trtllm_kv_fraction(spec),
            "dtype": "fp8" if dtypes.kv_cache is InferenceDtype.fp8 else "auto",
            "tokens_per_block": engine.kv_block_tokens,
            "enable_block_reuse": engine.prefix_caching and s.role is not Role.decode,
        },
        "scheduler_config": {
            "capacity_scheduler_policy":
                "GUARANTEED_NO_EVICT" if engine.kv_policy is KvPolicy.reserve else "MAX_UTILIZATION",
        },
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": s.max_num_seqs} if engine.cuda_graphs else None,
    })  # fmt: skip
    if engine.prefix_caching and engine.host_cache_bytes > 0 and s.role is not Role.decode:
        doc["kv_cache_config"]["host_cache_size"] = int(engine.host_cache_bytes)
    if s.role is not Role.aggregated:
        doc["cache_transceiver_config"] = {"backend": "DEFAULT"}
    if s.role is Role.prefill:
        doc["disable_overlap_scheduler"] = True  # TensorRT-LLM's disaggregated examples: context servers without it
    draft = engine.speculative
    if draft is not None and s.role is not Role.prefill:
        if draft.method is SpeculativeMethod.mtp:
            doc["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": draft.draft_tokens}
        else:
            doc["speculative_config"] = {
                "decoding_type": "Eagle", "max_draft_len": draft.draft_tokens, "speculative_model_dir": EAGLE_DRAFT,
            }  # fmt: skip
    return doc


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return json.dumps(str(value))  # a JSON string is a YAML double-quoted scalar


def _dump(doc: dict[str, Any], indent: int = 0) -> str:
    """Block-style YAML of nested mappings, lists of scalars and scalars, in the order given."""
    pad, lines = " " * indent, []
    for key, value in doc.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:\n{_dump(value, indent + 2)}")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:\n" + "".join(f"{pad}  - {_scalar(v)}\n" for v in value))
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}\n")
    return "".join(lines)


MAX_URLS = 64  # servers listed in a disaggregated router's configuration
PORTS = {Role.aggregated: 8000, Role.prefill: 8001, Role.decode: 8002}


def export(
    model: ModelSpec, model_name: str, engine: EngineOptions, dtypes: Dtypes, shapes: tuple[Shape, ...],
    specs: list[EngineSpec], units: int, max_len: int,
) -> dict[str, Any]:  # fmt: skip
    """The fleet's launch commands (an `Export` document): one entry per role, with the processes to start."""
    ckpt = checkpoint(model, model_name)
    vllm, trtllm = [], []
    servers: dict[str, Any] = {}
    listed: list[str] = []
    for s, spec in zip(shapes, specs, strict=True):
        instances = units * s.workers
        vllm.append(
            {"role": s.role.value, "instances": instances, "command": _vllm(ckpt, engine, dtypes, s, spec, max_len)}
        )
        options = _trtllm_options(engine, dtypes, s, spec, max_len, model.moe is not None)
        file = f"{s.role.value}-llm-api-options.yml"
        args = ["trtllm-serve", ckpt, "--backend", "pytorch"]
        if s.role is not Role.aggregated:
            args += ["--host", "0.0.0.0", "--port", str(PORTS[s.role])]
        args += ["--extra_llm_api_options", file]
        trtllm.append({"role": s.role.value, "instances": instances, "command": shlex.join(args),
                       "config_yaml": _dump(options)})  # fmt: skip
        if s.role is not Role.aggregated:
            key = "context_servers" if s.role is Role.prefill else "generation_servers"
            servers[key] = {
                "num_instances": instances,
                "urls": [f"{s.role.value}-{i}:{PORTS[s.role]}" for i in range(min(instances, MAX_URLS))],
            }
            if instances > MAX_URLS:
                listed.append(
                    f"the router configuration lists the first {MAX_URLS} of {instances} {s.role.value} servers"
                )
    disaggregated = None
    if servers:
        disaggregated = _dump({"hostname": "0.0.0.0", "port": 8000, "backend": "pytorch", **servers})
        router = "trtllm-serve disaggregated -c disaggregated.yml"
        trtllm.append({"role": "router", "instances": 1, "command": router, "config_yaml": disaggregated})
    return {"vllm": vllm, "trtllm": trtllm, "trtllm_disaggregated_yaml": disaggregated,
            "notes": _notes(model, engine, dtypes, shapes) + _lora_notes(specs) + listed}  # fmt: skip


def _lora_notes(specs: list[EngineSpec]) -> list[str]:
    if all(spec.scheduler.lora is None for spec in specs):
        return []
    return [
        "LoRA: vLLM's command enables the adapters' slots as the plan sized them (load each adapter with "
        "--lora-modules or at run time); TensorRT-LLM's options leave LoRA out: set its lora_config yourself"
    ]
