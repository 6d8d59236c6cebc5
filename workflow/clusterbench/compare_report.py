"""The PDF of ``clusterbench-compare`` (:mod:`clusterbench.compare`): the site-by-site page,
the runs that could not be matched, then the report's own pages over every run of every site.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterbench import provenance
from clusterbench.atomic import atomic_open
from clusterbench.compare import (
    CompareError,
    SiteRun,
    find_runs,
    find_skipped,
    match_runs,
    site_table,
    tree_name,
    tree_site,
)
from clusterbench.report import book as furniture
from clusterbench.report import inputs, tables, theme
from clusterbench.report.charts import log_ticks, set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.describe import first_epochs
from clusterbench.report.pages import build
from clusterbench.report.table_pages import (
    TABLE_ROWS_PER_PAGE,
    cell_text,
    chunk_rows,
    draw_table,
    table_budget,
)
from clusterbench.report.text import fmt_number_sd, fmt_pct, fmt_seconds_sd, plural


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("run"), dict):
        raise CompareError(f"{path}: not a run.json (no 'run' object)")
    return data


@dataclasses.dataclass
class Loaded:
    """Every tree's finished runs (with the report's view of each, named ``site/run``, its
    site set), the runs that did not finish (``site/run``, why) and the skipped runs."""

    runs: list[SiteRun]
    data: list[Any]
    pending: list[tuple[str, str]]
    skipped: list[dict[str, Any]]


def load_all(dirs: Sequence[Path]) -> Loaded:
    loaded = Loaded([], [], [], [])
    for path in dirs:
        runs, pending = find_runs(path, _read_json)
        for run in runs:
            try:
                data = inputs.load_run(run.run_dir, run.eval_dir)
            except (OSError, ValueError) as exc:
                raise CompareError(f"{run.label}: {exc}") from None
            # the site as the comparison names it (an older run.json: the tree's directory)
            info = {**data.info, "site": run.site}
            loaded.runs.append(run)
            loaded.data.append(dataclasses.replace(data, name=run.label, info=info))
        loaded.pending += pending
        loaded.skipped += find_skipped(path, tree_site(runs, tree_name(path)))
    return loaded


def _ratio(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else "n/a"


def site_pages(book: Any, table: Any, unmatched: list[tuple[str, str]], sites: list[str]):
    """The site-by-site table (with each site's ratio to the first) and chart."""
    import numpy as np

    warmup = book.params.timing_warmup_epochs
    caption = (
        f"Runs with equal training settings on {len(sites)} sites ({', '.join(sites)}): time "
        "per epoch (mean \u00b1 sd over the timed epochs, "
        + (f"{first_epochs(warmup)} of each run left out" if warmup else "all epochs")
        + ") and images/s over all workers; 'vs first' is the ratio to the first site listed "
        "for that benchmark (time: below 1 is faster; images/s: above 1 is faster)."
    )
    if table.empty:
        fig = book.new("Sites compared", caption)
        book.note(
            fig.add_subplot(),
            "No run has equal training settings on two sites: nothing to compare "
            "(see the runs that could not be matched).",
        )
    else:
        columns = [
            ("Benchmark", 0.25, False),
            ("Site", 0.14, False),
            ("Workers\n(nodes)", 0.09, True),
            ("Time per epoch\n(mean \u00b1 sd)", 0.16, True),
            ("vs first", 0.08, True),
            ("Images/s", 0.1, True),
            ("vs first", 0.08, True),
            ("Accuracy", 0.1, True),
        ]
        rows = [
            [
                cell_text(r.benchmark, 0.25),
                r.site,
                f"{r.workers} ({r.nodes})",
                fmt_seconds_sd(r.mean_epoch_seconds, r.std_epoch_seconds),
                _ratio(r.epoch_seconds_vs_first_site),
                fmt_number_sd(r.images_per_second, None),
                _ratio(r.images_per_second_vs_first_site),
                fmt_pct(r.accuracy),
            ]
            for r in table.itertuples(index=False)
        ]
        benchmarks = list(dict.fromkeys(table["benchmark"]))
        shade = {b: ("#eef1f6" if i % 2 == 0 else "white") for i, b in enumerate(benchmarks)}
        header = [c[0] for c in columns]
        chunks = chunk_rows(rows, table_budget(header), TABLE_ROWS_PER_PAGE)
        start = 0
        for page_no, chunk in enumerate(chunks, start=1):
            suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
            fig = book.new("Sites compared" + suffix, caption, layout=None)
            keys = list(table["benchmark"].iloc[start : start + len(chunk)])
            start += len(chunk)

            def shading(row: int, col: int, keys: list[str] = keys) -> tuple[str, bool]:
                return shade[keys[row]], False

            draw_table(fig, columns, header, chunk, shading)

        # the chart: time per epoch of each benchmark, one bar per site, log scale
        shown = benchmarks[:20]
        fig = book.new(
            "Time per epoch and throughput by site",
            "Each matched benchmark on each site: mean time per epoch (left; whiskers: sd) and "
            "images/s over all workers (right), both on log scales."
            + (f" The first 20 of {len(benchmarks)} benchmarks." if len(benchmarks) > 20 else ""),
            png="sites",
        )
        palette = book.sns.color_palette("tab10", len(sites))
        height = 0.8 / len(sites)
        y = np.arange(len(shown))
        axes = fig.subplots(1, 2, sharey=True)
        for ax, column, sd, label in (
            (axes[0], "mean_epoch_seconds", "std_epoch_seconds", "seconds per epoch"),
            (axes[1], "images_per_second", None, "images/s"),
        ):
            known = table[column][np.isfinite(table[column]) & (table[column] > 0)]
            if known.empty:
                book.note(
                    ax,
                    f"No {label}: no matched run has an epoch\nafter the "
                    f"{plural(warmup, 'warm-up epoch')}.",
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
        axes[0].legend(
            title="site", frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=4
        )

    if unmatched:
        columns = [("Run", 0.35, False), ("Why it is not compared", 0.59, False)]
        rows = [[cell_text(run, 0.35), cell_text(why, 0.59)] for run, why in unmatched]
        header = [c[0] for c in columns]
        chunks = chunk_rows(rows, table_budget(header), TABLE_ROWS_PER_PAGE)
        for page_no, chunk in enumerate(chunks, start=1):
            suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
            fig = book.new(
                f"Runs that could not be matched: {len(rows)}" + suffix,
                "Runs are compared across sites only when every training setting but the name "
                "is equal; these are shown on the report's other pages only. A run that did not "
                "finish (no run.json, or no evaluation) is on no other page.",
                layout=None,
            )
            draw_table(
                fig,
                columns,
                header,
                chunk,
                lambda row, col: ("#eef1f6" if row % 2 == 0 else "white", False),
            )


def write_comparison(dirs: Sequence[Path], output: Path, title: str | None, warmup: int) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    loaded = load_all(dirs)
    runs, data = loaded.runs, loaded.data
    sites = list(dict.fromkeys(r.site for r in runs))
    groups, unmatched = match_runs(runs)
    runs_df = tables.runs_table(data, warmup)
    epochs_df = tables.epochs_table(data, warmup)
    table = site_table(groups, runs_df)
    not_compared = [(r.label, why) for r, why in unmatched] + loaded.pending
    title = title or f"clusterbench: {', '.join(sites)} compared"
    params = inputs.ReportParams(title, "", "compare", warmup)
    prov = provenance.collect()
    bench = pd.DataFrame(columns=["rule", "job", "s"])
    output.parent.mkdir(parents=True, exist_ok=True)
    for name, df in (("compare", table), ("compare-runs", runs_df)):
        with atomic_open(output.with_name(f"{name}.csv"), newline="") as fh:
            df.to_csv(fh, index=False)
    with matplotlib.rc_context(theme.theme()):
        ctx = Context(params, prov, data, runs_df, epochs_df, bench, [], loaded.skipped)
        sites_page = (15, "sites", lambda ctx: site_pages(ctx.book, table, not_compared, sites))
        book = build(ctx, extra=[sites_page])
        furniture.stamp_footers(book, furniture.footer_text(params, prov))
        furniture.write_pdf(book, output, furniture.pdf_metadata(params, prov))
    print(
        f"compare: {len(runs)} runs on {len(sites)} sites ({', '.join(sites)}), "
        f"{len(groups)} matched, {len(not_compared)} not, {len(loaded.skipped)} skipped; "
        f"{len(book)} pages -> {output}",
        file=sys.stderr,
    )
    return 0
