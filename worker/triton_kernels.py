# ruff: noqa: N803 - Triton's convention: compile-time constants (tl.constexpr) and sizes in capitals.
# mypy: disable-error-code="no-untyped-def"
# Triton reads a kernel parameter's annotation as a Triton type (and refuses `Any`): kernel parameters stay
# unannotated but for tl.constexpr; the launchers below are typed.
"""Triton kernels for NVIDIA GPUs: a tiled matmul, a fused elementwise chain and a forward flash attention.

Imported only when Triton, PyTorch and a CUDA device are present (the `triton` suite checks); the tensors are
PyTorch's, as Triton launches take them. Each launcher checks its kernel against a PyTorch reference before it is
timed with `triton.testing.do_bench`, which flushes L2 between calls and times on the GPU with CUDA events.

Written against Triton 3.x (`tl.dot(a, b, acc)`, `triton.testing.do_bench(..., return_mode="all")`); the flash kernel
follows Tri Dao's FlashAttention-2 forward pass (online softmax in base 2, as Triton's fused-attention tutorial).
"""

from typing import Any

import triton
import triton.language as tl

from worker.timing import Stats, summarize

__all__ = ["bench", "compile_all", "flash_attention", "matmul", "sin2_cos2"]


def _jit(fn: Any) -> Any:
    return triton.jit(fn)


@_jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
) -> None:  # fmt: skip
    # Grouped launch order: GROUP_M rows of tiles share their B columns in L2 (Triton's matmul tutorial).
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - kk * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@_jit
def _sin2_cos2_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr) -> None:
    # The whole chain in registers: one read of x and one write of y per element.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = tl.sin(x)
    c = tl.cos(x)
    tl.store(y_ptr + offs, (s * s + c * c).to(y_ptr.dtype.element_ty), mask=mask)


@_jit
def _flash_forward_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, SEQ_Q, SEQ_K,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
) -> None:  # fmt: skip
    # q, o: [batch·heads, SEQ_Q, HEAD_DIM]; k, v: [batch·heads, SEQ_K, HEAD_DIM], contiguous.
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    q_base = q_ptr + bh * SEQ_Q * HEAD_DIM
    k_base = k_ptr + bh * SEQ_K * HEAD_DIM
    v_base = v_ptr + bh * SEQ_K * HEAD_DIM
    o_base = o_ptr + bh * SEQ_Q * HEAD_DIM

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < SEQ_Q, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # Causal, bottom-right aligned: query i sees keys up to i + (SEQ_K - SEQ_Q); later key blocks are skipped.
    hi = SEQ_K
    if CAUSAL:
        hi = tl.minimum(SEQ_K, (start_m + 1) * BLOCK_M + SEQ_K - SEQ_Q)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[None, :] * HEAD_DIM + offs_d[:, None], mask=cols[None, :] < SEQ_K, other=0.0)
        qk = tl.dot(q, k) * qk_scale  # scores in log2 units: qk_scale = sm_scale · log2(e)
        valid = cols[None, :] < SEQ_K
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None] + SEQ_K - SEQ_Q)
        qk = tl.where(valid, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=cols[:, None] < SEQ_K, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < SEQ_Q)  # fmt: skip


MATMUL_TILE = (128, 128)


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """C = A @ B with 128×128 output tiles (the tile reported with the result)."""
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: {a.shape} @ {b.shape}")
    c = out if out is not None else a.new_empty((m, n))
    block_m, block_n = MATMUL_TILE
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    _matmul_kernel[grid](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3,
    )  # fmt: skip
    return c


def sin2_cos2(x: Any, out: Any = None) -> Any:
    y = out if out is not None else x.new_empty(x.shape)
    n = x.numel()
    block = 1024
    _sin2_cos2_kernel[(triton.cdiv(n, block),)](x, y, n, BLOCK=block, num_warps=4)
    return y


def flash_attention(q: Any, k: Any, v: Any, causal: bool, out: Any = None) -> Any:
    """softmax(QKᵀ/√d)V for q [B, H, T, d] and k, v [B, H, S, d] (MHA), d a power of two ≥ 16."""
    b, h, t, d = q.shape
    s = k.shape[2]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = out if out is not None else q.new_empty(q.shape)
    block_m, block_n = 128, 64
    grid = (triton.cdiv(t, block_m), b * h)
    _flash_forward_kernel[grid](
        q, k, v, o, (d**-0.5) * 1.4426950408889634, t, s,
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal, num_warps=8 if d > 64 else 4, num_stages=2,
    )  # fmt: skip
    return o


def bench(fn: Any, warmup_ms: int = 25, rep_ms: int = 200) -> Stats:
    """Per-call GPU times from `triton.testing.do_bench` (L2 flushed between calls), summarised as ours."""
    try:
        times_ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    except (AssertionError, TypeError):
        # Triton < 3.2 has no return_mode="all": ask for the quantiles and estimate the count as do_bench does.
        p10, median, p90 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.1, 0.5, 0.9])
        return Stats(median_s=median / 1e3, p10_s=p10 / 1e3, p90_s=p90 / 1e3, repeats=max(1, int(rep_ms / median)))
    return summarize([t / 1e3 for t in times_ms])


def compile_all(arch: int = 90, dtypes: tuple[str, ...] = ("bf16", "fp16")) -> dict[str, int]:
    """Compile every kernel, as the launchers configure it, to a cubin for sm_`arch`; no GPU needed (Triton ships
    ptxas). Returns the cubin size of each. A check for hosts without a GPU: `ridgeline-worker check-triton`."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", arch, 32)
    sizes: dict[str, int] = {}

    def build(name: str, fn: Any, signature: dict[str, str], constants: dict[str, Any], **options: Any) -> None:
        source = ASTSource(
            fn=fn, signature={**signature, **dict.fromkeys(constants, "constexpr")}, constexprs=constants
        )
        sizes[name] = len(triton.compile(source, target=target, options=options).asm["cubin"])

    for dt in dtypes:
        ints = dict.fromkeys(("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm"), "i32")
        build(f"matmul {dt}", _matmul_kernel, {"a_ptr": f"*{dt}", "b_ptr": f"*{dt}", "c_ptr": f"*{dt}", **ints,
              "stride_cn": "i32"}, {"BLOCK_M": MATMUL_TILE[0], "BLOCK_N": MATMUL_TILE[1], "BLOCK_K": 64, "GROUP_M": 8},
              num_warps=8, num_stages=3)  # fmt: skip
        build(f"sin2_cos2 {dt}", _sin2_cos2_kernel, {"x_ptr": f"*{dt}", "y_ptr": f"*{dt}", "n": "i32"}, {"BLOCK": 1024},
              num_warps=4)  # fmt: skip
        for causal in (False, True):
            pointers = {name: f"*{dt}" for name in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")}
            blocks = {"HEAD_DIM": 128, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": causal}
            scalars = {"qk_scale": "fp32", "SEQ_Q": "i32", "SEQ_K": "i32"}
            name = f"flash attention {dt}{' causal' if causal else ''}"
            build(name, _flash_forward_kernel, {**pointers, **scalars}, blocks, num_warps=8, num_stages=2)
    return sizes
