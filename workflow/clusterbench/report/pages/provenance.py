"""Provenance of the runs: one row per run, where it trained and with what (its run.json's
provenance: hosts and their ranks, CPU, GPUs and driver, commit, package versions), the values
in which it differs from the other runs highlighted and named."""

from __future__ import annotations

from typing import Any

import pandas as pd

from clusterbench.report.book import Book
from clusterbench.report.context import Context
from clusterbench.report.network import network_note
from clusterbench.report.table_pages import DIFFERS_COLOR, CellStyle, table_pages
from clusterbench.report.tables import provenance_differences
from clusterbench.report.text import (
    UNKNOWN,
    commit_text,
    cut_lines,
    list_runs,
    shorten_text,
    wrap_label,
)

ORDER = 80

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


#: The column that names what differs.
DIFFERS_COLUMN = 7


CAPTION = (
    "Where and with what each run trained, as its ranks saw it on the training hosts and its "
    "rank 0 recorded it in run.json: hosts (ranks on each), CPU and cores, GPUs and NVIDIA "
    "driver, git commit of the code (dirty: with uncommitted changes) and package versions. "
    "Same order as the runs table. Highlighted: a value that differs from the one most runs "
    "share (from every run's where no value is the most common). TensorBoard event files: "
    "results/runs/<run>/tensorboard/ (docs/running.md)."
)


def draw(ctx: Context) -> None:
    runs_df = ctx.runs_df
    note = provenance_note(runs_df)
    bottom = 0.045 + 0.021 * len(Book.note_lines(note)) + 0.015 if note else 0.06
    rows = [provenance_cells(i, r) for i, r in enumerate(runs_df.itertuples(index=False), 1)]
    flags = list(runs_df["provenance_differs"])
    unknown = list(runs_df["provenance"] != "recorded")

    def style(i: int, col: int) -> CellStyle | None:
        fields = flags[i].split(", ") if flags[i] else []
        marked = {PROVENANCE_FIELD_COLUMN[f] for f in fields} | (
            {DIFFERS_COLUMN} if fields else set()
        )
        if col in marked:
            return DIFFERS_COLOR, col == DIFFERS_COLUMN
        if unknown[i] and col == DIFFERS_COLUMN:
            return "#e6e6e6", False
        return None

    title = "Provenance of the runs"
    table_pages(ctx.book, title, CAPTION, PROVENANCE_TABLE, rows, style, note, bottom=bottom)


def provenance_note(runs_df: pd.DataFrame) -> str | None:
    """What differs between the runs, the runs whose provenance was not recorded, and the
    network the runs' ranks talked over (interface, log level, and where each came from)."""
    _, notes = provenance_differences(runs_df)
    network = network_note(runs_df)
    unrecorded = runs_df[runs_df["provenance"] != "recorded"]
    if not unrecorded.empty:
        notes.append(
            f"Not recorded for {list_runs(sorted(unrecorded['run']), 4)}: its run.json is older "
            "than provenance recording, so its CPU, GPUs and commit are unknown (hosts and "
            "versions as its rank 0 recorded them)."
        )
    notes = [shorten_text(n, 290, placeholder=" ...") for n in notes[:6]]
    notes += [shorten_text(network, 290, placeholder=" ...")] if network else []
    return "\n".join(notes) if notes else None


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
