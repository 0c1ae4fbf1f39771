"""One training step of a small transformer: forward, backward and an AdamW update, jitted as one program.

The model is what `schemas.benchmarks.TrainingStep` describes and the service's training core predicts
(`roofline.estimate_training`): pre-norm layers (layer norms with a gain, no biases), learned positions, multi-head
causal attention written out as QKᵀ, a softmax and ·V, a GELU FFN, an untied LM head and the cross-entropy loss.
Parameters and AdamW's moments stay fp32; in bf16 or fp16 the forward and backward run on a cast of the
parameters (mixed precision: the gradients arrive in fp32 through the cast). The step updates its own state
(donated buffers), so each timed call is a whole optimizer step as a training loop runs it.
"""

from __future__ import annotations

import math
from typing import Any

from worker.suites._base import Case, Context, Target, primary_dtype
from worker.timing import Stats, measure

__all__ = ["plan_train", "train_op"]

# AdamW as PyTorch's defaults (torch.optim.AdamW): betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
LR, B1, B2, EPS, WEIGHT_DECAY = 1e-4, 0.9, 0.999, 1e-8, 0.01


def train_op(
    layers: int, hidden: int, heads: int, ffn: int, vocab: int, sequence: int, batch: int, dtype: str
) -> dict[str, Any]:
    return {"kind": "training_step", "layers": layers, "hidden": hidden, "heads": heads, "ffn": ffn, "vocab": vocab,
            "sequence": sequence, "batch": batch, "dtype": dtype}  # fmt: skip


def _params(key: Any, op: dict[str, Any]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    h, f, v, s = op["hidden"], op["ffn"], op["vocab"], op["sequence"]
    keys = iter(jax.random.split(key, 4 + 4 * op["layers"]))

    def normal(shape: tuple[int, ...]) -> Any:
        return jax.random.normal(next(keys), shape, jnp.float32) * 0.02

    return {
        "embed": normal((v, h)), "pos": normal((s, h)), "final_norm": jnp.ones((h,), jnp.float32),
        "head": normal((h, v)),
        "layers": [
            {"norm1": jnp.ones((h,), jnp.float32), "qkv": normal((h, 3 * h)), "out": normal((h, h)),
             "norm2": jnp.ones((h,), jnp.float32), "up": normal((h, f)), "down": normal((f, h))}
            for _ in range(op["layers"])
        ],
    }  # fmt: skip


def _step(op: dict[str, Any], dtype: Any) -> Any:
    import jax
    import jax.numpy as jnp

    heads, s = op["heads"], op["sequence"]
    head_dim = op["hidden"] // heads
    causal = jnp.tril(jnp.ones((s, s), bool))

    def norm(x: Any, gain: Any) -> Any:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gain

    def loss_fn(master: Any, tokens: Any, targets: Any) -> Any:
        p = jax.tree_util.tree_map(lambda w: w.astype(dtype), master)
        x = p["embed"][tokens] + p["pos"]
        b = tokens.shape[0]
        for layer in p["layers"]:
            q, k, v = jnp.split(norm(x, layer["norm1"]) @ layer["qkv"], 3, axis=-1)
            q, k, v = (t.reshape(b, s, heads, head_dim).transpose(0, 2, 1, 3) for t in (q, k, v))
            scores = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim), -1e4)
            attended = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)
            x = x + attended @ layer["out"]
            x = x + jax.nn.gelu(norm(x, layer["norm2"]) @ layer["up"]) @ layer["down"]
        logits = (norm(x, p["final_norm"]) @ p["head"]).astype(jnp.float32)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1).mean()

    def step(master: Any, m: Any, v: Any, count: Any, tokens: Any, targets: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(master, tokens, targets)
        count = count + 1
        m = jax.tree_util.tree_map(lambda a, g: B1 * a + (1 - B1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda a, g: B2 * a + (1 - B2) * g * g, v, grads)
        c1, c2 = 1 - B1**count, 1 - B2**count

        def update(w: Any, mw: Any, vw: Any) -> Any:
            return w - LR * ((mw / c1) / (jnp.sqrt(vw / c2) + EPS) + WEIGHT_DECAY * w)

        return jax.tree_util.tree_map(update, master, m, v), m, v, count, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


def _run_train(op: dict[str, Any]) -> Any:
    def run(ctx: Context) -> Stats:
        import jax
        import jax.numpy as jnp

        from worker.suites._jax import block

        key = jax.random.PRNGKey(ctx.seed)
        master = _params(key, op)
        state = [master, jax.tree_util.tree_map(jnp.zeros_like, master),
                 jax.tree_util.tree_map(jnp.zeros_like, master), jnp.zeros((), jnp.float32)]  # fmt: skip
        shape = (op["batch"], op["sequence"])
        batches = [
            (jax.random.randint(k, shape, 0, op["vocab"]), jax.random.randint(jax.random.fold_in(k, 1), shape, 0,
                                                                              op["vocab"]))
            for k in jax.random.split(key, 2)
        ]  # fmt: skip
        step = _step(op, ctx.jax.dtype(op["dtype"]))

        def call(i: int) -> Any:
            *state[:], loss = step(*state, *batches[i])
            return loss

        stats = measure(call, block, len(batches), ctx.policy)
        block(state)
        return stats

    return run


def plan_train(target: Target) -> list[Case]:
    """One step per size class: CI's seconds-long quick step, a moderate CPU one, a ~1 B-parameter-class layer
    stack on accelerators."""
    layers, hidden, heads, ffn, vocab, sequence, batch = target.pick(
        quick=(2, 256, 4, 1024, 2048, 128, 4),
        cpu=(4, 512, 8, 2048, 8192, 256, 8),
        accelerator=(8, 2048, 16, 8192, 32768, 1024, 8),
    )
    dtype = primary_dtype(target)
    op = train_op(layers, hidden, heads, ffn, vocab, sequence, batch, dtype)
    name = f"train step {layers}×{hidden} h{heads} f{ffn} v{vocab} s{sequence} b{batch} {dtype}"
    return [Case("train", name, op, _run_train(op))]
