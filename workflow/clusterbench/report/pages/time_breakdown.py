"""Where the time goes: each run's training step split into waiting for data, forward and
backward, exposed gradient communication, the optimizer and the rest, as stacked bars in per
cent of the run's step (runs of very different speeds side by side): the mean over the ranks
(left, 100 %, the step's milliseconds beside) and each phase's slowest rank (right: a
straggler pushes the bar past 100 %)."""

from __future__ import annotations

import numpy as np

from clusterbench.report.context import Context
from clusterbench.report.describe import first_epochs
from clusterbench.report.step_times import PHASE_NAMES, breakdown

ORDER = 105
#: The phases' colours, in the stack's order.
COLOURS = {
    "data": "#e69f00",
    "compute": "#0072b2",
    "comm": "#d55e00",
    "optimizer": "#009e73",
    "other": "#bbbbbb",
}


def caption(warmup: int) -> str:
    return (
        "Each training step in its phases, measured on every rank without adding "
        "synchronisation (perf_counter on the CPU, CUDA events on GPUs): waiting for data, "
        "forward + backward, gradient communication left exposed (after backward; DDP's "
        "overlapped buckets from the last one ready), the optimizer, and the rest. Mean over "
        "the timed epochs"
        + (f" ({first_epochs(warmup)} of each run excluded)" if warmup else "")
        + ", in per cent of the run's mean step (milliseconds beside). Left: the mean over the "
        "ranks; right: each phase's slowest rank (a straggler goes past 100 %)."
    )


def draw(ctx: Context) -> None:
    with ctx.per_run_charts() as (runs_df, _):
        means, slowest = breakdown(runs_df, "mean"), breakdown(runs_df, "max")
        if means.empty:
            return  # no run recorded a breakdown (older runs, or CLUSTERBENCH_STEP_TIMES=off)
        slowest["other"] = means["other"]  # the rest of the step has no rank's maximum
        book = ctx.book
        fig = book.new("Where the time goes", caption(ctx.warmup), png="time_breakdown")
        order = [name for name in book.order if name in means.index]
        step = means.reindex(order).sum(axis=1)  # the mean step: the phases and the rest
        mean_ax, max_ax = fig.subplots(1, 2, sharey=True)
        stack(mean_ax, 100 * means.reindex(order).div(step, axis=0), 1000 * step, "ms")
        stack(max_ax, 100 * slowest.reindex(order).div(step, axis=0), None, "%")
        for ax, title in ((mean_ax, "Mean over the ranks"), (max_ax, "Slowest rank, per phase")):
            ax.set_title(f"{title} (% of the run's mean step)", fontsize=11)
            ax.axvline(100, color="0.3", lw=0.8, ls=":")
            ax.tick_params(axis="x", labelsize=9)
        book.run_axis(mean_ax, order)
        max_ax.tick_params(axis="y", left=False, labelleft=False)
        legend = fig.legend(
            handles=legend_handles(),
            loc="lower center",
            bbox_to_anchor=(0.5, 0.03),
            ncols=len(COLOURS),
            frameon=False,
            fontsize=9,
        )
        legend.set_in_layout(False)  # in a margin above the footer, kept free of the charts:
        engine = fig.get_layout_engine()
        x, y, width, height = engine.get()["rect"]
        engine.set(rect=(x, y + 0.04, width, height - 0.04))
        top = float(np.nanmax(100 * slowest.reindex(order).sum(axis=1).div(step))) if order else 100
        for ax in (mean_ax, max_ax):
            ax.set_xlim(0, max(100.0, top) * 1.3)


def legend_handles() -> list:
    from matplotlib.patches import Patch

    return [Patch(color=colour, label=PHASE_NAMES[phase]) for phase, colour in COLOURS.items()]


def stack(ax, table, totals, unit: str) -> None:
    """One horizontal bar per run, its phases stacked left to right; beside it ``totals`` (in
    ``unit``), or the bar's own length."""
    left = np.zeros(len(table))
    for phase, colour in COLOURS.items():
        values = table[phase].fillna(0).to_numpy()
        ax.barh(range(len(table)), values, left=left, color=colour, height=0.6)
        left += values
    shown = left if totals is None else np.asarray(totals)
    for y, (end, value) in enumerate(zip(left, shown, strict=True)):
        ax.text(end, y, f"  {value:,.1f} {unit}", va="center", fontsize=9)
