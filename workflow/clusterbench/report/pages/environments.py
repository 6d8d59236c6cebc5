"""Execution environments, one page per experiment with environments: the same training's
time per epoch in each environment (and on each site, where several; log-scale bars, mean
over the repeats, whiskers the sd over the repeats or over the epochs of a single run, the
epochs reached printed), the environments skipped here beside, with their reasons. With a
matrix too, the environments are compared at the best run's swept values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.book import Book
from clusterbench.report.charts import MAX_BARS, log_ticks, set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.describe import point_label
from clusterbench.report.tables import best_run, environment_table
from clusterbench.report.text import plural, wrap_text

ORDER = 40


#: Lines the panel of skipped environments holds.
SKIPPED_LINES = 30


def draw(ctx: Context) -> None:
    environment_pages(ctx.book, ctx.runs_df, ctx.skipped)


def environment_pages(book: Book, runs_df: pd.DataFrame, skipped: Sequence[dict[str, Any]]) -> None:
    """One page per experiment that has environments, ran or skipped."""
    envs = environment_table(runs_df)
    skipped_envs = [s for s in skipped if s.get("environment")]
    experiments = list(
        dict.fromkeys([*envs["experiment"], *(s.get("experiment") or "" for s in skipped_envs)])
    )
    for exp in experiments:
        rows, held = environment_rows(runs_df, exp, envs)
        part = rows.head(MAX_BARS)
        caption = environment_caption(rows, part, held)
        fig = book.new(f"Execution environments: {exp}", caption, png=f"environments-{exp}")
        grid = fig.add_gridspec(1, 2, width_ratios=(1.7, 1))
        environment_chart(book, fig.add_subplot(grid[0, 0]), part, rows["site"].nunique() > 1)
        gone = [s for s in skipped_envs if (s.get("experiment") or "") == exp]
        skipped_panel(fig.add_subplot(grid[0, 1]), gone)


def environment_rows(
    runs_df: pd.DataFrame, exp: str, envs: pd.DataFrame
) -> tuple[pd.DataFrame, str]:
    """The environment table's rows of ``exp`` to draw: with a matrix too, those at the best
    run's swept values (named in the text returned)."""
    rows = envs[envs["experiment"] == exp]
    if rows["point"].nunique() <= 1:
        return rows, ""
    ran = runs_df[(runs_df["experiment"] == exp) & (runs_df["environment"] != "")]
    best = best_run(ran)
    return rows[rows["point"] == best["point"]], point_label(best["point"])


def sd_words(over: set[str]) -> str:
    """What the whiskers are, for bars whose sd is over ``over`` ('repeats', 'epochs')."""
    if over == {"repeats"}:
        return "whiskers: sd over the repeats (the runs with other seeds)"
    if over == {"epochs"}:
        return "whiskers: sd over the timed epochs of its one run"
    return (
        "whiskers: sd over the repeats, or over the timed epochs where an environment ran "
        "once (each bar's label says which)"
    )


def environment_caption(rows: pd.DataFrame, part: pd.DataFrame, held: str) -> str:
    """The caption of an experiment's page; ``part``: the rows drawn of ``rows``."""
    cut = ""
    if len(rows) > len(part):
        cut = f" The first {len(part)} of {len(rows)} environments."
    return (
        "The same training in each environment (workers x nodes x GPUs per node)"
        + (", on each site" if rows["site"].nunique() > 1 else "")
        + ": mean time per epoch over its repeats, on a log scale ("
        + sd_words(set(part["sd_over"]))
        + "), and the epochs each reached"
        + (" in its time box" if part["time_boxed"].any() else "")
        + "."
        + (f" All at the best run's swept values ({held})." if held else "")
        + cut
        + " Environments skipped where they were to run are listed beside, with the reason."
    )


def environment_chart(book: Book, ax: Any, part: pd.DataFrame, sites: bool) -> None:
    """The bars of ``part``, or why there are none."""
    values = part["epoch_seconds"].to_numpy(dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    if part.empty:
        book.note(ax, "No environment of this experiment ran here.")
    elif not finite.size:
        book.note(
            ax,
            "No time per epoch: no run of these environments has an epoch\nafter the "
            f"{plural(book.params.timing_warmup_epochs, 'warm-up epoch')}. Epochs reached: "
            + ", ".join(f"{r.environment} {r.epochs:.3g}" for r in part.itertuples()),
        )
    else:
        environment_bars(book, ax, part, values, finite, sites)


def environment_bars(
    book: Book,
    ax: Any,
    part: pd.DataFrame,
    values: np.ndarray,
    finite: np.ndarray,
    sites: bool,
) -> None:
    names = list(dict.fromkeys(part["environment"]))
    palette = dict(zip(names, book.sns.color_palette("tab10", len(names)), strict=True))
    labels = []
    for r in part.itertuples(index=False):
        spread = (
            f"{plural(r.repeats, 'repeat')}" if r.sd_over == "repeats" else "1 run: sd over epochs"
        )
        labels.append(
            (f"{r.site}: " if sites else "")
            + f"{r.environment}\n{r.workers} worker(s), {r.nodes} node(s), "
            f"{r.gpus_per_node} GPU/node\n{spread}"
        )
    y = np.arange(len(part))
    sd = np.nan_to_num(part["epoch_seconds_sd"].to_numpy(dtype=float))
    low = np.minimum(sd, np.nan_to_num(values) * 0.9)  # a log axis has no room below 0
    ax.barh(y, values, xerr=[low, sd], color=[palette[e] for e in part["environment"]], capsize=3)
    ax.set_xscale("log")
    log_ticks(ax.xaxis, float(finite.min()), float(finite.max()))
    for yi, (v, s, r) in enumerate(zip(values, sd, part.itertuples(index=False), strict=True)):
        text = f" {v:.3g} s" + (f" \u00b1 {s:.2g}" if s else "") + f", {r.epochs:.3g} epochs"
        if not np.isfinite(v):
            text = f" no timed epoch, {r.epochs:.3g} epochs"
            v, s = finite.min(), 0.0
        ax.text((v + s) * 1.05, yi, text, va="center", fontsize=9)
    ax.set_xlim(finite.min() / 2, finite.max() * 8)
    ax.set_xlabel("seconds per epoch (log scale)")
    set_category_ticks(ax, labels, width=40)


def skipped_panel(side: Any, gone: list[dict[str, Any]]) -> None:
    """The environments of the experiment skipped here, with their reasons (as many as the
    panel holds; the skipped runs page has every one)."""
    side.set_axis_off()
    lines = ["Skipped here:"] if gone else ["Nothing skipped."]
    for n, s in enumerate(gone):
        reason = wrap_text(str(s.get("reason")), 44) or [""]
        entry = [f"\u2022 {s.get('environment')} ({s.get('run')}):"]
        entry += [f"   {w}" for w in reason[:8]]
        if len(lines) + len(entry) > SKIPPED_LINES:
            lines.append(f"and {len(gone) - n} more (see the skipped runs page)")
            break
        lines += entry
    side.text(0.0, 1.0, "\n".join(lines), va="top", fontsize=9.5, transform=side.transAxes)
