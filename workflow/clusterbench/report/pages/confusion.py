"""The confusion matrix of the best run (chosen on validation) on its evaluation split, and
the precision, recall and F1 of each class. Only classification runs have classes: the best of
them is shown (the page says that language-model runs are left out, and draws nothing when
there is no classification run)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.book import Book
from clusterbench.report.context import Context
from clusterbench.report.describe import describe_run
from clusterbench.report.text import fmt_pct, shorten_text
from clusterbench.report.workloads import SYNTHETIC, classifiers, left_out

ORDER = 150
#: Beyond this many classes the matrix is an image, not a vector cell each (ImageNet's 1,000
#: classes made the page 16 MB and a minute to render), and the scores are those of the
#: classes of lowest F1.
MANY_CLASSES = 30


def draw(ctx: Context) -> None:
    runs = classifiers(ctx.runs_df)
    if runs.empty:
        return  # language models alone: no classes (their page says so)
    best = runs.iloc[0]
    data = ctx.run_data(best["run"])
    cm = data.confusion
    n = int(cm.to_numpy().sum())
    title = f"Confusion matrix of the best run: {best['run']}"
    named = ""
    if len(shorten_text(title, 80)) < len(title):  # a long name: in the caption, whole
        title, named = "Confusion matrix of the best run", f"{best['run']}: "
    fig = ctx.book.new(
        title,
        f"{named}{describe_run(best)}; {best['eval_split']} split, n = {n:,}, accuracy "
        f"{fmt_pct(best['accuracy'])}"
        + (f" ({SYNTHETIC})" if best["synthetic"] else "")
        + ". Left: colour = share of the true class"
        + (", numbers = counts" if len(cm) <= 20 else "")
        + ". Right: precision, recall and F1 of "
        + (
            f"the {MANY_CLASSES} classes of lowest F1 (of {len(cm):,})."
            if len(cm) > MANY_CLASSES
            else "each class."
        ),
        png="confusion_best",
        note=left_out(ctx.runs_df, "a confusion matrix (per-class scores)"),
    )
    fig.get_layout_engine().set(wspace=0.08)
    heat_ax, dot_ax = fig.subplots(1, 2, width_ratios=[1.45, 1])
    confusion_heatmap(ctx.book, heat_ax, cm)
    class_scores(dot_ax, data.per_class, cm.index)


def confusion_heatmap(book: Book, ax: Any, cm: pd.DataFrame) -> None:
    """Colour = share of the true class, numbers = counts (up to 20 classes); an image beyond
    :data:`MANY_CLASSES`."""
    share = cm.div(cm.sum(axis=1).replace(0, 1), axis=0) * 100
    k = len(cm)
    many = k > MANY_CLASSES
    book.sns.heatmap(
        share,
        ax=ax,
        cmap="Blues",
        vmin=0,
        vmax=100,
        annot=cm.to_numpy() if k <= 20 else False,
        fmt="d",
        annot_kws={"fontsize": max(6, 11 - k // 4)},
        square=True,
        linewidths=0 if many else 0.5,
        linecolor="white",
        rasterized=many,
        cbar_kws={"label": "Share of the true class (%)", "shrink": 0.75, "pad": 0.03},
    )
    ax.set_xlabel("Predicted class")
    ax.set_ylabel("True class")
    long_names = max(map(len, cm.columns)) > 3
    ax.tick_params(axis="x", rotation=45 if long_names else 0)
    if long_names:
        for t in ax.get_xticklabels():
            t.set_horizontalalignment("right")
    ax.tick_params(axis="y", rotation=0)


def class_scores(ax: Any, per_class: pd.DataFrame, classes: pd.Index) -> None:
    """Precision, recall and F1 of each class as dots, classes in the matrix's order; beyond
    :data:`MANY_CLASSES`, those of the classes of lowest F1, lowest first."""
    from matplotlib.ticker import PercentFormatter

    pc = per_class.set_index("class")[["precision", "recall", "f1"]].reindex(classes)
    if len(pc) > MANY_CLASSES:
        pc = pc.sort_values("f1", na_position="first", kind="stable").head(MANY_CLASSES)
        classes = pc.index
    k = len(classes)
    y = np.arange(k)
    for offset, (col, label, marker, color) in zip(
        (-0.22, 0, 0.22),
        (
            ("precision", "Precision", "o", "#1b9e77"),
            ("recall", "Recall", "s", "#d95f02"),
            ("f1", "F1", "D", "#7570b3"),
        ),
        strict=True,
    ):
        ax.scatter(pc[col], y + offset, marker=marker, color=color, s=28, label=label, zorder=3)
    ax.set_yticks(y, list(classes))
    ax.set_ylim(k - 0.5, -0.5)
    lo = float(np.nanmin(pc.to_numpy())) if pc.notna().any().any() else 0.0
    ax.set_xlim(max(0.0, math.floor((lo - 0.02) * 20) / 20), 1.005)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlabel("Score per class (axis does not start at 0)" if lo > 0.05 else "Score")
    ax.set_ylabel("True class" if k == len(per_class) else "True class, lowest F1 first")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False, fontsize=10)
