"""Training steps (`roofline.training`): the classic counts, worked out by hand and cited beside each test.

Models are built as `roofline.Transformer` in the paper's GPT shape (Korthikanti et al., arXiv 2205.05198, §2: biases,
learned positions, GELU FFN of 4·h, tied embeddings); devices are the catalogue's (tests/roofline/profiles.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import roofline
from tests.roofline.profiles import HARDWARE, system

H100 = HARDWARE["h100-sxm"]


def gpt(layers: int = 4, hidden: int = 1024, heads: int = 16, vocab: int = 32768) -> roofline.Transformer:
    return roofline.Transformer(
        layers=layers, hidden=hidden, heads=heads, kv_heads=heads, head_dim=hidden // heads, ffn=4 * hidden,
        gated=False, activation="gelu", vocab=vocab, position_table=2048, bias=True,
    )  # fmt: skip


def run(model: roofline.Transformer | None = None, **kw: object) -> roofline.TrainingRun:
    args: dict[str, object] = {"sequence": 2048, "micro_batch": 2, "global_batch": 8}
    args.update(kw)
    return roofline.TrainingRun(model or gpt(), system("h100-sxm"), **args)  # type: ignore[arg-type]


def matmul_flops(est: roofline.TrainingEstimate, recompute: bool) -> float:
    """The step's GEMM FLOPs on one device: forward and backward (and the recomputed forward) of every linear layer."""
    total = 0.0
    for r in est.ops:
        if r.kind == "matmul":
            again = r.cost.forward_flops if recompute and r.recompute_s > 0 else 0.0
            total += est.micro_batches * r.count * (r.cost.forward_flops + r.cost.backward_flops + again)
    return total


def test_a_dense_step_is_6_n_d_flops_and_8_n_d_with_full_recomputation() -> None:
    # Kaplan et al. 2020 §2.1: 2·N FLOPs per token forward, 4·N backward (dX and dW); full recomputation runs the
    # forward again (Korthikanti §5: 8·N·D). N here: each layer's QKV (3h²), projection (h²) and FFN (8h²) weights;
    # the LM head (V·h) is not recomputed.
    h, layers, vocab = 1024, 4, 32768
    tokens = 8 * 2048
    n_layers, n_head = layers * 12 * h * h, vocab * h
    none = roofline.estimate_training(run())
    assert matmul_flops(none, False) == pytest.approx(6 * (n_layers + n_head) * tokens, rel=1e-12)
    full = roofline.estimate_training(run(recompute="full"))
    assert matmul_flops(full, True) == pytest.approx((8 * n_layers + 6 * n_head) * tokens, rel=1e-12)
    assert full.hardware_flops > full.model_flops == pytest.approx(none.model_flops)


def test_mixed_precision_adam_keeps_16_bytes_per_parameter_and_sgd_12() -> None:
    # ZeRO (Rajbhandari et al. 2020) §3: 2 (fp16 weights) + 2 (fp16 gradients) + 12 (fp32 weights, momentum,
    # variance) bytes per parameter; SGD with momentum keeps 4 + 4 of the 12.
    r = run()
    params, _ = roofline.training.stage_parameters(r)
    mem = roofline.training_memory(r)
    assert mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes == 16 * params
    sgd = roofline.training_memory(replace(r, optimizer="sgd"))
    assert sgd.weights_bytes + sgd.gradients_bytes + sgd.optimizer_bytes == 12 * params


@pytest.mark.parametrize(
    ("sharding", "divided"),
    [
        (roofline.Sharding(zero=1), ("optimizer",)),
        (roofline.Sharding(zero=2), ("optimizer", "gradients")),
        (roofline.Sharding(zero=3), ("optimizer", "gradients", "weights")),
        (roofline.Sharding(fsdp="full"), ("optimizer", "gradients", "weights")),
    ],
)
def test_zero_divides_each_stage_by_the_data_parallel_degree(sharding: roofline.Sharding, divided: tuple[str]) -> None:
    # ZeRO §5.1: P_os divides the optimizer states by N_d, P_os+g also the gradients, P_os+g+p also the weights.
    base = roofline.training_memory(run(parallelism=roofline.TrainingParallelism(data=4)))
    sharded = roofline.training_memory(run(parallelism=roofline.TrainingParallelism(data=4), sharding=sharding))
    for part in ("weights", "gradients", "optimizer"):
        factor = 4 if part in divided else 1
        assert getattr(sharded, f"{part}_bytes") * factor == getattr(base, f"{part}_bytes")


def test_activation_memory_per_layer_is_korthikantis() -> None:
    # Korthikanti et al. 2022, Table 2, for GPT-3 175B's layer (h 12288, a 96) at s 2048, b 1, t 8, in bytes:
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    model = gpt(layers=96, hidden=h, heads=a, vocab=51200)
    tp = roofline.TrainingParallelism(tensor=t)
    sp = replace(tp, sequence_parallel=True)

    def per_layer(par: roofline.TrainingParallelism, recompute: str) -> float:
        r = run(model, micro_batch=b, global_batch=b, parallelism=par, recompute=recompute, attention="naive")
        return roofline.activation_bytes_per_layer(r)

    one = roofline.TrainingParallelism()
    assert per_layer(one, "none") == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert per_layer(tp, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert per_layer(sp, "none") == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert per_layer(tp, "selective") == pytest.approx(sbh * (10 + 24 / t))
    assert per_layer(sp, "selective") == pytest.approx(sbh / t * 34)
    assert per_layer(sp, "full") == pytest.approx(2 * sbh)
    # FlashAttention keeps no s² tensor (Dao et al. 2022): selective's figure without recomputing anything.
    r = run(model, micro_batch=b, global_batch=b, parallelism=sp, attention="flash")
    assert roofline.activation_bytes_per_layer(r) == pytest.approx(sbh / t * 34)


def test_a_linear_layers_backward_is_its_two_gemms() -> None:
    # dX = dY·Wᵀ (tokens × k, inner n) and dW = Xᵀ·dY (k × n, inner tokens), each timed by the op core.
    est = roofline.estimate_training(run())
    qkv = next(r for r in est.ops if r.name == "qkv_projection")
    tokens, n, k = 2 * 2048.0, 3 * 1024.0, 1024.0

    def seconds(m: float, n_: float, k_: float) -> float:
        kernels = roofline.matmul(H100, m, n_, k_, dtype="bf16")
        return float(roofline.single(kernels, H100, H100.vector_peak("bf16"), H100.launch_s).time_s)

    assert qkv.cost.forward_s == seconds(tokens, n, k)
    assert qkv.cost.backward_s == seconds(tokens, k, n) + seconds(k, n, tokens)


def test_seed_001_collectives_of_a_training_step() -> None:
    # Seed 001: data-parallel gradients are all-reduced, an all-reduce being a reduce-scatter then an all-gather
    # (ZeRO-1 runs them as such, with the same bytes); FSDP all-gathers the weights forward and backward and
    # reduce-scatters the gradients; tensor parallelism with sequence parallelism reduce-scatters and all-gathers
    # where Megatron-LM all-reduces (Korthikanti §4.2.2), 2 + 2 per layer and pass.
    dp = roofline.estimate_training(run(parallelism=roofline.TrainingParallelism(data=4)))
    (ar,) = dp.communication
    assert (ar.op, ar.devices, ar.calls) == ("all_reduce", 4, 1.0)
    zero = roofline.estimate_training(
        run(parallelism=roofline.TrainingParallelism(data=4), sharding=roofline.Sharding(zero=1))
    )
    assert [(c.op, c.bytes) for c in zero.communication] == [("reduce_scatter", ar.bytes), ("all_gather", ar.bytes)]
    assert roofline.bus_factor("all_reduce", 4) == roofline.bus_factor("reduce_scatter", 4) + roofline.bus_factor(
        "all_gather", 4
    )
    fsdp = roofline.estimate_training(
        run(parallelism=roofline.TrainingParallelism(data=4), sharding=roofline.Sharding(fsdp="full"))
    )
    assert [(c.op, c.calls) for c in fsdp.communication] == [("all_gather", 2.0), ("reduce_scatter", 1.0)]

    layers, micro_batches = 4, 4
    activations = 2 * 2048 * 1024 * 2.0  # b·s·h in bf16
    tp = roofline.TrainingParallelism(tensor=4)
    plain = roofline.estimate_training(run(parallelism=tp))
    assert [(c.op, c.calls, c.bytes) for c in plain.communication] == [
        ("all_reduce", 4.0 * layers * micro_batches, activations)
    ]
    sp = roofline.estimate_training(run(parallelism=replace(tp, sequence_parallel=True), recompute="full"))
    calls = 6.0 * layers * micro_batches  # full recomputation repeats the forward's two of each
    assert [(c.op, c.calls) for c in sp.communication] == [("all_gather", calls), ("reduce_scatter", calls)]


@pytest.mark.parametrize(("schedule", "virtual", "fraction"), [("1f1b", 1, 3 / 8), ("interleaved", 2, 3 / 16)])
def test_the_pipeline_bubble_is_narayanans(schedule: str, virtual: int, fraction: float) -> None:
    # Narayanan et al. 2021 §2.2: bubble = (p − 1)/m of the ideal time under 1F1B, (p − 1)/(v·m) interleaved.
    par = roofline.TrainingParallelism(pipeline=4, schedule=schedule, virtual_stages=virtual)
    est = roofline.estimate_training(run(gpt(layers=8), micro_batch=1, parallelism=par))
    ideal = est.step_s - est.bubble_s - est.optimizer_s
    assert est.micro_batches == 8
    assert est.bubble_s / ideal == pytest.approx(fraction)


def test_the_largest_micro_batch_is_the_largest_that_fits() -> None:
    est = roofline.estimate_training(run(gpt(layers=24, hidden=2048, heads=16)))
    largest = est.max_micro_batch
    assert largest >= 1
    fits = roofline.training_memory(
        run(gpt(layers=24, hidden=2048, heads=16), micro_batch=largest, global_batch=largest)
    )
    over = roofline.training_memory(
        run(gpt(layers=24, hidden=2048, heads=16), micro_batch=largest + 1, global_batch=largest + 1)
    )
    assert fits.fits and not over.fits


def test_rates_and_costs_follow_the_step() -> None:
    est = roofline.estimate_training(run())
    assert est.tokens_per_s == pytest.approx(8 * 2048 / est.step_s)
    assert est.time_to_train_s(1e9) == pytest.approx(1e9 / est.tokens_per_s)
    assert est.cost(1e9, 2.0) == pytest.approx(est.time_to_train_s(1e9) / 3600 * 2.0)
    assert 0 < est.mfu <= est.hfu < 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"parallelism": roofline.TrainingParallelism(tensor=3)}, "parallelism.tensor"),
        ({"global_batch": 6, "parallelism": roofline.TrainingParallelism(data=4)}, "global_batch"),
        ({"parallelism": roofline.TrainingParallelism(pipeline=3)}, "parallelism.pipeline"),
        ({"recompute": "some"}, "recompute"),
    ],
)
def test_a_step_that_cannot_be_built_names_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(roofline.TrainingConfigError) as err:
        roofline.estimate_training(replace(run(), **change))  # type: ignore[arg-type]
    assert err.value.field == field


def test_the_devices_must_be_the_parallelisms_product() -> None:
    with pytest.raises(roofline.TrainingConfigError, match="there are 16 devices") as err:
        roofline.validate_training(run(parallelism=roofline.TrainingParallelism(tensor=2, data=4)), devices=16)
    assert err.value.field == "parallelism"


def test_a_model_of_dense_and_moe_layers_runs_each_ffn_in_its_share_of_the_layers() -> None:
    # Llama 4 Maverick's interleave (every other layer MoE) on a 4-layer GPT-shaped model: 2 layers run a dense
    # FFN of 4·h, 2 run 8 experts of h (top-2) and one shared expert of h. GEMM FLOPs per token forward: 2 per
    # weight a token uses, 6 forward and backward (Kaplan et al. 2020 §2.1).
    h, layers, vocab = 1024, 4, 32768
    moe = roofline.Moe(experts=8, top_k=2, expert_ffn=h, shared_experts=1, layer_step=2)
    model = replace(gpt(), moe=moe)
    est = roofline.estimate_training(run(model))
    by_name = {r.name: r for r in est.ops}
    assert by_name["ffn_up"].count == by_name["experts_up"].count == by_name["shared_experts_up"].count == 2
    assert by_name["qkv_projection"].count == layers
    tokens = 8 * 2048
    per_token = layers * 4 * h * h + 2 * (2 * 4 * h * h) + 2 * (3 * 2 * h * h) + vocab * h  # attention, dense, MoE
    assert matmul_flops(est, False) == pytest.approx(6 * per_token * tokens, rel=1e-12)


@pytest.mark.parametrize(("compute", "bytes_per_parameter"), [("bf16", 44.0), ("fp16", 52.0)])
def test_the_optimizer_step_moves_megatron_cores_bytes_per_parameter(compute: str, bytes_per_parameter: float) -> None:
    # Megatron-Core's Float16OptimizerWithFloat16Params.step (megatron/core/optimizer/optimizer.py, v0.16.1), per
    # parameter: cast the 2-byte gradient to fp32 (read 2, write 4), fp16 only: unscale in place (read 4, write 4),
    # L2 norm for clipping (read 4), AdamW (read master, m, v, gradient: 16; write master, m, v: 12), copy the
    # master to the 2-byte weights (read 4, write 2): 6 + 4 + 28 + 6 = 44 bytes, 52 with fp16's unscale.
    r = run(precision=roofline.TrainingPrecision(compute=compute))
    passes = roofline.training.optimizer_passes(r)
    assert sum(4.0 * (ins + outs) for _, ins, outs, _ in passes) == bytes_per_parameter
    # Memory-bound: the step takes at least those bytes over the device's bandwidth at its memory efficiency.
    params, _ = roofline.training.stage_parameters(r)
    est = roofline.estimate_training(r)
    assert est.optimizer_s >= params * bytes_per_parameter / (H100.memory_bytes_per_s * H100.eff_memory)


def test_communication_buffers_by_hand() -> None:
    # One layer of the test GPT (h = 1024, biases, layer norms): QKV 3h² + 3h, projection h² + h, FFN 8h² + 5h, two
    # norms 4h: 12h² + 13h = 12 596 224 parameters, 2 bytes each in bf16.
    layer_bytes = (12 * 1024**2 + 13 * 1024) * 2.0
    dp = roofline.TrainingParallelism(data=4)
    # PyTorch FSDP (torch 1.13.1 fully_sharded_data_parallel.py): the current unit's gathered parameters, the next
    # unit's prefetched (backward_prefetch_limit = 1, :1046) and the unit's unsharded gradient before its
    # reduce-scatter (:3294-3297): 3 layers; without prefetch 2.
    fsdp = roofline.training_memory(run(parallelism=dp, sharding=roofline.Sharding(fsdp="full")))
    assert fsdp.gathered_bytes == 3 * layer_bytes == 75_577_344
    no_prefetch = roofline.training_memory(
        run(parallelism=dp, sharding=roofline.Sharding(fsdp="full"), overlap=roofline.Overlap(fsdp_prefetch=False))
    )
    assert no_prefetch.gathered_bytes == 2 * layer_bytes
    # Megatron-LM's buckets are views into its contiguous gradient buffer: nothing beyond the gradients. PyTorch DDP's
    # default buckets (bucket_cap_mb 25, gradient_as_bucket_view=False) copy every gradient: "the saved memory size
    # will be equal to the total gradients size" (torch/nn/parallel/distributed.py:477).
    views = roofline.training_memory(run(parallelism=dp))
    copies = roofline.training_memory(run(parallelism=dp, gradient_buckets="copies"))
    assert views.gradient_bucket_bytes == 0 and views.gathered_bytes == 0
    assert copies.gradient_bucket_bytes == copies.gradients_bytes
    assert copies.total_bytes == views.total_bytes + views.gradients_bytes
    # One device has nothing to reduce; ZeRO-2 reduce-scatters into its gradient shard.
    assert roofline.training_memory(run(gradient_buckets="copies")).buffers_bytes == 0
    zero2 = roofline.training_memory(run(parallelism=dp, sharding=roofline.Sharding(zero=2), gradient_buckets="copies"))
    assert zero2.buffers_bytes == 0
