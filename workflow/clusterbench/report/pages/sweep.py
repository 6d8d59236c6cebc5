"""Sweeps, per experiment with a matrix: validation accuracy and time per epoch over each pair
of swept keys (heatmaps, the other dimensions held at the best run's values, the best cell
outlined; at most :data:`clusterbench.report.sweeps.MAX_PAIRS` pairs, the page names those
left out), or over the one swept key (bars)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from clusterbench.config.experiments import format_value
from clusterbench.report import sweeps
from clusterbench.report.book import Book
from clusterbench.report.charts import at_most_bars, no_time, set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.tables import point_table, swept_keys
from clusterbench.report.text import plural

ORDER = 50


def draw(ctx: Context) -> None:
    sweep_pages(ctx.book, ctx.runs_df)


def sweep_pages(book: Book, runs_df: pd.DataFrame) -> None:
    """The pages of every experiment whose swept keys vary."""
    for exp, keys in swept_keys(runs_df).items():
        table = point_table(runs_df, exp)
        varying = sweeps.varying_keys(table, keys)
        if len(varying) >= 2:
            heatmap_pages(book, runs_df, exp, table)
        elif varying:
            one_key_page(book, exp, varying[0], table)


def heatmap_pages(book: Book, runs_df: pd.DataFrame, exp: str, table: pd.DataFrame) -> None:
    """One page per pair of swept keys (at most ``MAX_PAIRS``): two heatmaps."""
    every = sweeps.pairs(runs_df, exp, table)
    drawn = every[: sweeps.MAX_PAIRS]
    left = every[sweeps.MAX_PAIRS :]
    note = None
    if left:
        note = (
            f"{len(every)} pairs of swept keys; drawn: the first {len(drawn)}; left out: "
            + ", ".join(f"{p.rows} x {p.cols}" for p in left)
            + " (every point is in results.csv)."
        )
    warmup = book.params.timing_warmup_epochs
    for i, pair in enumerate(drawn):
        acc = sweeps.grid(table, pair, "val_accuracy")
        sec = sweeps.grid(table, pair, "epoch_seconds")
        suffix = f" ({i + 1} of {len(drawn)})" if len(drawn) > 1 else ""
        fig = book.new(
            f"Sweep: {exp}: {pair.rows} x {pair.cols}" + suffix,
            pair_caption(pair, acc, sec, int(table["repeats"].max()), warmup),
            png=f"sweep-{exp}" if len(every) == 1 else f"sweep-{exp}-{pair.rows}-x-{pair.cols}",
            note=note if i == 0 else None,
        )
        axes = fig.subplots(1, 2)
        no_time_text = (
            f"No time per epoch: no run here has an epoch\nafter the "
            f"{plural(warmup, 'warm-up epoch')} (time box or epochs too short)."
        )
        best = sweeps.best_cell(acc)
        for ax, data, fmt, cmap, title, empty in (
            (axes[0], acc * 100, ".1f", "viridis", "validation accuracy (%)", "No accuracy."),
            (axes[1], sec, ".3g", "rocket_r", "time per epoch (s)", no_time_text),
        ):
            if data.isna().all().all():
                book.note(ax, empty)
                continue
            heatmap(book, ax, data, pair, fmt, cmap, best)
            ax.set_title(title)


def pair_caption(
    pair: sweeps.Pair, acc: pd.DataFrame, sec: pd.DataFrame, repeats: int, warmup: int
) -> str:
    """The caption of a pair's page: what is held, what a blank cell means."""
    blanks = []
    if acc.isna().any().any():
        blanks.append("blank: no run there at the held values (not in the sweep, or skipped)")
    if (sec.isna() & acc.notna()).any().any():
        blanks.append(f"no time: no epoch after the {plural(warmup, 'warm-up epoch')}")
    held = sweeps.held_text(pair.held)
    return (
        f"Final validation accuracy (left) and mean time per epoch (right) over {pair.rows} "
        f"x {pair.cols}"
        + (f", the other dimensions held at the best run's values: {held}" if held else "")
        + (f"; mean over up to {repeats} repeats" if repeats > 1 else "")
        + ". The cell with the highest validation accuracy is outlined"
        + (f" ({'; '.join(blanks)})" if blanks else "")
        + "."
    )


def heatmap(
    book: Book,
    ax: Any,
    data: pd.DataFrame,
    pair: sweeps.Pair,
    fmt: str,
    cmap: str,
    best: tuple[int, int] | None,
) -> None:
    """``data`` over the pair's keys, values printed where the cells have room, the cell
    ``best`` (row, column) outlined."""
    cells = data.size
    font = 10 if cells <= 36 else 8 if cells <= 100 else 6.5 if cells <= 196 else 0
    book.sns.heatmap(
        data,
        ax=ax,
        annot=bool(font),
        annot_kws={"fontsize": font} if font else None,
        fmt=fmt,
        cmap=cmap,
        linewidths=0.5,
        linecolor="white",
    )
    if best is not None:
        ax.add_patch(outline(best[1], best[0]))
    ax.set_xlabel(pair.cols)
    ax.set_ylabel(pair.rows)
    ax.tick_params(axis="y", rotation=0)
    long = sum(len(str(c)) for c in data.columns) > 45
    ax.tick_params(axis="x", rotation=45 if long else 0)


def outline(x: int, y: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, fill=False, edgecolor="red", lw=3)


def one_key_page(book: Book, exp: str, key: str, table: pd.DataFrame) -> None:
    """Bars of validation accuracy and time per epoch for each value of the one swept key."""
    order = {format_value(v): i for i, v in enumerate(sweeps.ordered_values(table[key]))}
    ranks = [order[format_value(v)] for v in table[key]]
    table = table.assign(_order=ranks).sort_values(["site", "environment", "_order"], kind="stable")
    shown, cut = at_most_bars(table, "points")
    repeats = int(table["repeats"].max())
    fig = book.new(
        f"Sweep: {exp}",
        f"Final validation accuracy (left) and mean time per epoch (right) for each {key}"
        + ("; mean \u00b1 sd over the repeats." if repeats > 1 else ".")
        + cut,
        png=f"sweep-{exp}",
    )
    axes = fig.subplots(1, 2, sharey=True)
    labels = [str(p) for p in shown["point_label"]]
    y = np.arange(len(shown))
    axes[0].barh(y, shown["val_accuracy"] * 100, xerr=np.nan_to_num(shown["val_accuracy_sd"] * 100))
    axes[0].set_xlabel("validation accuracy (%)")
    if shown["epoch_seconds"].notna().any():
        axes[1].barh(y, shown["epoch_seconds"], xerr=np.nan_to_num(shown["epoch_seconds_sd"]))
        axes[1].set_xlabel("seconds per epoch")
    else:
        no_time(axes[1], book.params.timing_warmup_epochs)
    set_category_ticks(axes[0], labels, width=40)
    axes[1].grid(axis="y", visible=False)
