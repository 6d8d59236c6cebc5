"""Runs: the table of every run, best first on evaluation accuracy, with its training
conventions (backend, BN mode, global batch, effective learning rate), its accuracy and its
timing over the timed epochs."""

from __future__ import annotations

import math
from typing import Any

from clusterbench.report.context import Context
from clusterbench.report.describe import first_epochs, untimed_note
from clusterbench.report.table_pages import best_first, table_pages
from clusterbench.report.text import (
    fmt_duration,
    fmt_hours,
    fmt_seconds_sd,
    wrap_label,
)
from clusterbench.report.time_box import epochs_cell, train_time_cell
from clusterbench.report.workloads import (
    accuracy_cell,
    lm_only_cell,
    notes,
    throughput_cell,
    throughput_header,
)

ORDER = 70
#: The memory formats as the table names them.
MEMORY_FORMATS = {"channels_last": "NHWC (ch.-last)", "contiguous": "NCHW"}

#: The LR schedule under the effective LR (its column is narrow); constant: nothing.
SCHEDULE_MARKS = {"constant": "", "cosine": "\ncos", "step": "\nstep", "inverse_time": "\n1/t"}


#: The throughput column's header, as the columns list it (:func:`throughput_header` says it
#: for the table's runs).
THROUGHPUT = "Throughput\n(images/s)"
#: The columns: header, relative width, right-aligned; the accuracy's header is the split's.
COLUMNS = (
    ("#", 0.025, True),
    ("Run", 0.125, False),
    ("Dataset /\nmodel", 0.085, False),
    ("Workers\n(nodes)", 0.066, True),
    ("Device /\nmemory", 0.075, False),
    ("Backend /\nBN", 0.086, False),
    ("Global\nbatch", 0.073, True),
    ("Eff.\nLR", 0.045, True),
    ("Deter-\nministic", 0.062, False),
    ("Epochs", 0.055, True),
    (None, 0.07, True),
    ("Time per epoch\n(mean \u00b1 sd)", 0.125, True),
    (THROUGHPUT, 0.1, True),
    ("Total\ntrain time", 0.092, True),
)
#: With elastic runs whose device-hours are known: one more column (its header names the unit),
#: its width taken from these.
HOURS_WIDTH = 0.07
NARROWER = {"Run": 0.045, "Time per epoch\n(mean \u00b1 sd)": 0.015, "Global\nbatch": 0.01}
SHORTER = {"Time per epoch\n(mean \u00b1 sd)": "Time / epoch\n(mean \u00b1 sd)"}


def columns_for(
    acc_header: str,
    hours: str | None,
    throughput: str = THROUGHPUT,
) -> list[tuple[str, float, bool]]:
    """The table's columns; with ``hours`` (the device-hours' unit: ``CPU``, ``GPU``, or both),
    the device-hours column before the total time (the widths still add up the same);
    ``throughput``: its header (:func:`throughput_header`)."""
    named = [(throughput if h == THROUGHPUT else h, w, r) for h, w, r in COLUMNS]
    if not hours:
        return [(h or acc_header, w, r) for h, w, r in named]
    columns = [(SHORTER.get(h, h or acc_header), w - NARROWER.get(h, 0), r) for h, w, r in named]
    return [*columns[:-1], (f"{hours}-h\nused/max", HOURS_WIDTH, True), columns[-1]]


def hours_unit(runs_df: Any) -> str | None:
    """The unit of the runs' device-hours (``CPU``, ``GPU``, ``GPU/CPU``), None without any."""
    if "device_hours" not in runs_df:
        return None
    units = sorted(set(runs_df.loc[runs_df["device_hours"].notna(), "device_hours_unit"]))
    return "/".join(reversed(units)) or None


def draw(ctx: Context) -> None:
    runs_df, warmup = ctx.runs_df, ctx.warmup
    splits = runs_df["eval_split"].unique()
    acc_header = f"{splits[0].capitalize()}\naccuracy" if len(splits) == 1 else "Accuracy\n(split)"
    hours = hours_unit(runs_df)
    lm_only = bool((runs_df["task"] == "language-model").all())
    rows = [
        run_cells(rank, r, len(splits) > 1, hours, lm_only)
        for rank, r in enumerate(runs_df.itertuples(index=False), start=1)
    ]
    caption = (
        "Sorted by evaluation accuracy, best first (highlighted). Workers = processes (ranks). "
        "Memory = the memory format trained in. "
        "Global batch = images per optimiser step over all workers; convention: global = the "
        "configured batch size is the global batch, per worker = it is per worker (times the "
        "workers). Eff. LR = learning rate after warm-up (then cos, step, 1/t: its schedule). "
        "Time per epoch and throughput (all workers): mean \u00b1 sample sd over the timed "
        "epochs (ep.), "
        + (
            f"excluding {first_epochs(warmup)} of each run (warm-up)."
            if warmup
            else "all epochs of each run."
        )
    )
    hours_note = (
        f"{hours}-h used/max: the GPU-hours (on CPUs: CPU-hours, ranks x their CPUs) an elastic "
        "run used, its ranks over its training time, and those a fixed run of its max_workers "
        "would have held over that time."
        if hours
        else None
    )
    boxed = (
        "Time-boxed runs (minutes): the total is the time used, the box below it; one the box "
        "stopped within an epoch shows that epoch's steps (+ st.), validated and recorded as "
        "partial, not timed."
        if "time_box_seconds" in runs_df and runs_df["time_box_seconds"].notna().any()
        else None
    )
    note = " ".join(
        filter(
            None,
            [
                untimed_note(runs_df, "* "),
                *notes(runs_df),
                efficiency_note(runs_df),
                hours_note,
                boxed,
            ],
        )
    )
    bottom = 0.08 if note else 0.06
    table_pages(
        ctx.book,
        "Runs",
        caption,
        columns_for(
            acc_header,
            hours,
            throughput_header(runs_df["task"], "Throughput\n")[:-1] + ";\nTF/s, MFU)",
        ),
        rows,
        best_first,
        note or None,
        bottom=bottom,
    )


def run_cells(
    rank: int, r: Any, splits: bool, hours: str | None = None, lm_only: bool = False
) -> list[str]:
    """One run's row (``r``: a runs.csv row as a named tuple); ``splits``: the runs were
    evaluated on several splits (each cell names its own); ``hours``: the device-hours
    column's unit (None: no such column); ``lm_only``: every run is a language model's (the
    header says tokens/s, its cells need not)."""
    rate = lm_only_cell(throughput_cell(r, sd=True), lm_only)
    acc = accuracy_cell(r, "test")
    convention = "per worker" if r.batch_scaling == "per_worker" else r.batch_scaling
    return [
        str(rank),
        wrap_label(r.run, 17),
        f"{r.dataset}\n{r.model}",
        f"{r.workers} ({r.nodes})",
        f"{r.device}\n{MEMORY_FORMATS.get(r.memory_format, r.memory_format)}",
        f"{r.backend}\n{r.bn}"
        + ("" if r.grad_compression == "none" else f"\n{r.grad_compression} grads"),
        f"{r.global_batch}\n{convention}",
        f"{r.effective_lr:g}" + SCHEDULE_MARKS.get(r.lr_schedule, f"\n{r.lr_schedule}"),
        "yes" if r.deterministic else "no",
        epochs_cell(r),
        f"{acc}\n({r.eval_split})" if splits else acc,
        (
            f"{fmt_seconds_sd(r.mean_epoch_seconds, r.std_epoch_seconds)}\n({r.timed_epochs} ep.)"
            if r.timed_epochs
            else "n/a\n(0 ep.*)"
        ),
        rate.replace(" \u00b1", "\n\u00b1") + efficiency_cell(r),
        *([hours_cell(r, "/" in hours)] if hours else []),
        train_time_cell(r) + compile_cell(r),
    ]


def efficiency_note(runs_df: Any) -> str | None:
    """What the throughput's TF/s and MFU and the compile time are, where a run has them."""
    parts = []
    if "tflops" in runs_df and runs_df["tflops"].notna().any():
        parts.append(
            "TF/s: the model FLOPs achieved (TFLOP/s); MFU: their share of the devices' peak "
            "(a GPU's from its datasheet, a CPU's measured; docs/report.md)."
        )
    if "compiled" in runs_df and runs_df["compiled"].astype(bool).any():
        parts.append("Under a compiled run's training time: its compile time (+, not in it).")
    return " ".join(parts) or None


def efficiency_cell(r: Any) -> str:
    """A run's achieved TFLOP/s and MFU on a line of their own ('' where not known)."""
    tflops, mfu = getattr(r, "tflops", math.nan), getattr(r, "mfu", math.nan)
    if not r.timed_epochs or not math.isfinite(tflops):
        return ""
    return f"\n{tflops:.3g} TF/s" + (f"\nMFU {100 * mfu:.3g} %" if math.isfinite(mfu) else "")


def compile_cell(r: Any) -> str:
    """A compiled run's compile time, on a line of its own under its training time."""
    if not getattr(r, "compiled", False):
        return ""
    return f"\n+{fmt_duration(r.compile_seconds)}\ncompile"


def hours_cell(r: Any, mixed: bool) -> str:
    """An elastic run's device-hours used / a fixed run of max_workers's ("–": not known);
    ``mixed``: the runs' units differ (each cell names its own)."""
    used, fixed = getattr(r, "device_hours", math.nan), getattr(r, "fixed_device_hours", math.nan)
    if not (math.isfinite(used) and math.isfinite(fixed)):
        return "\u2013"
    unit = f" {r.device_hours_unit}" if mixed else ""
    return f"{fmt_hours(used)} /\n{fmt_hours(fixed)}{unit}"
