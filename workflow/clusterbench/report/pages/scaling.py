"""Scaling across workers and nodes: throughput, speed-up and parallel efficiency of each run
against its number of workers, a line per series of runs that share the scaling baseline's
settings (``tables.BASELINE_KEY``), markers by node count, line styles by backend."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from clusterbench.report.book import Book
from clusterbench.report.charts import node_marker
from clusterbench.report.context import Context
from clusterbench.report.describe import BASELINE_WORDS, compression_words, series_words
from clusterbench.report.tables import BASELINE_KEY
from clusterbench.report.text import list_runs, plural
from clusterbench.report.workloads import classifiers, language_models, left_out

ORDER = 110


#: The most speed-up/efficiency values printed next to the points.
MAX_ANNOTATED_POINTS = 8


#: The three charts: (runs.csv column, axis label).
SPECS = (
    ("images_per_second", "Images per second, all workers"),
    ("speedup", "Speed-up vs 1 worker"),
    ("efficiency", "Parallel efficiency (speed-up / workers)"),
)


@dataclass
class Series:
    """The timed runs grouped by series, and how each is drawn."""

    groups: list[tuple[tuple, pd.DataFrame]]  # (BASELINE_KEY values, the series' runs)
    palette: list[Any]  # a colour per series
    labels: list[str]  # a legend label per series: what differs between them
    common: str  # what they all share
    backends: list[str]
    backend_ls: dict[str, Any]  # backend -> line style
    markers: dict[int, dict[str, Any]]  # node count -> marker (charts.node_marker)


def draw(ctx: Context) -> None:
    runs_df = ctx.runs_df
    notes = scaling_notes(runs_df)
    lm = left_out(runs_df, "the images per second (top left chart)")
    notes = [*notes, lm] if lm else notes
    fig = ctx.book.new(
        "Scaling across workers and nodes",
        "Mean throughput (timed epochs) of each run against its number of workers (ranks; one "
        "per GPU on GPU runs). A line joins the runs of one series (their mean where a series has "
        "several runs with one worker count): "
        f"{BASELINE_WORDS}. Speed-up and efficiency are relative to the series' 1-worker run "
        "(the fastest if there are several); a run without one is compared with no other run. "
        "Efficiencies below 100 %: the step's shares of exposed communication and data wait.",
        png="scaling",
        note="\n".join(notes) if notes else None,
    )
    grid = fig.add_gridspec(2, 2)
    axes = [fig.add_subplot(grid[i // 2, i % 2]) for i in range(3)]
    legend_ax = fig.add_subplot(grid[1, 1])
    legend_ax.set_axis_off()
    series = scaling_series(ctx.book, runs_df)
    plot_series(axes, series, runs_df)
    for ax, (col, ylabel) in zip(axes, SPECS, strict=True):
        scaling_axis(ax, col, ylabel, runs_df)
    if series.groups:
        scaling_legend(legend_ax, series, runs_df["speedup"].notna().any())


def language(group: pd.DataFrame) -> bool:
    """Whether a series is of language models."""
    return bool(len(language_models(group)))


def scaling_series(book: Book, runs_df: pd.DataFrame) -> Series:
    timed = runs_df[runs_df["images_per_second"].notna()]
    groups = list(timed.groupby(list(BASELINE_KEY), sort=True, dropna=False))
    labels, common = series_labels([key for key, _ in groups]) if groups else ([], "")
    palette = book.sns.color_palette("tab10" if len(groups) <= 10 else "husl", len(groups))
    backends = sorted(runs_df["backend"].unique())
    styles = ["-", "--", "-.", (0, (5, 1, 1, 1, 1, 1))]  # ":" is the ideal line
    backend_ls = {b: styles[i % len(styles)] for i, b in enumerate(backends)}
    markers = {n: node_marker(i) for i, n in enumerate(sorted(runs_df["nodes"].unique()))}
    return Series(groups, palette, labels, common, backends, backend_ls, markers)


def plot_series(axes: list[Any], series: Series, runs_df: pd.DataFrame) -> None:
    """Each series' line and points on the three charts. Speed-up/efficiency values are
    printed next to the points of at most 3 series (labels of series j shifted so that close
    points do not overprint) and :data:`MAX_ANNOTATED_POINTS` points."""
    based = [key for key, group in series.groups if group["speedup"].notna().any()]
    annotate = len(based) <= 3 and runs_df["speedup"].notna().sum() <= MAX_ANNOTATED_POINTS
    for (key, group), color in zip(series.groups, series.palette, strict=True):
        # (annotated: at most 3 series, each shifted its own way)
        offset = (7, (4, -13, 14)[based.index(key)] if key in based[:3] else 0)
        group = group.sort_values(["workers", "nodes"])
        ls = series.backend_ls[dict(zip(BASELINE_KEY, key, strict=True))["backend"]]
        for ax, (col, _) in zip(axes, SPECS, strict=True):
            if group[col].isna().all() or col == "images_per_second" and language(group):
                continue  # a language model's throughput is in tokens/s: its own page
            line = group.groupby("workers")[col].mean()  # several runs per count: their mean
            ax.plot(line.index, line.to_numpy(), color=color, lw=1.5, alpha=0.75, ls=ls)
            for nodes, sub in group.groupby("nodes"):
                style = series.markers[nodes]
                ax.scatter(
                    sub["workers"],
                    sub[col],
                    marker=style["marker"],
                    s=60,
                    zorder=3,
                    facecolor="white" if style["hollow"] else color,
                    edgecolor=color if style["hollow"] else "white",
                    linewidth=1.2 if style["hollow"] else 0.8,
                )
            label = {"speedup": "{:.2f}x", "efficiency": "{:.0%}"}.get(col)
            if label and annotate:  # the line's values (a mean where runs share a count)
                for w, v in line.items():
                    if math.isfinite(v):
                        why = shares(group, w) if col == "efficiency" and v < 1 else ""
                        ax.annotate(
                            label.format(v) + why,
                            (w, v),
                            textcoords="offset points",
                            xytext=offset,
                            fontsize=9,
                            color=color,
                        )


def shares(group: pd.DataFrame, workers: int) -> str:
    """Where an efficiency below 100 % went: the measured shares of the step's time spent on
    exposed communication and waiting for data, of the runs with ``workers`` workers ("" where
    not measured)."""
    runs = group[group["workers"] == workers]
    if "comm_share" not in runs or runs["comm_share"].isna().all():
        return ""
    comm, data = runs["comm_share"].mean(), runs["data_share"].mean()
    return f"\ncomm {comm:.0%}, data {data:.0%}"


def scaling_axis(ax: Any, col: str, ylabel: str, runs_df: pd.DataFrame) -> None:
    """The axes of one chart (log2 workers), or why it has nothing to show."""
    from matplotlib.ticker import FixedLocator, NullLocator, PercentFormatter

    if col == "images_per_second" and classifiers(runs_df)["images_per_second"].isna().all():
        why = (
            "No run has an epoch left after the warm-up."
            if classifiers(runs_df).size
            else "Language models: tokens/s\non the language-model page."
        )
        Book.note(ax, f"Throughput in images/s: not available.\n{why}")
        return
    if col != "images_per_second" and not runs_df["speedup"].notna().any():
        Book.note(
            ax,
            f"{ylabel.split(' (')[0]}: not available.\nNo run has a timed 1-worker run "
            "with the same\ndataset, model, global batch, device,\nbackend and BN mode "
            "to compare with.",
        )
        return
    workers_all = sorted(runs_df["workers"].unique())
    max_w = max(workers_all)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(workers_all))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels(worker_tick_labels(workers_all, min(workers_all) / 1.4, max_w * 1.5))
    ax.set_xlim(min(workers_all) / 1.4, max_w * 1.5)
    ax.set_xlabel("Workers (ranks)")
    ax.set_ylabel(ylabel.replace(", ", ",\n").replace(" (", "\n("))  # short axes: 2 lines
    if col == "speedup":
        ax.plot([1, max_w], [1, max_w], ls=":", color="0.4", lw=1.2)
        ax.set_ylim(0, max(max_w, float(runs_df["speedup"].max())) * 1.1)
    elif col == "efficiency":
        ax.axhline(1.0, ls=":", color="0.4", lw=1.2)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, max(1.1, float(runs_df["efficiency"].max()) * 1.1))
    else:
        ax.set_ylim(0, float(classifiers(runs_df)["images_per_second"].max()) * 1.15)


def scaling_legend(legend_ax: Any, series: Series, has_any_base: bool) -> None:
    """Two legends in the fourth panel: the series, then the markers and line styles."""
    from matplotlib.lines import Line2D

    fontsize = 9.5 if len(series.groups) <= 8 else 8
    series_handles = [
        Line2D([], [], color=c, lw=2, ls=series.backend_ls[g["backend"].iloc[0]], label=lab)
        for (_, g), c, lab in zip(series.groups, series.palette, series.labels, strict=True)
    ]
    first = legend_ax.legend(
        handles=series_handles,
        loc="upper left",
        ncol=1 if len(series.groups) <= 10 else 2,
        frameon=False,
        fontsize=fontsize,
        title="Series" + (f" (all: {series.common})" if series.common else ""),
        title_fontsize=fontsize + 0.5,
        alignment="left",
    )
    legend_ax.add_artist(first)
    other = [
        Line2D(
            [],
            [],
            color="0.3",
            marker=st["marker"],
            ls="",
            markersize=8,
            markerfacecolor="white" if st["hollow"] else "0.3",
            label=plural(int(n), "node"),
        )
        for n, st in series.markers.items()
    ]
    other += [
        Line2D([], [], color="0.3", lw=1.5, ls=series.backend_ls[b], label=b)
        for b in series.backends
    ]
    if has_any_base:
        other.append(Line2D([], [], color="0.4", ls=":", lw=1.2, label="ideal (linear)"))
    legend_ax.legend(
        handles=other,
        loc="lower left",
        ncol=min(len(other), 4),
        frameon=False,
        fontsize=fontsize,
        title="Markers: nodes; lines: backend",
        title_fontsize=fontsize + 0.5,
        alignment="left",
    )


#: Settings a series label names only where some series sets them (your own loss and
#: optimiser, uneven shares, the network and its log level), and their unset values as runs.csv
#: writes them.
NAMED_WHERE_SET = ("own_training", "shares", "iface", "log_level")
UNSET = (None, "None", "", "nan")


def setting_words(key: str) -> Any:
    """A series label's words for ``key`` (:data:`NAMED_WHERE_SET`): ``shares auto``, your own
    training's ``loss m:f``; where unset ``default shares``, ``cross-entropy, SGD``."""
    if key == "own_training":
        return lambda k: k.get(key) if k.get(key) not in UNSET else "cross-entropy, SGD"
    return lambda k: f"{key} {k.get(key)}" if k.get(key) not in UNSET else f"default {key}"


def series_labels(keys: list[tuple]) -> tuple[list[str], str]:
    """Legend labels of scaling series (``BASELINE_KEY`` tuples) naming only what differs
    between them, and a line with what they all share."""
    parts = [
        ("dataset", lambda k: f"{k['dataset']} / {k['model']}"),
        ("global_batch", lambda k: f"batch {k['global_batch']}"),
        ("device", lambda k: str(k["device"])),
        ("backend", lambda k: str(k["backend"])),
        ("bn", lambda k: f"{k['bn']} BN"),
        (
            "grad_compression",
            lambda k: compression_words(k["grad_compression"])[2:] or "fp32 gradients",
        ),
        ("site", lambda k: f"site {k['site']}" if k["site"] else ""),
        *((key, setting_words(key)) for key in NAMED_WHERE_SET),
    ]
    dicts = [dict(zip(BASELINE_KEY, key, strict=True)) for key in keys]
    varies = {name: len({fmt(d) for d in dicts}) > 1 or len(dicts) == 1 for name, fmt in parts}
    unnamed = set()
    if len({d["site"] for d in dicts}) == 1:  # one site: never named (as before sites)
        unnamed.add("site")
    if all(d["grad_compression"] == "none" for d in dicts):  # named only where some compress
        unnamed.add("grad_compression")
    unnamed.update(k for k in NAMED_WHERE_SET if all(d.get(k) in UNSET for d in dicts))
    parts = [(name, fmt) for name, fmt in parts if name not in unnamed]
    labels = [", ".join(fmt(d) for name, fmt in parts if varies[name] and fmt(d)) for d in dicts]
    common = ", ".join(fmt(dicts[0]) for name, fmt in parts if not varies[name])
    return labels, common


def worker_tick_labels(workers: list[int], lo: float, hi: float) -> list[str]:
    """Labels of worker-count ticks on a log axis from ``lo`` to ``hi``: a tick too close to
    the previous labelled one (under 6 % of the axis) stays unlabelled, so labels never
    overprint."""
    span = math.log2(hi / lo)
    labels, last = [], None
    for w in workers:
        if last is None or math.log2(w / last) >= 0.06 * span:
            labels.append(str(w))
            last = w
        else:
            labels.append("")
    return labels


def scaling_notes(runs_df: pd.DataFrame) -> list[str]:
    """Why runs have no speed-up, and which baselines were picked among several."""
    notes = []
    missing = runs_df[runs_df["speedup"].isna()]
    untimed = missing[missing["images_per_second"].isna()]
    no_base = missing[missing["images_per_second"].notna()]
    if not no_base.empty:
        notes.append(
            f"No speed-up or efficiency for {list_runs(sorted(no_base['run']))}: no timed "
            f"1-worker run with {BASELINE_WORDS} (no other run is used instead)."
        )
    if not untimed.empty:
        notes.append(
            f"No throughput for {list_runs(sorted(untimed['run']))}: no epoch left after the "
            "warm-up."
        )
    several = list(runs_df[runs_df["baseline_candidates"] > 1].groupby("baseline_run", sort=True))
    if len(several) == 1:
        base, group = several[0]
        notes.append(
            f"{int(group['baseline_candidates'].iloc[0])} 1-worker runs qualify as the baseline "
            f"of {series_words(group.iloc[0], runs_df)}: the fastest, {base}, is used."
        )
    elif several:  # one line for all of them (many series, several sites)
        notes.append(
            f"In {len(several)} series several 1-worker runs qualify as the baseline; the "
            f"fastest is used: {list_runs([base for base, _ in several], 4)}."
        )
    return notes
