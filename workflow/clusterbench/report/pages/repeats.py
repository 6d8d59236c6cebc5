"""Repeats, per experiment whose points ran more than once: mean ± sd over the seeds of the
validation and test accuracy and of the time per epoch, as error bars."""

from __future__ import annotations

import numpy as np

from clusterbench.report.charts import at_most_bars, no_time, set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.tables import point_table

ORDER = 60


def draw(ctx: Context) -> None:
    runs_df = ctx.runs_df
    for exp in [e for e in runs_df["experiment"].unique() if e]:
        table = point_table(runs_df, exp)
        if not (table["repeats"] > 1).any():
            continue
        shown, cut = at_most_bars(table, "points")
        fig = ctx.book.new(
            f"Repeats: {exp}",
            "Each point's runs with different seeds: mean \u00b1 sd (error bars) over "
            f"{int(shown['repeats'].max())} seed(s) of the final validation accuracy, the test "
            "accuracy and the time per epoch." + cut,
            png=f"repeats-{exp}",
        )
        axes = fig.subplots(1, 2, sharey=True)
        y = np.arange(len(shown))
        for values, sd, offset, fmt, label in (
            ("val_accuracy", "val_accuracy_sd", -0.12, "o", "validation"),
            ("accuracy", "accuracy_sd", 0.12, "s", "test"),
        ):
            axes[0].errorbar(
                shown[values] * 100,
                y + offset,
                xerr=np.nan_to_num(shown[sd] * 100),
                fmt=fmt,
                capsize=3,
                label=label,
            )
        axes[0].set_xlabel("accuracy (%)")
        axes[0].legend(frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=2)
        if shown["epoch_seconds"].notna().any():
            axes[1].errorbar(
                shown["epoch_seconds"],
                y,
                xerr=np.nan_to_num(shown["epoch_seconds_sd"]),
                fmt="o",
                capsize=3,
            )
            axes[1].set_xlabel("seconds per epoch")
        else:
            no_time(axes[1], ctx.warmup)
        set_category_ticks(axes[0], [str(p) for p in shown["point_label"]], width=40)
        axes[1].grid(axis="y", visible=False)
