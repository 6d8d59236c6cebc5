"""Where the time goes, as tables (pure pandas): the step-time breakdown each epoch records
(metrics.jsonl's ``step_seconds``: :mod:`clusterbench.training.step_times`) flattened into
epochs.csv's columns, and each run's summary over its timed epochs in runs.csv."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: The phases of a step, in their order within it (clusterbench.training.step_times.PHASES).
PHASES = ("data", "compute", "comm", "optimizer")
#: How the pages name them.
PHASE_NAMES = {
    "data": "waiting for data",
    "compute": "forward + backward",
    "comm": "communication (exposed)",
    "optimizer": "optimizer",
    "other": "other",
}


def flatten(epochs: pd.DataFrame) -> pd.DataFrame:
    """``epochs`` with its ``step_seconds`` records (dicts, or absent in older runs) as columns
    ``step_<phase>_mean`` / ``step_<phase>_max`` (seconds per step over the ranks),
    ``step_timed_steps`` and ``step_work`` (each rank's own work per step, a list); NaN (None)
    where an epoch has none."""
    if "step_seconds" not in epochs.columns:
        return epochs
    records = epochs["step_seconds"]
    columns: dict[str, list[Any]] = {"step_timed_steps": [], "step_work": []}
    for phase in PHASES:
        columns[f"step_{phase}_mean"], columns[f"step_{phase}_max"] = [], []
    for rec in records:
        ok = isinstance(rec, dict) and rec.get("steps")
        columns["step_timed_steps"].append(float(rec["steps"]) if ok else np.nan)
        columns["step_work"].append(rec.get("work") if ok else None)  # each rank's, or none
        for phase in PHASES:
            for stat in ("mean", "max"):
                value = rec[phase][stat] if ok else np.nan
                columns[f"step_{phase}_{stat}"].append(float(value))
    return epochs.drop(columns=["step_seconds"]).assign(**columns)


def run_columns(timed: pd.DataFrame) -> dict[str, Any]:
    """A run's breakdown over its timed epochs (``timed``: its flattened epochs after the
    warm-up): per phase the mean over epochs of the ranks' mean and max (seconds per step),
    the step's whole time (``epoch_seconds`` / steps) and the shares of communication and of
    waiting for data in it. NaN without a timed breakdown."""
    out: dict[str, Any] = {}
    has = "step_timed_steps" in timed.columns and timed["step_timed_steps"].notna().any()
    rows = timed[timed["step_timed_steps"].notna()] if has else timed.iloc[0:0]
    for phase in PHASES:
        for stat in ("mean", "max"):
            col = f"step_{phase}_{stat}"
            out[col] = float(rows[col].mean()) if len(rows) else np.nan
    step = rows["epoch_seconds"] / rows["step_timed_steps"] if len(rows) else pd.Series([])
    out["step_seconds"] = float(step.mean()) if len(rows) else np.nan
    whole = out["step_seconds"]
    out["comm_share"] = out["step_comm_mean"] / whole if len(rows) and whole > 0 else np.nan
    out["data_share"] = out["step_data_mean"] / whole if len(rows) and whole > 0 else np.nan
    return out


def breakdown(runs_df: pd.DataFrame, stat: str) -> pd.DataFrame:
    """Per run (index), seconds per step of each phase (``stat``: mean or max over the ranks)
    and ``other`` (the rest of the step's time: progress, checks, bookkeeping), for the runs
    with a breakdown."""
    cols = {
        phase: runs_df[f"step_{phase}_{stat}"]
        for phase in PHASES
        if f"step_{phase}_{stat}" in runs_df
    }
    if len(cols) < len(PHASES):
        return pd.DataFrame(columns=[*PHASES, "other"])
    table = pd.DataFrame(cols).set_index(runs_df["run"])
    table["other"] = (runs_df.set_index("run")["step_seconds"] - table.sum(axis=1)).clip(lower=0)
    return table.dropna(subset=list(PHASES))
