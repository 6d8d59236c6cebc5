"""Evaluating while training (``evaluate.every_minutes``): each run's accuracy on the evaluation
split against its training time, from the watch stage's points (its newest weights every few
minutes while it trained: :mod:`clusterbench.watch`) and, last, the evaluate stage's on the
final model; a language model's perplexity. No page where no run was watched."""

from __future__ import annotations

import math
from typing import Any

from clusterbench.report.context import Context
from clusterbench.report.text import list_runs

ORDER = 141

CAPTION = (
    "Each run's {metric} on the {split} split against its training time: every "
    "{every:g} min while it trained, a job of its own evaluated its newest weights (dots; "
    "the training waited where the two shared a node, and that time counts nowhere), and "
    "after training the evaluate stage the final model (a square, at the run's training time)."
)


def curve(ctx: Context, name: str, record: dict[str, Any]) -> tuple[list, list]:
    """``(minutes, values)`` of a run: its points, then its final evaluation; a language
    model's values are perplexities (exp of the loss per token)."""
    lm = is_lm(record)
    value = (lambda p: math.exp(min(p["loss"], 700.0))) if lm else (lambda p: p["accuracy"])
    points = [p for p in record["points"] if p.get("loss") is not None or not lm]
    minutes = [p["train_seconds"] / 60 for p in points]
    values = [value(p) for p in points]
    row = ctx.runs_df.set_index("run").loc[name] if name in set(ctx.runs_df["run"]) else None
    if row is not None and math.isfinite(row["train_seconds"]):
        final = row["perplexity"] if lm else row["accuracy"]
        if final == final:  # not NaN
            minutes.append(row["train_seconds"] / 60)
            values.append(float(final))
    return minutes, values


def is_lm(record: dict[str, Any]) -> bool:
    """Whether a watch record's points are a language model's (per token)."""
    return any(p.get("task") == "language-model" for p in record["points"])


def page_notes(ctx: Context, watched: list[str], shown: list[str]) -> str | None:
    """The runs without a point, and the language models left out of an accuracy chart."""
    notes = []
    empty = [n for n in watched if not ctx.watch[n]["points"]]
    if empty:
        why = ctx.watch[empty[0]].get("note") or "none recorded"
        notes.append(f"{list_runs(empty, 4)}: no point while training ({why}).")
    left = [n for n in watched if n not in shown]
    if left:
        notes.append(f"Language models ({list_runs(left, 4)}): their perplexity is not drawn.")
    return " ".join(notes) or None


def draw(ctx: Context) -> None:
    from matplotlib.ticker import PercentFormatter

    watched = [name for name in ctx.book.order if name in ctx.watch]
    if not watched:
        return
    lm = {n for n in watched if is_lm(ctx.watch[n])}
    metric = "perplexity (lower is better)" if lm == set(watched) else "accuracy"
    shown = [n for n in watched if (n in lm) == (metric != "accuracy")]
    first = ctx.watch[watched[0]]
    fig = ctx.book.new(
        "Evaluating while training",
        CAPTION.format(metric=metric, split=first["split"], every=first["every_minutes"]),
        png="evaluations",
        note=page_notes(ctx, watched, shown),
    )
    ax = fig.add_subplot()
    for name in shown:
        minutes, values = curve(ctx, name, ctx.watch[name])
        color = ctx.book.colors[name]
        ax.plot(minutes, values, "-", color=color, lw=1.2, label=name)
        ax.plot(minutes[:-1], values[:-1], "o", color=color, ms=4)
        ax.plot(minutes[-1:], values[-1:], "s", color=color, ms=6)
    ax.set_xlabel("Training time (minutes)")
    ax.set_xlim(left=0)
    if metric == "accuracy":
        ax.set_ylabel(f"Accuracy ({first['split']} split)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    else:
        ax.set_ylabel(f"Perplexity ({first['split']} split)")
    ax.legend(loc="best", fontsize=9, frameon=False)
