"""Skipped runs: every run the workflow left out where it ran (hand-written, a sweep point, an
environment), with its reason; no page when none was skipped."""

from __future__ import annotations

from clusterbench.report.context import Context
from clusterbench.report.table_pages import cell_text, table_pages
from clusterbench.report.tables import skipped_table

ORDER = 30

CAPTION = (
    "Runs the workflow left out where it ran, before any job: the machine or cluster could not "
    "offer what they ask for (cores, GPUs, nodes, a queue) and the run may be skipped there "
    "(on_unavailable). They appear on no other page but the execution environments'; "
    "skipped.csv lists them too."
)


def draw(ctx: Context) -> None:
    table = skipped_table(ctx.skipped)
    if table.empty:
        return
    sites = bool(table["site"].str.len().any())
    widths = (0.22, 0.1, 0.12, 0.14, 0.42) if sites else (0.24, 0, 0.12, 0.14, 0.5)
    columns = [("Run", widths[0], False)]
    columns += [("Site", widths[1], False)] if sites else []
    columns += [
        ("Experiment /\nenvironment", widths[2], False),
        ("Swept values", widths[3], False),
        ("Why it was skipped", widths[4], False),
    ]
    rows = []
    for r in table.itertuples(index=False):
        origin = "\n".join(x for x in (r.experiment, r.environment) if x) or "by hand"
        rows.append(
            [cell_text(r.run, widths[0])]
            + ([cell_text(r.site, widths[1])] if sites else [])
            + [
                cell_text(origin, widths[2]),
                cell_text(r.point, widths[3]) or "-",
                cell_text(r.reason, widths[4], max_lines=8),  # the whole reason, as a rule
            ]
        )
    table_pages(ctx.book, f"Skipped runs: {len(table)}", CAPTION, columns, rows)
