"""bench.validate_serving: every measured row is either simulated or counted with its reason (none dropped
silently), and the backends' scheduler defaults are the ones the module cites."""

from __future__ import annotations

import csv

from bench import validate_serving as vs
from service.benchmarks.datasets import data_dir, open_text, resolve


def test_every_silicon_row_is_simulated_or_listed() -> None:
    root = data_dir(None)
    with open_text(resolve(root / vs.SILICON)) as f:
        total = sum(1 for _ in csv.DictReader(f))
    rows, skipped = vs.silicon_rows(root, limit=120)
    sampled = len(range(0, total, max(1, total // 120)))
    assert len(rows) + len(skipped) == sampled
    assert rows, "some rows are expressible"
    assert all(s["why"] for s in skipped)
    for r in rows:
        assert r["pred_ttft_s"] > 0 and r["pred_tpot_s"] > 0
        assert r["tpot_error"] == r["pred_tpot_s"] / r["tpot_s"] - 1.0


def test_backend_defaults_are_the_engines_own() -> None:
    assert vs.ENGINES["trtllm"].kv_policy == "reserve" and vs.ENGINES["trtllm"].block_size == 32
    assert vs.ENGINES["vllm"].kv_policy == "on_demand" and vs.ENGINES["vllm"].block_size == 16
    assert vs.ENGINES["vllm"].max_num_batched_tokens == 8192
