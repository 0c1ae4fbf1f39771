"""Model configurations: the transformer shapes the inference estimates run on."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from schemas import limits
from schemas.common import InputModel, LongText, PositiveFloat, ShortText, Slug, Source, UtcDatetime

# Model shapes: generous (the largest published models are ~130 layers, hidden 25 600, vocab 256 000) but bounded,
# since the inference model allocates per layer and multiplies sizes together (schemas.limits).
Size = Annotated[int, Field(ge=1, le=limits.MAX_DIM)]
Layers = Annotated[int, Field(ge=1, le=limits.MAX_LAYERS)]
Heads = Annotated[int, Field(ge=1, le=limits.MAX_HEADS)]
ContextTokens = Annotated[int, Field(ge=1, le=limits.MAX_CONTEXT_TOKENS)]


class FfnKind(StrEnum):
    standard = "standard"  # up, activation, down: 2·d·f parameters
    gated = "gated"  # gate and up, activation × gate, down (SwiGLU/GeGLU): 3·d·f parameters


class Activation(StrEnum):
    gelu = "gelu"
    gelu_tanh = "gelu_tanh"
    silu = "silu"
    relu = "relu"


class NormKind(StrEnum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Positional(StrEnum):
    learned = "learned"
    rotary = "rotary"
    alibi = "alibi"
    sinusoidal = "sinusoidal"


class Moe(InputModel):
    experts: Heads = Field(description="Routed experts per MoE layer.")
    top_k: Heads = Field(description="Routed experts each token uses.")
    shared_experts: int = Field(default=0, ge=0, le=64, description="Experts every token uses (DeepSeek, Llama 4).")
    expert_ffn_size: Size = Field(description="FFN intermediate size of one expert.")
    dense_layers: int = Field(
        default=0, ge=0, le=100_000, description="Leading layers with a dense FFN (ffn_size) instead of experts."
    )
    layer_step: int = Field(
        default=1,
        ge=1,
        le=limits.MAX_LAYERS,
        description="Past dense_layers, every layer_step-th layer is a MoE layer and the others have a dense FFN "
        "(ffn_size): 1 every layer, 2 every other one (Llama 4 Maverick's interleave_moe_layer_step).",
    )

    @model_validator(mode="after")
    def _top_k(self) -> Moe:
        if self.top_k > self.experts:
            raise ValueError("top_k must not exceed experts")
        return self


class Mla(InputModel):
    """DeepSeek multi-head latent attention (DeepSeek-V2 paper §2.1): the KV cache holds a compressed latent."""

    kv_lora_rank: Size
    q_lora_rank: Size | None = None
    qk_rope_head_dim: Size
    qk_nope_head_dim: Size
    v_head_dim: Size


class ModelSpec(InputModel):
    name: ShortText
    family: ShortText
    layers: Layers
    hidden_size: Size
    heads: Heads = Field(description="Query heads.")
    kv_heads: Heads = Field(description="Key/value heads: = heads for MHA, 1 for MQA, between for GQA.")
    head_dim: Size
    ffn_size: Size = Field(description="FFN intermediate size of a dense layer.")
    ffn_kind: FfnKind
    activation: Activation
    vocab_size: Size
    tied_embeddings: bool
    norm: NormKind
    positional: Positional
    max_context_tokens: ContextTokens
    bias: bool = Field(default=False, description="Linear layers carry bias vectors (GPT-2, GPT-3).")
    sliding_window_tokens: ContextTokens | None = Field(
        default=None, description="Local attention window, where the model has one."
    )
    sliding_window_layers: Annotated[str, Field(max_length=20)] | None = Field(
        default=None, description="Which layers use the window: 'all' or 'alternate' (Gemma 2)."
    )
    moe: Moe | None = None
    mla: Mla | None = None
    reported_parameters: PositiveFloat | None = Field(
        default=None, description="Parameter count the authors report, to check our own count against."
    )
    sources: list[Source] = Field(min_length=1, max_length=limits.MAX_SOURCES)
    notes: list[LongText] = Field(default_factory=list, max_length=limits.MAX_SOURCES)

    @model_validator(mode="after")
    def _shapes(self) -> ModelSpec:
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise ValueError("kv_heads must divide heads")
        if self.sliding_window_layers not in (None, "all", "alternate"):
            raise ValueError("sliding_window_layers must be 'all' or 'alternate'")
        if (self.sliding_window_layers is None) != (self.sliding_window_tokens is None):
            raise ValueError("sliding_window_tokens and sliding_window_layers go together")
        moe = self.moe
        if (
            moe is not None
            and moe.dense_layers < self.layers
            and self.layers // moe.layer_step <= moe.dense_layers // moe.layer_step
        ):
            # The layers past dense_layers hold no multiple of the step: named as the field at fault.
            message = f"leaves no MoE layer among the model's {self.layers} layers (dense_layers {moe.dense_layers})"
            detail = InitErrorDetails(
                type="value_error", loc=("moe", "layer_step"), input=moe.layer_step, ctx={"error": ValueError(message)}
            )
            raise ValidationError.from_exception_data(type(self).__name__, [detail])
        return self


class ModelCreate(ModelSpec):
    slug: Slug


class ModelRead(ModelCreate):
    builtin: bool
    version: int = Field(description="1, 2, …: every change of the config is a new version (kept).")
    created_at: UtcDatetime
    updated_at: UtcDatetime


class ModelSummary(BaseModel):
    slug: str
    name: str
    family: str
    builtin: bool
