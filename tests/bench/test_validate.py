"""`python -m bench.validate`: op families against the measured tables (figures held by tests/bench/test_report.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import validate
from measured.datasets import data_dir, xla
from tests.bench.conftest import group

FAMILIES = {
    "aiconfigurator": {"gemm", "attention-context", "attention-generation"},
    "vidur": {"gemm", "rmsnorm", "layernorm", "rope", "activation", "elementwise", "embedding"},
    "llmcompass": {"gemm", "softmax", "layernorm", "activation"},
}
A100 = "a100-sxm-80gb"
# aiconfigurator's tables of newer generations, each on its catalogue profile (bf16 GEMMs and attention).
GENERATIONS = {"b200", "l40s", "rtx-pro-6000-server"}
# XLA's matmul table (validation/xla): B200 and gfx950 (MI355X), 16-bit, fp8 and f32 products.
XLA = {("xla", f, device) for f in ("gemm", "gemm-fp8", "gemm-fp32") for device in ("b200", "mi355x")}
# Their quantised GEMMs: dynamic per-tensor fp8 and 1x128-block fp8 on all three, NVFP4 where the device has fp4.
QUANTISED = {("aiconfigurator", f, d) for f in ("gemm-fp8", "gemm-fp8-block", "moe") for d in GENERATIONS} | {
    ("aiconfigurator", "gemm-fp4", d) for d in ("b200", "rtx-pro-6000-server")
}
EXPECTED = (
    {(s, f, A100) for s, families in FAMILIES.items() for f in families}
    | {("aiconfigurator", f, device) for f in FAMILIES["aiconfigurator"] for device in GENERATIONS}
    | QUANTISED
    | XLA
)


def test_every_source_family_and_device_is_reported(fresh: dict[str, Any]) -> None:
    assert {(r["source"], r["family"], r["device"]) for r in fresh["ops"].values()} == EXPECTED
    assert all(r["count"] > 0 and len(r["worst"]) == min(3, r["count"]) for r in fresh["ops"].values())


@pytest.mark.slow  # every measured table parsed and predicted
@group("ops")
def test_the_command_writes_the_report_as_json(tmp_path: Path) -> None:
    out = tmp_path / "accuracy.json"
    assert validate.main(["--json", str(out), "--worst", "2"]) == 0
    doc = json.loads(out.read_text())
    assert doc["hardware"] == A100
    rows = {(r["source"], r["family"], r["device"]): r for r in doc["families"]}
    assert set(rows) == EXPECTED
    assert all(len(r["worst"]) <= 2 for r in rows.values())


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate.main(["--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "validation data not found" in err and "nowhere" in err


def test_the_newer_generations_count_their_bf16_rows(fresh: dict[str, Any]) -> None:
    # validation/aiconfigurator-{b200,l40s,rtx-pro-6000}/README.md: 30 000 GEMM rows, an equal share per dtype (4 on
    # B200 and the RTX PRO 6000: bf16, fp8, fp8_block, nvfp4; 3 on L40S, which has no nvfp4); 6 000 decode rows with
    # a bf16 KV cache of 12 000.
    ops = fresh["ops"]
    assert ops["aiconfigurator/gemm/b200"]["count"] == 30_000 // 4
    assert ops["aiconfigurator/gemm/rtx-pro-6000-server"]["count"] == 30_000 // 4
    assert ops["aiconfigurator/gemm/l40s"]["count"] == 30_000 // 3
    assert ops["aiconfigurator/attention-generation/b200"]["count"] == 12_000 // 2
    assert ops["aiconfigurator/attention-generation/rtx-pro-6000-server"]["count"] == 12_000 // 2


def test_xlas_table_is_read_as_its_readme_says() -> None:
    """validation/xla/README.md: `device, b, m, n, k, types, flops_per_s, time_us`; 375 shapes per device and type
    signature. Its first row: sm_100_B200, 1 × 256³, bf16xbf16->bf16, 4.96 µs."""
    groups = {(g.device, g.labels[0].split()[0]): g for g in xla(data_dir())}
    first = groups[("b200", "bf16xbf16->bf16")]
    assert (first.source, first.family, first.scope) == ("xla", "gemm", "xla")
    assert first.labels[0] == "bf16xbf16->bf16 b=1 m=256 n=256 k=256"
    assert first.measured_s[0] == pytest.approx(4.96e-6)
    assert all(g.measured_s.size == 375 for g in groups.values())
    assert len([key for key in groups if key[0] == "mi355x"]) == 16 and len(groups) == 21
    f32 = groups[("mi355x", "f32xf32->f32")].parts[0].op
    assert (f32.dtype, f32.out_dtype, f32.precision) == ("fp32", "fp32", "default")  # XLA's default precision
    fp8 = groups[("mi355x", "f8e4m3fnxf8e5m2->bf16")]
    assert (fp8.family, fp8.parts[0].op.dtype, fp8.parts[0].op.out_dtype) == ("gemm-fp8", "fp8", "bf16")


def test_leave_one_device_out_text_renders_every_constant() -> None:
    """The text report of `--leave-one-device-out` prints each fold's constants, the narrow products' efficiency
    table (key, value pairs) included, with the devices each entry was derived from (it once raised on the table)."""
    from dataclasses import replace

    from bench import loo

    derived = replace(loo.SHIPPED, narrow_matmul_efficiency=(("fp8", 0.92), ("fp8_block", 0.61)), sources={
        "narrow_matmul_efficiency.fp8": "l40s, rtx-pro-6000-server", "kernel_floor_s": "b200"})  # fmt: skip
    row = {"median_ape": 0.1, "p90_ape": 0.2, "bias": -0.05}
    doc = {
        "rows": [{"source": "aiconfigurator", "family": "gemm", "device": "b200", "count": 3, "in_sample": row,
                  "loo": row}],
        "constants": {"shipped": validate._constants(loo.SHIPPED), "without b200": validate._constants(derived)},
    }  # fmt: skip
    text = "\n".join(validate.render_loo(doc))
    assert "without b200: fp8 0.92, fp8_block 0.61 [fp8: l40s, rtx-pro-6000-server]" in text
    assert "without b200: 2.50 µs [b200]" in text


@pytest.mark.slow  # every measured table parsed and predicted
@group("ops")
def test_the_warm_attention_scopes_differ_from_the_cold_ones_by_the_cache_state_alone() -> None:
    """TensorRT-LLM 1.3's attention tables are timed warm (docs/decisions/0035): their scopes carry the same fixed
    costs as the A100's cold ones, shipped and re-derived leave one device out, and only those tables use them."""
    from dataclasses import replace

    from bench import loo

    derived = replace(
        loo.SHIPPED, kernel_floor_s=1.8e-6, context_plateau_cycles=21_000.0, generation_plateau_cycles=16_000.0
    )
    for scopes in (validate.SCOPES, validate.scopes_of(derived)):
        for phase in ("context", "generation"):
            cold, warm = scopes[f"aiconfigurator-{phase}"], scopes[f"aiconfigurator-{phase}-warm"]
            same = ("launch_s", "call_s", "floor_s", "call_cycles")
            assert [getattr(warm, x) for x in same] == [getattr(cold, x) for x in same]
            assert warm.warm_cache and not cold.warm_cache
    # On B200 (1 965 MHz): 21 000 cycles = 10.69 µs of plateau, less the two modelled kernels at 1.8 µs.
    context = validate.scopes_of(derived)["aiconfigurator-context-warm"]
    assert float(context.measured(np.asarray(2 * 1.8e-6), 1.965e9)) == pytest.approx(21_000 / 1.965e9)
    assert float(context.measured(np.asarray(2 * 1.8e-6 + 5e-6), 1.965e9)) == pytest.approx(21_000 / 1.965e9 + 5e-6)
    groups = validate.load()
    warm_devices = {g.device for g in groups if validate.SCOPES[g.scope].warm_cache}
    assert warm_devices == GENERATIONS
    assert {g.family for g in groups if validate.SCOPES[g.scope].warm_cache} == {
        "attention-context", "attention-generation"}  # fmt: skip
