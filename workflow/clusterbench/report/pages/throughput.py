"""Throughput of each run: images per second over its timed epochs, mean and sd, for all
workers together (left) and per worker (right). Language models' tokens per second are on
their own page (:mod:`~clusterbench.report.pages.language_models`)."""

from __future__ import annotations

import math

import numpy as np

from clusterbench.report.context import Context
from clusterbench.report.describe import first_epochs
from clusterbench.report.workloads import classifiers, left_out

ORDER = 100


def draw(ctx: Context) -> None:
    if classifiers(ctx.runs_df).empty:
        return  # language models alone: their tokens/s on their own page
    with ctx.per_run_charts(classifiers(ctx.runs_df)) as (runs_df, _):
        warmup, book = ctx.warmup, ctx.book
        fig = book.new(
            "Throughput",
            "Training images per second: mean over the timed epochs (bars) and one sample "
            "standard deviation (error lines); left for all workers together, right per worker. "
            + (
                f"{first_epochs(warmup).capitalize()} of each run (warm-up) "
                f"{'is' if warmup == 1 else 'are'} excluded."
                if warmup
                else "All epochs are used (no warm-up excluded)."
            ),
            png="throughput",
            note=left_out(ctx.runs_df, "images per second"),
        )
        total_ax, worker_ax = fig.subplots(1, 2, sharey=True)
        order = book.order
        stats = runs_df.set_index("run").reindex(order)
        colors = [book.colors[n] for n in order]
        height = min(0.6, 0.25 + 0.1 * len(order))
        for ax, scale, xlabel in (
            (total_ax, 1, "Images per second, all workers"),
            (worker_ax, stats["workers"], "Images per second per worker"),
        ):
            mean = stats["images_per_second"] / scale
            std = stats["std_images_per_second"].fillna(0) / scale
            ax.barh(
                range(len(order)),
                mean.fillna(0),
                xerr=std.where(mean.notna(), 0),
                color=colors,
                height=height,
                error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
            )
            for y, (m, s, note) in enumerate(zip(mean, std, stats["timing_note"], strict=True)):
                text = f"  {m:,.0f}" if math.isfinite(m) else f"  n/a ({note})"
                ax.text(m + s if math.isfinite(m) else 0, y, text, va="center", fontsize=10)
            ax.set_xlabel(xlabel)
            top = float(np.nanmax((mean + std).to_numpy())) if mean.notna().any() else 0.0
            ax.set_xlim(0, top * 1.22 if top > 0 else 1.0)
        book.run_axis(total_ax, order)
        worker_ax.tick_params(axis="y", left=False, labelleft=False)
        worker_ax.grid(axis="y", visible=False)
