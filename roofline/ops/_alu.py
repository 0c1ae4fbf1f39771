"""Per-element ALU cost of elementwise functions as XLA compiles them for NVIDIA GPUs.

Figures: OpenXLA `xla/service/gpu/model/hlo_op_profiles_data.h` (Apache-2.0; via the ROCm/xla fork @dc660322,
shared/validation/xla), `clock_cycles_per_element_op`: the measured incremental cost of one op per element.
XLA's own cost model (GpuHloCostAnalysis, GpuPerformanceModel) counts it as FLOPs per element and times them at
the device's FP32 FMA rate, and so does Ridgeline: cost / (FP32 vector peak × vector efficiency) per element.
These are XLA's exact-rounding implementations (an exp is a range reduction and a polynomial, ~80 FLOPs; a sine
~1000 on sm_80+), far dearer than the `__expf`-style special-function instructions hand-written kernels use, which
is why a transcendental-heavy chain compiled by XLA can turn compute-bound.
"""

from __future__ import annotations

from collections.abc import Mapping

# architecture -> function -> {"F16" | "F32": cost}
XLA_CYCLES_PER_ELEMENT: Mapping[str, Mapping[str, Mapping[str, int]]] = {
    "sm_70": {
        "add": {"F16": 9, "F32": 6},
        "atan2": {"F16": 449, "F32": 406},
        "cbrt": {"F16": 226, "F32": 189},
        "cos": {"F16": 425, "F32": 373},
        "divide": {"F16": 73, "F32": 21},
        "exp": {"F16": 128, "F32": 79},
        "expm1": {"F16": 241, "F32": 205},
        "log": {"F16": 232, "F32": 180},
        "log1p": {"F16": 266, "F32": 217},
        "multiply": {"F16": 9, "F32": 6},
        "power": {"F16": 709, "F32": 673},
        "rsqrt": {"F16": 122, "F32": 76},
        "sin": {"F16": 425, "F32": 373},
        "sqrt": {"F16": 122, "F32": 76},
        "subtract": {"F16": 9, "F32": 6},
        "tanh": {"F16": 284, "F32": 269},
    },
    "sm_80": {
        "cbrt": {"F16": 1195},
        "log": {"F16": 321, "F32": 259},
        "log1p": {"F16": 346},
        "power": {"F32": 1221},
        "sqrt": {"F16": 124},
        "tanh": {"F16": 499, "F32": 504},
    },
    "sm_90": {
        "add": {"F16": 7, "F32": 7},
        "atan2": {"F16": 451, "F32": 431},
        "cbrt": {"F16": 201, "F32": 178},
        "cos": {"F16": 997, "F32": 978},
        "divide": {"F16": 43, "F32": 19},
        "exp": {"F16": 102, "F32": 79},
        "expm1": {"F16": 217, "F32": 190},
        "log": {"F16": 182, "F32": 166},
        "log1p": {"F16": 245, "F32": 229},
        "multiply": {"F16": 7, "F32": 3},
        "power": {"F16": 526, "F32": 510},
        "rsqrt": {"F16": 95, "F32": 75},
        "sin": {"F16": 993, "F32": 958},
        "sqrt": {"F16": 95, "F32": 75},
        "subtract": {"F16": 7, "F32": 7},
        "tanh": {"F16": 502, "F32": 467},
    },
    "sm_100": {
        "add": {"F16": 7, "F32": 7},
        "atan2": {"F16": 400, "F32": 373},
        "cbrt": {"F16": 200, "F32": 180},
        "cos": {"F16": 1017, "F32": 1002},
        "divide": {"F16": 43, "F32": 23},
        "erf": {"F16": 161, "F32": 161},
        "exp": {"F16": 106, "F32": 82},
        "expm1": {"F16": 216, "F32": 196},
        "log": {"F16": 102, "F32": 165},
        "log1p": {"F16": 216, "F32": 200},
        "logistic": {"F16": 220, "F32": 176},
        "multiply": {"F16": 7, "F32": 7},
        "power": {"F16": 451, "F32": 463},
        "rsqrt": {"F16": 98, "F32": 74},
        "sin": {"F16": 1006, "F32": 990},
        "sqrt": {"F16": 98, "F32": 74},
        "subtract": {"F16": 7, "F32": 7},
        "tanh": {"F16": 141, "F32": 137},
    },
}  # fmt: skip

FUNCTIONS = tuple(sorted({fn for table in XLA_CYCLES_PER_ELEMENT.values() for fn in table}))
GENERATIONS = tuple(XLA_CYCLES_PER_ELEMENT)  # oldest first
FALLBACK_ARCHITECTURE = "sm_90"


def _generation(architecture: str | None) -> int:
    """Position of an `sm_XY` architecture among the measured generations (sm_89 sits between sm_80 and sm_90)."""
    if architecture is None or not architecture.startswith("sm_") or not architecture[3:].isdigit():
        return GENERATIONS.index(FALLBACK_ARCHITECTURE)
    number = int(architecture[3:])
    older = [i for i, name in enumerate(GENERATIONS) if int(name[3:]) <= number]
    return older[-1] if older else 0


def alu_cost(function: str, dtype: str, architecture: str | None) -> tuple[float, str]:
    """FLOPs per element of one `function` on `dtype` for a device of `architecture`, and the table it came from.

    The device's own generation if XLA measured it there, else the nearest older one, else the nearest newer; a
    device with no CUDA architecture (TPU, AMD, CPU) gets the H100 (sm_90) figures. fp16 uses the F16 row; every
    other type the F32 row (XLA computes bf16 elementwise math in f32 on GPUs).
    """
    if function not in FUNCTIONS:
        raise ValueError(f"unknown elementwise function {function!r}; known: {', '.join(FUNCTIONS)}")
    row = "F16" if dtype == "fp16" else "F32"
    start = _generation(architecture)
    order = list(range(start, -1, -1)) + list(range(start + 1, len(GENERATIONS)))
    for index in order:
        costs = XLA_CYCLES_PER_ELEMENT[GENERATIONS[index]].get(function, {})
        if row in costs:
            return float(costs[row]), f"xla {GENERATIONS[index]} {function} {row}"
    for index in order:  # the other precision, where XLA measured only one
        costs = XLA_CYCLES_PER_ELEMENT[GENERATIONS[index]].get(function, {})
        if costs:
            other = next(iter(costs))
            return float(costs[other]), f"xla {GENERATIONS[index]} {function} {other}"
    raise ValueError(f"no XLA cost for {function!r}")  # unreachable: FUNCTIONS comes from the table
