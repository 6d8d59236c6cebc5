"""Language models: tokens per second, validation loss and perplexity of each language-model
run, then a table with their test loss and perplexity. Accuracy, per-class tables and the
confusion matrix do not apply to them and are left out (the pages say so); none of this is
drawn for a report without a language-model run."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.charts import epoch_axis, log_ticks
from clusterbench.report.context import Context
from clusterbench.report.describe import first_epochs, untimed_note
from clusterbench.report.table_pages import table_pages
from clusterbench.report.text import fmt_number_sd, wrap_label
from clusterbench.report.workloads import language_models

ORDER = 145

#: What the pages say of the figures that do not apply.
LEFT_OUT = (
    "Accuracy, per-class tables and the confusion matrix do not apply to language models and "
    "are left out."
)

COLUMNS = (
    ("Run", 0.2, False),
    ("Dataset /\nmodel", 0.14, False),
    ("Tokens per\nsequence", 0.08, True),
    ("Workers\n(nodes)", 0.07, True),
    ("Epochs", 0.06, True),
    ("Tokens/s\n(mean \u00b1 sd)", 0.13, True),
    ("Validation\nloss", 0.08, True),
    ("Validation\nperplexity", 0.08, True),
    ("Test loss\n(split)", 0.08, True),
    ("Test\nperplexity", 0.08, True),
)


def draw(ctx: Context) -> None:
    runs = language_models(ctx.runs_df)
    if runs.empty:
        return
    synthetic = sorted(runs.loc[runs["synthetic"], "run"])
    warning = (
        f" Synthetic-text runs ({', '.join(synthetic)}): random tokens, the loss stays near "
        f"ln 256 = {math.log(256):.2f} and the perplexity near 256; synthetic: accuracy not "
        "meaningful, the tokens/s are."
        if synthetic
        else ""
    )
    with ctx.per_run_charts(runs) as (shown, epochs_df):
        chart_page(ctx, shown, epochs_df, warning)
    rows = [run_cells(r) for r in runs.itertuples(index=False)]
    note = untimed_note(runs, "* ")
    caption = (
        "Each language-model run: tokens per second over the timed epochs, final validation "
        "loss (cross-entropy per token) and perplexity (exp of the loss), and the evaluation's "
        f"loss and perplexity on its split. {LEFT_OUT}{warning}"
    )
    table_pages(ctx.book, "Language models", caption, COLUMNS, rows, note=note)


def chart_page(ctx: Context, runs: pd.DataFrame, epochs_df: pd.DataFrame, warning: str) -> None:
    """Tokens/s bars (left), validation loss and perplexity after each epoch (middle, right)."""
    book, warmup = ctx.book, ctx.warmup
    timing = (
        f"{first_epochs(warmup)} of each run (warm-up) excluded."
        if warmup
        else "All epochs are used."
    )
    fig = book.new(
        "Language models: tokens per second, loss and perplexity",
        "Left: training tokens per second over all workers, mean over the timed epochs (bars) "
        f"and one sample sd (error lines); {timing} Middle and right: validation loss per "
        f"token and perplexity after each epoch. {LEFT_OUT}{warning}",
        png="language_models",
    )
    rate_ax, loss_ax, ppl_ax = fig.subplots(1, 3, width_ratios=[1.2, 1, 1])
    order = [name for name in book.order if name in set(runs["run"])]
    stats = runs.set_index("run").reindex(order)
    mean = stats["tokens_per_second"]
    sd = stats["std_tokens_per_second"].fillna(0)
    rate_ax.barh(
        range(len(order)),
        mean.fillna(0),
        xerr=sd.where(mean.notna(), 0),
        color=[book.colors[n] for n in order],
        height=min(0.6, 0.25 + 0.1 * len(order)),
        error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
    )
    for y, (m, s) in enumerate(zip(mean, sd, strict=True)):
        text = f"  {m:,.0f}" if math.isfinite(m) else "  n/a (no timed epoch)"
        rate_ax.text(m + s if math.isfinite(m) else 0, y, text, va="center", fontsize=10)
    top = float(np.nanmax((mean + sd).to_numpy())) if mean.notna().any() else 0.0
    rate_ax.set_xlim(0, top * 1.3 if top > 0 else 1.0)
    rate_ax.set_xlabel("Tokens per second, all workers")
    book.run_axis(rate_ax, order)
    curves(book, loss_ax, ppl_ax, order, epochs_df)


def curves(book: Any, loss_ax: Any, ppl_ax: Any, order: list[str], epochs_df: pd.DataFrame) -> None:
    """Validation loss and perplexity (log scale) of each run after each epoch."""
    for name in order:
        ep = epochs_df[epochs_df["run"] == name]
        style = {"color": book.colors[name], "marker": "o", "markersize": 3.5}
        loss_ax.plot(ep["epoch"], ep["val_loss"], **style)
        ppl_ax.plot(ep["epoch"], ep["val_perplexity"], **style)
    shown = epochs_df[epochs_df["run"].isin(order)]
    loss_ax.set_ylabel("Validation loss (per token)")
    ppl_ax.set_yscale("log")
    log_ticks(ppl_ax.yaxis, shown["val_perplexity"].min(), shown["val_perplexity"].max())
    ppl_ax.set_ylabel("Validation perplexity (log scale)")
    for ax in (loss_ax, ppl_ax):
        epoch_axis(ax, shown["epoch"])


def run_cells(r: Any) -> list[str]:
    """One language-model run's row (``r``: a runs.csv row as a named tuple)."""

    def num(x: float, digits: int) -> str:
        return f"{x:,.{digits}f}" if pd.notna(x) else "n/a"

    return [
        wrap_label(r.run, 22),
        f"{r.dataset}\n{r.model}",
        str(int(r.seq_len)) if r.seq_len else "n/a",
        f"{r.workers} ({r.nodes})",
        str(r.epochs),
        fmt_number_sd(r.tokens_per_second, r.std_tokens_per_second).replace(" \u00b1", "\n\u00b1")
        if r.timed_epochs
        else "n/a*",
        num(r.final_val_loss, 4),
        num(r.final_val_perplexity, 2),
        f"{num(r.loss, 4)}\n({r.eval_split})",
        num(r.perplexity, 2),
    ]
