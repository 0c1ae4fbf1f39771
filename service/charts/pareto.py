"""The capacity plan's chart: every candidate's operating point, output tokens/s per device against output tokens/s
per user, the Pareto frontier through them, and the plan's choice (matplotlib, Agg).

Per user is the decode speed one request sees (1 / its time per output token); per device is the fleet's
throughput over its devices. A deployment trades one for the other with its batch: the frontier is the best
throughput per device available at each speed per user (the chart aiconfigurator and NVIDIA's serving guides draw).
A TPOT objective is a floor on per-user speed (1 / TPOT), drawn as a vertical line.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from matplotlib.figure import Figure

from service.charts.roofline import LABEL_BOX, PALETTE


@dataclass
class Frontier:
    title: str
    per_user: list[float] = field(default_factory=list)
    per_device: list[float] = field(default_factory=list)
    group: list[str] = field(default_factory=list)  # hardware and mode, one colour each
    meets: list[bool] = field(default_factory=list)  # meets the objectives at its operating point
    frontier: list[int] = field(default_factory=list)
    chosen: int | None = None
    chosen_label: str = ""
    tpot_s: float | None = None


def render(chart: Frontier, fmt: str) -> bytes:
    """The chart as SVG or PNG bytes."""
    fig = Figure(figsize=(10, 6.4), dpi=110, layout="constrained")
    ax = fig.subplots()
    ax.grid(True, color="#d0d0d0", linewidth=0.7)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    groups = list(dict.fromkeys(chart.group))
    for i, group in enumerate(groups):
        colour = PALETTE[i % len(PALETTE)]
        for meets, marker, alpha in ((True, "o", 0.85), (False, "x", 0.45)):
            pick = [j for j, g in enumerate(chart.group) if g == group and chart.meets[j] == meets]
            if pick:
                label = f"{group}" + ("" if meets else " (misses at its batch)")
                ax.scatter([chart.per_user[j] for j in pick], [chart.per_device[j] for j in pick], s=22,
                           marker=marker, color=colour, alpha=alpha, label=label, zorder=3)  # fmt: skip
    if chart.frontier:
        xs = [chart.per_user[j] for j in chart.frontier]
        ys = [chart.per_device[j] for j in chart.frontier]
        ax.step(xs, ys, where="post", color="#222222", linewidth=1.6, label="Pareto frontier", zorder=4)
    if chart.tpot_s:
        ax.axvline(1.0 / chart.tpot_s, color="#B2182B", linestyle="--", linewidth=1.2,
                   label=f"TPOT objective: ≥ {1.0 / chart.tpot_s:,.1f} tokens/s per user")  # fmt: skip
    if chart.chosen is not None:
        x, y = chart.per_user[chart.chosen], chart.per_device[chart.chosen]
        ax.scatter([x], [y], s=220, marker="*", color="#B2182B", edgecolors="white", zorder=5, label="chosen")
        ax.annotate(chart.chosen_label, xy=(x, y), xytext=(12, 12), textcoords="offset points", fontsize=8.5,
                    bbox=LABEL_BOX, arrowprops={"arrowstyle": "-", "color": "#B2182B", "linewidth": 0.8})  # fmt: skip
    ax.set_xlabel("Output tokens/s per user (1 / time per output token)", fontsize=11)
    ax.set_ylabel("Output tokens/s per device", fontsize=11)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title(chart.title, fontsize=13, loc="left")
    ax.legend(loc="upper right", fontsize=8.5, framealpha=0.92)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return buffer.getvalue()
