"""Triton kernels on NVIDIA GPUs (matmul, fused sin²x + cos²x, flash attention), timed with triton.testing.do_bench.

do_bench times on the GPU with CUDA events and flushes L2 before each call: timing scope `kernel`. Every kernel is
checked against PyTorch before it is timed; a wrong kernel is a failure, not a number.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from worker.results import TimingScope
from worker.suites._base import Case, Context, Target
from worker.suites.fusion import sin2_cos2_chain
from worker.suites.matmul import matmul_op
from worker.timing import Stats

__all__ = ["plan_triton", "triton_available"]


def triton_available() -> bool:
    """Triton and PyTorch importable and a CUDA (not ROCm) device present."""
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
        return False
    try:
        import torch

        return bool(torch.cuda.is_available()) and getattr(torch.version, "hip", None) is None
    except Exception:
        return False


def _torch_dtype(dtype: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def _rand(shape: tuple[int, ...], dtype: str) -> Any:
    import torch

    # Uniform in [-1, 1): never zeros.
    return torch.rand(shape, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(_torch_dtype(dtype))


def _check(name: str, got: Any, want: Any, atol: float, rtol: float) -> None:
    import torch

    if not torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol):
        error = (got.float() - want.float()).abs().max().item()
        raise RuntimeError(f"{name}: Triton result differs from PyTorch (max abs error {error:g})")


def _run_matmul(m: int, n: int, k: int, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        from worker import triton_kernels as tk

        a, b = _rand((m, k), dtype), _rand((k, n), dtype)
        c = tk.matmul(a, b)
        _check("matmul", c, a.float() @ b.float(), atol=0.05 * k**0.5, rtol=0.02)
        return tk.bench(lambda: tk.matmul(a, b, out=c))

    return run


def _run_sin2_cos2(n: int, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import torch

        from worker import triton_kernels as tk

        x = _rand((n,), dtype)
        y = tk.sin2_cos2(x)
        _check("sin²+cos²", y, torch.ones_like(y), atol=1e-2, rtol=0)
        return tk.bench(lambda: tk.sin2_cos2(x, out=y))

    return run


def _run_flash(batch: int, heads: int, head_dim: int, seq: int, causal: bool, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import torch

        from worker import triton_kernels as tk

        q, k, v = (_rand((batch, heads, seq, head_dim), dtype) for _ in range(3))
        o = tk.flash_attention(q, k, v, causal)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        _check("flash attention", o, want, atol=2e-2, rtol=2e-2)
        return tk.bench(lambda: tk.flash_attention(q, k, v, causal, out=o))

    return run


def plan_triton(target: Target) -> list[Case]:
    if not (target.device.is_nvidia_gpu and target.has_triton):
        return []
    dtypes = [d for d in ("bf16", "fp16") if target.profile_dtypes is None or d in target.profile_dtypes]
    if (target.device.sm_version() or (8, 0)) < (8, 0):
        dtypes = [d for d in dtypes if d != "bf16"]  # no bf16 tensor cores before Ampere
    if not dtypes:
        return []
    kernel = TimingScope.kernel
    quick = target.quick
    cases = []
    for dtype in dtypes:
        for n in (512, 1024) if quick else (1024, 2048, 4096, 8192):
            op = matmul_op(n, n, n, dtype) | {"tile": [128, 128]}
            cases.append(Case("triton", f"Triton matmul {n}³ {dtype}", op, _run_matmul(n, n, n, dtype), kernel))
    main = dtypes[0]
    for n in (1 << 20,) if quick else (1 << 20, 1 << 24, 1 << 27):
        ops = sin2_cos2_chain(n, main)
        cases.append(Case("triton", f"Triton sin²x + cos²x n={n} {main}", {"kind": "chain", "ops": ops, "fused": True},
                          _run_sin2_cos2(n, main), kernel))  # fmt: skip
    batch, heads, head_dim = (1, 4, 64) if quick else (2, 16, 128)
    for seq in (512,) if quick else (1024, 2048, 4096, 8192):
        for causal in (False, True):
            op = {"kind": "attention", "batch": batch, "heads": heads, "kv_heads": heads, "head_dim": head_dim,
                  "q_len": seq, "kv_len": seq, "causal": causal, "implementation": "flash", "dtype": main}  # fmt: skip
            name = (
                f"Triton flash attention B{batch} H{heads} d{head_dim} S{seq} {'causal' if causal else 'full'} {main}"
            )
            cases.append(Case("triton", name, op, _run_flash(batch, heads, head_dim, seq, causal, main), kernel))
    return cases
