"""A time-boxed run (``minutes``) as run.json's ``time_box`` records it
(:func:`clusterbench.training.record.time_box_record`): runs.csv's columns and the runs
table's cells, the box beside the time it used and the partial epoch it stopped in."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clusterbench.report.text import fmt_duration


def time_box_columns(info: Mapping[str, Any]) -> dict[str, Any]:
    """``time_box_seconds`` (NaN: no box) and ``partial_epoch``: the steps of the epoch the box
    stopped the run in, ``"120/400"`` (``""``: none)."""
    box = info.get("time_box") or {}
    part = box.get("partial") or {}
    seconds = box.get("seconds")
    return {
        "time_box_seconds": float(seconds) if isinstance(seconds, int | float) else math.nan,
        "partial_epoch": f"{part['steps']}/{part['of']}" if part else "",
    }


def epochs_cell(r: Any) -> str:
    """The runs table's epochs: its whole epochs, and the partial one a box stopped it in."""
    partial = getattr(r, "partial_epoch", "")
    return f"{r.epochs}\n+{partial} st." if isinstance(partial, str) and partial else str(r.epochs)


def train_time_cell(r: Any) -> str:
    """The runs table's training time, with the box beside it where there was one."""
    box = getattr(r, "time_box_seconds", math.nan)
    used = fmt_duration(r.train_seconds)
    return f"{used}\n(box {fmt_duration(box)})" if isinstance(box, float) and box > 0 else used
