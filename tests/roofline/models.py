"""The models the core's inference tests run, built directly as `roofline.Transformer` with the shapes of the
catalogue's model configs (hardware_db/models/<slug>.yaml, which cite the models' published configs): what
`adapters.transformer` makes of them, which tests/adapters/test_core_mapping.py holds equal."""

from __future__ import annotations

import roofline

# hardware_db/models/seed-calculator.yaml: seed 004's calculator default, GPT-2 medium's shape.
SEED_CALCULATOR = roofline.Transformer(
    layers=24, hidden=768, heads=16, kv_heads=16, head_dim=48, ffn=3072, gated=False, activation="gelu",
    vocab=50257, position_table=1024,
)  # fmt: skip

# hardware_db/models/llama-3-8b.yaml
LLAMA_3_8B = roofline.Transformer(
    layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, gated=True, activation="silu",
    vocab=128256, tied_embeddings=False, rms_norm=True, rotary=True,
)  # fmt: skip

# hardware_db/models/llama-3-70b.yaml
LLAMA_3_70B = roofline.Transformer(
    layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672, gated=True, activation="silu",
    vocab=128256, tied_embeddings=False, rms_norm=True, rotary=True,
)  # fmt: skip

# hardware_db/models/mixtral-8x7b.yaml
MIXTRAL_8X7B = roofline.Transformer(
    layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, gated=True, activation="silu",
    vocab=32000, tied_embeddings=False, rms_norm=True, rotary=True,
    moe=roofline.Moe(experts=8, top_k=2, expert_ffn=14336),
)  # fmt: skip

# hardware_db/models/mistral-7b.yaml: sliding-window attention over 4096 tokens in every layer.
MISTRAL_7B = roofline.Transformer(
    layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, gated=True, activation="silu",
    vocab=32000, tied_embeddings=False, rms_norm=True, rotary=True, window=4096, window_layers=32,
)  # fmt: skip

# hardware_db/models/deepseek-v3.yaml: 61 layers (3 dense, 58 MoE of 256 experts of 2048, top-8, 1 shared), MLA.
DEEPSEEK_V3 = roofline.Transformer(
    layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=128, ffn=18432, gated=True, activation="silu",
    vocab=129280, tied_embeddings=False, rms_norm=True, rotary=True,
    moe=roofline.Moe(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3),
    mla=roofline.Mla(kv_lora_rank=512, rope_dim=64, nope_dim=128, v_dim=128, q_lora_rank=1536),
)  # fmt: skip

# hardware_db/models/llama-4-maverick.yaml: 48 layers, every other one (1, 3, …) MoE of 128 experts of 8192, top-1, one
# shared expert; the other 24 a dense FFN of 16384.
LLAMA_4_MAVERICK = roofline.Transformer(
    layers=48, hidden=5120, heads=40, kv_heads=8, head_dim=128, ffn=16384, gated=True, activation="silu",
    vocab=202048, tied_embeddings=False, rms_norm=True, rotary=True,
    moe=roofline.Moe(experts=128, top_k=1, expert_ffn=8192, shared_experts=1, layer_step=2),
)  # fmt: skip

# hardware_db/models/gpt-oss-120b.yaml: 36 MoE layers of 128 experts of 2880, top-4, biases; a 128-token window in
# alternate layers (the first windowed).
GPT_OSS_120B = roofline.Transformer(
    layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880, gated=True, activation="silu",
    vocab=201088, tied_embeddings=False, rms_norm=True, rotary=True, bias=True, window=128, window_layers=18,
    moe=roofline.Moe(experts=128, top_k=4, expert_ffn=2880),
)  # fmt: skip

MODELS = {
    "seed-calculator": SEED_CALCULATOR,
    "llama-3-8b": LLAMA_3_8B,
    "llama-3-70b": LLAMA_3_70B,
    "mixtral-8x7b": MIXTRAL_8X7B,
    "mistral-7b": MISTRAL_7B,
    "deepseek-v3": DEEPSEEK_V3,
    "llama-4-maverick": LLAMA_4_MAVERICK,
    "gpt-oss-120b": GPT_OSS_120B,
}
