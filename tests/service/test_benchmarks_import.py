"""`ridgeline benchmarks import`: the parsers on the shared tables and a synthetic nccl-tests log, and the command
against a live `ridgeline serve` (a second import of the same file stores nothing)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from measured import datasets, importer
from tests.conftest import LiveServer, ridgeline_command

pytestmark = pytest.mark.slow  # the CLI against a live server

VALIDATION = datasets.DATA_DIR

NCCL_LOG = """# nThread 1 nGpus 8 minBytes 8 maxBytes 1048576 step: 1024(factor) warmup iters: 5 iters: 20 agg iters: 1
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on   node-1 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid   4242 on   node-1 device  1 [0x0a] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid   4242 on   node-1 device  2 [0x44] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid   4242 on   node-1 device  3 [0x4a] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    18.48    0.00    0.00      0    18.10    0.00    0.00      0
        8192          2048     float     sum      -1    21.30    0.38    0.58      0    20.90    0.39    0.59      0
     8388608       2097152     float     sum      -1    121.5   69.04  103.56      0    120.9   69.38  104.07      0
# Out of bounds values : 0 OK
"""


def test_nccl_tests_output(tmp_path: Path) -> None:
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(NCCL_LOG)
    parsed = importer.parse("nccl-tests", path)
    assert parsed.device == "NVIDIA A100-SXM4-80GB" and parsed.timing_scope == "kernel"
    assert [r["op"]["bytes"] for r in parsed.results] == [8, 8192, 8388608]
    assert parsed.results[2] == {
        "op": {"kind": "collective", "collective": "all_reduce", "bytes": 8388608, "devices": 4, "dtype": "fp32"},
        "median_s": pytest.approx(121.5e-6),
    }
    other = tmp_path / "out.txt"
    other.write_text(NCCL_LOG)
    with pytest.raises(importer.FormatError, match="--collective"):
        importer.parse("nccl-tests", other)
    assert importer.parse("nccl-tests", other, "all_gather").results[0]["op"]["collective"] == "all_gather"


def test_validation_tables() -> None:
    gemm = importer.parse("aiconfigurator-gemm", VALIDATION / "aiconfigurator-a100" / "gemm_perf.csv")
    assert len(gemm.results) == 9240 and gemm.timing_scope == "graph_replay"  # its bf16 rows
    # The quantised rows are counted, not dropped silently (6 048 of each scheme in the A100 table).
    assert gemm.skipped == {"gemm_dtype int4_wo": 6048, "gemm_dtype int8_wo": 6048, "gemm_dtype sq": 6048}
    first = gemm.results[0]["op"]
    assert first["kind"] == "matmul" and first["dtype"] == "bf16" and isinstance(first["m"], int)
    decode = importer.parse(
        "aiconfigurator-attention", VALIDATION / "aiconfigurator-a100" / "generation_attention_perf.csv"
    )
    assert len(decode.results) == 5026 and all(r["op"]["q_len"] == 1 for r in decode.results)
    softmax = importer.parse("llmcompass", VALIDATION / "llmcompass-a100" / "softmax_A100.csv")
    assert softmax.timing_scope == "wall_clock" and len(softmax.results) == 22
    with pytest.raises(importer.FormatError):
        importer.parse("llmcompass", VALIDATION / "aiconfigurator-a100" / "gemm_perf.csv")


def test_collective_tables() -> None:
    nccl = importer.parse("aiconfigurator-nccl", VALIDATION / "aiconfigurator-a100" / "nccl_perf.csv")
    assert len(nccl.results) == 504
    # message_size counts elements: 256 half elements are 512 bytes (validation/aiconfigurator-a100/README.md);
    # 8.98e-3 ms.
    assert nccl.results[0] == {
        "op": {"kind": "collective", "collective": "all_gather", "bytes": 512, "devices": 2, "dtype": "fp16"},
        "median_s": pytest.approx(8.98e-6),
    }
    ring = importer.parse(
        "llmcompass-allreduce", VALIDATION / "llmcompass-a100" / "allreduce_A100x4_nvlink_transcribed.csv"
    )
    assert ring.results[0]["op"]["devices"] == 4 and ring.results[0]["median_s"] == pytest.approx(12.52e-6)
    vidur = importer.parse("vidur-network", VALIDATION / "vidur" / "network" / "a100_dgx" / "all_reduce.csv")
    # Rank 0, one node only (devices_per_node ≥ workers): the first such row is 2048 bytes over 2 GPUs in 0.010 ms.
    assert vidur.results[0]["op"]["bytes"] == 2048 and vidur.results[0]["median_s"] == pytest.approx(0.010e-3)


def test_import_command_posts_once(live_server: LiveServer, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'live.db'}"
    made = subprocess.run(
        [*ridgeline_command(), "keys", "create", "--name", "importer", "--database-url", db],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    key = made.stdout.strip().splitlines()[-1]
    softmax = VALIDATION / "llmcompass-a100" / "softmax_A100.csv"
    command = [
        *ridgeline_command(), "benchmarks", "import", "--format", "llmcompass", str(softmax),
        "--hardware", "a100-sxm-80gb", "--server", live_server.url, "--token", key, "--batch-size", "10",
    ]  # fmt: skip
    first = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stderr
    assert "batch 2:" in first.stdout and first.stdout.strip().endswith("22 results stored")
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0 and again.stdout.strip().endswith("0 results stored")
    no_key = subprocess.run([*command[:-4], "--batch-size", "10"], capture_output=True, text=True, check=False)
    assert no_key.returncode != 0


def test_a_table_reads_the_same_plain_or_gzip_compressed(tmp_path: Path) -> None:
    """The repository stores large tables as `name.csv.gz`; the importer takes either name, and either form."""
    import gzip

    stored = VALIDATION / "aiconfigurator-b200" / "nccl_perf.csv.gz"
    assert stored.is_file() and not stored.with_name("nccl_perf.csv").exists()
    plain = tmp_path / "nccl_perf.csv"
    plain.write_bytes(gzip.decompress(stored.read_bytes()))
    by_logical_name = importer.parse("aiconfigurator-nccl", stored.with_name("nccl_perf.csv"))
    by_stored_name = importer.parse("aiconfigurator-nccl", stored)
    from_plain = importer.parse("aiconfigurator-nccl", plain)
    assert by_logical_name.results == by_stored_name.results == from_plain.results
    assert len(from_plain.results) == sum(1 for line in plain.read_text().splitlines()[1:] if line.strip())
    assert importer.digest(stored.with_name("nccl_perf.csv"), "x") == importer.digest(stored, "x")
    with pytest.raises(importer.FormatError, match="no such file"):
        importer.parse("aiconfigurator-nccl", tmp_path / "absent.csv")


def test_a_table_of_several_kernels_is_imported_one_kernel_at_a_time(tmp_path: Path) -> None:
    """B200's prefill table holds bf16 rows of two kernels (TensorRT-LLM's own, 2 775; FlashInfer's, 159): without a
    choice the import refuses, naming both; with one, the other kernel's rows and the fp8 ones are counted."""
    table = VALIDATION / "aiconfigurator-b200" / "context_attention_perf.csv"
    with pytest.raises(importer.FormatError, match=r"torch_flow: 2775 rows, torch_flow_flashinfer: 159 rows"):
        importer.parse("aiconfigurator-attention", table)
    chosen = importer.parse("aiconfigurator-attention", table, kernel_source="torch_flow")
    assert len(chosen.results) == 2775 and {r["op"]["kind"] for r in chosen.results} == {"attention"}
    expected = {
        "attn_dtype bfloat16, kv_cache_dtype fp8": 3066,
        "attn_dtype fp8, kv_cache_dtype fp8": 6000,
        "kernel_source torch_flow_flashinfer": 159,
    }
    assert chosen.skipped == expected
    with pytest.raises(importer.FormatError, match="no importable rows of kernel_source 'cudnn'"):
        importer.parse("aiconfigurator-attention", table, kernel_source="cudnn")
    refused = subprocess.run(
        [*ridgeline_command(), "benchmarks", "import", "--format", "aiconfigurator-attention", str(table),
         "--hardware", "b200", "--token", "unused"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "--kernel-source NAME" in refused.stderr
