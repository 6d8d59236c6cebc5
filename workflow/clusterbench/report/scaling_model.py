"""The scaling model, pure pandas: each multi-worker run's time per step predicted from its
1-worker run's compute and the interconnect its environment measured (the comm stage), against
the time per step it measured.

For a run on W workers:

- **measured**: its mean time per epoch (timed epochs) over its steps per epoch (run.json's
  ``step_work.steps_per_epoch``);
- **ideal compute**: its 1-worker run's time per step, scaled to the run's share of the batch:
  ``t1 x (the largest per-rank share of the global batch) / (the 1-worker run's samples per
  step)``. The 1-worker run is the scaling baseline (``baseline_run`` of runs.csv: the same
  dataset, model, global batch, device, backend, BN mode, precision, memory format and site);
  a run without one (``batch_scaling: per_worker``: its global batch grows with W) takes the
  1-worker run of those settings but the batch whose samples per step are nearest its share;
- **network**: the time of one allreduce of its gradients (``step_work.parameters`` x 4 bytes,
  or x 2 with ``grad_compression`` fp16/bf16) through its backend, interpolated at that size in
  the allreduce times the comm stage measured for its environment (workers, nodes, GPUs per
  node) and backend on its site: linear in log-log between the two sizes around it; below the
  smallest size that size's time (the latency), above the largest that size's bandwidth;
- **predicted** = ideal compute + network: no overlap of communication with compute, one
  message for all gradients (Horovod's step is one fused allreduce; DDP's buckets overlap
  backward, so a DDP run may beat the prediction);
- **gap** = measured - ideal compute, the time the run lost to scaling, and **explained** =
  network / gap, the share of it the interconnect accounts for (above 100 %: the run hid some
  communication behind compute, or its compute scaled better than linearly);
- **measured comm**: beside the model, the exposed communication per step the run measured
  itself (the step-time breakdown's mean over the ranks, runs.csv ``step_comm_mean``; NaN for a
  run without it): the network time the model predicts against the wait the ranks saw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.inputs import RunData
from clusterbench.report.tables import BASELINE_KEY

#: Bytes per gradient value on the wire, by ``grad_compression`` (absent: none).
GRADIENT_BYTES = {"none": 4, "fp16": 2, "bf16": 2}

#: What a run's 1-worker run must share with it when it has no scaling baseline.
MODEL_KEY = tuple(key for key in BASELINE_KEY if key != "global_batch")

#: The environment a comm job measured, as runs.csv names it.
ENVIRONMENT_KEY = ("site", "workers", "nodes", "gpus_per_node", "backend")

#: scaling_model.csv's columns: one row per multi-worker run.
MODEL_COLUMNS = (
    "run",
    "site",
    "workers",
    "nodes",
    "gpus_per_node",
    "backend",
    "comm_job",
    "baseline_run",
    "steps_per_epoch",
    "measured_step_s",
    "compute_s",
    "network_s",
    "measured_comm_s",
    "predicted_s",
    "gap_s",
    "explained",
    "predicted_vs_measured",
    "gradient_bytes",
    "grad_compression",
    "busbw_gbps",
    "latency_s",
    "note",
)


def interpolate_time(sizes: Sequence[float], times: Sequence[float], nbytes: float) -> float:
    """The time of one operation on ``nbytes`` from measured ``(size, time)`` pairs (sizes
    ascending): linear in log-log between the neighbouring sizes; the smallest size's time
    below it; above the largest, its time scaled by the size (its bandwidth)."""
    if not len(sizes) or len(sizes) != len(times):
        raise ValueError(f"need as many times as sizes (>= 1), got {len(sizes)} and {len(times)}")
    if nbytes <= sizes[0]:
        return float(times[0])
    if nbytes >= sizes[-1]:
        return float(times[-1]) * nbytes / sizes[-1]
    logs = np.log(np.asarray(sizes, dtype=float))
    return float(np.exp(np.interp(math.log(nbytes), logs, np.log(np.asarray(times, float)))))


def gradient_bytes(parameters: int, compression: str | None) -> int:
    """The bytes of one allreduce of all gradients of ``parameters`` values."""
    compression = compression or "none"
    if compression not in GRADIENT_BYTES:
        raise ValueError(f"unknown grad_compression {compression!r}: {', '.join(GRADIENT_BYTES)}")
    return parameters * GRADIENT_BYTES[compression]


def allreduce_curve(comm: pd.DataFrame, env: dict[str, Any]) -> pd.DataFrame:
    """The allreduce rows of the comm job of ``env`` (:data:`ENVIRONMENT_KEY`), by size."""
    if comm.empty:
        return comm
    mask = comm["op"] == "allreduce"
    for key in ENVIRONMENT_KEY:
        mask &= comm[key].astype(str) == str(env[key])
    return comm[mask].sort_values("bytes")


def step_work(info: dict[str, Any]) -> tuple[int | None, int | None]:
    """(parameters, steps per epoch) a run.json records (None: recorded before they were)."""
    block = info.get("step_work") or {}
    return block.get("parameters"), block.get("steps_per_epoch")


def largest_share(info: dict[str, Any], row: pd.Series) -> int:
    """The most samples a rank of the run takes per step (its shard of the global batch)."""
    shares = (info.get("effective") or {}).get("per_worker_batch")
    if shares:
        return int(max(shares))
    return math.ceil(int(row["global_batch"]) / int(row["workers"]))


def compression_of(info: dict[str, Any]) -> str:
    return str(info["run"].get("grad_compression") or "none")


def baseline_of(row: pd.Series, runs_df: pd.DataFrame, share: int) -> str | None:
    """The 1-worker run whose compute the run's is scaled from (the module docstring)."""
    if isinstance(row.get("baseline_run"), str) and row["baseline_run"]:
        return row["baseline_run"]
    ones = runs_df[(runs_df["workers"] == 1) & np.isfinite(runs_df["mean_epoch_seconds"])]
    for key in MODEL_KEY:
        ones = ones[ones[key].astype(str) == str(row[key])]
    if ones.empty:
        return None
    distance = (ones["global_batch"] - share).abs()
    best = ones[distance == distance.min()]
    return str(best.loc[best["images_per_second"].idxmax(), "run"])


def step_seconds(row: pd.Series, steps: int | None) -> float:
    """A run's measured time per step: its mean timed epoch over its steps (NaN: unknown)."""
    if not steps or not np.isfinite(row["mean_epoch_seconds"]):
        return math.nan
    return float(row["mean_epoch_seconds"]) / steps


def predict_run(
    row: pd.Series, info: dict[str, Any], runs_df: pd.DataFrame, infos: dict, comm: pd.DataFrame
) -> dict[str, Any]:
    """One multi-worker run's model row; ``note`` says why a figure is missing."""
    env = {key: row[key] for key in ENVIRONMENT_KEY}
    parameters, steps = step_work(info)
    share = largest_share(info, row)
    out: dict[str, Any] = {**env, "run": row["run"], "steps_per_epoch": steps}
    out["grad_compression"] = compression_of(info)
    out["measured_step_s"] = step_seconds(row, steps)
    out["measured_comm_s"] = float(row.get("step_comm_mean", math.nan))
    base = baseline_of(row, runs_df, share)
    out["baseline_run"] = base
    if base is not None:
        base_row = runs_df.set_index("run").loc[base]
        base_step = step_seconds(base_row, step_work(infos[base])[1])
        out["compute_s"] = base_step * share / int(base_row["global_batch"])
    curve = allreduce_curve(comm, env)
    if parameters is not None and not curve.empty:
        nbytes = gradient_bytes(int(parameters), out["grad_compression"])
        seconds = interpolate_time(list(curve["bytes"]), list(curve["time_s"]), nbytes)
        ranks = int(row["workers"])
        out.update(
            comm_job=str(curve["name"].iloc[0]),
            gradient_bytes=nbytes,
            network_s=seconds,
            busbw_gbps=nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks,
            latency_s=float(curve["time_s"].iloc[0]),
        )
    out["note"] = missing_note(row, out, parameters, steps, base, curve)
    return out


def missing_note(row, out, parameters, steps, base, curve) -> str:
    """Why a run has no prediction ("" when it has one)."""
    if row["elastic"]:
        return "elastic: its world size changed while it trained"
    if not steps or parameters is None:
        return "its run.json records no steps per epoch or parameter count (an older run)"
    if not np.isfinite(out["measured_step_s"]):
        return "no timed epoch"
    if base is None:
        return "no timed 1-worker run of the same dataset, model, device, backend and BN mode"
    if not np.isfinite(out.get("compute_s", math.nan)):
        return f"its 1-worker run {base} has no timed epoch or no steps per epoch"
    if curve.empty:
        env = ", ".join(f"{k} {row[k]}" for k in ENVIRONMENT_KEY if k != "site")
        return f"no comm result for its environment ({env}) on site {row['site'] or '?'}"
    return ""


def model_table(runs: Sequence[RunData], runs_df: pd.DataFrame, comm: pd.DataFrame):
    """scaling_model.csv: one row per multi-worker run (:data:`MODEL_COLUMNS`), the runs with
    a prediction first (best explained last)."""
    infos = {r.name: r.info for r in runs}
    multi = runs_df[runs_df["workers"] > 1]
    rows = [
        predict_run(row, infos[row["run"]], runs_df, infos, comm) for _, row in multi.iterrows()
    ]
    df = pd.DataFrame(rows, columns=list(MODEL_COLUMNS))
    for col in ("compute_s", "network_s", "measured_step_s", "measured_comm_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    predicted = df["note"] == ""
    df.loc[predicted, "predicted_s"] = df["compute_s"] + df["network_s"]
    df.loc[predicted, "gap_s"] = df["measured_step_s"] - df["compute_s"]
    gap = df["gap_s"].where(df["gap_s"] > 0)
    df.loc[predicted, "explained"] = df["network_s"] / gap
    df.loc[predicted, "predicted_vs_measured"] = df["predicted_s"] / df["measured_step_s"]
    return df.sort_values(["note", "run"], kind="stable").reset_index(drop=True)
