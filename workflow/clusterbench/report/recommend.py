"""The recommendation: for each workload (dataset and model; and site, where the runs come from
several), the fastest measured configuration, its margin over the runner-up and whether that
margin is beyond the noise; with ``report.target_accuracy``, each run's time to that accuracy
and the configuration that reached it first. Pure pandas on the report's tables.

A **configuration** is how a workload was run (:data:`CONFIG_KEY`): backend, BN mode, workers
and nodes (so ranks per node), GPUs per node, device, global batch, precision, memory format
and gradient compression (the run key ``grad_compression`` where runs have it, else none).
Runs of one configuration that differ in anything else (learning rate, momentum, seed) are
its repeats: their throughputs are measurements of the same speed.

**Fastest and the noise.** Each configuration's throughput is the mean of its runs' mean
images/s over their timed epochs, with the standard error of
:func:`clusterbench.core.stats.estimate`
(the larger of the epochs' share and the repeats' share). The fastest is the configuration of
the highest mean; its margin over the runner-up (the next highest) is beyond the noise when it
exceeds 3 standard errors of the difference (:func:`clusterbench.core.stats.difference`).

**Time to accuracy.** A run's time to the target is its training time (the sum of
``epoch_seconds``, validation excluded, warm-up included: the time the run really took) up to
the end of the first epoch whose validation accuracy reached the target; a run that never
reached it has none. The configuration that reached it first is that of the run with the least.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.core import stats
from clusterbench.report.tables import EFFECTIVE_KEYS, SETTING_KEYS, with_settings
from clusterbench.report.text import fmt_duration, fmt_pct, plural

#: What a configuration is (runs.csv columns; ``grad_compression`` "none" where absent): the
#: speed settings of a workload (:data:`clusterbench.report.tables.SETTING_KEYS` but the
#: dataset and model), its size and the effective values a run records.
CONFIG_KEY = (
    *(k for k in SETTING_KEYS if k not in ("dataset", "model")),
    "workers",
    "nodes",
    "gpus_per_node",
    *EFFECTIVE_KEYS,
)

#: The columns of :func:`configurations`.
CONFIG_COLUMNS = (
    "workload",
    *CONFIG_KEY,
    "ranks_per_node",
    "runs",
    "n_runs",
    "epochs",
    "mean",
    "se",
    "unit",
    "tflops",
    "mfu",
    "rank",
)

#: The columns of :func:`recommendations`.
RECOMMENDATION_COLUMNS = (
    "workload",
    "config",
    "runs",
    "mean",
    "se",
    "runner_up",
    "runner_up_mean",
    "runner_up_se",
    "margin",
    "margin_pct",
    "margin_se",
    "beyond_noise",
    "configurations",
    "unit",
    "tflops",
    "mfu",
)


def workload_of(runs_df: pd.DataFrame) -> pd.Series:
    """Each run's workload: 'dataset / model', with ' on <site>' where runs come from several
    sites."""
    workload = runs_df["dataset"].astype(str) + " / " + runs_df["model"].astype(str)
    if "site" in runs_df and runs_df["site"].nunique() > 1:
        workload = workload + " on " + runs_df["site"].astype(str)
    return workload


def with_config(runs_df: pd.DataFrame) -> pd.DataFrame:
    """``runs_df`` with ``workload``, ``grad_compression`` ("none" where the runs do not have
    it) and ``ranks_per_node``."""
    df = with_settings(runs_df).copy()
    if "grad_compression" not in df:
        df["grad_compression"] = "none"
    df["grad_compression"] = df["grad_compression"].fillna("none").astype(str)
    df["workload"] = workload_of(df)
    df["ranks_per_node"] = df["workers"] / df["nodes"]
    return df


def rate_key(group: pd.DataFrame) -> str:
    """The throughput a group of runs is compared by: a language model's tokens/s (every run of
    the group has it), else images/s."""
    tokens = group.get("tokens_per_second")
    if tokens is not None and np.isfinite(tokens.astype(float)).all():
        return "tokens_per_second"
    return "images_per_second"


def configurations(runs_df: pd.DataFrame) -> pd.DataFrame:
    """One row per workload and configuration of the timed runs: its runs, mean throughput
    (``unit``: images/s, a language model's tokens/s) and standard error; ranked within its
    workload, fastest first (``rank`` 1)."""
    df = with_config(runs_df)
    df = df[np.isfinite(df["images_per_second"].astype(float))]
    rows = []
    for key, group in df.groupby(["workload", *CONFIG_KEY], sort=False, dropna=False):
        rate = rate_key(group)
        est = stats.estimate(
            group[rate].astype(float).tolist(),
            group[f"std_{rate}"].astype(float).tolist(),
            group["timed_epochs"].astype(int).tolist(),
        )
        rows.append(
            {
                **dict(zip(("workload", *CONFIG_KEY), key, strict=True)),
                "ranks_per_node": group["ranks_per_node"].iloc[0],
                "runs": ", ".join(group["run"].astype(str)),
                "n_runs": est.runs,
                "epochs": est.epochs,
                "mean": est.mean,
                "se": est.se,
                "unit": rate.replace("_per_second", "/s"),
                **mean_efficiency(group),
            }
        )
    out = pd.DataFrame(rows, columns=[c for c in CONFIG_COLUMNS if c != "rank"])
    out = out.sort_values(["workload", "mean"], ascending=[True, False], kind="stable")
    out["rank"] = out.groupby("workload").cumcount() + 1
    return out.reset_index(drop=True)


def mean_efficiency(group: pd.DataFrame) -> dict[str, float]:
    """The mean achieved TFLOP/s and MFU of a configuration's runs (runs.csv's ``tflops`` and
    ``mfu``; NaN where no run has them: a runs.csv of an older version, no known peak)."""
    found = {}
    for key in ("tflops", "mfu"):
        values = group[key].astype(float).to_numpy() if key in group else np.array([])
        found[key] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
    return found


def efficiency_text(row: Any) -> str:
    """'0.42 TFLOP/s, MFU 3.1 %' ('' where not known; the TFLOP/s alone without a peak)."""
    tflops, mfu = row.get("tflops"), row.get("mfu")
    if missing(tflops):
        return ""
    text = f"{tflops:.3g} TFLOP/s"
    return text if missing(mfu) else f"{text}, MFU {fmt_pct(mfu, 1)}"


def config_parts(row: Any, batch: bool = True) -> dict[str, str]:
    """A configuration's parts in words, by what they say (``batch``: the global batch too)."""
    workers, nodes = int(row["workers"]), int(row["nodes"])
    per_node = float(row["workers"]) / float(row["nodes"])
    compression = row["grad_compression"]
    gpus = int(row.get("gpus_per_node") or 0)
    parts = {
        "backend": str(row["backend"]),
        "size": f"{plural(workers, 'worker')} on {plural(nodes, 'node')} ({per_node:g} per node)",
        "gpus": f"{gpus} GPU{'' if gpus == 1 else 's'} per node" if gpus else "",
        "bn": f"BN {row['bn']}",
        "precision": str(row["precision"]),
        "compression": "no compression"
        if compression in ("none", None)
        else f"{compression} compression",
        "memory_format": "channels-last" if row.get("memory_format") == "channels_last" else "",
        "compile": "compiled" if str(row.get("compile")) == "True" else "",
        "decode": f"decode {row['decode']}" if row.get("decode") in ("cpu", "gpu") else "",
        "batch": f"batch {int(row['global_batch'])}" if batch else "",
    }
    return {k: v for k, v in parts.items() if v}


def describe_config(row: Any, batch: bool = True, like: Any = None) -> str:
    """A configuration in words: 'ddp, 2 workers on 1 node (2 per node), BN aggregate, fp32,
    no compression, batch 128'; with ``like`` (another configuration), only what differs from
    it."""
    parts = config_parts(row, batch)
    if like is not None:
        other = config_parts(like, batch)
        parts = {k: v for k, v in parts.items() if other.get(k) != v} or parts
    return ", ".join(parts.values())


def recommendations(configs: pd.DataFrame) -> pd.DataFrame:
    """Per workload: the fastest configuration, its runner-up, the margin (its ``unit`` and
    relative to the runner-up), the standard error of that difference and whether the margin
    is beyond the noise (None: unknown, or no runner-up)."""
    rows = []
    for workload, group in configs.groupby("workload", sort=True):
        group = group.sort_values("rank")
        best, batch = group.iloc[0], group["global_batch"].nunique() > 1
        est = stats.Estimate(best["mean"], best["se"], int(best["n_runs"]), int(best["epochs"]))
        row = {
            "workload": workload,
            "config": describe_config(best, batch),
            "runs": best["runs"],
            "mean": best["mean"],
            "se": best["se"],
            "configurations": len(group),
            "unit": best["unit"],
            "tflops": best.get("tflops", math.nan),
            "mfu": best.get("mfu", math.nan),
            **dict.fromkeys(("runner_up", "runner_up_mean", "runner_up_se"), None),
            **dict.fromkeys(("margin", "margin_pct", "margin_se"), math.nan),
            "beyond_noise": None,
        }
        if len(group) > 1:
            second = group.iloc[1]
            other = stats.Estimate(
                second["mean"], second["se"], int(second["n_runs"]), int(second["epochs"])
            )
            diff = stats.difference(est, other)
            row.update(
                runner_up=describe_config(second, batch, like=best),
                runner_up_mean=second["mean"],
                runner_up_se=second["se"],
                margin=diff.value,
                margin_pct=diff.value / second["mean"],
                margin_se=diff.se,
                beyond_noise=diff.beyond,
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=list(RECOMMENDATION_COLUMNS))


def missing(value: Any) -> bool:
    """No value: None or NaN (a table's missing cell)."""
    return value is None or (not isinstance(value, str) and bool(pd.isna(value)))


def verdict(row: Any) -> str:
    """Whether a recommendation's margin is beyond the noise, in words."""
    if missing(row["runner_up"]):
        return "the only configuration measured"
    if missing(row["beyond_noise"]):
        return "noise unknown (no run has two timed epochs)"
    times = row["margin"] / row["margin_se"]
    if row["beyond_noise"]:
        return f"beyond the noise ({times:.1f} standard errors > 3)"
    return f"within the noise ({times:.1f} standard errors \u2264 3): as fast as measured"


def recommendation_sentence(row: Any) -> str:
    """'digits / small_cnn: fastest ddp, 1 worker ...: 2,450 images/s, 8.1 % ahead of the
    runner-up (horovod: 2,266): beyond the noise (4.2 standard errors > 3).' A language
    model's rate is in tokens/s."""
    unit = row.get("unit") or "images/s"
    text = f"{row['workload']}: fastest {row['config']}: {row['mean']:,.0f} {unit}"
    if efficiency := efficiency_text(row):
        text += f" ({efficiency})"
    if missing(row["runner_up"]):
        return f"{text} ({verdict(row)})."
    return (
        f"{text}, {fmt_pct(row['margin_pct'], 1)} ahead of the runner-up ({row['runner_up']}: "
        f"{row['runner_up_mean']:,.0f}): {verdict(row)}."
    )


def time_to_accuracy(epochs_df: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per run: the first epoch whose validation accuracy reached ``target`` (NaN: none) and
    the training time to its end (cumulative ``epoch_seconds``)."""
    rows = []
    for run, ep in epochs_df.groupby("run", sort=False):
        ep = ep.sort_values("epoch")
        elapsed = ep["epoch_seconds"].astype(float).cumsum()
        reached = ep["val_accuracy"].astype(float) >= target
        first = reached.to_numpy().argmax() if reached.any() else None
        rows.append(
            {
                "run": run,
                "target": target,
                "epoch": float(ep["epoch"].iloc[first]) if first is not None else math.nan,
                "seconds": float(elapsed.iloc[first]) if first is not None else math.nan,
                "best_val_accuracy": float(ep["val_accuracy"].max()),
                "epochs": len(ep),
            }
        )
    return pd.DataFrame(
        rows, columns=["run", "target", "epoch", "seconds", "best_val_accuracy", "epochs"]
    )


def first_to_target(runs_df: pd.DataFrame, tta: pd.DataFrame) -> pd.DataFrame:
    """Per workload: the run (and its configuration) that reached the target in the least
    training time, and how many of the workload's runs reached it at all."""
    df = with_config(runs_df).merge(tta, on="run", how="inner")
    rows = []
    for workload, group in df.groupby("workload", sort=True):
        reached = group[np.isfinite(group["seconds"])]
        batch = group["global_batch"].nunique() > 1
        row = {"workload": workload, "reached": len(reached), "runs": len(group)}
        if not reached.empty:
            best = reached.loc[reached["seconds"].idxmin()]
            row.update(
                run=best["run"],
                config=describe_config(best, batch),
                seconds=best["seconds"],
                epoch=int(best["epoch"]),
            )
        rows.append(row)
    columns = ["workload", "reached", "runs", "run", "config", "seconds", "epoch"]
    return pd.DataFrame(rows, columns=columns)


def first_sentence(row: Any, target: float, fastest: str | None = None) -> str:
    """'First to 95.0 % validation accuracy on digits / small_cnn: run R (its configuration;
    'the fastest configuration' where it is ``fastest``) after 1.72 s of training (epoch 10;
    4 of 4 runs reached it).'"""
    goal = f"{fmt_pct(target, 1)} validation accuracy"
    if missing(row["run"]):
        return f"No run of {row['workload']} reached {goal} ({plural(int(row['runs']), 'run')})."
    config = "the fastest configuration" if row["config"] == fastest else row["config"]
    return (
        f"First to {goal} on {row['workload']}: {row['run']} ({config}) after "
        f"{fmt_duration(row['seconds'])} of training (epoch {int(row['epoch'])}; "
        f"{row['reached']} of {plural(int(row['runs']), 'run')} reached it)."
    )
