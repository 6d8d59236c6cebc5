"""History: the throughput of these runs' series over time, from the history store (the
history step's table, ``ctx.history``), one panel per site, environment and workload, a line
per configuration; regressions marked, with what changed in provenance. No page without a
history (a comparison of results trees)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from clusterbench.history import regression
from clusterbench.report.context import Context
from clusterbench.report.text import part_of, shorten_text

ORDER = 107

#: Panels (site, environment, workload) per page.
PANELS_PER_PAGE = 6

TITLE = "History: throughput over time"

CAPTION = (
    "Mean images/s (a language model's: tokens/s) of every run of these runs' series in the "
    "history store, by the date its "
    "training ended: a series is one site, environment, workload and configuration (a line); "
    "each point is one workflow run's runs of it (whiskers: \u00b1 1 standard error; small dots: "
    "the runs). Hollow: earlier runs, from any checkout or user sharing the store; filled: this "
    "report's. A red cross is a regression (rule below). Each line's legend gives the model "
    "FLOPs its newest run achieved (TFLOP/s) and their share of the devices' peak (MFU)."
)

STATUS_WORDS = {
    "first": "first point",
    "ok": "within the noise",
    "faster": "faster, beyond the noise",
    "regression": "REGRESSION",
    "unjudged": "noise unknown",
}


def draw(ctx: Context) -> None:
    history = ctx.history
    if history is None or history.empty:
        return
    pts = regression.points(history)
    history = history.assign(date=pd.to_datetime(history["date"], utc=True, format="ISO8601"))
    pts = pts.assign(when=pd.to_datetime(pts["date"], utc=True, format="ISO8601"))
    panels = list(pts.groupby(["site", "environment", "workload"], sort=False, dropna=False))
    chunks = [panels[i : i + PANELS_PER_PAGE] for i in range(0, len(panels), PANELS_PER_PAGE)]
    note = history_note(pts)
    for page_no, chunk in enumerate(chunks, start=1):
        fig = ctx.book.new(
            TITLE + part_of(page_no, len(chunks)),
            CAPTION,
            png="history" + (f"-{page_no}" if page_no > 1 else ""),
            note=note,
        )
        cols = 1 if len(chunk) == 1 else 2
        axes = np.atleast_1d(fig.subplots((len(chunk) + cols - 1) // cols, cols, squeeze=False))
        for ax, (key, part) in zip(axes.flat, chunk, strict=False):
            panel(ctx, ax, key, part, history)
        for ax in list(axes.flat)[len(chunk) :]:
            ax.set_axis_off()


def panel(ctx: Context, ax: Any, key: tuple, part: pd.DataFrame, history: pd.DataFrame) -> None:
    """One site, environment and workload: a line per configuration over the dates."""
    import matplotlib.dates as mdates

    site, environment, workload = key
    configs = list(dict.fromkeys(part["speed_settings"]))
    colors = dict(zip(configs, ctx.book.sns.color_palette("tab10", len(configs)), strict=False))
    same = (history["site"].fillna("") == (site or "")) & (history["environment"] == environment)
    mine = history[same & history["speed_settings"].isin(configs)]  # this panel's runs
    unit = part["unit"].iloc[0]  # a workload's: images/s, or a language model's tokens/s
    rate = mine.get(regression.UNITS[unit][0], pd.Series(np.nan, index=mine.index))
    for config in configs:
        line = part[part["speed_settings"] == config]
        color = colors[config]
        runs = mine[mine["speed_settings"] == config]
        ax.plot(runs["date"], rate[runs.index], ".", color=color, alpha=0.35)
        label = line["config"].iloc[0] + mfu_label(runs)
        ax.plot(line["when"], line["mean"], "-", color=color, lw=1.2, label=label)
        for row in line.itertuples(index=False):
            se = row.se if np.isfinite(row.se) else 0.0
            face = color if row.current else "white"
            ax.errorbar(
                row.when, row.mean, yerr=se, fmt="o", mfc=face, mec=color, color=color, capsize=3
            )
            if row.status == "regression":
                ax.plot(row.when, row.mean, "x", color="#c0392b", ms=13, mew=2.5)
    ax.set_title(
        shorten_text(f"{site or 'no site'} \u00b7 {environment} \u00b7 {workload}", 70),
        fontsize=10.5,
    )
    ax.set_ylabel(unit)
    tops = np.concatenate([np.asarray(part["mean"] + part["se"].fillna(0), float), rate])
    tops = tops[np.isfinite(tops)]  # a point without a timed epoch has no rate
    ax.set_ylim(0, 1.12 * tops.max() if tops.size and tops.max() > 0 else 1.0)  # markers whole
    dates = pd.concat([part["when"], mine["date"]])
    ax.set_xlim(*date_range(dates[dates.notna()]))
    locator = mdates.AutoDateLocator(minticks=3, maxticks=6)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.tick_params(axis="x", labelsize=8.5, labelrotation=20)
    ax.legend(fontsize=8, frameon=False, loc="lower left")


def mfu_label(runs: pd.DataFrame) -> str:
    """'\nnewest: 0.42 TFLOP/s, MFU 3.1 %' (a line of its own under the configuration's) from
    a configuration's newest entry that has them (the store's ``tflops`` and ``mfu``); ''
    where none has."""
    if "tflops" not in runs:
        return ""
    tflops = pd.to_numeric(runs["tflops"], errors="coerce")  # a CSV's empty cell: NaN
    known = runs.assign(tflops=tflops)[np.isfinite(tflops)].sort_values("date")
    if known.empty:
        return ""
    newest = known.iloc[-1]
    mfu = float(pd.to_numeric(newest.get("mfu"), errors="coerce"))
    text = f"{float(newest['tflops']):.3g} TFLOP/s" + (
        f", MFU {100 * mfu:.3g} %" if np.isfinite(mfu) else ""
    )
    return f"\nnewest: {text}"


#: The least time either side of a panel's points (one point, or points minutes apart, would
#: otherwise get matplotlib's default range of several years).
MIN_PAD = pd.Timedelta(hours=1)


def date_range(dates: pd.Series) -> tuple[Any, Any]:
    """The x range of a panel with points at ``dates``: their span, widened by 8 % on each side
    (the first and last points' markers whole), and by at least :data:`MIN_PAD`."""
    first, last = dates.min(), dates.max()
    pad = max((last - first) * 0.08, MIN_PAD)
    return first - pad, last + pad


def history_note(pts: pd.DataFrame) -> str:
    """The rule, then each series' newest point: its status, and a regression's change."""
    newest = pts.groupby(list(regression.SERIES_KEY), sort=False, dropna=False).tail(1)
    flagged = newest[newest["status"] == "regression"]
    lines = [regression.RULE]
    if flagged.empty:
        counts = newest["status"].map(STATUS_WORDS).value_counts()
        lines.append(
            "Newest points: no regression ("
            + ", ".join(f"{int(n)} series: {w}" for w, n in counts.items())
            + ")."
        )
    for row in flagged.itertuples(index=False):
        lines.append(
            f"REGRESSION {regression.series_name(row)}: "
            f"{row.mean:,.0f} {row.unit} on {row.date[:10]}, {-row.change:.1%} below the "
            f"history's {row.ref_mean:,.0f} (threshold {row.threshold:,.0f}). Changed since the "
            f"last good entry: {row.changed}."
        )
    return "\n".join(shorten_text(line, 450, placeholder=" ...") for line in lines)
