"""Snakemake jobs: the wall time and peak memory (max RSS) of every job, from the rules'
benchmark files, in pipeline order, :data:`JOBS_PER_PAGE` a page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.charts import log_ticks, set_category_ticks
from clusterbench.report.context import Context
from clusterbench.report.text import fmt_duration, part_of, shorten_text

ORDER = 160


JOBS_PER_PAGE = 26


PIPELINE_ORDER = ("download", "preprocess", "train", "evaluate", "report")


TITLE = "Snakemake jobs: wall time and memory"

CAPTION = (
    "From the rules' benchmark files (results/benchmarks/{rule}/{job}.tsv), mean over "
    "repeats. Max RSS = peak resident memory of the job's processes."
)


def draw(ctx: Context) -> None:
    bench, missing, book = ctx.bench, ctx.bench_missing, ctx.book
    if bench.empty:
        text = (
            "No Snakemake benchmark records were found, so there is nothing to show here.\n"
            "Rules with a benchmark: directive write them once their jobs have run."
        )
        if missing:
            text += "\n\nNot found: " + ", ".join(shorten_text(m, 60) for m in missing[:6])
        book.nothing_to_show(TITLE, CAPTION, text, png="benchmarks")
        return
    notes = []
    if bench["max_rss"].isna().any():
        notes.append("n/a: the job ended before Snakemake's first memory sample")
    if missing:
        notes.append(f"not found: {', '.join(shorten_text(m, 50) for m in missing[:4])}")
    means = job_means(bench)
    rules = list(dict.fromkeys(means["rule"]))
    palette = dict(zip(rules, book.sns.color_palette("Set2", len(rules)), strict=True))
    positive = means["s"][means["s"] > 0]
    time_lim = (positive.min() / 2, positive.max() * 8) if not positive.empty else None
    rss_max = max(float(means["max_rss"].max(skipna=True) or 0), 1.0)
    chunks = [means.iloc[i : i + JOBS_PER_PAGE] for i in range(0, len(means), JOBS_PER_PAGE)]
    for page_no, chunk in enumerate(chunks, start=1):
        fig = book.new(
            TITLE + part_of(page_no, len(chunks)),
            CAPTION,
            png="benchmarks" + (f"-{page_no}" if page_no > 1 else ""),
            note="; ".join(notes) + "." if notes else None,
        )
        time_ax, mem_ax = fig.subplots(1, 2, sharey=True)
        job_bars(time_ax, mem_ax, chunk, palette)
        if time_lim:
            time_ax.set_xscale("log")
            time_ax.set_xlim(*time_lim)
            log_ticks(time_ax.xaxis, *time_lim)
        mem_ax.set_xlim(0, rss_max * 1.25)
        rules_legend(mem_ax, rules, palette)


def job_means(bench: pd.DataFrame) -> pd.DataFrame:
    """Wall time and max RSS per job, the mean over its records, in pipeline order."""
    means = bench.groupby(["rule", "job"], sort=False)[["s", "max_rss"]].mean().reset_index()
    rank = {r: i for i, r in enumerate(PIPELINE_ORDER)}
    means["order"] = means["rule"].map(lambda r: rank.get(r, len(rank)))
    return means.sort_values(["order", "rule", "job"]).reset_index(drop=True)


def job_bars(time_ax: Any, mem_ax: Any, chunk: pd.DataFrame, palette: dict[str, Any]) -> None:
    """A bar per job on each axis, coloured by rule, its value printed; the jobs named on the
    time axis."""
    y = np.arange(len(chunk))
    colors = [palette[r] for r in chunk["rule"]]
    for ax, col, xlabel, fmt in (
        (time_ax, "s", "Wall time (s, log scale)", fmt_duration),
        (mem_ax, "max_rss", "Max RSS (MB)", lambda v: f"{v:,.0f} MB"),
    ):
        values = chunk[col]
        ax.barh(y, values.fillna(0), color=colors, height=0.65)
        for yi, v in zip(y, values, strict=True):
            text = "n/a" if pd.isna(v) else fmt(v)
            ax.text(0 if pd.isna(v) else v, yi, f"  {text}", va="center", fontsize=9.5)
        ax.set_xlabel(xlabel)
    labels = [f"{r}: {j}" for r, j in zip(chunk["rule"], chunk["job"], strict=True)]
    set_category_ticks(time_ax, labels, width=34)


def rules_legend(mem_ax: Any, rules: Sequence[str], palette: dict[str, Any]) -> None:
    """The rules' colours beside the memory axis (which shares the time axis' job names)."""
    from matplotlib.patches import Patch

    mem_ax.tick_params(axis="y", left=False, labelleft=False)
    mem_ax.grid(axis="y", visible=False)
    mem_ax.legend(
        handles=[Patch(color=palette[r], label=r) for r in rules],
        title="Rule",
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
        frameon=False,
        fontsize=10,
        title_fontsize=10.5,
    )
