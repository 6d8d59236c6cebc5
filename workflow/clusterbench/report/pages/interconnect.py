"""The interconnect, as the comm stage measured it: bus bandwidth and latency against message
size (log-log) of allreduce, allgather and broadcast, one line per environment and backend
(and site), the spread over the timed chunks shaded. With several sites (a comparison): the
same environment and backend side by side, a line per site."""

from __future__ import annotations

from typing import Any

import pandas as pd

from clusterbench.report.book import Book
from clusterbench.report.charts import log_ticks
from clusterbench.report.context import Context
from clusterbench.report.text import plural

ORDER = 112

#: The most lines one chart draws (the first jobs, in the report's order; all in the CSVs).
MAX_SERIES = 12

#: The most environments the page by site draws (a chart each).
MAX_PANELS = 6

#: The charts' rows: (column, its spread's columns, axis label, scale to the axis' unit).
MEASURES = (
    ("busbw_gbps", ("busbw_min_gbps", "busbw_max_gbps"), "Bus bandwidth (GB/s)", 1.0),
    ("time_s", ("time_min_s", "time_max_s"), "Latency: time per operation (\u00b5s)", 1e6),
)

#: The message sizes labelled on the size axes: 8 B, 256 B, 8 KiB, ... (x 32).
TICKS = [8 * 32**k for k in range(8)]

CAPTION = (
    "Allreduce, allgather and broadcast timed by the comm stage across the ranks of each "
    "multi-worker environment and backend the runs use, started as their training is and "
    "through the backend's own collectives (Gloo on CPUs, NCCL on GPUs); float32 messages from "
    "8 B, doubling. Bus bandwidth is nccl-tests': message / time per operation x 2(n-1)/n "
    "(allreduce), (n-1)/n (allgather) or 1 (broadcast) for n ranks. Lines: the mean over the "
    "timed iterations; shaded: the fastest to the slowest chunk of them."
)


def series_label(key: tuple, several_sites: bool) -> str:
    """A line's legend label: the job's name and library, its site where there are several."""
    site, name, library = key
    label = f"{name} ({library})" if library else name
    return f"{site}/{label}" if several_sites else label


def size_label(value: float) -> str:
    """A message size in words: 8 B, 256 B, 8 KiB, 256 MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B"


def size_axis(ax: Any, sizes: pd.Series) -> None:
    """A log2 axis of message sizes, labelled every 32x (:data:`TICKS`)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ticks = [t for t in TICKS if sizes.min() <= t <= sizes.max()] or [float(sizes.min())]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([size_label(t) for t in ticks], fontsize=9)


def value_axis(ax: Any, values: pd.Series) -> None:
    """A log axis of positive ``values``, labelled as plain numbers."""
    known = values[values > 0]
    ax.set_yscale("log")
    if not known.empty:
        log_ticks(ax.yaxis, float(known.min()), float(known.max()))


def plot_lines(ax: Any, comm: pd.DataFrame, op: str, measure: tuple, style: dict) -> None:
    """One chart: each series' ``op`` rows, its mean line and its spread shaded."""
    column, (low, high), _, scale = measure
    rows = comm[comm["op"] == op]
    for key, group in rows.groupby(["site", "name", "library"], sort=False):
        if key not in style:
            continue
        group = group.sort_values("bytes")
        color, ls = style[key]
        x = group["bytes"]
        ax.plot(x, group[column] * scale, color=color, ls=ls, lw=1.6, marker=".", ms=4)
        ax.fill_between(x, group[low] * scale, group[high] * scale, color=color, alpha=0.18, lw=0)
    size_axis(ax, rows["bytes"])
    value_axis(ax, pd.concat([rows[low], rows[high]]) * scale)


def series_style(book: Book, keys: list[tuple], comm: pd.DataFrame) -> dict[tuple, tuple]:
    """Each series' colour, and its line style by backend."""
    palette = book.sns.color_palette("tab10" if len(keys) <= 10 else "husl", len(keys))
    backend_of = dict(zip(comm["name"], comm["backend"], strict=True))
    styles = ["-", "--", "-.", ":"]
    ls = {b: styles[i % len(styles)] for i, b in enumerate(sorted(set(backend_of.values())))}
    return {k: (c, ls[backend_of[k[1]]]) for k, c in zip(keys, palette, strict=True)}


def curves_page(book: Book, comm: pd.DataFrame) -> None:
    """Bus bandwidth (top) and latency (bottom) of each operation (columns), a line per job."""
    from matplotlib.lines import Line2D

    keys = list(dict.fromkeys(zip(comm["site"], comm["name"], comm["library"], strict=True)))
    shown = keys[:MAX_SERIES]
    note = None
    if len(keys) > len(shown):
        note = f"Shown: the first {len(shown)} of {len(keys)} comm jobs (all are in their CSVs)."
    fig = book.new(
        "The interconnect: bus bandwidth and latency",
        CAPTION,
        png="interconnect",
        note=note,
    )
    style = series_style(book, shown, comm)
    legend_rows = -(-len(shown) // 4)
    grid = fig.add_gridspec(3, 3, height_ratios=[1, 1, 0.07 + 0.05 * legend_rows])
    for col, op in enumerate(("allreduce", "allgather", "broadcast")):
        for line, measure in enumerate(MEASURES):
            ax = fig.add_subplot(grid[line, col])
            plot_lines(ax, comm, op, measure, style)
            if line == 0:
                ax.set_title(op, fontsize=12)
            else:
                ax.set_xlabel("Message size")
            if col == 0:
                ax.set_ylabel(measure[2])
    several = comm["site"].nunique() > 1
    handles = [
        Line2D([], [], color=c, ls=ls, lw=2, label=series_label(k, several))
        for k, (c, ls) in style.items()
    ]
    legend_ax = fig.add_subplot(grid[2, :])
    legend_ax.set_axis_off()
    legend_ax.legend(handles=handles, loc="center", ncols=min(4, len(handles)), frameon=False)


def sites_page(book: Book, comm: pd.DataFrame) -> None:
    """The allreduce bus bandwidth of each environment and backend measured on several sites,
    a chart each, a line per site (a comparison's page)."""
    allreduce = comm[comm["op"] == "allreduce"]
    sites_of = allreduce.groupby("name", sort=False)["site"].unique()
    shared = [name for name, sites in sites_of.items() if len(sites) > 1]
    caption = (
        "Allreduce bus bandwidth of each environment and backend measured on more than one "
        "site, a line per site (shaded: the fastest to the slowest chunk of the timed "
        "iterations); the comm stage's own page has every operation."
    )
    if not shared:
        book.nothing_to_show(
            "The interconnect by site",
            caption,
            "No environment and backend was measured on two sites.",
        )
        return
    shown = shared[:MAX_PANELS]
    fig = book.new(
        "The interconnect by site",
        caption,
        png="interconnect-sites",
        note=(
            f"Shown: {len(shown)} of {plural(len(shared), 'environment')}."
            if len(shared) > len(shown)
            else None
        ),
    )
    sites = list(dict.fromkeys(allreduce["site"]))
    palette = dict(zip(sites, book.sns.color_palette("tab10", len(sites)), strict=True))
    cols = 2 if len(shown) == 4 else min(3, len(shown))
    axes = fig.subplots(-(-len(shown) // cols), cols, squeeze=False).ravel()
    for ax, name in zip(axes, shown, strict=False):
        part = allreduce[allreduce["name"] == name]
        for site, group in part.groupby("site", sort=False):
            group = group.sort_values("bytes")
            ax.plot(group["bytes"], group["busbw_gbps"], color=palette[site], lw=1.6, label=site)
            low, high = group["busbw_min_gbps"], group["busbw_max_gbps"]
            ax.fill_between(group["bytes"], low, high, color=palette[site], alpha=0.18, lw=0)
        size_axis(ax, part["bytes"])
        value_axis(ax, pd.concat([part["busbw_min_gbps"], part["busbw_max_gbps"]]))
        ax.set_title(name, fontsize=11)
        ax.set_xlabel("Message size")
        ax.set_ylabel("Bus bandwidth (GB/s)")
        ax.legend(frameon=False, fontsize=9)
    for ax in axes[len(shown) :]:
        ax.set_axis_off()


def draw(ctx: Context) -> None:
    """The page, and with several sites the page by site; none without comm results (no
    multi-worker run, or ``comm.enabled: false``)."""
    comm, book = ctx.comm, ctx.book
    if comm.empty:
        return
    curves_page(book, comm)
    if comm["site"].nunique() > 1:
        sites_page(book, comm)
