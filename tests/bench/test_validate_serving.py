"""bench.validate_serving: every measured row is either simulated or counted with its reason (none dropped
silently), and the backends' scheduler defaults are the ones the module cites."""

from __future__ import annotations

import csv

import pytest

from bench import validate_serving as vs
from measured.datasets import data_dir, open_text, resolve
from tests.bench.conftest import group

# Every row simulated, once per test process (tests/bench/conftest.py), beside the baseline's serving section.
ALL_ROWS = [pytest.mark.slow, group("serving")]


@pytest.mark.parametrize("limit", [pytest.param(None, marks=ALL_ROWS), 12])  # all rows; a sample of 12
def test_every_silicon_row_is_simulated_or_listed(limit: int | None) -> None:
    root = vs.data_dir(data_dir(None))
    with open_text(resolve(root / vs.SILICON)) as f:
        total = sum(1 for _ in csv.DictReader(f))
    rows, skipped = vs.silicon_rows(root, limit=limit)
    sampled = len(range(0, total, max(1, total // limit))) if limit else total
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


def test_aggregated_layouts_written_as_tensor_times_expert_are_read_as_the_engine() -> None:
    # The same measurement (DeepSeek-R1, B200, TensorRT-LLM, 1024/1024, TPOT 9.405 ms) is in two source files: once
    # as tensor 4, MoE tensor 1 × expert 4 (aiconfigurator's schema), once as tensor 16, MoE tensor 4 × expert 4.
    row = {"backend": "trtllm", "attention_dp_size": "1", "moe_ep_size": "4"}
    assert vs.agg_layout(row | {"tp_size": "4", "moe_tp_size": "1"}) == (4, 1, 4)
    assert vs.agg_layout(row | {"tp_size": "16", "moe_tp_size": "4"}) == (4, 1, 4)
    # Attention-DP 8 with experts over 8 (MoE 1 × 8), and the same engine written as attention-DP 64, MoE 8 × 8.
    dep = {"backend": "trtllm", "tp_size": "1", "moe_ep_size": "8"}
    assert vs.agg_layout(dep | {"attention_dp_size": "8", "moe_tp_size": "1"}) == (1, 8, 8)
    assert vs.agg_layout(dep | {"attention_dp_size": "64", "moe_tp_size": "8"}) == (1, 8, 8)
    # Tensor-parallel experts without expert parallelism stay as written, and so does TensorRT-LLM's tensor 8 with
    # its experts as MoE tensor 2 × expert 4 (an expert group of 4 cannot live on 2 GPUs).
    assert vs.agg_layout(row | {"tp_size": "8", "moe_tp_size": "8", "moe_ep_size": "1"}) == (8, 1, 1)
    assert vs.agg_layout(row | {"tp_size": "8", "moe_tp_size": "2"}) == (8, 1, 4)


@pytest.mark.slow
@group("serving")
def test_disaggregated_rows_without_worker_counts_are_listed_not_guessed() -> None:
    root = vs.data_dir(data_dir(None))
    with open_text(resolve(root / vs.SILICON)) as f:
        table = list(csv.DictReader(f))
    unknown = {r["id"] for r in table if r["mode"] == "disagg" and not r["decode_num_workers"]}
    assert unknown, "the table holds disaggregated rows without worker counts"
    rows, skipped = vs.silicon_rows(root)
    assert not unknown & {r["id"] for r in rows}
    assert {s["id"] for s in skipped if "without worker counts" in s["why"]} == unknown


def test_experts_split_wider_than_the_attention_tensor_group_are_spread_as_expert_parallelism() -> None:
    # Attention-DP 8 with tensor-parallel experts (MoE 8 × 1): each device holds 1/8 of every layer's experts, as
    # expert parallelism over the 8 devices does; experts within the tensor group stay as written.
    assert vs.expert_group(1, 8, 1) == 8
    assert vs.expert_group(1, 4, 8) == 32
    assert vs.expert_group(8, 8, 1) == 1
    assert vs.expert_group(8, 1, 8) == 8
    assert vs.expert_group(8, 2, 4) == 4
    row = {"backend": "trtllm", "tp_size": "1", "attention_dp_size": "4", "moe_tp_size": "4", "moe_ep_size": "1"}
    assert vs.agg_layout(row) == (1, 4, 4)
    # A dense model's row with attention-DP and MoE columns of 0 (not used): tensor 2 alone.
    dense = {"backend": "trtllm", "tp_size": "2", "attention_dp_size": "0", "moe_tp_size": "0", "moe_ep_size": "0"}
    assert vs.agg_layout(dense) == (2, 1, 1)


def test_aggregated_replicas_come_from_the_per_rank_batch() -> None:
    # aiconfigurator's batch_size is the concurrency per attention rank of one worker: 288 clients at 144 per
    # worker are 2 workers; 256 at 4 per rank of 64 attention-DP ranks, one.
    row = {"batch_size": "144", "attention_dp_size": "0"}
    assert vs.agg_replicas(row, 288) == 2
    assert vs.agg_replicas({"batch_size": "4", "attention_dp_size": "64"}, 256) == 1
    assert vs.agg_replicas({"batch_size": "", "attention_dp_size": "1"}, 8) == 1
    assert vs.agg_replicas({"batch_size": "3", "attention_dp_size": "1"}, 8) == 1  # not a whole number of workers
