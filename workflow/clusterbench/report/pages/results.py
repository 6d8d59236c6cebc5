"""Results, best first: every run sorted by its final validation accuracy, with what it is
(experiment, environment, swept values), its validation and test accuracy and its time."""

from __future__ import annotations

from clusterbench.report.context import Context
from clusterbench.report.describe import point_label
from clusterbench.report.table_pages import best_first, cell_text, table_pages
from clusterbench.report.text import fmt_seconds_sd
from clusterbench.report.workloads import (
    accuracy_cell,
    lm_only_cell,
    notes,
    throughput_cell,
    throughput_header,
)

ORDER = 20

COLUMNS = (
    ("#", 0.03, True),
    ("Run", 0.24, False),
    ("Experiment /\nenvironment", 0.1, False),
    ("Swept values", 0.2, False),
    ("Workers\n(nodes)", 0.065, True),
    ("Epochs", 0.05, True),
    ("Validation\naccuracy", 0.075, True),
    ("Test\naccuracy", 0.065, True),
    ("Time per epoch\n(mean \u00b1 sd)", 0.11, True),
    (None, 0.065, True),  # the throughput: its unit by the runs (throughput_header)
)

CAPTION = (
    "Every run sorted by its final validation accuracy (then validation loss): the best run "
    "(highlighted) is chosen on validation, never on the test split, and is kept in "
    "results/best/. Test accuracy is the evaluation's, on data no choice has seen. Language "
    "models follow (the lower validation loss first), then runs on synthetic data."
)


def draw(ctx: Context) -> None:
    lm_only = bool((ctx.runs_df["task"] == "language-model").all())
    header = throughput_header(ctx.runs_df["task"]).strip("()").replace("img/s; ", "img/s;\n")
    columns = [(h or header.capitalize(), w, right) for h, w, right in COLUMNS]
    rows = []
    for rank, r in enumerate(ctx.runs_df.itertuples(index=False), start=1):
        origin = "\n".join(x for x in (r.experiment, r.environment) if x) or "by hand"
        rows.append(
            [
                str(rank),
                cell_text(r.run, 0.24),
                origin,
                cell_text(point_label(r.point), 0.2) or "-",
                f"{r.workers} ({r.nodes})",
                str(r.epochs),
                accuracy_cell(r, "val"),
                accuracy_cell(r, "test"),
                fmt_seconds_sd(r.mean_epoch_seconds, r.std_epoch_seconds)
                if r.timed_epochs
                else "n/a",
                lm_only_cell(throughput_cell(r), lm_only).replace(" tok/s", "\ntok/s"),
            ]
        )
    note = " ".join(notes(ctx.runs_df)) or None
    table_pages(
        ctx.book, "Results, best first", CAPTION, columns, rows, style=best_first, note=note
    )
