"""Op descriptions: the same JSON object is an estimate request's `op` and (later) a benchmark result's `op`.

A discriminated union on `kind`. Sizes are element counts; `dtype` is the storage type of inputs and outputs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from schemas import limits
from schemas.common import Dtype, InputModel

# Bounded so that products of a few dimensions stay well inside float64's exact-integer range.
Dim = Annotated[int, Field(gt=0, le=limits.MAX_DIM, description="A dimension, 1 … 16 777 216.")]
Count = Annotated[int, Field(gt=0, le=limits.MAX_ELEMENTS, description="An element count, 1 … 2⁴⁰.")]
PerElement = Annotated[float, Field(ge=0, le=limits.MAX_PER_ELEMENT, allow_inf_nan=False)]


class MemoryAccess(StrEnum):
    """How a memory-bound kernel loads: `vectorized` 16-byte loads per thread (PyTorch, Triton, XLA kernels),
    `scalar` one element per load (simple hand-written kernels). Scalar loads keep fewer bytes in flight and, by
    Little's law, reach a fraction of device bandwidth on GPUs (`roofline.ops.MEMORY_ACCESS`)."""

    vectorized = "vectorized"
    scalar = "scalar"


ACCESS_FIELD = Field(
    default=MemoryAccess.vectorized,
    description="vectorized (16-byte loads) or scalar (one element per load: far fewer bytes in flight).",
)


class ElementFn(StrEnum):
    """Elementwise functions with a measured XLA ALU cost (`roofline.ops.FUNCTIONS`)."""

    add = "add"
    atan2 = "atan2"
    cbrt = "cbrt"
    cos = "cos"
    divide = "divide"
    erf = "erf"
    exp = "exp"
    expm1 = "expm1"
    log = "log"
    log1p = "log1p"
    logistic = "logistic"
    multiply = "multiply"
    power = "power"
    rsqrt = "rsqrt"
    sin = "sin"
    sqrt = "sqrt"
    subtract = "subtract"
    tanh = "tanh"


class Backward(StrEnum):
    store = "store"
    recompute = "recompute"


class EpilogueOp(StrEnum):
    bias = "bias"
    relu = "relu"
    gelu = "gelu"
    silu = "silu"
    sigmoid = "sigmoid"
    residual = "residual"  # adds a second m×n input


class ActivationFn(StrEnum):
    relu = "relu"
    gelu = "gelu"
    gelu_tanh = "gelu_tanh"
    silu = "silu"
    sigmoid = "sigmoid"
    tanh = "tanh"
    swiglu = "swiglu"
    geglu = "geglu"


class MatmulPrecision(StrEnum):
    """How a matmul of fp32 inputs runs (`roofline.ops.matmul_rate`); other dtypes run at their own rate whatever it
    says. `default` is JAX/XLA's default precision: TF32 on a GPU that has TF32 tensor cores (else fp32), one bf16
    pass on a TPU, fp32 on a CPU. `tf32`: the TF32 matrix rate. `bf16x3`: three bf16 products (XLA's
    BF16_BF16_F32_X3). `highest`: full fp32 (six bf16 passes on a TPU); PyTorch's default unless TF32 is enabled."""

    default = "default"
    tf32 = "tf32"
    bf16x3 = "bf16x3"
    highest = "highest"


def _check_16_bit_input(quantization: str, dtype: object) -> None:
    """A quantization scheme quantises (or dequantises against) a 16-bit input: `dtype` must be bf16 or fp16."""
    if quantization != "none" and dtype is not None and dtype not in (Dtype.bf16, Dtype.fp16):
        raise ValueError(
            f"quantization {quantization} quantises a 16-bit input: dtype must be bf16 or fp16, not {dtype}"
        )


class MatmulQuantization(StrEnum):
    """How a matmul's 16-bit input is quantised before a narrow product (`roofline.ops.QUANTIZATIONS`), as
    TensorRT-LLM's quantised linear layers run it: `fp8_tensor` (dynamic per-tensor fp8: an amax reduction, then the
    quantise kernel), `fp8_block` (DeepSeek-V3's 1×128 activation / 128×128 weight scales), `nvfp4` (4-bit values,
    one e4m3 scale per 16). The weights are stored quantised. `none`: the product runs at `dtype`."""

    none = "none"
    fp8_tensor = "fp8_tensor"
    fp8_block = "fp8_block"
    nvfp4 = "nvfp4"


class Matmul(InputModel):
    """C[batch, m, n] = A[batch, m, k] · B[batch, k, n] (+ an elementwise epilogue on C)."""

    kind: Literal["matmul"] = "matmul"
    m: Dim
    n: Dim
    k: Dim
    batch: Dim = 1
    dtype: Dtype = Dtype.bf16
    out_dtype: Dtype | None = Field(default=None, description="Output storage type; defaults to dtype.")
    tile: tuple[Dim, Dim] | None = Field(
        default=None, description="Fix the output tile [tm, tn] instead of choosing as a library heuristic would."
    )
    epilogue: list[EpilogueOp] = Field(default_factory=list, max_length=8)
    fuse_epilogue: bool = True
    precision: MatmulPrecision = Field(
        default=MatmulPrecision.default,
        description="fp32 inputs only: default (JAX/XLA: TF32 on GPUs that have it, one bf16 pass on TPUs), tf32, "
        "bf16x3 (three bf16 passes) or highest (full fp32: PyTorch's default unless TF32 is enabled).",
    )
    quantization: MatmulQuantization = Field(
        default=MatmulQuantization.none,
        description="none, or how the 16-bit input (dtype bf16 or fp16) is quantised by its own kernels before a "
        "narrow product with quantised weights, as TensorRT-LLM runs it: fp8_tensor (dynamic per-tensor fp8), "
        "fp8_block (1x128 activation and 128x128 weight scales), nvfp4 (4-bit, one scale per 16 elements).",
    )

    @field_validator("quantization")
    @classmethod
    def _quantized_input_is_16_bit(cls, value: MatmulQuantization, info: ValidationInfo) -> MatmulQuantization:
        _check_16_bit_input(str(value), info.data.get("dtype"))
        return value


class Elementwise(InputModel):
    kind: Literal["elementwise"] = "elementwise"
    elements: Count
    inputs: Annotated[int, Field(ge=0, le=64)] = 1
    outputs: Annotated[int, Field(ge=1, le=64)] = 1
    flops_per_element: PerElement = 1.0
    transcendentals_per_element: PerElement = Field(
        default=0.0, description="exp/sin/tanh… per element, run on the special-function units."
    )
    functions: list[ElementFn] = Field(
        default_factory=list,
        max_length=64,
        description="Functions applied once per element as XLA compiles them (exp, tanh, sin …): each adds XLA's "
        "measured ALU cost on the device's architecture to flops_per_element.",
    )
    chained_inputs: Annotated[int, Field(ge=0, le=64)] = Field(
        default=1,
        description="Inside a chain: how many inputs are earlier ops' outputs (or re-reads of the chain's input), "
        "which stay on chip when the chain is fused. Ignored for the first op of a chain and outside chains.",
    )
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class Activation(InputModel):
    kind: Literal["activation"] = "activation"
    elements: Count = Field(description="Output elements.")
    function: ActivationFn
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class Reduction(InputModel):
    kind: Literal["reduction"] = "reduction"
    rows: Count
    cols: Count = Field(description="Length of each reduced row.")
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class Softmax(InputModel):
    kind: Literal["softmax"] = "softmax"
    rows: Count
    cols: Count
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD
    online: bool = Field(default=True, description="One pass (online max and sum) instead of three.")


class LayerNorm(InputModel):
    kind: Literal["layernorm"] = "layernorm"
    rows: Count
    cols: Count
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class RmsNorm(InputModel):
    kind: Literal["rmsnorm"] = "rmsnorm"
    rows: Count
    cols: Count
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class Rotary(InputModel):
    kind: Literal["rotary"] = "rotary"
    tokens: Count
    heads: Dim
    head_dim: Dim
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class Embedding(InputModel):
    kind: Literal["embedding"] = "embedding"
    tokens: Count
    hidden: Dim
    vocab: Dim
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class CrossEntropy(InputModel):
    kind: Literal["cross_entropy"] = "cross_entropy"
    tokens: Count
    vocab: Dim
    dtype: Dtype = Dtype.bf16
    memory_access: MemoryAccess = ACCESS_FIELD


class AttentionImpl(StrEnum):
    naive = "naive"
    flash = "flash"


class AttentionOpImpl(StrEnum):
    """`naive`: two kernels over all heads, the b·h·q·kv scores written to device memory and read back. `flash`:
    FlashAttention's tiled online softmax as the device's architecture runs it (on Hopper, warp-specialised
    persistent kernels: FlashAttention-3, cuDNN, TensorRT-LLM). `flash2`: FlashAttention-2's kernel on any GPU
    (mma.sync tiles, softmax after the products; PyTorch SDPA's flash backend), which on Hopper reaches about 2/3 of
    the tensor-core peak. `fused_per_head`: one fused kernel per head of one example that keeps that head's q·kv
    scores on chip when they fit (seed 001's "handle each example independently"), else as naive."""

    naive = "naive"
    fused_per_head = "fused_per_head"
    flash = "flash"
    flash2 = "flash2"


class Attention(InputModel):
    kind: Literal["attention"] = "attention"
    batch: Dim
    heads: Dim
    kv_heads: Dim | None = Field(default=None, description="Defaults to heads (MHA); 1 is MQA; between is GQA.")
    head_dim: Dim
    q_len: Dim
    kv_len: Dim
    causal: bool = True
    implementation: AttentionOpImpl = AttentionOpImpl.flash
    dtype: Dtype = Dtype.bf16
    window: Dim | None = Field(
        default=None,
        description="Sliding-window (local) attention: each query sees only its last `window` keys, itself "
        "included (Mistral, Gemma 2 and gpt-oss local layers). Needs `causal`. Unset: every key.",
    )

    # Field validators (not one model validator) so that an error names the field: body.op.kv_heads.
    @field_validator("kv_heads")
    @classmethod
    def _divides_heads(cls, kv_heads: int | None, info: ValidationInfo) -> int | None:
        heads = info.data.get("heads")
        if kv_heads is not None and heads is not None and (kv_heads > heads or heads % kv_heads):
            raise ValueError(f"kv_heads must divide heads ({heads})")
        return kv_heads

    @field_validator("kv_len")
    @classmethod
    def _covers_queries(cls, kv_len: int, info: ValidationInfo) -> int:
        q_len = info.data.get("q_len")
        if q_len is not None and q_len > kv_len:
            raise ValueError(f"kv_len must be at least q_len ({q_len}): queries attend to the cache and themselves")
        return kv_len

    @field_validator("window")
    @classmethod
    def _window_is_causal(cls, window: int | None, info: ValidationInfo) -> int | None:
        if window is not None and info.data.get("causal") is False:
            raise ValueError("a sliding window needs causal: true")
        return window


class MoeQuantization(StrEnum):
    """The experts' products (`roofline.ops.QUANTIZATIONS`): `none` (at `dtype`), `fp8_tensor`, `fp8_block`, `nvfp4`,
    `w4a8_mxfp4_mxfp8` (MXFP4 weights, MXFP8 activations: gpt-oss on Blackwell) or `w4a16_mxfp4` (MXFP4 weights,
    16-bit activations). The activations are quantised inside the expand and activation kernels."""

    none = "none"
    fp8_tensor = "fp8_tensor"
    fp8_block = "fp8_block"
    nvfp4 = "nvfp4"
    w4a8_mxfp4_mxfp8 = "w4a8_mxfp4_mxfp8"
    w4a16_mxfp4 = "w4a16_mxfp4"


class MoeRouting(StrEnum):
    """How the tokens spread over the experts: `uniform` (independent top-k routing, in expectation), `balanced`
    (every expert gets tokens · top_k / experts exactly, as benchmark harnesses route) or `power_law` (experts'
    loads from a bounded power law of exponent `alpha`; the device is the most loaded expert-parallel rank)."""

    uniform = "uniform"
    balanced = "balanced"
    power_law = "power_law"


class MoeLayer(InputModel):
    """A mixture-of-experts FFN on one device, as TensorRT-LLM's fused MoE runs it: routing, expand (permute), the
    gate/up grouped GEMM, the activation, the down grouped GEMM, finalize (unpermute and weighted sum)."""

    kind: Literal["moe"] = "moe"
    tokens: Dim = Field(description="Tokens entering the layer (every token of the expert group, before routing).")
    hidden: Dim
    inter: Dim = Field(description="One expert's intermediate width (moe_intermediate_size), before tensor splits.")
    top_k: Dim
    experts: int = Field(gt=0, le=limits.MAX_EXPERTS, description="Routed experts, 1 … 1 024.")
    tensor: Dim = Field(default=1, description="Devices each expert's intermediate width is split over.")
    expert: Dim = Field(default=1, description="Devices the experts are split over (expert parallelism).")
    gated: bool = Field(default=True, description="SwiGLU (gate and up projections); false: up only (squared ReLU).")
    dtype: Dtype = Dtype.bf16
    quantization: MoeQuantization = MoeQuantization.none
    routing: MoeRouting = MoeRouting.uniform
    alpha: float = Field(default=1.2, gt=1.0, le=3.0, description="The power law's exponent (routing power_law).")

    @field_validator("experts")
    @classmethod
    def _experts_hold_top_k(cls, value: int, info: ValidationInfo) -> int:
        top_k = info.data.get("top_k")
        if top_k is not None and top_k > value:
            raise ValueError(f"experts must be at least top_k ({top_k})")
        return value

    @field_validator("expert")
    @classmethod
    def _expert_divides_experts(cls, value: int, info: ValidationInfo) -> int:
        experts = info.data.get("experts")
        if experts is not None and experts % value:
            raise ValueError(f"expert parallelism must divide experts ({experts})")
        return value

    @field_validator("quantization")
    @classmethod
    def _quantized_input_is_16_bit(cls, value: MoeQuantization, info: ValidationInfo) -> MoeQuantization:
        _check_16_bit_input(str(value), info.data.get("dtype"))
        return value


# The leaf op classes, once: LeafOp, Op and schemas.benchmarks.ResultOp are unions of them on `kind`.
LEAF_OPS = (
    Matmul
    | Elementwise
    | Activation
    | Reduction
    | Softmax
    | LayerNorm
    | RmsNorm
    | Rotary
    | Embedding
    | CrossEntropy
    | Attention
)
LeafOp = Annotated[LEAF_OPS, Field(discriminator="kind")]


class Chain(InputModel):
    """Ops applied one after another, each taking the previous op's output as its first input (a matmul takes it
    as whichever operand has its size). Fused, only the chain's external inputs and final output touch device
    memory, unless a matmul needs a whole intermediate that outgrows on-chip memory."""

    kind: Literal["chain"] = "chain"
    ops: list[LeafOp] = Field(min_length=1, max_length=limits.MAX_CHAIN_OPS)
    fused: bool = True
    backward: Backward | None = Field(
        default=None,
        description="Add the training backward pass (elementwise chains): `store` writes every intermediate in the "
        "forward pass and reloads it; `recompute` keeps only the inputs and recomputes the chain in the backward "
        "kernel (fused chains only).",
    )


# A MoE layer is a whole sequence of kernels: an op of its own, not a leaf of a chain.
Op = Annotated[LEAF_OPS | Chain | MoeLayer, Field(discriminator="kind")]
