"""scripts/measure_gpu.py's pure helpers (its timing needs PyTorch and a GPU; bench/heldout/h200 is its output)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "measure_gpu.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("measure_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_sample_is_spread_evenly_and_keeps_short_lists() -> None:
    m = _module()
    assert m.sample(list(range(10)), 3) == [0, 3, 6]  # steps of 10 / 3: indices 0, 3.33, 6.67
    assert m.sample([1, 2], 5) == [1, 2]


def test_weight_copies_cover_three_l2s_between_one_and_sixteen() -> None:
    m = _module()
    l2 = 60 << 20
    assert m.copies_for(60 << 20, l2) == 3  # one L2 each: three of them
    assert m.copies_for(1 << 20, l2) == 16  # 180 needed, capped
    assert m.copies_for(1 << 30, l2) == 1


def test_a_product_of_milliseconds_runs_once_per_graph() -> None:
    """Guess 2mnk / 600 TFLOP/s + bytes / 3 TB/s: 16384³ is ~15 ms, one call; 1024³ ~4 µs, 8 calls over 2 copies."""
    m = _module()
    assert m.repeats(16384, 16384, 16384, 1) == 1
    assert m.repeats(1024, 1024, 1024, 2) == 4
    assert m.repeats(1024, 1024, 1024, 16) == 1
