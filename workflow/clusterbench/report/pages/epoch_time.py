"""Time per epoch of each run: mean ± sd over its timed epochs with every single epoch
(left), and the time of each epoch in order (right), the warm-up epochs marked."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from clusterbench.report.book import Book
from clusterbench.report.charts import epoch_axis, log_ticks
from clusterbench.report.context import Context
from clusterbench.report.describe import first_epochs, untimed_note
from clusterbench.report.text import fmt_seconds_sd, plural

ORDER = 90


def draw(ctx: Context) -> None:
    with ctx.per_run_charts() as (runs_df, epochs_df):
        warmup = ctx.warmup
        excluded = (
            f"{plural(warmup, 'warm-up epoch')} excluded per run: {first_epochs(warmup)} "
            f"(start-up costs; hollow dots, shaded) {'is' if warmup == 1 else 'are'} not in the "
            "mean."
            if warmup
            else "No warm-up epoch is excluded: the mean is over all epochs."
        )
        fig = ctx.book.new(
            "Time per epoch",
            "Left: mean \u00b1 sample sd of the time per epoch of each run over its timed epochs "
            "(bars, value and number of epochs printed) and every single epoch (dots). Right: the "
            f"time of each epoch in order. {excluded}",
            png="epoch_time",
            note=untimed_note(runs_df),
        )
        left, right = fig.subplots(1, 2, width_ratios=[1.1, 1])
        all_values = epochs_df["epoch_seconds"].to_numpy(float)
        positive = all_values[all_values > 0]
        lo, hi = (positive.min(), positive.max()) if len(positive) else (0.1, 1.0)
        epoch_bars(ctx.book, left, runs_df, epochs_df, lo, hi)
        epoch_lines(ctx.book, right, epochs_df, lo, hi)


def epoch_bars(
    book: Book, ax, runs_df: pd.DataFrame, epochs_df: pd.DataFrame, lo: float, hi: float
) -> None:
    """Per run: the mean (bar) ± sd, every epoch as a dot (warm-up ones hollow), the mean
    printed; a log axis from ``lo`` / 3, with room for the printed values."""
    order = book.order
    stats = runs_df.set_index("run").reindex(order)
    rng = np.random.default_rng(0)
    for i, name in enumerate(order):
        color = book.colors[name]
        ep = epochs_df[epochs_df["run"] == name]
        timed = ep["timed"].to_numpy(bool)
        vals = ep["epoch_seconds"].to_numpy(float)
        mean, sd, n = stats.loc[name, ["mean_epoch_seconds", "std_epoch_seconds", "timed_epochs"]]
        if math.isfinite(mean):
            ax.barh(i, mean, height=0.6, color=color, alpha=0.45)
            if math.isfinite(sd) and sd > 0:
                ax.errorbar(
                    mean, i, xerr=[[min(sd, mean * 0.999)], [sd]], color="0.25", capsize=3, lw=1
                )
        jitter = rng.uniform(-0.2, 0.2, len(vals)) if len(vals) > 1 else np.zeros(len(vals))
        ax.scatter(
            vals[timed], i + jitter[timed], s=16, color=color, edgecolor="white", lw=0.4, zorder=3
        )
        ax.scatter(
            vals[~timed],
            i + jitter[~timed],
            s=18,
            facecolor="none",
            edgecolor=color,
            lw=1,
            zorder=3,
        )
        label = fmt_seconds_sd(mean, sd, int(n)) if math.isfinite(mean) else "n/a (0 ep.)"
        ax.text(vals.max() * 1.15, i, label, va="center", fontsize=9.5)
    # the bars and dots take the left 55 % of the axis, the printed values the rest
    x_hi = 10 ** (math.log10(lo / 3) + math.log10(hi * 1.15 / (lo / 3)) / 0.55)
    ax.set_xscale("log")
    ax.set_xlim(lo / 3, x_hi)
    log_ticks(ax.xaxis, lo / 3, x_hi)
    book.run_axis(ax, order)
    ax.set_xlabel("Time per epoch (s, log scale)")


def epoch_lines(book: Book, ax, epochs_df: pd.DataFrame, lo: float, hi: float) -> None:
    """Per run: the time of each epoch in order (log scale), the warm-up epochs shaded."""
    warm = epochs_df[~epochs_df["timed"]]
    if not warm.empty:
        ax.axvspan(
            warm["epoch"].min() - 0.5, warm["epoch"].max() + 0.5, color="0.9", zorder=0, lw=0
        )
        ax.text(
            (warm["epoch"].min() + warm["epoch"].max()) / 2,
            1.0,
            "warm-up\n(excluded)",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
            color="0.4",
        )
    for name in book.order:
        ep = epochs_df[epochs_df["run"] == name]
        color = book.colors[name]
        ax.plot(ep["epoch"], ep["epoch_seconds"], color=color, label=name)
        for timed, face in ((True, color), (False, "white")):
            sub = ep[ep["timed"] == timed]
            ax.scatter(
                sub["epoch"],
                sub["epoch_seconds"],
                s=14,
                facecolor=face,
                edgecolor=color,
                lw=1,
                zorder=3,
            )
    ax.set_yscale("log")
    log_ticks(ax.yaxis, lo, hi)
    ax.set_ylabel("Time per epoch (s, log scale)")
    epoch_axis(ax, epochs_df["epoch"])
    ax.legend(
        title="Run",
        fontsize=9.5,
        title_fontsize=10,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
        frameon=False,
    )
