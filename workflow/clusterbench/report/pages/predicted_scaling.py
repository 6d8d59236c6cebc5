"""The scaling model (:mod:`clusterbench.report.scaling_model`): each multi-worker run's time
per step as measured, against the prediction from its 1-worker run's compute and the
interconnect the comm stage measured; and how much of what the run lost to scaling the network
explains."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.context import Context
from clusterbench.report.text import fmt_pct, list_runs

ORDER = 114

#: The most runs the chart draws (the first in scaling_model.csv's order; all in the CSV).
MAX_RUNS = 24

TITLE = "Scaling model: predicted against measured step time"

CAPTION = (
    "Each multi-worker run's time per step (mean timed epoch / steps per epoch, ◆) against a "
    "prediction: its 1-worker run's time per step scaled to the run's share of the batch "
    "(ideal compute) plus one allreduce of its gradients (parameters × 4 bytes, × 2 with 16-bit "
    "compression) at the time the comm stage measured for its environment and backend, "
    "interpolated at that size (network; no overlap with compute). 'Explained': the network's "
    "share of the gap between measured and ideal compute."
)


def bars(ax: Any, table: pd.DataFrame, book: Any) -> None:
    """Per run: ideal compute and network stacked (the prediction), the measured time."""
    y = np.arange(len(table))
    compute, network = table["compute_s"] * 1e3, table["network_s"] * 1e3
    ax.barh(y, compute, height=0.6, color="#4c72b0", label="ideal compute (1 worker, scaled)")
    ax.barh(y, network, left=compute, height=0.6, color="#dd8452", label="network (comm stage)")
    measured = table["measured_step_s"] * 1e3
    ax.scatter(measured, y, marker="D", color="black", zorder=3, s=36, label="measured")
    right = float(np.nanmax(np.r_[measured, compute + network]))
    for i, r in enumerate(table.itertuples(index=False)):
        ax.annotate(
            gap_words(r),
            (right, i),
            xytext=(12, 0),
            textcoords="offset points",
            va="center",
            fontsize=9,
            color="0.25",
        )
    ax.set_xlim(0, right * 1.6)
    ax.set_xlabel("Time per step (ms)")
    book.run_axis(ax, list(table["run"]))
    # below the axes: the runs' gap annotations fill the right of the plot
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False, fontsize=9)


def gap_words(r: Any) -> str:
    """What the network explains of one run's gap, in words."""
    if not math.isfinite(r.explained):
        return f"no gap (measured {r.measured_step_s * 1e3:.3g} ms)"
    return (
        f"gap {r.gap_s * 1e3:.3g} ms,\nnetwork {r.network_s * 1e3:.3g} ms: "
        f"{fmt_pct(r.explained, 0)} of it"
    )


def summary(predicted: pd.DataFrame) -> str:
    """One line: how much of the gaps the network explains over the runs predicted."""
    explained = predicted["explained"].dropna()
    if explained.empty:
        return "No predicted run lost time to scaling (no gap to explain)."
    return (
        f"Over {len(explained)} run(s) with a gap, the network explains "
        f"{fmt_pct(explained.median(), 0)} of it (median; "
        f"{fmt_pct(explained.min(), 0)} to {fmt_pct(explained.max(), 0)})."
    )


def scatter(ax: Any, table: pd.DataFrame, book: Any) -> None:
    """Predicted (y) against measured (x), the line of a perfect prediction."""
    measured, predicted = table["measured_step_s"] * 1e3, table["predicted_s"] * 1e3
    for name, x, y in zip(table["run"], measured, predicted, strict=True):
        ax.scatter(x, y, color=book.colors.get(name, "0.3"), s=50, zorder=3)
    top = float(np.nanmax(np.r_[measured, predicted])) * 1.1
    ax.plot([0, top], [0, top], ls=":", color="0.4", lw=1.2, label="predicted = measured")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("Measured time per step (ms)")
    ax.set_ylabel("Predicted time per step (ms)")
    ax.legend(loc="upper left", frameon=False, fontsize=9)


def notes(model: pd.DataFrame) -> list[str]:
    """Why runs have no prediction, grouped by reason."""
    missing = model[model["note"] != ""]
    return [
        f"No prediction for {list_runs(sorted(group['run']), 4)}: {why}."
        for why, group in missing.groupby("note", sort=True)
    ]


def draw(ctx: Context) -> None:
    model = ctx.scaling_model
    if model.empty or ctx.comm.empty:
        return  # no multi-worker run, or no comm result (comm.enabled: false): no page
    predicted = model[model["note"] == ""].head(MAX_RUNS)
    lines = notes(model)
    if predicted.empty:
        ctx.book.nothing_to_show(TITLE, CAPTION, "\n".join(lines[:6]))
        return
    if len(predicted) < (model["note"] == "").sum():
        lines.insert(0, f"Shown: the first {len(predicted)} runs (all are in scaling_model.csv).")
    lines.insert(0, summary(predicted))
    fig = ctx.book.new(TITLE, CAPTION, png="scaling-model", note="\n".join(lines))
    grid = fig.add_gridspec(1, 5)
    bars(fig.add_subplot(grid[0, :3]), predicted, ctx.book)
    scatter(fig.add_subplot(grid[0, 3:]), predicted, ctx.book)
