"""Backend comparison: the throughput of runs that differ only in their backend, side by
side, with each backend's ratio to the reference backend's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.charts import set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.describe import compression_words
from clusterbench.report.tables import BACKEND_MATCH_KEY, REFERENCE_BACKEND, backend_comparison
from clusterbench.report.text import list_runs, part_of, plural

ORDER = 130


#: The most configurations (groups of bars) a page holds.
CONFIGS_PER_PAGE = 10

TITLE = "Backend comparison"

CAPTION = (
    "Mean throughput (timed epochs, \u00b1 sample sd) of runs that differ only in their "
    "backend: same dataset, model, workers, nodes, device, BN mode, global batch, "
    "precision/memory format and gradient compression. The "
    f"ratio is each backend's throughput over {REFERENCE_BACKEND}'s (> 1: faster)."
)


def draw(ctx: Context) -> None:
    from matplotlib.patches import Patch

    runs_df, book = ctx.runs_df, ctx.book
    cmp = backend_comparison(runs_df)
    backends = sorted(runs_df["backend"].unique())
    if cmp.empty:
        book.nothing_to_show(TITLE, CAPTION, nothing_to_compare(runs_df), png="backends")
        return
    colors = dict(zip(backends, book.sns.color_palette("colorblind", len(backends)), strict=True))
    legend_order = list(dict.fromkeys(cmp["backend"]))  # the reference (top bar) first
    notes = backend_notes(runs_df, cmp)
    chunks = []  # a page's configurations share a unit: images/s, a language model's tokens/s
    for unit, part in cmp.groupby("unit", sort=True):
        configs = list(part.groupby(list(BACKEND_MATCH_KEY), sort=True, dropna=False))
        top = float(np.nanmax(part["throughput"] + part["std_throughput"].fillna(0)))
        chunks += [
            (configs[i : i + CONFIGS_PER_PAGE], unit, top)
            for i in range(0, len(configs), CONFIGS_PER_PAGE)
        ]
    sites = cmp["site"].nunique() > 1
    for page_no, (chunk, unit, top) in enumerate(chunks, start=1):
        fig = book.new(
            TITLE + part_of(page_no, len(chunks)),
            CAPTION,
            png="backends" + (f"-{page_no}" if page_no > 1 else ""),
            note="\n".join(notes) if notes else None,
        )
        ax = fig.add_subplot()
        labels = [
            config_bars(ax, i, key, group, colors, sites) for i, (key, group) in enumerate(chunk)
        ]
        set_category_ticks(ax, labels, width=30)
        ax.set_xlim(0, top * 1.45)
        ax.set_xlabel(f"{unit.split('/')[0].capitalize()} per second, all workers")
        ax.legend(
            handles=[Patch(color=colors[b], label=b) for b in legend_order],
            loc="lower left",
            bbox_to_anchor=(0, 1.0),
            ncol=len(legend_order),
            frameon=False,
            fontsize=10.5,
        )


def nothing_to_compare(runs_df: pd.DataFrame) -> str:
    """Why no runs are compared: one backend only, or no pair that differs only in it."""
    backends = sorted(runs_df["backend"].unique())
    if len(backends) == 1:
        return (
            f"All runs use the {backends[0]} backend, so there is no backend to compare.\n"
            "Runs that differ only in their backend would be compared here."
        )
    counts = runs_df["backend"].value_counts()
    return (
        "No two timed runs differ only in their backend, so there is nothing to compare."
        "\nBackends run: "
        + ", ".join(f"{b} ({plural(int(counts[b]), 'run')})" for b in backends)
        + "."
    )


def backend_notes(runs_df: pd.DataFrame, cmp: pd.DataFrame) -> list[str]:
    """Which runs are shown among several, and which are not compared, and why."""
    notes = []
    untimed = sorted(runs_df.loc[runs_df["images_per_second"].isna(), "run"])
    unmatched = sorted(set(runs_df["run"]) - set(cmp["run"]) - set(untimed))
    several = cmp[cmp["runs"] > 1]
    if not several.empty:
        notes.append(
            "Several runs of one backend in a configuration: the fastest is shown ("
            + list_runs(list(several["run"]))
            + ")."
        )
    if unmatched:
        notes.append(f"Not compared (no counterpart on another backend): {list_runs(unmatched)}.")
    if untimed:
        notes.append(f"Not compared (no timed epoch): {list_runs(untimed)}.")
    return notes


def config_bars(
    ax: Any, i: int, key: tuple, group: pd.DataFrame, colors: dict[str, Any], sites: bool
) -> str:
    """The bars of configuration ``i`` (a bar per backend, its throughput and run printed,
    the ratios beside the axis); returns its label."""
    cfg = dict(zip(BACKEND_MATCH_KEY, key, strict=True))
    n = len(group)
    height = 0.7 / n
    ratios = []
    for j, row in enumerate(group.itertuples(index=False)):
        y = i - 0.35 + height * (j + 0.5)
        sd = row.std_throughput if math.isfinite(row.std_throughput) else 0
        ax.barh(
            y,
            row.throughput,
            xerr=sd,
            height=height * 0.9,
            color=colors[row.backend],
            error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
        )
        ax.text(
            row.throughput + sd,
            y,
            f"  {row.throughput:,.0f} ({row.run})",
            va="center",
            fontsize=9 if n > 2 else 9.5,
        )
        if row.backend != row.reference_backend:
            ratios.append(f"{row.backend} / {row.reference_backend} = {row.ratio:.2f}x")
    ax.text(
        1.01,
        i,
        "\n".join(ratios),
        transform=ax.get_yaxis_transform(),
        va="center",
        fontsize=10.5,
        weight="bold",
    )
    return (
        f"{cfg['dataset']} / {cfg['model']}, {plural(cfg['workers'], 'worker')} on "
        f"{plural(cfg['nodes'], 'node')}, {cfg['device']}, batch "
        f"{cfg['global_batch']}, {cfg['bn']} BN"
        + compression_words(cfg["grad_compression"])
        + (f", site {cfg['site']}" if sites else "")
    )
