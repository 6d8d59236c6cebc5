"""The PDF of ``clusterbench-compare`` (:mod:`clusterbench.compare`, which finds, matches and
tabulates the runs): the report's own pages over every run of every site, with the
comparison's pages after the title page: the site-by-site table (each site's ratio to the
first) and chart, and the runs that could not be matched. Imports nothing from
:mod:`clusterbench.compare`: what it draws comes in as :class:`Comparison` and :class:`Sites`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from clusterbench.report import theme
from clusterbench.report.book import Book, footer_text, pdf_metadata, stamp_footers, write_pdf
from clusterbench.report.charts import log_ticks, set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.describe import first_epochs
from clusterbench.report.inputs import ReportParams, RunData
from clusterbench.report.pages import build
from clusterbench.report.table_pages import CellStyle, cell_text, table_pages
from clusterbench.report.text import fmt_number_sd, fmt_pct, fmt_ratio, fmt_seconds_sd, plural

#: The comparison's pages come right after the report's title page (ORDER 10).
SITES_ORDER = 15


#: The most benchmarks the chart by site draws.
CHART_BENCHMARKS = 20


@dataclass
class Comparison:
    """The report's view of every run of every site (each named ``site/run``)."""

    params: ReportParams
    prov: dict[str, Any]
    runs: list[RunData]
    runs_df: pd.DataFrame
    epochs_df: pd.DataFrame
    comm: pd.DataFrame | None = None  # every site's comm stage rows (report.inputs.load_comm)


@dataclass
class Sites:
    """What the comparison's own pages show."""

    names: list[str]  # the sites, in the order given
    table: pd.DataFrame  # compare.csv: each matched run on each site
    not_compared: list[tuple[str, str]]  # (site/run, why) of the runs not matched
    skipped: list[dict[str, Any]]  # the runs each tree's workflow skipped


def write_comparison(output: Path, comparison: Comparison, sites: Sites) -> int:
    """The comparison's PDF at ``output``; returns its page count."""
    import matplotlib

    matplotlib.use("Agg")
    params, prov = comparison.params, comparison.prov
    bench = pd.DataFrame(columns=["rule", "job", "s"])
    with theme.style():
        ctx = Context(
            params,
            prov,
            comparison.runs,
            comparison.runs_df,
            comparison.epochs_df,
            bench,
            skipped=sites.skipped,
        )
        if comparison.comm is not None:
            ctx.comm = comparison.comm
        own = (SITES_ORDER, "sites", lambda ctx: site_pages(ctx.book, sites))
        pages = build(ctx, extra=[own])
        stamp_footers(pages, footer_text(params, prov))
        write_pdf(pages, output, pdf_metadata(params, prov))
    return len(pages)


def site_pages(book: Book, sites: Sites) -> None:
    """The site-by-site table and chart (or why there is none), the runs not matched."""
    warmup = book.params.timing_warmup_epochs
    caption = (
        f"Runs with equal training settings on {len(sites.names)} sites "
        f"({', '.join(sites.names)}): time per epoch (mean \u00b1 sd over the timed epochs, "
        + (f"{first_epochs(warmup)} of each run left out" if warmup else "all epochs")
        + ") and throughput over all workers (images/s; a language model's tokens/s, marked); "
        "'vs first' is the ratio to the first site listed for that benchmark (time: below 1 is "
        "faster; throughput: above 1 is faster)."
    )
    if sites.table.empty:
        book.nothing_to_show(
            "Sites compared",
            caption,
            "No run has equal training settings on two sites: nothing to compare "
            "(see the runs that could not be matched).",
        )
    else:
        site_table_pages(book, sites.table, caption)
        site_chart_page(book, sites.table, sites.names)
    if sites.not_compared:
        unmatched_pages(book, sites.not_compared)


def site_table_pages(book: Book, table: pd.DataFrame, caption: str) -> None:
    """Each matched benchmark on each site, its rows shaded alike."""
    columns = [
        ("Benchmark", 0.25, False),
        ("Site", 0.14, False),
        ("Workers\n(nodes)", 0.09, True),
        ("Time per epoch\n(mean \u00b1 sd)", 0.16, True),
        ("vs first", 0.08, True),
        ("Images/s", 0.1, True),  # a language model's cell: tokens/s, so marked
        ("vs first", 0.08, True),
        ("Accuracy", 0.1, True),
    ]
    rows = [
        [
            cell_text(r.benchmark, 0.25),
            r.site,
            f"{r.workers} ({r.nodes})",
            fmt_seconds_sd(r.mean_epoch_seconds, r.std_epoch_seconds),
            fmt_ratio(r.epoch_seconds_vs_first_site),
            fmt_number_sd(r.throughput, None) + (" tok/s" if r.unit == "tokens/s" else ""),
            fmt_ratio(r.images_per_second_vs_first_site),
            fmt_pct(r.accuracy),
        ]
        for r in table.itertuples(index=False)
    ]
    benchmarks = list(dict.fromkeys(table["benchmark"]))
    shade = {b: ("#eef1f6" if i % 2 == 0 else "white") for i, b in enumerate(benchmarks)}
    keys = list(table["benchmark"])

    def shading(i: int, col: int) -> CellStyle:
        return shade[keys[i]], False

    table_pages(book, "Sites compared", caption, columns, rows, shading)


def site_chart_page(book: Book, table: pd.DataFrame, sites: Sequence[str]) -> None:
    """Time per epoch and images/s of each benchmark, a bar per site, on log scales."""
    import numpy as np

    benchmarks = list(dict.fromkeys(table["benchmark"]))
    shown = benchmarks[:CHART_BENCHMARKS]
    fig = book.new(
        "Time per epoch and throughput by site",
        "Each matched benchmark on each site: mean time per epoch (left; whiskers: sd) and "
        "images/s over all workers (right; a language model's: tokens/s), both on log scales."
        + (
            f" The first {CHART_BENCHMARKS} of {len(benchmarks)} benchmarks."
            if len(benchmarks) > CHART_BENCHMARKS
            else ""
        ),
        png="sites",
    )
    palette = book.sns.color_palette("tab10", len(sites))
    height = 0.8 / len(sites)
    y = np.arange(len(shown))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, column, sd, label in (
        (axes[0], "mean_epoch_seconds", "std_epoch_seconds", "seconds per epoch"),
        (axes[1], "throughput", None, throughput_label(table)),
    ):
        known = table[column][np.isfinite(table[column]) & (table[column] > 0)]
        if known.empty:
            book.note(
                ax,
                f"No {label}: no matched run has an epoch\nafter the "
                f"{plural(book.params.timing_warmup_epochs, 'warm-up epoch')}.",
            )
            continue
        for i, site in enumerate(sites):
            part = table[table["site"] == site].set_index("benchmark")
            values = [part[column].get(b, np.nan) for b in shown]
            errors = [part[sd].get(b, np.nan) for b in shown] if sd else None
            ax.barh(
                y + (i - (len(sites) - 1) / 2) * height,
                values,
                height,
                xerr=np.nan_to_num(errors) if errors else None,
                label=site,
                color=palette[i],
                capsize=2,
            )
        ax.set_xscale("log")
        log_ticks(ax.xaxis, float(known.min()), float(known.max()))
        ax.set_xlabel(f"{label} (log scale)")
    set_category_ticks(axes[0], shown)
    axes[1].grid(axis="y", visible=False)
    axes[0].legend(title="site", frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=4)


def unmatched_pages(book: Book, unmatched: list[tuple[str, str]]) -> None:
    """The runs not compared (no match on another site, or not finished), with why."""
    columns = [("Run", 0.35, False), ("Why it is not compared", 0.59, False)]
    rows = [[cell_text(run, 0.35), cell_text(why, 0.59)] for run, why in unmatched]
    table_pages(
        book,
        f"Runs that could not be matched: {len(rows)}",
        "Runs are compared across sites only when every training setting but the name is "
        "equal; these are shown on the report's other pages only. A run that did not finish "
        "(no run.json, or no evaluation) is on no other page.",
        columns,
        rows,
    )


def throughput_label(table: pd.DataFrame) -> str:
    """The throughput axis's label: images/s, tokens/s, or both where the benchmarks mix."""
    units = sorted(set(table["unit"]))
    return " or ".join(units) if units else "images/s"
