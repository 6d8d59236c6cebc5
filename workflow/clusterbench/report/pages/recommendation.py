"""The recommendation, one page per workload: every configuration's throughput with its
standard error, the fastest marked with its margin over the runner-up and whether that is
beyond the noise; with ``report.target_accuracy``, each run's time to that accuracy
(:mod:`clusterbench.report.recommend`). The title page leads with the same sentences."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from clusterbench.core import stats
from clusterbench.report import recommend
from clusterbench.report.charts import set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.text import fmt_duration, fmt_pct, part_of, plural, shorten_text

ORDER = 12

#: The most configurations and runs a chart draws (the fastest).
SHOWN = 15

#: Workloads per page (a row of charts each).
PER_PAGE = 3

TITLE = "Recommendation: the fastest configuration of each workload"

CAPTION = (
    "Each configuration of the workload (backend, workers and nodes, BN mode, precision, "
    "compression, ...; runs that differ in nothing else, e.g. a sweep's learning rates or "
    "repeats' seeds, are its repeats): the mean over its runs of their mean images/s (a "
    "language model's tokens/s) over the timed epochs, whiskers \u00b1 1 standard error; the "
    "fastest in green."
)

#: The noise rule, in the note of every page.
RULE = (
    "Beside each bar: its runs' model FLOPs achieved (TFLOP/s) and their share of the devices' "
    "peak (MFU; docs/report.md). Noise rule: a margin is " + stats.RULE + "."
)


def draw(ctx: Context) -> None:
    configs = recommend.configurations(ctx.runs_df)
    recs = recommend.recommendations(configs).set_index("workload", drop=False)
    target = ctx.params.target_accuracy
    tta, firsts = None, None
    if target is not None:
        tta = recommend.time_to_accuracy(ctx.epochs_df, target)
        firsts = recommend.first_to_target(ctx.runs_df, tta).set_index("workload", drop=False)
        tta = tta.merge(recommend.with_config(ctx.runs_df)[["run", "workload"]], on="run")
    caption = CAPTION + (
        ""
        if target is None
        else f" Right: each run's training time to {fmt_pct(target, 1)} validation accuracy "
        "(to the end of the first epoch that reached it)."
    )
    if configs.empty:
        ctx.book.nothing_to_show(
            TITLE, caption, "No run has an epoch left after the warm-up: no throughput to compare."
        )
        return
    workloads = list(recs.index)
    chunks = [workloads[i : i + PER_PAGE] for i in range(0, len(workloads), PER_PAGE)]
    for page_no, chunk in enumerate(chunks, start=1):
        fig = ctx.book.new(
            TITLE + part_of(page_no, len(chunks)),
            caption,
            png="recommendation" + (f"-{page_no}" if page_no > 1 else ""),
            note=RULE,
        )
        widths = [1.0] if tta is None else [1.5, 1.0]
        axes = fig.subplots(len(chunk), len(widths), squeeze=False, width_ratios=widths)
        for row_axes, workload in zip(axes, chunk, strict=True):
            rec = recs.loc[workload]
            config_bars(row_axes[0], configs[configs["workload"] == workload], rec)
            if tta is not None:
                first = firsts.loc[workload]
                tta_bars(ctx, row_axes[1], tta[tta["workload"] == workload], target, first)


def short_verdict(rec: pd.Series) -> str:
    """'+45.2 % over the runner-up, beyond the noise (32.3 SE)'."""
    if recommend.missing(rec["runner_up"]):
        return "the only configuration"
    margin = f"+{fmt_pct(rec['margin_pct'], 1)} over the runner-up"
    if recommend.missing(rec["beyond_noise"]):
        return f"{margin}, noise unknown"
    times = rec["margin"] / rec["margin_se"]
    return f"{margin}, {'beyond' if rec['beyond_noise'] else 'within'} the noise ({times:.1f} SE)"


def config_bars(ax: Any, part: pd.DataFrame, rec: pd.Series) -> None:
    """The configurations' mean throughput (images/s, tokens/s), fastest on top, the fastest
    coloured."""
    part = part.sort_values("rank").head(SHOWN)
    batch = part["global_batch"].nunique() > 1
    colors = ["#2e7d32" if r == 1 else "0.6" for r in part["rank"]]
    y = np.arange(len(part))
    se = np.nan_to_num(part["se"].to_numpy(dtype=float))
    ax.barh(y, part["mean"], xerr=se, color=colors, capsize=3, height=0.6)
    for yi, (_, row) in zip(y, part.iterrows(), strict=True):
        mean, row_se = float(row["mean"]), float(row["se"])
        spread = f" \u00b1 {row_se:,.0f}" if np.isfinite(row_se) else ""
        efficiency = recommend.efficiency_text(row)
        ax.text(
            mean + (row_se if np.isfinite(row_se) else 0),
            yi,
            f"  {mean:,.0f}{spread} ({plural(row['n_runs'], 'run')}, {row['epochs']} ep.)"
            + (f"\n  {efficiency}" if efficiency else ""),
            va="center",
            fontsize=8.5,
        )
    labels = [recommend.describe_config(row, batch) for _, row in part.iterrows()]
    set_category_ticks(ax, labels, width=34)
    top = float(np.nanmax(part["mean"] + se))
    ax.set_xlim(0, top * 1.5)
    unit = rec.get("unit") or "images/s"
    ax.set_xlabel(f"{unit}, all workers (mean over runs, \u00b1 1 SE)")
    ax.set_title(shorten_text(f"{rec['workload']}: {short_verdict(rec)}", 80), fontsize=9.5)


def tta_bars(ctx: Context, ax: Any, tta: pd.DataFrame, target: float, first: pd.Series) -> None:
    """Each run's training time to the target, quickest on top; runs that never reached it
    after, with their best validation accuracy."""
    tta = tta.sort_values(["seconds", "run"], na_position="last").head(SHOWN)
    reached = tta["seconds"].notna()
    if not reached.any():
        ctx.book.note(
            ax,
            f"No run of {first['workload']} reached {fmt_pct(target, 1)} validation accuracy\n"
            f"(best: {fmt_pct(float(tta['best_val_accuracy'].max()), 1)}).",
        )
        return
    y = np.arange(len(tta))
    seconds = tta["seconds"].fillna(0).to_numpy(dtype=float)
    ax.barh(y, seconds, color=[ctx.book.colors.get(r, "0.5") for r in tta["run"]], height=0.6)
    for yi, row in zip(y, tta.itertuples(index=False), strict=True):
        text = (
            f"  {fmt_duration(row.seconds)} (epoch {int(row.epoch)})"
            if np.isfinite(row.seconds)
            else f"  not reached (best {fmt_pct(row.best_val_accuracy, 1)})"
        )
        ax.text(row.seconds if np.isfinite(row.seconds) else 0, yi, text, va="center", fontsize=8.5)
    set_category_ticks(ax, list(tta["run"]), width=30)
    ax.set_xlim(0, float(np.nanmax(seconds)) * 1.6)
    ax.set_xlabel("training seconds to the target")
    first_run = "none" if recommend.missing(first["run"]) else first["run"]
    ax.set_title(  # two lines: the panel is a third of the page wide
        f"Time to {fmt_pct(target, 1)}\nfirst: {shorten_text(first_run, 40)}", fontsize=9.5
    )
