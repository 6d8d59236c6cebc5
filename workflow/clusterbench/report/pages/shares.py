"""Worker shares: each rank's share of the global batch of the runs that set ``shares`` (a list,
or ``auto``: :mod:`clusterbench.training.shares`), its samples per step, and its own work per
step (the step-time breakdown's data and compute, last whole epoch) beside the slowest rank's;
no page without such a run."""

from __future__ import annotations

import math
from typing import Any

from clusterbench.data.order import shard_sizes
from clusterbench.report.context import Context
from clusterbench.report.table_pages import cell_text, table_pages

ORDER = 106

CAPTION = (
    "Runs that split each global batch unevenly (shares: a weight per worker, or auto: timed "
    "over the first steps). Per rank: its share, its samples per step, its measured time per "
    "sample (auto), its own work per step (batch wait, forward and backward; not its wait for "
    "the others) in the last whole epoch, and that over the slowest rank's: near 100 % on "
    "every rank, the ranks finish a step together. The update is the same whatever the split."
)

COLUMNS = (
    ("Run", 0.26, False),
    ("Asked", 0.1, False),
    ("Rank", 0.06, True),
    ("Share", 0.09, True),
    ("Samples\nper step", 0.1, True),
    ("Measured\nms / sample", 0.12, True),
    ("Own work\nper step", 0.12, True),
    ("Of the\nslowest", 0.09, True),
)


def asked_text(asked: Any) -> str:
    """``auto``, or the weights as given (``[3, 1]``)."""
    if isinstance(asked, list):
        return "[" + ", ".join(f"{w:g}" for w in asked) + "]"
    return str(asked)


def last_work(epochs: Any) -> list[float | None]:
    """Each rank's own work per step in the run's last whole epoch that timed it (none: [])."""
    if "step_work" not in epochs:
        return []
    for i in reversed(range(len(epochs))):
        partial = epochs["partial"].iloc[i] if "partial" in epochs else None
        found = epochs["step_work"].iloc[i]
        if isinstance(found, list) and found and not isinstance(partial, dict):
            return list(found)
    return []


def run_rows(name: str, info: dict[str, Any], epochs: Any) -> list[list[str]]:
    """One row per rank of a run that set shares."""
    record = info["shares"]
    shares = record.get("shares")
    size = int(record.get("size") or len(shares or []) or info["world"]["size"])
    batch = int(info["effective"]["global_batch"])
    samples = shard_sizes(batch, size, shares) if batch >= size else [0] * size
    measured = record.get("measured_seconds_per_sample") or [None] * size
    work = last_work(epochs) or [None] * size
    slowest = max((w for w in work if w), default=math.nan)
    rows = []
    for rank in range(size):
        share = shares[rank] if shares else 1 / size
        w = work[rank] if rank < len(work) else None
        rows.append(
            [
                cell_text(name, COLUMNS[0][1]) if rank == 0 else "",
                asked_text(record.get("asked")) if rank == 0 else "",
                str(rank),
                f"{share:.1%}",
                str(samples[rank]),
                f"{1000 * measured[rank]:.2f}" if measured[rank] else "-",
                f"{1000 * w:.1f} ms" if w else "-",
                f"{w / slowest:.0%}" if w and slowest == slowest else "-",
            ]
        )
    return rows


def draw(ctx: Context) -> None:
    rows = []
    for run in ctx.runs:
        if run.info.get("shares"):
            rows += run_rows(run.name, run.info, run.epochs)
    if rows:
        table_pages(ctx.book, "Worker shares", CAPTION, list(COLUMNS), rows)
