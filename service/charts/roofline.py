"""The roofline chart of a hardware profile for one dtype, with measured results plotted on it (matplotlib, Agg).

Log-log: arithmetic intensity (FLOP per byte of device memory) against FLOP/s. The memory roof is bandwidth ×
intensity; the compute roofs are the matrix unit's and the vector unit's peaks for the dtype; each meets the memory
roof at its ridge point (peak / bandwidth), marked. Dashed: the same roofs at the profile's default efficiencies
(what well-tuned kernels reach). A measured result sits at its op's intensity and its achieved FLOP/s (the op's
FLOPs over the measured median); how far below the roof it sits is how far from the model it ran.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

MAX_POINTS = 5000
# Okabe-Ito colours (colour-blind safe) other than the roofs' red and blue, one per op family.
PALETTE = ("#E69F00", "#009E73", "#CC79A7", "#8C564B", "#D55E00", "#7F7F7F", "#F0E442", "#000000")
LABEL_BOX = {"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
SI = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


@dataclass
class Roofs:
    name: str
    dtype: str
    bandwidth_bytes_per_s: float
    matrix_flops_per_s: float | None
    vector_flops_per_s: float
    eff_memory: float
    eff_matrix: float
    eff_vector: float


@dataclass
class Points:
    """Measured results: intensity (FLOP/byte) and achieved FLOP/s, with each one's op family."""

    intensity: list[float] = field(default_factory=list)
    achieved: list[float] = field(default_factory=list)
    family: list[str] = field(default_factory=list)
    total: int = 0  # before sampling down to MAX_POINTS


def _si(value: float, unit: str) -> str:
    for scale, prefix in SI:
        if abs(value) >= scale:
            number = value / scale
            text = f"{number:.0f}" if number >= 10 or number == int(number) else f"{number:.1f}"
            return f"{text} {prefix}{unit}"
    return f"{value:g} {unit}"


def render(roofs: Roofs, points: Points, fmt: str) -> bytes:
    """The chart as SVG or PNG bytes."""
    bw = roofs.bandwidth_bytes_per_s
    peaks: list[tuple[str, float, float]] = [("vector", roofs.vector_flops_per_s, roofs.eff_vector)]
    if roofs.matrix_flops_per_s and abs(roofs.matrix_flops_per_s / roofs.vector_flops_per_s - 1) < 0.01:
        peaks = [("both", roofs.matrix_flops_per_s, roofs.eff_matrix)]  # a CPU: one roof, not two on top of each other
    elif roofs.matrix_flops_per_s:
        peaks.insert(0, ("matrix", roofs.matrix_flops_per_s, roofs.eff_matrix))
    top = max(peak for _, peak, _ in peaks)
    ridges = [peak / bw for _, peak, _ in peaks]
    ai = np.asarray(points.intensity, dtype=np.float64)
    perf = np.asarray(points.achieved, dtype=np.float64)
    # From three decades left of the ridge to two right of it, widened to show every measured point.
    x_lo, x_hi = min(ridges) / 1000, max(ridges) * 100
    y_lo, y_hi = bw * x_lo, top * 3
    if ai.size:
        x_lo, x_hi = min(x_lo, float(ai.min()) / 3), max(x_hi, float(ai.max()) * 3)
        y_lo = min(y_lo, float(perf.min()) / 3)

    fig = Figure(figsize=(10, 6.4), dpi=110, layout="constrained")
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.grid(True, which="major", color="#d0d0d0", linewidth=0.7)
    ax.grid(True, which="minor", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)

    x = np.geomspace(x_lo, x_hi, 400)
    ax.plot(x, np.minimum(bw * x, top), color="#222222", linewidth=0, alpha=0)  # keeps autoscale honest
    ax.plot(x, bw * x, color="#444444", linewidth=1.0, linestyle=":", alpha=0.6)
    styles = {
        "matrix": ("#B2182B", "Matrix unit"),
        "vector": ("#2166AC", "Vector unit"),
        "both": ("#B2182B", "Matrix and vector units"),
    }
    for unit, peak, eff in peaks:
        colour, label = styles[unit]
        ridge = peak / bw
        ax.plot(x, np.minimum(bw * x, peak), color=colour, linewidth=2.2, label=f"{label} peak: {_si(peak, 'FLOP/s')}")
        achievable = np.minimum(bw * roofs.eff_memory * x, peak * eff)
        at = f"{label} at default efficiency ({eff:.0%} of peak, {roofs.eff_memory:.0%} of bandwidth)"
        ax.plot(x, achievable, color=colour, linewidth=1.2, linestyle="--", alpha=0.7, label=at)
        ax.plot([ridge], [peak], marker="o", markersize=8, color=colour, markeredgecolor="white", zorder=5)
        # Above the roof, to the left of the ridge: where no measurement can be.
        ax.annotate(
            f"ridge point: {ridge:,.1f} FLOP/B", xy=(ridge, peak), xytext=(-14, 16), textcoords="offset points",
            ha="right", va="bottom", fontsize=9, color=colour, bbox=LABEL_BOX,
            arrowprops={"arrowstyle": "-", "color": colour, "linewidth": 0.8},
        )  # fmt: skip
    # The memory roof's label, along its slope in the lower left.
    x_mem = x_lo * 8
    ax.annotate(
        f"memory: {_si(bw, 'B/s')}", xy=(x_mem, bw * x_mem), xytext=(-4, 8), textcoords="offset points",
        rotation=_slope_degrees(ax, fig), rotation_mode="anchor", fontsize=9, color="#444444", bbox=LABEL_BOX,
    )  # fmt: skip

    families = list(dict.fromkeys(points.family))
    for i, family in enumerate(families):
        pick = np.array([f == family for f in points.family])
        ax.scatter(ai[pick], perf[pick], s=12, alpha=0.55, color=PALETTE[i % len(PALETTE)], edgecolors="none",
                   label=f"measured {family} ({int(pick.sum())})", zorder=4)  # fmt: skip

    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=20))
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=20))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _si(v, "FLOP/s")))
    ax.set_xlabel("Arithmetic intensity (FLOP per byte of device memory traffic)", fontsize=11)
    ax.set_ylabel("Performance (FLOP/s)", fontsize=11)
    sampled = f", {len(points.intensity):,} of them plotted" if points.total > len(points.intensity) else ""
    measured = f"{points.total:,} measured results{sampled}" if points.total else "no measured results yet"
    ax.set_title(f"{roofs.name}: {roofs.dtype} roofline\n{measured}", fontsize=13, loc="left")
    ax.legend(loc="lower right", fontsize=8.5, framealpha=0.92, markerscale=1.8)

    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return buffer.getvalue()


def _slope_degrees(ax: object, fig: Figure) -> float:
    """The on-screen angle of a slope-1 line on the log-log axes (depends on the axes' aspect)."""
    fig.canvas.draw_idle()
    bbox = ax.get_window_extent()  # type: ignore[attr-defined]
    x0, x1 = ax.get_xlim()  # type: ignore[attr-defined]
    y0, y1 = ax.get_ylim()  # type: ignore[attr-defined]
    dx = bbox.width / math.log10(x1 / x0)
    dy = bbox.height / math.log10(y1 / y0)
    return math.degrees(math.atan2(dy, dx))
