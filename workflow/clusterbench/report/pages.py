"""The report's pages: each function draws one kind of page from the tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench import provenance
from clusterbench.report.book import Book
from clusterbench.report.charts import epoch_axis, log_ticks, node_marker, set_category_ticks
from clusterbench.report.describe import (
    BASELINE_WORDS,
    describe_run,
    first_epochs,
    series_words,
    timing_sentence,
    untimed_note,
)
from clusterbench.report.inputs import PROVENANCE_COMPARED, ReportParams, RunData
from clusterbench.report.layout import (
    LINE_HEIGHT,
    PAGE_SIZE,
    SUBTITLE_PT,
    TEXT_WIDTH_PT,
    drawn_width,
    fit_wrap,
)
from clusterbench.report.table_pages import (
    DIFFERS_COLOR,
    TABLE_ROWS_PER_PAGE,
    chunk_rows,
    draw_table,
    table_budget,
)
from clusterbench.report.tables import (
    BACKEND_MATCH_KEY,
    BASELINE_KEY,
    REFERENCE_BACKEND,
    backend_comparison,
    provenance_differences,
)
from clusterbench.report.text import (
    UNKNOWN,
    commit_text,
    cut_lines,
    fmt_duration,
    fmt_number_sd,
    fmt_pct,
    fmt_seconds_sd,
    list_runs,
    plural,
    shorten_text,
    wrap_label,
)
from clusterbench.report.theme import font_families

BENCH_JOBS_PER_PAGE = 26


MAX_ANNOTATED_POINTS = 8


PIPELINE_ORDER = ("download", "preprocess", "train", "evaluate", "report")


def title_page(
    pages: Book, prov: dict[str, Any], runs_df: pd.DataFrame, bench: pd.DataFrame, skipped: int = 0
):
    params = pages.params
    subtitle = " \u00b7 ".join(filter(None, [params.author, prov["date"]]))
    fig = pages.new(params.title, subtitle, layout=None)
    # the summary starts below the subtitle (a long author takes up to 4 lines)
    below_subtitle = 0.028 * (len(Book.subtitle_lines(subtitle)) - 1)
    best = runs_df.iloc[0]
    warmup = params.timing_warmup_epochs
    datasets = ", ".join(sorted(runs_df["dataset"].unique()))
    models = ", ".join(sorted(runs_df["model"].unique()))
    backends = ", ".join(sorted(runs_df["backend"].unique()))
    lines = [
        f"{plural(len(runs_df), 'run')} on {datasets} ({models}; backends: {backends}); "
        f"{plural(int(runs_df['epochs'].sum()), 'epoch')}, "
        f"{fmt_duration(runs_df['train_seconds'].sum())} of training in total.",
        f"Best run: {best['run']} with {fmt_pct(best['accuracy'])} {best['eval_split']} "
        f"accuracy ({describe_run(best)}); chosen on validation accuracy "
        f"({fmt_pct(best['final_val_accuracy'])}), never on the test split.",
        timing_sentence(warmup),
    ]
    if runs_df["images_per_second"].notna().any():
        fastest = runs_df.loc[runs_df["images_per_second"].idxmax()]
        lines.append(
            f"Highest throughput: {fastest['run']} with {fastest['images_per_second']:,.0f} "
            f"images/s ({describe_run(fastest)})."
        )
    else:
        lines.append(
            "Highest throughput: n/a: no run has an epoch left after the "
            f"{plural(warmup, 'warm-up epoch')}."
        )
    scaled = runs_df[runs_df["speedup"].notna() & (runs_df["workers"] > 1)]
    series = list(scaled.groupby(list(BASELINE_KEY), sort=True))
    for _, group in series[:2]:
        top_run = group.sort_values(["workers", "speedup"]).iloc[-1]
        lines.append(
            f"Scaling of {series_words(top_run, runs_df)}: {top_run['speedup']:.2f}x speed-up on "
            f"{plural(top_run['workers'], 'worker')} ({fmt_pct(top_run['efficiency'], 0)} "
            f"efficiency) against {top_run['baseline_run']}."
        )
    if len(series) > 2:
        lines.append(f"... and {len(series) - 2} more scaling series (see the scaling page).")
    if skipped:
        lines.append(
            f"Skipped: {plural(skipped, 'run')} that could not run where the workflow ran (see "
            "the skipped runs page)."
        )
    if bench.empty:
        lines.append("Snakemake benchmarks: none found (see the last page).")
    else:
        jobs = bench.groupby(["rule", "job"])["s"].mean()
        lines.append(
            f"Snakemake benchmarks: {plural(len(jobs), 'job')}, "
            f"{fmt_duration(float(jobs.sum()))} of job wall time in total."
        )
    ax = fig.add_axes((0.03, 0.52, 0.94, 0.34 - below_subtitle))
    ax.set_axis_off()
    ax.text(0, 1, "Summary", fontsize=14, weight="bold", va="top", transform=ax.transAxes)
    indent_pt = drawn_width("\u2022  ", SUBTITLE_PT)
    wrapped = [
        "\u2022  " + "\n    ".join(fit_wrap(line, 135, SUBTITLE_PT, TEXT_WIDTH_PT - 2 * indent_pt))
        for line in lines
    ]
    # many lines (skips, sites, long names) are set closer, then smaller, above the provenance
    room_pt = 0.87 * (0.34 - below_subtitle) * PAGE_SIZE[1] * 72
    n_lines = sum(w.count("\n") + 1 for w in wrapped)
    spacing = min(1.5, max(1.15, room_pt / (n_lines * 11 * LINE_HEIGHT)))
    size = min(11.0, max(8.0, room_pt / (n_lines * spacing * LINE_HEIGHT)))
    ax.text(
        0.01,
        0.87,
        "\n".join(wrapped),
        va="top",
        fontsize=size,
        linespacing=spacing,
        transform=ax.transAxes,
    )

    versions = prov["versions"]
    differs = runs_df[runs_df["provenance_differs"] != ""]
    unrecorded = runs_df[runs_df["provenance"] != "recorded"]
    if differs.empty:
        diff_text = "none: every run's hardware and software match the others'"
    else:
        flagged = {f for text in differs["provenance_differs"] for f in text.split(", ")}
        fields = [f for f in [*PROVENANCE_COMPARED.values(), "within the run"] if f in flagged]
        diff_text = (
            f"DIFFERS in {', '.join(fields)} (see the provenance page): "
            f"{plural(len(differs), 'run')}, {list_runs(sorted(differs['run']), 3)}"
        )
    if not unrecorded.empty:
        diff_text += f"; not recorded for {list_runs(sorted(unrecorded['run']), 3)}"
    commits = [
        commit_text(c, d, 12) for c, d in zip(runs_df["commit"], runs_df["dirty"], strict=True)
    ]
    rows = [
        ("Config hash", params.config_hash),
        ("Training hosts", summarise_values(host_names(runs_df))),
        ("Training CPUs", summarise_values(runs_df["cpu_model"])),
        (
            "Training GPUs (driver)",
            summarise_values(
                [
                    g if g in ("none", UNKNOWN) else f"{g} (driver {d})"
                    for g, d in zip(runs_df["gpus"], runs_df["gpu_driver"], strict=True)
                ]
            ),
        ),
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
        ("Runs that differ", diff_text),
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
    ax = fig.add_axes((0.03, 0.06, 0.94, 0.44))
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
        if rows[row][0] == "Runs that differ" and not differs.empty:
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


def runs_table_pages(pages: Book, runs_df: pd.DataFrame) -> None:
    warmup = pages.params.timing_warmup_epochs
    splits = runs_df["eval_split"].unique()
    acc_header = f"{splits[0].capitalize()}\naccuracy" if len(splits) == 1 else "Accuracy\n(split)"
    columns = [  # header, relative width, right-aligned
        ("#", 0.025, True),
        ("Run", 0.157, False),
        ("Dataset /\nmodel", 0.085, False),
        ("Workers\n(nodes)", 0.066, True),
        ("Device", 0.055, False),
        ("Backend /\nBN", 0.086, False),
        ("Global\nbatch", 0.073, True),
        ("Eff.\nLR", 0.045, True),
        ("Deter-\nministic", 0.062, False),
        ("Epochs", 0.055, True),
        (acc_header, 0.07, True),
        ("Time per epoch\n(mean \u00b1 sd)", 0.125, True),
        ("Throughput\n(images/s)", 0.088, True),
        ("Total\ntrain time", 0.092, True),
    ]
    header = [c[0] for c in columns]
    rows = []
    for rank, r in enumerate(runs_df.itertuples(index=False), start=1):
        acc = fmt_pct(r.accuracy)
        convention = "per worker" if r.batch_scaling == "per_worker" else r.batch_scaling
        rows.append(
            [
                str(rank),
                wrap_label(r.run, 17),
                f"{r.dataset}\n{r.model}",
                f"{r.workers} ({r.nodes})",
                r.device,
                f"{r.backend}\n{r.bn}",
                f"{r.global_batch}\n{convention}",
                f"{r.effective_lr:g}",
                "yes" if r.deterministic else "no",
                str(r.epochs),
                acc if len(splits) == 1 else f"{acc}\n({r.eval_split})",
                (
                    f"{fmt_seconds_sd(r.mean_epoch_seconds, r.std_epoch_seconds)}\n"
                    f"({r.timed_epochs} ep.)"
                    if r.timed_epochs
                    else "n/a\n(0 ep.*)"
                ),
                fmt_number_sd(r.images_per_second, r.std_images_per_second).replace(
                    " \u00b1", "\n\u00b1"
                ),
                fmt_duration(r.train_seconds),
            ]
        )
    note = untimed_note(runs_df, "* ")
    bottom = 0.08 if note else 0.06
    chunks = chunk_rows(rows, table_budget(header, bottom=bottom), TABLE_ROWS_PER_PAGE)
    for page_no, chunk in enumerate(chunks, start=1):
        suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
        fig = pages.new(
            "Runs" + suffix,
            "Sorted by evaluation accuracy, best first (highlighted). Workers = processes (ranks). "
            "Global batch = images per optimiser step over all workers; convention: global = the "
            "configured batch size is the global batch, per worker = it is per worker (times "
            "the workers). Eff. LR = learning rate after warm-up. Time per epoch and throughput "
            "(all workers): mean \u00b1 sample sd over the timed epochs (ep.), "
            + (
                f"excluding {first_epochs(warmup)} of each run (warm-up)."
                if warmup
                else "all epochs of each run."
            ),
            layout=None,
            note=note,
        )

        def style(row: int, col: int, page_no: int = page_no) -> tuple[str, bool]:
            if page_no == 1 and row == 0:  # the best run
                return "#d4ecd0", True
            return ("#eef1f6" if row % 2 == 0 else "white"), False

        draw_table(fig, columns, header, chunk, style, bottom=bottom)


#: Columns of the provenance table: runs.csv fields shown -> (header, width, right-aligned).
PROVENANCE_TABLE = (
    ("#", 0.025, True),
    ("Run", 0.13, False),
    ("Training hosts\n(ranks)", 0.135, False),
    ("CPU\n(logical cores per host)", 0.18, False),
    ("GPUs\n(NVIDIA driver)", 0.16, False),
    ("Commit", 0.09, False),
    ("Python / torch /\nHorovod / NumPy", 0.145, False),
    ("Differs from\nthe other runs", 0.135, False),
)


#: The provenance table's column of each field of ``PROVENANCE_COMPARED`` (and 'within the run').
PROVENANCE_FIELD_COLUMN = {
    "CPU": 3,
    "cores": 3,
    "GPUs": 4,
    "GPU driver": 4,
    "commit": 5,
    "Python": 6,
    "torch": 6,
    "Horovod": 6,
    "NumPy": 6,
    "within the run": 2,
}


def provenance_cells(rank: int, r: Any) -> list[str]:
    """One run's row of the provenance table (``r``: a runs.csv row as a named tuple)."""
    hosts = [h.strip() for h in str(r.host_ranks).split(";") if h.strip()]
    host_lines = [
        shorten_text(h.replace(" (ranks ", " ("), 24, placeholder="...") for h in hosts[:3]
    ]
    if len(hosts) > 3:
        host_lines[-1] = f"+ {len(hosts) - 2} more hosts"
    cpu = [UNKNOWN]
    if r.cpu_model != UNKNOWN or r.cpu_cores != UNKNOWN:
        cpu = cut_lines(f"{r.cpu_model} ({r.cpu_cores} cores)", 27, 3)
    gpus = [str(r.gpus)]
    if r.gpus not in ("none", UNKNOWN):
        gpus = cut_lines(f"{r.gpus}, driver {r.gpu_driver}", 24, 3)
    commit = commit_text(r.commit, r.dirty, 10).replace(" (dirty)", "\n(dirty)")
    versions = f"{r.python} / {r.torch}\n{r.horovod} / {r.numpy}"
    if r.provenance != "recorded":
        differs = "not recorded"
    else:
        differs = (
            "\n".join(cut_lines(r.provenance_differs, 15, 3)) if r.provenance_differs else "none"
        )
    return [
        str(rank),
        wrap_label(r.run, 17),
        "\n".join(host_lines),
        "\n".join(cpu),
        "\n".join(gpus),
        commit,
        versions,
        differs,
    ]


def provenance_pages(pages: Book, runs_df: pd.DataFrame) -> None:
    """One row per run: where it trained and with what (run.json's provenance), the values in
    which it differs from the other runs highlighted and named."""
    _, notes = provenance_differences(runs_df)
    unrecorded = runs_df[runs_df["provenance"] != "recorded"]
    if not unrecorded.empty:
        notes.append(
            f"Not recorded for {list_runs(sorted(unrecorded['run']), 4)}: its run.json is older "
            "than provenance recording, so its CPU, GPUs and commit are unknown (hosts and "
            "versions as its rank 0 recorded them)."
        )
    notes = [shorten_text(n, 290, placeholder=" ...") for n in notes[:6]]
    note = "\n".join(notes) if notes else None
    note_lines = len(Book.note_lines(note))
    bottom = 0.045 + 0.021 * note_lines + 0.015 if notes else 0.06
    top = 0.8
    header = [c[0] for c in PROVENANCE_TABLE]
    rows = [provenance_cells(i, r) for i, r in enumerate(runs_df.itertuples(index=False), 1)]
    chunks = chunk_rows(rows, table_budget(header, top, bottom), TABLE_ROWS_PER_PAGE)
    flags = list(runs_df["provenance_differs"])
    unknown = list(runs_df["provenance"] != "recorded")
    start = 0
    for page_no, chunk in enumerate(chunks, start=1):
        suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
        fig = pages.new(
            "Provenance of the runs" + suffix,
            "Where and with what each run trained, as its ranks saw it on the training hosts "
            "and its rank 0 recorded it in run.json: hosts (ranks on each), CPU and cores, GPUs "
            "and NVIDIA driver, git commit of the code (dirty: with uncommitted changes) and "
            "package versions. Same order as the runs table. Highlighted: a value that differs "
            "from the one most runs share (from every run's where no value is the most common).",
            layout=None,
            note=note,
        )

        def style(row: int, col: int, first: int = start) -> tuple[str, bool]:
            i = first + row
            fields = flags[i].split(", ") if flags[i] else []
            marked = {PROVENANCE_FIELD_COLUMN[f] for f in fields} | ({7} if fields else set())
            if col in marked:
                return DIFFERS_COLOR, col == 7
            if unknown[i] and col == 7:
                return "#e6e6e6", False
            return ("#eef1f6" if row % 2 == 0 else "white"), False

        draw_table(fig, PROVENANCE_TABLE, header, chunk, style, bottom=bottom, top=top)
        start += len(chunk)


def epoch_time_page(pages: Book, runs_df: pd.DataFrame, epochs_df: pd.DataFrame) -> None:
    warmup = pages.params.timing_warmup_epochs
    excluded = (
        f"{plural(warmup, 'warm-up epoch')} excluded per run: {first_epochs(warmup)} "
        f"(start-up costs; hollow dots, shaded) {'is' if warmup == 1 else 'are'} not in the "
        "mean."
        if warmup
        else "No warm-up epoch is excluded: the mean is over all epochs."
    )
    note = untimed_note(runs_df)
    fig = pages.new(
        "Time per epoch",
        "Left: mean \u00b1 sample sd of the time per epoch of each run over its timed epochs "
        "(bars, value and number of epochs printed) and every single epoch (dots). Right: the "
        f"time of each epoch in order. {excluded}",
        png="epoch_time",
        note=note,
    )
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1])
    order = pages.order
    stats = runs_df.set_index("run").reindex(order)
    rng = np.random.default_rng(0)
    for i, name in enumerate(order):
        color = pages.colors[name]
        ep = epochs_df[epochs_df["run"] == name]
        timed = ep["timed"].to_numpy(bool)
        vals = ep["epoch_seconds"].to_numpy(float)
        mean, sd, n = stats.loc[name, ["mean_epoch_seconds", "std_epoch_seconds", "timed_epochs"]]
        if math.isfinite(mean):
            left.barh(i, mean, height=0.6, color=color, alpha=0.45)
            if math.isfinite(sd) and sd > 0:
                left.errorbar(
                    mean, i, xerr=[[min(sd, mean * 0.999)], [sd]], color="0.25", capsize=3, lw=1
                )
        jitter = rng.uniform(-0.2, 0.2, len(vals)) if len(vals) > 1 else np.zeros(len(vals))
        left.scatter(
            vals[timed], i + jitter[timed], s=16, color=color, edgecolor="white", lw=0.4, zorder=3
        )
        left.scatter(
            vals[~timed],
            i + jitter[~timed],
            s=18,
            facecolor="none",
            edgecolor=color,
            lw=1,
            zorder=3,
        )
        label = fmt_seconds_sd(mean, sd, int(n)) if math.isfinite(mean) else "n/a (0 ep.)"
        left.text(vals.max() * 1.15, i, label, va="center", fontsize=9.5)
    all_values = epochs_df["epoch_seconds"].to_numpy(float)
    positive = all_values[all_values > 0]
    lo, hi = (positive.min(), positive.max()) if len(positive) else (0.1, 1.0)
    # the bars and dots take the left 55 % of the axis, the printed values the rest
    x_hi = 10 ** (math.log10(lo / 3) + math.log10(hi * 1.15 / (lo / 3)) / 0.55)
    left.set_xscale("log")
    left.set_xlim(lo / 3, x_hi)
    log_ticks(left.xaxis, lo / 3, x_hi)
    pages.run_axis(left, order)
    left.set_xlabel("Time per epoch (s, log scale)")
    warm = epochs_df[~epochs_df["timed"]]
    if not warm.empty:
        right.axvspan(
            warm["epoch"].min() - 0.5, warm["epoch"].max() + 0.5, color="0.9", zorder=0, lw=0
        )
        right.text(
            (warm["epoch"].min() + warm["epoch"].max()) / 2,
            1.0,
            "warm-up\n(excluded)",
            transform=right.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
            color="0.4",
        )
    for name in order:
        ep = epochs_df[epochs_df["run"] == name]
        color = pages.colors[name]
        right.plot(ep["epoch"], ep["epoch_seconds"], color=color, label=name)
        for timed, face in ((True, color), (False, "white")):
            sub = ep[ep["timed"] == timed]
            right.scatter(
                sub["epoch"],
                sub["epoch_seconds"],
                s=14,
                facecolor=face,
                edgecolor=color,
                lw=1,
                zorder=3,
            )
    right.set_yscale("log")
    log_ticks(right.yaxis, lo, hi)
    right.set_ylabel("Time per epoch (s, log scale)")
    epoch_axis(right, epochs_df["epoch"])
    right.legend(
        title="Run",
        fontsize=9.5,
        title_fontsize=10,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
        frameon=False,
    )


def throughput_page(pages: Book, runs_df: pd.DataFrame) -> None:
    warmup = pages.params.timing_warmup_epochs
    fig = pages.new(
        "Throughput",
        "Training images per second: mean over the timed epochs (bars) and one sample standard "
        "deviation (error lines); left for all workers together, right per worker. "
        + (
            f"{first_epochs(warmup).capitalize()} of each run (warm-up) "
            f"{'is' if warmup == 1 else 'are'} excluded."
            if warmup
            else "All epochs are used (no warm-up excluded)."
        ),
        png="throughput",
    )
    total_ax, worker_ax = fig.subplots(1, 2, sharey=True)
    order = pages.order
    stats = runs_df.set_index("run").reindex(order)
    colors = [pages.colors[n] for n in order]
    height = min(0.6, 0.25 + 0.1 * len(order))
    for ax, scale, xlabel in (
        (total_ax, 1, "Images per second, all workers"),
        (worker_ax, stats["workers"], "Images per second per worker"),
    ):
        mean = stats["images_per_second"] / scale
        std = stats["std_images_per_second"].fillna(0) / scale
        ax.barh(
            range(len(order)),
            mean.fillna(0),
            xerr=std.where(mean.notna(), 0),
            color=colors,
            height=height,
            error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
        )
        for y, (m, s, note) in enumerate(zip(mean, std, stats["timing_note"], strict=True)):
            text = f"  {m:,.0f}" if math.isfinite(m) else f"  n/a ({note})"
            ax.text(m + s if math.isfinite(m) else 0, y, text, va="center", fontsize=10)
        ax.set_xlabel(xlabel)
        top = float(np.nanmax((mean + std).to_numpy())) if mean.notna().any() else 0.0
        ax.set_xlim(0, top * 1.22 if top > 0 else 1.0)
    pages.run_axis(total_ax, order)
    worker_ax.tick_params(axis="y", left=False, labelleft=False)
    worker_ax.grid(axis="y", visible=False)


def series_labels(keys: list[tuple]) -> tuple[list[str], str]:
    """Legend labels of scaling series (``BASELINE_KEY`` tuples) naming only what differs
    between them, and a line with what they all share."""
    parts = [
        ("dataset", lambda k: f"{k['dataset']} / {k['model']}"),
        ("global_batch", lambda k: f"batch {k['global_batch']}"),
        ("device", lambda k: str(k["device"])),
        ("backend", lambda k: str(k["backend"])),
        ("bn", lambda k: f"{k['bn']} BN"),
        ("site", lambda k: f"site {k['site']}" if k["site"] else ""),
    ]
    dicts = [dict(zip(BASELINE_KEY, key, strict=True)) for key in keys]
    varies = {name: len({fmt(d) for d in dicts}) > 1 or len(dicts) == 1 for name, fmt in parts}
    if len({d["site"] for d in dicts}) == 1:  # one site: never named (as before sites)
        parts = parts[:-1]
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


def scaling_page(pages: Book, runs_df: pd.DataFrame) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator, PercentFormatter

    notes = scaling_notes(runs_df)
    fig = pages.new(
        "Scaling across workers and nodes",
        "Mean throughput (timed epochs) of each run against its number of workers (ranks; one "
        "per GPU on GPU runs). A line joins the runs of one series (their mean where a series has "
        "several runs with one worker count): "
        f"{BASELINE_WORDS}. Speed-up and efficiency are relative to the series' 1-worker run "
        "(the fastest if there are several); a run without one is compared with no other run.",
        png="scaling",
        note="\n".join(notes) if notes else None,
    )
    grid = fig.add_gridspec(2, 2)
    axes = [fig.add_subplot(grid[i // 2, i % 2]) for i in range(3)]
    legend_ax = fig.add_subplot(grid[1, 1])
    legend_ax.set_axis_off()
    timed = runs_df[runs_df["images_per_second"].notna()]
    has_any_base = runs_df["speedup"].notna().any()
    series = list(timed.groupby(list(BASELINE_KEY), sort=True))
    labels, common = series_labels([key for key, _ in series]) if series else ([], "")
    palette = pages.sns.color_palette("tab10" if len(series) <= 10 else "husl", len(series))
    backends = sorted(runs_df["backend"].unique())
    styles = ["-", "--", "-.", (0, (5, 1, 1, 1, 1, 1))]  # ":" is the ideal line
    backend_ls = {b: styles[i % len(styles)] for i, b in enumerate(backends)}
    markers = {n: node_marker(i) for i, n in enumerate(sorted(runs_df["nodes"].unique()))}
    specs = (
        (axes[0], "images_per_second", "Images per second, all workers"),
        (axes[1], "speedup", "Speed-up vs 1 worker"),
        (axes[2], "efficiency", "Parallel efficiency (speed-up / workers)"),
    )
    # speed-up/efficiency values printed next to the points: of at most 3 series (labels of
    # series j shifted so that close points do not overprint) and MAX_ANNOTATED_POINTS points
    based = [key for key, group in series if group["speedup"].notna().any()]
    annotate = len(based) <= 3 and runs_df["speedup"].notna().sum() <= MAX_ANNOTATED_POINTS
    for (key, group), color in zip(series, palette, strict=True):
        offset = (7, (4, -13, 14)[based.index(key)] if key in based else 0)
        group = group.sort_values(["workers", "nodes"])
        ls = backend_ls[dict(zip(BASELINE_KEY, key, strict=True))["backend"]]
        for ax, col, _ in specs:
            if group[col].isna().all():
                continue
            line = group.groupby("workers")[col].mean()  # several runs per count: their mean
            ax.plot(line.index, line.to_numpy(), color=color, lw=1.5, alpha=0.75, ls=ls)
            for nodes, sub in group.groupby("nodes"):
                style = markers[nodes]
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
                        ax.annotate(
                            label.format(v),
                            (w, v),
                            textcoords="offset points",
                            xytext=offset,
                            fontsize=9,
                            color=color,
                        )
    workers_all = sorted(runs_df["workers"].unique())
    max_w = max(workers_all)
    for ax, col, ylabel in specs:
        if col == "images_per_second" and timed.empty:
            Book.note(ax, "Throughput: not available.\nNo run has an epoch left after the warm-up.")
            continue
        if col != "images_per_second" and not has_any_base:
            Book.note(
                ax,
                f"{ylabel.split(' (')[0]}: not available.\nNo run has a timed 1-worker run "
                "with the same\ndataset, model, global batch, device,\nbackend and BN mode "
                "to compare with.",
            )
            continue
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
            ax.set_ylim(0, float(runs_df["images_per_second"].max()) * 1.15)

    if not series:
        return
    fontsize = 9.5 if len(series) <= 8 else 8
    series_handles = [
        Line2D([], [], color=c, lw=2, ls=backend_ls[g["backend"].iloc[0]], label=lab)
        for (_, g), c, lab in zip(series, palette, labels, strict=True)
    ]
    first = legend_ax.legend(
        handles=series_handles,
        loc="upper left",
        ncol=1 if len(series) <= 10 else 2,
        frameon=False,
        fontsize=fontsize,
        title="Series" + (f" (all: {common})" if common else ""),
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
        for n, st in markers.items()
    ]
    other += [Line2D([], [], color="0.3", lw=1.5, ls=backend_ls[b], label=b) for b in backends]
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


def backend_pages(pages: Book, runs_df: pd.DataFrame) -> None:
    """Throughput of runs that differ only in their backend, side by side, with the ratio."""
    from matplotlib.patches import Patch

    title = "Backend comparison"
    subtitle = (
        "Mean throughput (timed epochs, \u00b1 sample sd) of runs that differ only in their "
        "backend: same dataset, model, workers, nodes, device, BN mode, global batch and "
        "precision/memory format. The "
        f"ratio is each backend's throughput over {REFERENCE_BACKEND}'s (> 1: faster)."
    )
    cmp = backend_comparison(runs_df)
    backends = sorted(runs_df["backend"].unique())
    if cmp.empty:
        fig = pages.new(title, subtitle, png="backends")
        counts = runs_df["backend"].value_counts()
        if len(backends) == 1:
            text = (
                f"All runs use the {backends[0]} backend, so there is no backend to compare.\n"
                "Runs that differ only in their backend would be compared here."
            )
        else:
            text = (
                "No two timed runs differ only in their backend, so there is nothing to compare."
                "\nBackends run: "
                + ", ".join(f"{b} ({plural(int(counts[b]), 'run')})" for b in backends)
                + "."
            )
        Book.note(fig.add_subplot(), text)
        return
    palette = pages.sns.color_palette("colorblind", len(backends))
    colors = dict(zip(backends, palette, strict=True))
    configs = list(cmp.groupby(list(BACKEND_MATCH_KEY), sort=True))
    legend_order = list(dict.fromkeys(cmp["backend"]))  # the reference (top bar) first
    notes = []
    untimed = sorted(runs_df.loc[runs_df["images_per_second"].isna(), "run"])
    unmatched = sorted(set(runs_df["run"]) - set(cmp["run"]) - set(untimed))
    several = cmp[cmp["runs"] > 1]
    if not several.empty:
        notes.append(
            "Several runs of one backend in a configuration: the fastest is shown ("
            + list_runs(list(several["run"]))
            + ")."
        )
    if unmatched:
        notes.append(f"Not compared (no counterpart on another backend): {list_runs(unmatched)}.")
    if untimed:
        notes.append(f"Not compared (no timed epoch): {list_runs(untimed)}.")
    per_page = 10
    chunks = [configs[i : i + per_page] for i in range(0, len(configs), per_page)]
    top = float(np.nanmax(cmp["images_per_second"] + cmp["std_images_per_second"].fillna(0)))
    for page_no, chunk in enumerate(chunks, start=1):
        fig = pages.new(
            title + (f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""),
            subtitle,
            png="backends" + (f"-{page_no}" if page_no > 1 else ""),
            note="\n".join(notes) if notes else None,
        )
        ax = fig.add_subplot()
        labels = []
        for i, (key, group) in enumerate(chunk):
            cfg = dict(zip(BACKEND_MATCH_KEY, key, strict=True))
            labels.append(
                f"{cfg['dataset']} / {cfg['model']}, {plural(cfg['workers'], 'worker')} on "
                f"{plural(cfg['nodes'], 'node')}, {cfg['device']}, batch "
                f"{cfg['global_batch']}, {cfg['bn']} BN"
                + (f", site {cfg['site']}" if cmp["site"].nunique() > 1 else "")
            )
            n = len(group)
            height = 0.7 / n
            ratios = []
            for j, row in enumerate(group.itertuples(index=False)):
                y = i - 0.35 + height * (j + 0.5)
                sd = row.std_images_per_second if math.isfinite(row.std_images_per_second) else 0
                ax.barh(
                    y,
                    row.images_per_second,
                    xerr=sd,
                    height=height * 0.9,
                    color=colors[row.backend],
                    error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
                )
                ax.text(
                    row.images_per_second + sd,
                    y,
                    f"  {row.images_per_second:,.0f} ({row.run})",
                    va="center",
                    fontsize=9 if n > 2 else 9.5,
                )
                if row.backend != row.reference_backend:
                    ratios.append(f"{row.backend} / {row.reference_backend} = {row.ratio:.2f}x")
            ax.text(
                1.01,
                i,
                "\n".join(ratios),
                transform=ax.get_yaxis_transform(),
                va="center",
                fontsize=10.5,
                weight="bold",
            )
        set_category_ticks(ax, labels, width=30)
        ax.set_xlim(0, top * 1.45)
        ax.set_xlabel("Images per second, all workers")
        ax.legend(
            handles=[Patch(color=colors[b], label=b) for b in legend_order],
            loc="lower left",
            bbox_to_anchor=(0, 1.0),
            ncol=len(legend_order),
            frameon=False,
            fontsize=10.5,
        )


def curves_page(pages: Book, epochs_df: pd.DataFrame) -> None:
    from matplotlib.ticker import PercentFormatter

    fig = pages.new(
        "Training curves",
        "Training loss (mean over the epoch's batches) and validation accuracy after each epoch.",
        png="training_curves",
    )
    loss_ax, acc_ax = fig.subplots(1, 2)
    for name in pages.order:
        ep = epochs_df[epochs_df["run"] == name]
        style = {"color": pages.colors[name], "marker": "o", "markersize": 3.5, "label": name}
        loss_ax.plot(ep["epoch"], ep["train_loss"], **style)
        acc_ax.plot(ep["epoch"], ep["val_accuracy"], **style)
    if (epochs_df["train_loss"] > 0).all():
        loss_ax.set_yscale("log")
        log_ticks(loss_ax.yaxis, epochs_df["train_loss"].min(), epochs_df["train_loss"].max())
        loss_ax.set_ylabel("Training loss (cross-entropy, log scale)")
    else:
        loss_ax.set_ylabel("Training loss (cross-entropy)")
    acc_ax.set_ylabel("Validation accuracy")
    acc_ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    acc_lo, acc_hi = epochs_df["val_accuracy"].min(), epochs_df["val_accuracy"].max()
    if acc_hi - acc_lo < 0.05:  # a flat or single-point curve: show at least 10 points of range
        mid = min(max((acc_lo + acc_hi) / 2, 0.05), 0.95)
        acc_ax.set_ylim(mid - 0.05, mid + 0.05)
    for ax in (loss_ax, acc_ax):
        epoch_axis(ax, epochs_df["epoch"])
    handles, labels = loss_ax.get_legend_handles_labels()
    acc_ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
        frameon=False,
        fontsize=10,
        title="Run",
        title_fontsize=10.5,
    )


def confusion_page(pages: Book, runs_df: pd.DataFrame, runs: list[RunData]) -> None:
    from matplotlib.ticker import PercentFormatter

    best = runs_df.iloc[0]
    data = next(r for r in runs if r.name == best["run"])
    cm = data.confusion
    n = int(cm.to_numpy().sum())
    title = f"Confusion matrix of the best run: {best['run']}"
    named = ""
    if len(shorten_text(title, 80)) < len(title):  # a long name: in the subtitle, whole
        title, named = "Confusion matrix of the best run", f"{best['run']}: "
    fig = pages.new(
        title,
        f"{named}{describe_run(best)}; {best['eval_split']} split, n = {n:,}, accuracy "
        f"{fmt_pct(best['accuracy'])}. Left: colour = share of the true class, numbers = counts. "
        "Right: precision, recall and F1 of each class.",
        png="confusion_best",
    )
    fig.get_layout_engine().set(wspace=0.08)
    heat_ax, dot_ax = fig.subplots(1, 2, width_ratios=[1.45, 1])
    share = cm.div(cm.sum(axis=1).replace(0, 1), axis=0) * 100
    k = len(cm)
    pages.sns.heatmap(
        share,
        ax=heat_ax,
        cmap="Blues",
        vmin=0,
        vmax=100,
        annot=cm.to_numpy() if k <= 20 else False,
        fmt="d",
        annot_kws={"fontsize": max(6, 11 - k // 4)},
        square=True,
        linewidths=0.5,
        linecolor="white",
        cbar_kws={"label": "Share of the true class (%)", "shrink": 0.75, "pad": 0.03},
    )
    heat_ax.set_xlabel("Predicted class")
    heat_ax.set_ylabel("True class")
    long_names = max(map(len, cm.columns)) > 3
    heat_ax.tick_params(axis="x", rotation=45 if long_names else 0)
    if long_names:
        for t in heat_ax.get_xticklabels():
            t.set_horizontalalignment("right")
    heat_ax.tick_params(axis="y", rotation=0)

    pc = data.per_class.set_index("class")[["precision", "recall", "f1"]].reindex(cm.index)
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
        dot_ax.scatter(pc[col], y + offset, marker=marker, color=color, s=28, label=label, zorder=3)
    dot_ax.set_yticks(y, list(cm.index))
    dot_ax.set_ylim(k - 0.5, -0.5)
    lo = float(np.nanmin(pc.to_numpy())) if pc.notna().any().any() else 0.0
    dot_ax.set_xlim(max(0.0, math.floor((lo - 0.02) * 20) / 20), 1.005)
    dot_ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    dot_ax.set_xlabel("Score per class (axis does not start at 0)" if lo > 0.05 else "Score")
    dot_ax.set_ylabel("True class")
    dot_ax.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False, fontsize=10
    )


def benchmarks_pages(pages: Book, bench: pd.DataFrame, missing: list[str]) -> None:
    """Wall time and max RSS per Snakemake job, in pipeline order, BENCH_JOBS_PER_PAGE a page."""
    from matplotlib.patches import Patch

    title = "Snakemake jobs: wall time and memory"
    subtitle = (
        "From the rules' benchmark files (results/benchmarks/{rule}/{job}.tsv), mean over "
        "repeats. Max RSS = peak resident memory of the job's processes."
    )
    if bench.empty:
        fig = pages.new(title, subtitle, png="benchmarks")
        text = (
            "No Snakemake benchmark records were found, so there is nothing to show here.\n"
            "Rules with a benchmark: directive write them once their jobs have run."
        )
        if missing:
            text += "\n\nNot found: " + ", ".join(shorten_text(m, 60) for m in missing[:6])
        Book.note(fig.add_subplot(), text)
        return
    notes = []
    if bench["max_rss"].isna().any():
        notes.append("n/a: the job ended before Snakemake's first memory sample")
    if missing:
        notes.append(f"not found: {', '.join(shorten_text(m, 50) for m in missing[:4])}")
    means = bench.groupby(["rule", "job"], sort=False)[["s", "max_rss"]].mean().reset_index()
    rank = {r: i for i, r in enumerate(PIPELINE_ORDER)}
    means["order"] = means["rule"].map(lambda r: rank.get(r, len(rank)))
    means = means.sort_values(["order", "rule", "job"]).reset_index(drop=True)
    rules = list(dict.fromkeys(means["rule"]))
    palette = dict(zip(rules, pages.sns.color_palette("Set2", len(rules)), strict=True))
    positive = means["s"][means["s"] > 0]
    time_lim = (positive.min() / 2, positive.max() * 8) if not positive.empty else None
    rss_max = max(float(means["max_rss"].max(skipna=True) or 0), 1.0)

    chunks = [
        means.iloc[i : i + BENCH_JOBS_PER_PAGE] for i in range(0, len(means), BENCH_JOBS_PER_PAGE)
    ]
    for page_no, chunk in enumerate(chunks, start=1):
        fig = pages.new(
            title + (f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""),
            subtitle,
            png="benchmarks" + (f"-{page_no}" if page_no > 1 else ""),
            note="; ".join(notes) + "." if notes else None,
        )
        time_ax, mem_ax = fig.subplots(1, 2, sharey=True)
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
        if time_lim:
            time_ax.set_xscale("log")
            time_ax.set_xlim(*time_lim)
            log_ticks(time_ax.xaxis, *time_lim)
        mem_ax.set_xlim(0, rss_max * 1.25)
        labels = [f"{r}: {j}" for r, j in zip(chunk["rule"], chunk["job"], strict=True)]
        set_category_ticks(time_ax, labels, width=34)
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


#: The most runs a chart with one bar or line per run draws (the best on validation).
RUNS_PER_CHART = 24


def build_pages(
    params: ReportParams,
    prov: dict[str, Any],
    runs: list[RunData],
    runs_df: pd.DataFrame,
    epochs_df: pd.DataFrame,
    bench: pd.DataFrame,
    bench_missing: list[str],
    skipped: Sequence[dict[str, Any]] = (),
) -> Book:
    from clusterbench.report import experiment_pages as designs

    pages = Book(params, runs_df)
    title_page(pages, prov, runs_df, bench, len(skipped))
    designs.results_pages(pages, runs_df)
    designs.skipped_pages(pages, skipped)
    designs.environment_pages(pages, runs_df, skipped)
    designs.sweep_pages(pages, runs_df)
    designs.repeats_pages(pages, runs_df)
    runs_table_pages(pages, runs_df)
    provenance_pages(pages, runs_df)
    # one bar or line per run: at most RUNS_PER_CHART, the best on validation
    shown = runs_df.head(RUNS_PER_CHART)
    shown_epochs = epochs_df[epochs_df["run"].isin(shown["run"])]
    note = None
    if len(shown) < len(runs_df):
        note = (
            f"Shown: the {len(shown)} best of {len(runs_df)} runs on validation "
            "(every run is in runs.csv and epochs.csv)."
        )
    with pages.subset(note, list(shown["run"])):
        epoch_time_page(pages, shown, shown_epochs)
        throughput_page(pages, shown)
    scaling_page(pages, runs_df)
    designs.world_size_pages(pages, runs_df, epochs_df)
    backend_pages(pages, runs_df)
    with pages.subset(note, list(shown["run"])):
        curves_page(pages, shown_epochs)
    confusion_page(pages, runs_df, runs)
    benchmarks_pages(pages, bench, bench_missing)
    return pages
