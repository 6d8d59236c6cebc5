"""Helpers the charts of several pages share: category and log axes, epoch ticks, node
markers, the order runs are listed in, capping a chart's bars, and an axis that says in words
why it has nothing to draw."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from clusterbench.report.text import first_lines, plural, wrap_label

NODE_MARKERS = "osD^vP*X"


#: The most tick-label lines a category axis holds (a page's height at 6 pt).
CATEGORY_LINES = 60


#: The most bars / rows one chart draws; a page with more says how many it leaves out.
MAX_BARS = 30


def node_marker(i: int) -> dict[str, Any]:
    """Marker style of the i-th node count: the filled markers, then the same ones hollow, and
    so on (cycled: any number of node counts gets a marker)."""
    marker = NODE_MARKERS[i % len(NODE_MARKERS)]
    return {"marker": marker, "hollow": (i // len(NODE_MARKERS)) % 2 == 1}


def run_order(runs_df: pd.DataFrame) -> list[str]:
    """Order runs are listed in on the per-run plots: by dataset, model, workers, nodes, name."""
    return list(runs_df.sort_values(["dataset", "model", "workers", "nodes", "run"])["run"])


def set_category_ticks(ax, labels: list[str], colors: list | None = None, width: int = 24) -> None:
    """Categories 0..n-1 top to bottom on the y axis, labels wrapped and sized to fit (wider,
    then cut to fewer lines each, where many long labels would overprint); a short list gets
    extra room so that its bars do not fill the whole height."""
    for columns in dict.fromkeys((width, max(width, 32), max(width, 40))):
        wrapped = [wrap_label(label, columns) for label in labels]
        lines = sum(w.count("\n") + 1 for w in wrapped)
        if lines <= CATEGORY_LINES:
            break
    if lines > CATEGORY_LINES:
        most = max(1, CATEGORY_LINES // len(labels))
        wrapped = [first_lines(w, most, columns) for w in wrapped]
        lines = sum(w.count("\n") + 1 for w in wrapped)
    ax.set_yticks(range(len(labels)), wrapped, fontsize=max(6.0, min(10.5, 300 / lines)))
    for tick, color in zip(ax.get_yticklabels(), colors or [], strict=False):
        tick.set_color(color)
    pad = max(0.0, (3 - len(labels)) / 2)
    ax.set_ylim(len(labels) - 0.5 + pad, -0.5 - pad)
    ax.grid(axis="y", visible=False)


def epoch_axis(ax, epochs: pd.Series) -> None:
    """Integer epoch ticks; a run of one or two epochs gets a half-epoch margin each side."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("Epoch")
    lo, hi = int(epochs.min()), int(epochs.max())
    if hi - lo < 3:
        ax.set_xticks(range(lo, hi + 1))
        ax.set_xlim(lo - 0.5, hi + 0.5)


def log_ticks(axis, lo: float, hi: float) -> None:
    """Log-axis ticks labelled as plain numbers (0.2, 1, 50): at 1, 2, 5 x 10^k over a short
    range ``lo..hi``, at powers of ten over a long one."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))
    axis.set_minor_formatter(NullFormatter())


def note(ax, text: str) -> None:
    """``ax`` without axes, ``text`` in its middle: what a chart says instead of being empty."""
    ax.set_axis_off()
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        fontsize=12,
        color="0.35",
        wrap=True,
        transform=ax.transAxes,
    )


def no_time(ax, warmup: int) -> None:
    """:func:`note`: no time per epoch, as no run has an epoch after the warm-up."""
    note(
        ax,
        "No time per epoch: no run here has\nan epoch after the "
        f"{plural(warmup, 'warm-up epoch')}.",
    )


def at_most_bars(table: pd.DataFrame, what: str) -> tuple[pd.DataFrame, str]:
    """At most :data:`MAX_BARS` rows of a point table: all of them, or the best on mean
    validation accuracy (in their order), and the sentence that says so."""
    if len(table) <= MAX_BARS:
        return table, ""
    best = table["val_accuracy"].nlargest(MAX_BARS).index
    shown = table.loc[sorted(best)]
    return shown, f" Shown: the {MAX_BARS} best of {len(table)} {what} on mean validation accuracy."
