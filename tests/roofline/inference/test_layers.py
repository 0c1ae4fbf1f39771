"""The op list of a layer (`roofline.inference`): tensor-parallel splits and all-reduces, fused epilogues, and
DeepSeek's multi-head latent attention, with numbers worked out by hand from the models' configs."""

from __future__ import annotations

from dataclasses import replace

import pytest

import roofline
import roofline.inference as inf
from tests.roofline.inference import rows
from tests.roofline.models import MODELS
from tests.roofline.profiles import H200, system, topologies


def test_tensor_parallelism_splits_weights_and_heads_and_adds_two_all_reduces_per_layer() -> None:
    model = MODELS["llama-3-70b"]
    hw = system("h100-sxm")
    batch, prompt = 4, 512
    one = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(batch, prompt, 3)))
    four = inf.estimate_inference(
        inf.InferenceRun(model, hw, inf.Workload.uniform(batch, prompt, 3), inf.Parallelism(tensor=4))
    )
    d, layers = 8192, 80
    # Every matrix and table splits 4 ways (64 query and 8 KV heads → 16 and 2 per device); norms are replicated.
    norms = (2 * layers + 1) * d * 2
    assert four.memory.weights_bytes == pytest.approx((one.memory.weights_bytes - norms) / 4 + norms)
    assert four.memory.kv_cache_bytes == pytest.approx(one.memory.kv_cache_bytes / 4)
    qkv1, qkv4 = rows(one.prefill)["qkv_projection"], rows(four.prefill)["qkv_projection"]
    assert qkv4.flops == pytest.approx(qkv1.flops / 4)
    # Two all-reduces of the block's output per layer in the forward pass (Megatron), b·s·d·2 bytes each.
    ar = rows(four.prefill)["tensor_parallel_all_reduce"]
    assert ar.calls == 2 * layers
    assert ar.bytes == 2 * layers * batch * prompt * d * 2
    topology = topologies("h100-sxm")
    per_call = float(roofline.collective("all_reduce", batch * prompt * d * 2, topology(4)).time_s)
    assert ar.time_s == pytest.approx(2 * layers * per_call)
    assert four.prefill.communication_s["tensor_parallel"] == pytest.approx(ar.time_s)
    # Decode: one token per sequence per step, two steps.
    ar_decode = rows(four.decode)["tensor_parallel_all_reduce"]
    assert ar_decode.bytes == 2 * 2 * layers * batch * d * 2
    assert "tensor_parallel_all_reduce" not in rows(one.prefill)
    assert four.communication_s == pytest.approx(ar.time_s + ar_decode.time_s)


def test_fused_kernels_are_fewer_and_faster() -> None:
    model = MODELS["llama-3-8b"]
    run = inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(8, 1024, 16))
    fused, unfused = inf.estimate_inference(run), inf.estimate_inference(replace(run, fused=False))
    calls = lambda e: sum(r.calls for r in e.decode.rows)  # noqa: E731
    assert calls(unfused) - calls(fused) == 32 * 4  # per layer: rotary, activation and two residual adds
    assert fused.total_time_s < unfused.total_time_s


def test_deepseek_v3_latent_attention_caches_a_576_value_latent() -> None:
    # Shapes from the config (hardware_db/models/deepseek-v3.yaml): d 7168, 128 heads, q_lora 1536, kv_lora 512,
    # rope 64, nope 128, v 128; 61 layers (3 dense, 58 MoE of 256 experts of 2048, top-8, 1 shared).
    model = MODELS["deepseek-v3"]
    assert model.mla is not None and model.mla.latent == 576
    d, h = 7168, 128
    attention = (d * 1536 + 1536) + 1536 * h * 192 + (d * 576 + 512) + 512 * h * 256 + h * 128 * d
    assert attention == 187_107_328  # the config notes' "about 187 M" per layer
    params = inf.parameter_count(model)
    assert params.attention == 61 * attention
    assert round(params.total / 1e9, 1) == 671.0  # the paper's 671B
    assert round(params.active_per_token / 1e9, 1) == 37.6  # the paper's 37B activated (embeddings included)
    run = inf.InferenceRun(
        model, system("h200-sxm"), inf.Workload.uniform(4, 1023, 2), inf.Parallelism(tensor=8),
        inf.Precision("fp8", "bf16", "bf16"),
    )  # fmt: skip
    est = inf.estimate_inference(run)
    # 576 bf16 values per token and layer, whole on every device of the tensor group: 70 272 bytes per token.
    assert est.memory.kv_cache_bytes == 4 * 1024 * 61 * 576 * 2
    decode = rows(est.decode)
    # Absorbed decode (one step at 1024 keys): the 16 heads of a device attend over the latent as one MQA head of
    # (576 + 512)/2 dimensions, reading each cached latent once; queries and outputs of 544 bf16 values per head.
    assert {"q_absorb", "v_absorb", "attention"} <= set(decode) and "kv_up_projection" not in decode
    latent_bytes = 4 * 1024 * 576 * 2
    q_and_o = 2 * 4 * 16 * 544 * 2
    assert decode["attention"].bytes == pytest.approx(61 * (latent_bytes + q_and_o))
    assert decode["attention"].flops >= 61 * 4 * 4 * 16 * 1024 * 544  # two products of 2·b·h·kv·d_eff
    assert "kv_up_projection" in rows(est.prefill)  # the prefill projects the latent up and attends as MHA


def test_deepseek_v3_decode_with_all_heads_on_a_device_reads_the_latent_once() -> None:
    # Attention data parallelism (tensor 1, attention-DP 8): each device attends with all 128 heads. Blackwell's MLA
    # decode kernel holds 128 query heads per thread block (CUTLASS sm100 MLA, TileShapeH == 128), so the latent is
    # read once, as with 16 heads at tensor 8; queries and outputs are 8 times wider; the FLOPs 8 times more.
    model = MODELS["deepseek-v3"]
    prec = inf.Precision("fp8", "bf16", "bf16")

    def decode(par: inf.Parallelism) -> dict[str, inf.OpRow]:
        run = inf.InferenceRun(model, system("h200-sxm"), inf.Workload.uniform(4, 1023, 2), par, prec)
        return rows(inf.estimate_inference(run).decode)

    wide, narrow = decode(inf.Parallelism(tensor=1, data=8, expert=8)), decode(inf.Parallelism(tensor=8))
    latent_bytes = 4 * 1024 * 576 * 2
    q_and_o = 2 * 4 * 128 * 544 * 2
    assert wide["attention"].bytes == pytest.approx(61 * (latent_bytes + q_and_o))
    assert wide["attention"].flops == pytest.approx(8 * narrow["attention"].flops)
    # Before: a masked-MHA block per head read the latent 128 times (125 times the bytes of tensor 8, 12.5 times the
    # time); now the time grows with the FLOPs' compute share only.
    assert wide["attention"].time_s < 2 * narrow["attention"].time_s


def test_an_nvfp4_checkpoint_that_keeps_attention_in_bf16() -> None:
    """`Precision.attention`: DeepSeek-R1's NVFP4 checkpoint keeps its self-attention block in bf16. Tensor 8, one
    decode step of 4 sequences: the output projection (16 heads × 128 values → 7168) reads 16·128·7168 weights at 2
    bytes (29 360 128 B a layer) instead of NVFP4's 0.5625 (8 257 536 B), the FFN (a dense layer's 18 432-wide gated
    up projection) stays at NVFP4's bytes, and the weights on a device grow by the attention's 187 107 328 parameters a
    layer (the latent's down projections replicated, the rest split 8 ways) at 2 − 0.5625 bytes more each."""
    model = MODELS["deepseek-v3"]
    fp4_h200 = replace(H200, matrix_flops_per_s={**H200.matrix_flops_per_s, "fp4": 4 * 989e12})  # a rate to run at
    run = inf.InferenceRun(
        model, system("h200-sxm", fp4_h200), inf.Workload.uniform(4, 1023, 2), inf.Parallelism(tensor=8),
        inf.Precision("fp4", "fp4", "fp8"),
    )  # fmt: skip
    kept = replace(run, precision=inf.Precision("fp4", "fp4", "fp8", attention="bf16"))
    fp4, bf16 = (rows(inf.estimate_inference(r).decode) for r in (run, kept))
    o_weights = 16 * 128 * 7168
    o_io = 4 * 16 * 128 + 2 * 4 * 7168  # its input, its output and the residual its epilogue adds (4 tokens)
    assert fp4["output_projection"].bytes == pytest.approx(61 * (o_weights * 0.5625 + o_io * 0.5625), rel=1e-9)
    assert bf16["output_projection"].bytes == pytest.approx(61 * (o_weights * 2 + o_io * 2), rel=1e-9)
    assert bf16["ffn_up"].bytes == fp4["ffn_up"].bytes
    down = 7168 * 1536 + 7168 * 576 + 1536 + 512  # q and kv down projections and their norms: on every device
    split = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168  # q up, kv up, output: split over 8
    grown = inf.estimate_inference(kept).memory.weights_bytes - inf.estimate_inference(run).memory.weights_bytes
    assert grown == pytest.approx(61 * (down + split / 8) * (2 - 0.5625), rel=1e-9)


def test_attention_kept_in_bf16_under_int4_weights_reads_bf16_weights() -> None:
    """W4A16 (int4 weights, bf16 activations) with `attention="bf16"`: the attention type equals the activations', yet
    the output projection still reads its 8192·8192 weights at 2 bytes (the attention's own type), not int4's 0.5."""
    model = MODELS["llama-3-70b"]
    run = inf.InferenceRun(
        model, system("h100-sxm"), inf.Workload.uniform(4, 1023, 2), inf.Parallelism(tensor=1),
        inf.Precision("int4", "bf16", "bf16", attention="bf16"),
    )  # fmt: skip
    out = rows(inf.estimate_inference(run).decode)["output_projection"]
    io = 4 * 8192 + 2 * 4 * 8192  # input, output and the residual its epilogue adds (4 tokens, bf16)
    assert out.bytes == pytest.approx(80 * (8192 * 8192 + io) * 2, rel=1e-9)


def test_a_quantised_linear_layer_quantises_its_16_bit_input_first() -> None:
    """W8A8 and W4A4 linear layers run a quantisation kernel before the product, as the engines do (TensorRT-LLM's
    linear layer, vLLM's `scaled_fp8_quant`): it reads the m·k input at 2 bytes and writes it at the narrow type's
    1 (fp8) or 0.5625 (NVFP4, scales included) bytes. Llama-3-70B, one decode step of 4 sequences, tensor 1: the
    down projection's input is 4 × 28 672 values, the QKV projection's 4 × 8 192, in each of 80 layers. The router
    and the LM head stay 16-bit (no kernel); weight-only int4 keeps 16-bit activations (none)."""
    model = MODELS["llama-3-70b"]
    run = inf.InferenceRun(
        model, system("h100-sxm"), inf.Workload.uniform(4, 1023, 2), inf.Parallelism(tensor=1),
        inf.Precision("fp8", "fp8", "bf16"),
    )  # fmt: skip
    decode = rows(inf.estimate_inference(run).decode)
    assert decode["ffn_down_quantize"].calls == 80
    assert decode["ffn_down_quantize"].bytes == pytest.approx(80 * 4 * 28672 * (2 + 1))
    assert decode["qkv_projection_quantize"].bytes == pytest.approx(80 * 4 * 8192 * (2 + 1))
    assert "lm_head_quantize" not in decode
    fp4_h100 = replace(system("h100-sxm").hardware, matrix_flops_per_s={
        **system("h100-sxm").hardware.matrix_flops_per_s, "fp4": 4 * 989e12})  # fmt: skip
    nvfp4 = replace(run, system=system("h100-sxm", fp4_h100), precision=inf.Precision("fp4", "fp4", "bf16"))
    assert rows(inf.estimate_inference(nvfp4).decode)["ffn_down_quantize"].bytes == pytest.approx(
        80 * 4 * 28672 * (2 + 0.5625)
    )
    w4a16 = replace(run, precision=inf.Precision("int4", "bf16", "bf16"))
    assert not [name for name in rows(inf.estimate_inference(w4a16).decode) if name.endswith("_quantize")]


def test_block_scaled_fp8_runs_the_block_scheme_and_its_own_quantisation() -> None:
    """`Precision.fp8_scaling="block"` (DeepSeek-V3's 128 × 128 weight blocks, 1 × 128 activation groups): a dense
    layer's product is `roofline.ops.QUANTIZATIONS["fp8_block"]`'s, whose per-token-group kernel quantises the input
    inside the row, so no `_quantize` row of its own; per tensor, the separate kernel reads the 4 × 2 304 inputs of
    the down projection (18 432 / 8 on tensor 8) at 2 bytes and writes them at 1, in each of the 3 dense layers. The
    block kernel also writes a 4-byte scale per 128 values, so the block row moves at least those bytes more."""
    model = MODELS["deepseek-v3"]
    run = inf.InferenceRun(
        model, system("h200-sxm"), inf.Workload.uniform(4, 1023, 2), inf.Parallelism(tensor=8),
        inf.Precision("fp8", "fp8", "bf16"),
    )  # fmt: skip
    tensor = rows(inf.estimate_inference(run).decode)
    block = rows(inf.estimate_inference(replace(run, precision=replace(run.precision, fp8_scaling="block"))).decode)
    assert tensor["ffn_down_quantize"].bytes == pytest.approx(3 * 4 * 2304 * (2 + 1))
    assert "ffn_down_quantize" not in block
    assert block["ffn_down"].flops >= 3 * 2 * 4 * 7168 * 2304  # the product's 2·m·n·k, and the quantisation's few
    assert block["ffn_down"].bytes >= tensor["ffn_down"].bytes + 3 * 4 * 2304 * (2 + 1 + 4 / 128)
    # The experts run the block scheme too: slower than per-tensor products at the fp8 rate.
    assert block["experts"].time_s > tensor["experts"].time_s
    with pytest.raises(inf.InferenceConfigError) as err:
        inf.estimate_inference(replace(run, precision=replace(run.precision, fp8_scaling="row")))
    assert err.value.field == "dtypes.fp8_scaling"
