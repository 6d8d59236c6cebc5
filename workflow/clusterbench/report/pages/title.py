"""The title page: the report's title, author and date, then the recommendation (the fastest
configuration of each workload and whether its margin is beyond the noise; with a target
accuracy, the configuration that reached it first: :mod:`clusterbench.report.recommend`), a
summary of the results and their provenance (where and with what the runs trained, and where
the report was made)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from clusterbench.core import provenance
from clusterbench.report import recommend
from clusterbench.report.book import Book
from clusterbench.report.context import Context
from clusterbench.report.describe import describe_run, series_words, timing_sentence
from clusterbench.report.inputs import PROVENANCE_COMPARED
from clusterbench.report.layout import (
    LINE_HEIGHT,
    PAGE_SIZE,
    TEXT_WIDTH_PT,
    drawn_width,
    fit_wrap,
)
from clusterbench.report.table_pages import DIFFERS_COLOR
from clusterbench.report.tables import BASELINE_KEY
from clusterbench.report.text import (
    UNKNOWN,
    commit_text,
    fmt_duration,
    fmt_pct,
    list_runs,
    plural,
    shorten_text,
)
from clusterbench.report.theme import font_families
from clusterbench.report.workloads import SYNTHETIC, classifiers, language_models

ORDER = 10

#: How the PDF's list of pages names this one (its title is the report's).
CONTENTS = "the title page: recommendation, summary and provenance"


def draw(ctx: Context) -> None:
    params = ctx.params
    caption = " \u00b7 ".join(filter(None, [params.author, ctx.prov["date"]]))
    fig = ctx.book.new(params.title, caption, layout=None, contents=CONTENTS)
    # the summary starts below the caption (a long author takes up to 4 lines)
    below_caption = 0.028 * (len(Book.subtitle_lines(caption)) - 1)
    blocks = [("Recommendation", recommendation_lines(ctx)), ("Summary", summary_lines(ctx))]
    draw_blocks(fig, [(head, lines) for head, lines in blocks if lines], below_caption)
    differs = (ctx.runs_df["provenance_differs"] != "").any()
    draw_provenance(fig, provenance_rows(ctx), highlight="Runs that differ" if differs else None)


#: The most workloads the title page recommends for (the recommendation page has them all).
WORKLOADS_SHOWN = 3


def recommendation_lines(ctx: Context) -> list[str]:
    """The fastest configuration of each workload (the first :data:`WORKLOADS_SHOWN`), its
    margin and whether it is beyond the noise; with a target accuracy, who reached it first."""
    recs = recommend.recommendations(recommend.configurations(ctx.runs_df))
    shown = recs.head(WORKLOADS_SHOWN)
    lines = [recommend.recommendation_sentence(row) for _, row in shown.iterrows()]
    if recs.empty:
        lines = ["No configuration to recommend: no run has an epoch left after the warm-up."]
    target = ctx.params.target_accuracy
    if target is not None:
        tta = recommend.time_to_accuracy(ctx.epochs_df, target)
        firsts = recommend.first_to_target(ctx.runs_df, tta).set_index("workload", drop=False)
        fastest = recs.set_index("workload")["config"]
        for workload, row in firsts.iterrows():
            if recs.empty or workload in set(shown["workload"]):
                lines.append(recommend.first_sentence(row, target, fastest.get(workload)))
    if len(recs) > WORKLOADS_SHOWN:
        more = plural(len(recs) - WORKLOADS_SHOWN, "more workload")
        lines.append(f"... and {more} (see the recommendation pages).")
    return lines


def summary_lines(ctx: Context) -> list[str]:
    """The summary's sentences: the runs, the best, the timing, the fastest, scaling, the
    skipped runs and the Snakemake jobs."""
    runs_df, warmup = ctx.runs_df, ctx.warmup
    best = runs_df.iloc[0]
    datasets = ", ".join(sorted(runs_df["dataset"].unique()))
    models = ", ".join(sorted(runs_df["model"].unique()))
    backends = ", ".join(sorted(runs_df["backend"].unique()))
    lines = [
        f"{plural(len(runs_df), 'run')} on {datasets} ({models}; backends: {backends}); "
        f"{plural(int(runs_df['epochs'].sum()), 'epoch')}, "
        f"{fmt_duration(runs_df['train_seconds'].sum())} of training in total.",
        best_line(best),
        timing_sentence(warmup),
        *throughput_lines(runs_df, warmup),
    ]
    lines += scaling_lines(runs_df)
    if ctx.skipped:
        lines.append(
            f"Skipped: {plural(len(ctx.skipped), 'run')} that could not run where the workflow "
            "ran (see the skipped runs page)."
        )
    if ctx.bench.empty:
        lines.append("Snakemake benchmarks: none found (see the last page).")
    else:
        jobs = ctx.bench.groupby(["rule", "job"])["s"].mean()
        lines.append(
            f"Snakemake benchmarks: {plural(len(jobs), 'job')}, "
            f"{fmt_duration(float(jobs.sum()))} of job wall time in total."
        )
    return lines


def best_line(best: pd.Series) -> str:
    """The best run (chosen on validation) and its test figure: accuracy, or a language
    model's perplexity; a synthetic run's accuracy is said to mean nothing."""
    if best["task"] == "language-model":
        return (
            f"Best run: {best['run']}, a language model, with perplexity "
            f"{best['perplexity']:,.2f} on the {best['eval_split']} split ({describe_run(best)}); "
            f"chosen on validation loss ({best['final_val_loss']:.4f} per token), never on the "
            "test split."
        )
    synthetic = f" ({SYNTHETIC})" if best["synthetic"] else ""
    return (
        f"Best run: {best['run']} with {fmt_pct(best['accuracy'])} {best['eval_split']} "
        f"accuracy{synthetic} ({describe_run(best)}); chosen on validation accuracy "
        f"({fmt_pct(best['final_val_accuracy'])}), never on the test split."
    )


def throughput_lines(runs_df: pd.DataFrame, warmup: int) -> list[str]:
    """The fastest run in images/s (classification) and in tokens/s (language models)."""
    lines = []
    images, lm = classifiers(runs_df), language_models(runs_df)
    if images["images_per_second"].notna().any():
        fastest = images.loc[images["images_per_second"].idxmax()]
        lines.append(
            f"Highest throughput: {fastest['run']} with {fastest['images_per_second']:,.0f} "
            f"images/s ({describe_run(fastest)})."
        )
    if lm["tokens_per_second"].notna().any():
        fastest = lm.loc[lm["tokens_per_second"].idxmax()]
        lines.append(
            f"Highest token rate: {fastest['run']} with {fastest['tokens_per_second']:,.0f} "
            f"tokens/s ({describe_run(fastest)})."
        )
    if not lines:
        lines.append(
            "Highest throughput: n/a: no run has an epoch left after the "
            f"{plural(warmup, 'warm-up epoch')}."
        )
    return lines


def scaling_lines(runs_df: pd.DataFrame) -> list[str]:
    """The best speed-up of the first two scaling series, and how many more there are."""
    scaled = runs_df[runs_df["speedup"].notna() & (runs_df["workers"] > 1)]
    series = list(scaled.groupby(list(BASELINE_KEY), sort=True))
    lines = []
    for _, group in series[:2]:
        top_run = group.sort_values(["workers", "speedup"]).iloc[-1]
        lines.append(
            f"Scaling of {series_words(top_run, runs_df)}: {top_run['speedup']:.2f}x speed-up on "
            f"{plural(top_run['workers'], 'worker')} ({fmt_pct(top_run['efficiency'], 0)} "
            f"efficiency) against {top_run['baseline_run']}."
        )
    if len(series) > 2:
        lines.append(f"... and {len(series) - 2} more scaling series (see the scaling page).")
    return lines


def draw_blocks(fig, blocks: list[tuple[str, list[str]]], below_caption: float) -> None:
    """Each block's heading and bullets, one under the other, in the upper half of the page;
    many lines (workloads, skips, sites, long names) are set closer, then smaller, above the
    provenance."""
    height = 0.45 - below_caption
    ax = fig.add_axes((0.03, 0.41, 0.94, height))
    ax.set_axis_off()
    top_pt = height * PAGE_SIZE[1] * 72  # the axes' height, in points
    gaps = len(blocks) * HEADING_PT + (len(blocks) - 1) * HEADING_PT / 2
    size, wrapped, n_lines = fit_bullets([lines for _, lines in blocks], 0.9 * (top_pt - gaps))
    spacing = min(1.5, max(1.15, 0.9 * (top_pt - gaps) / (n_lines * size * LINE_HEIGHT)))
    y_pt = top_pt
    for (heading, _), bullets in zip(blocks, wrapped, strict=True):
        ax.text(
            0, y_pt / top_pt, heading, fontsize=14, weight="bold", va="top", transform=ax.transAxes
        )
        y_pt -= HEADING_PT
        text = "\n".join(bullets)
        ax.text(
            0.01,
            y_pt / top_pt,
            text,
            va="top",
            fontsize=size,
            linespacing=spacing,
            transform=ax.transAxes,
        )
        y_pt -= (text.count("\n") + 1) * size * spacing * LINE_HEIGHT + 0.5 * HEADING_PT


def fit_bullets(blocks: list[list[str]], room_pt: float) -> tuple[float, list[list[str]], int]:
    """The largest font size (11 down to 7.5 points) at which the blocks' lines, as bullets
    wrapped at that size, fit ``room_pt`` points of height at the closest spacing (1.15); the
    bullets and their number of lines."""
    for size in np.arange(11.0, 7.49, -0.25):
        indent_pt = drawn_width("\u2022  ", size)
        columns = int(135 * 11 / size)
        wrapped = [
            [
                "\u2022  "
                + "\n    ".join(fit_wrap(line, columns, size, TEXT_WIDTH_PT - 2 * indent_pt))
                for line in lines
            ]
            for lines in blocks
        ]
        n_lines = sum(w.count("\n") + 1 for block in wrapped for w in block)
        if n_lines * size * 1.15 * LINE_HEIGHT <= room_pt:
            break
    return float(size), wrapped, n_lines


#: The height a block's heading takes, with the room under it (points).
HEADING_PT = 26


def differs_text(runs_df: pd.DataFrame) -> str:
    """The runs whose provenance differs from the others', and in what; those not recorded."""
    differs = runs_df[runs_df["provenance_differs"] != ""]
    unrecorded = runs_df[runs_df["provenance"] != "recorded"]
    if differs.empty:
        text = "none: every run's hardware and software match the others'"
    else:
        flagged = {f for value in differs["provenance_differs"] for f in value.split(", ")}
        fields = [f for f in [*PROVENANCE_COMPARED.values(), "within the run"] if f in flagged]
        text = (
            f"DIFFERS in {', '.join(fields)} (see the provenance page): "
            f"{plural(len(differs), 'run')}, {list_runs(sorted(differs['run']), 3)}"
        )
    if not unrecorded.empty:
        text += f"; not recorded for {list_runs(sorted(unrecorded['run']), 3)}"
    return text


def provenance_rows(ctx: Context) -> list[tuple[str, str]]:
    """The provenance table: the training's, as the runs recorded it, then the report's."""
    runs_df, prov, versions = ctx.runs_df, ctx.prov, ctx.prov["versions"]
    commits = [
        commit_text(c, d, 12) for c, d in zip(runs_df["commit"], runs_df["dirty"], strict=True)
    ]
    gpus = [
        g if g in ("none", UNKNOWN) else f"{g} (driver {d})"
        for g, d in zip(runs_df["gpus"], runs_df["gpu_driver"], strict=True)
    ]
    return [
        ("Config hash", ctx.params.config_hash),
        ("Training hosts", summarise_values(host_names(runs_df))),
        ("Training CPUs", summarise_values(runs_df["cpu_model"])),
        ("Training GPUs (driver)", summarise_values(gpus)),
        ("Training commit", summarise_values(commits)),
        (
            "Training Python / torch / Horovod",
            " / ".join(summarise_values(runs_df[k]) for k in ("python", "torch", "horovod")),
        ),
        (
            "Training devices; backends; schedulers",
            f"{', '.join(sorted(runs_df['device'].unique()))}; "
            f"{', '.join(sorted(runs_df['backend'].unique()))}; "
            f"{', '.join(sorted(runs_df['scheduler'].unique()))}",
        ),
        ("Runs that differ", differs_text(runs_df)),
        (
            "Report generated on",
            f"{prov['host']}, {prov['date']}, commit {provenance.describe_commit(prov['git'])}",
        ),
        (
            "Report software",
            f"Python {versions['python']}, pandas {versions['pandas']}, matplotlib "
            f"{versions['matplotlib']}, seaborn {versions['seaborn']}, Snakemake "
            f"{versions['snakemake']}",
        ),
    ]


def draw_provenance(fig, rows: list[tuple[str, str]], highlight: str | None) -> None:
    """The provenance table in the lower half of the page, the row ``highlight`` marked."""
    ax = fig.add_axes((0.03, 0.05, 0.94, 0.34))
    ax.set_axis_off()
    ax.text(0, 1, "Provenance", fontsize=14, weight="bold", va="top", transform=ax.transAxes)
    table = ax.table(
        cellText=[[k, shorten_text(str(v), 92, placeholder=" ...")] for k, v in rows],
        colWidths=[0.25, 0.75],
        cellLoc="left",
        bbox=(0.01, 0, 0.99, 0.88),
        edges="horizontal",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    for (row, col), cell in table.get_celld().items():
        cell.set_edgecolor("0.85")
        cell.get_text().set_weight("bold" if col == 0 else "normal")
        if col == 1:
            cell.get_text().set_family(font_families("monospace"))
        if rows[row][0] == highlight:
            cell.set_facecolor(DIFFERS_COLOR)


def summarise_values(values: Any) -> str:
    """The distinct values of the runs, with their number of runs where they are several:
    'a' or 'a (3 runs), b (1 run)'; 'unknown' when no run knows it."""
    counts = pd.Series(list(values), dtype=object).astype(str).value_counts(sort=True)
    known = counts[counts.index != UNKNOWN]
    if known.empty:
        return UNKNOWN
    if len(counts) == 1:
        return str(counts.index[0])
    return ", ".join(f"{v} ({plural(int(n), 'run')})" for v, n in counts.items())


def host_names(runs_df: pd.DataFrame) -> list[str]:
    """Every training host of every run (one entry per run and host), from ``host_ranks``."""
    return [
        part.split(" (ranks ")[0].strip()
        for text in runs_df["host_ranks"]
        for part in str(text).split(";")
        if part.strip()
    ]
