"""The report's tables, pure pandas: one row per run (runs.csv), per epoch (epochs.csv), the
scaling and backend comparisons, provenance differences."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.config import LATER_TRAIN_DEFAULTS, SPEED_KEYS, TRAIN_DEFAULTS
from clusterbench.config.experiments import format_value
from clusterbench.core import provenance
from clusterbench.records import flops
from clusterbench.records.runs import memory_format, throughput_columns
from clusterbench.report import step_times
from clusterbench.report.inputs import (
    LOCAL_NAMES,
    PROVENANCE_COMPARED,
    PROVENANCE_VERSIONS,
    RunData,
)
from clusterbench.report.network import network_columns
from clusterbench.report.text import UNKNOWN, commit_text, list_runs, plural
from clusterbench.report.time_box import time_box_columns

RUN_ID_COLUMNS = ("run", "dataset", "model", "workers", "nodes")


#: What a scaling series runs along: the size of the world (the 1-worker run of a series is its
#: baseline).
SCALE_KEYS = ("workers", "nodes", "min_workers", "max_workers", "gpus_per_node")
#: The effective values a run records of speed settings that other keys stand for (batch_size
#: and batch_scaling: the global batch; gpus_per_node: the device; channels_last: the memory
#: format).
EFFECTIVE_KEYS = ("global_batch", "device", "memory_format")
#: Your own loss and optimiser: a speed setting, in one column, ``own_training`` (``loss m:f,
#: optimizer m:g``; empty: the defaults), as the key ``loss`` would be the evaluation's column.
OWN_TRAINING = ("loss", "optimizer")
#: The training keys that set how fast a step runs at a given scale: the schema's ``x-speed``
#: keys (:data:`clusterbench.config.SPEED_KEYS`) but those of the scale (and your own loss and
#: optimiser as ``own_training``).
SETTING_KEYS = (
    *(k for k in SPEED_KEYS if k not in SCALE_KEYS and k not in OWN_TRAINING),
    "own_training",
)

#: Runs that share these are one scaling series: the 1-worker run among them is the baseline.
BASELINE_KEY = (*SETTING_KEYS, *EFFECTIVE_KEYS, "site")

#: Settings a 1-worker run has no use for (it exchanges no gradients): such a run is the
#: baseline of every series that differs from it only in these.
NO_USE_ON_ONE_WORKER = ("grad_compression", "grad_allreduce", "shares", "iface", "log_level")


#: Runs that share these differ only in their backend: compared on the backend page.
BACKEND_MATCH_KEY = tuple(
    k for k in (*BASELINE_KEY[:2], "workers", "nodes", *BASELINE_KEY[2:]) if k != "backend"
)


REFERENCE_BACKEND = "horovod"  # the denominator of the backend ratios, when present


def fmt_ranks(ranks: list[int]) -> str:
    """Rank numbers as ranges: [0, 1, 2, 3, 5] -> '0-3, 5'."""
    spans: list[list[int]] = []
    for r in sorted(set(map(int, ranks))):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def fmt_gpus(names: list[str]) -> str:
    """['A', 'A', 'B'] -> '2\u00d7 A, 1\u00d7 B'; 'none' without GPUs."""
    counts: dict[str, int] = {}
    for name in names:
        counts[str(name)] = counts.get(str(name), 0) + 1
    return ", ".join(f"{n}\u00d7 {name}" for name, n in counts.items()) or "none"


def host_label(entry: dict[str, Any]) -> str:
    """A host entry's name: the machine's, with the scheduler's node name where that differs
    ('node2 on vm': several scheduler nodes on one machine)."""
    host, node = str(entry.get("host") or UNKNOWN), entry.get("node")
    if not node or node == host or node in LOCAL_NAMES or host.startswith(f"{node}."):
        return host
    return f"{node} on {host}"


def _join(values: Any) -> str:
    """Distinct values joined by ' + ' (hosts of one run that differ); 'unknown' if none."""
    return " + ".join(dict.fromkeys(str(v) for v in values)) or UNKNOWN


def provenance_columns(info: dict[str, Any]) -> dict[str, Any]:
    """The runs.csv provenance columns of one run from its (checked) ``run.json``."""
    prov = info.get("provenance")
    if prov is None:  # older run.json: rank 0 recorded its versions and the node names only
        world = info.get("world") or {}
        versions = info.get("versions") if isinstance(info.get("versions"), dict) else {}
        return {
            "provenance": "not recorded",
            "host_ranks": "; ".join(dict.fromkeys(map(str, world.get("hosts") or []))) or UNKNOWN,
            "host_count": len(set(world.get("hosts") or [])),
            **dict.fromkeys(("cpu_model", "cpu_cores", "gpus", "gpu_driver", "commit"), UNKNOWN),
            "dirty": None,
            **{k: str(versions.get(k, UNKNOWN)) for k in PROVENANCE_VERSIONS},
            "rank_differences": "",
        }
    hosts = prov["hosts"]
    git, versions = prov["git"], prov["versions"]
    has_gpus = any(h.get("gpus") for h in hosts)

    def cores(h: dict[str, Any]) -> Any:
        c = h.get("cpu_cores")
        return (c.get("logical") if isinstance(c, dict) else c) or UNKNOWN

    rank_diffs = []
    for h in hosts:
        differs = h.get("differs_from_rank0") or {}
        if differs:
            what = [
                "commit " + provenance.describe_commit(v) if k == "git" else f"{k} {v}"
                for k, v in differs.items()
            ]
            rank_diffs.append(f"{host_label(h)}: {', '.join(what)}")
    return {
        "provenance": "recorded",
        "host_ranks": "; ".join(f"{host_label(h)} (ranks {fmt_ranks(h['ranks'])})" for h in hosts),
        "host_count": len(hosts),
        "cpu_model": _join(h.get("cpu_model") or UNKNOWN for h in hosts),
        "cpu_cores": _join(cores(h) for h in hosts),
        "gpus": _join(fmt_gpus(h.get("gpus") or []) for h in hosts),
        "gpu_driver": _join(h.get("gpu_driver") or UNKNOWN for h in hosts if h.get("gpus"))
        if has_gpus
        else "none",
        "commit": str(git.get("commit") or UNKNOWN),
        "dirty": git.get("dirty"),
        **{k: str(versions.get(k, UNKNOWN)) for k in PROVENANCE_VERSIONS},
        "rank_differences": "; ".join(rank_diffs),
    }


def _compared_values(runs_df: pd.DataFrame, col: str) -> pd.Series:
    if col == "commit":
        return pd.Series(
            [commit_text(c, d) for c, d in zip(runs_df["commit"], runs_df["dirty"], strict=True)],
            index=runs_df.index,
        )
    return runs_df[col].astype(str)


def provenance_differences(runs_df: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Which provenance fields (``PROVENANCE_COMPARED``) of each run differ from the other
    runs', and one note per differing field listing its values and their runs.

    A run differs in a field when its value is not the one most runs share; when no value is
    shared by more runs than any other, every run differs in it. Unknown values are never
    compared. A run whose ranks ran other software than its rank 0 differs 'within the run'.
    """
    flags: dict[Any, list[str]] = {i: [] for i in runs_df.index}
    notes = []
    for col, label in PROVENANCE_COMPARED.items():
        values = _compared_values(runs_df, col)
        known = values[values != UNKNOWN]
        counts = known.value_counts(sort=True)
        if len(counts) < 2:
            continue
        top = counts[counts == counts.max()]
        odd = known.index if len(top) > 1 else known.index[known != top.index[0]]
        for i in odd:
            flags[i].append(label)
        notes.append(
            f"{label} differs: "
            + "; ".join(
                f"{value} ({list_runs(sorted(runs_df.loc[known.index[known == value], 'run']), 3)})"
                for value in counts.index
            )
        )
    for i, text in runs_df["rank_differences"].items():
        if text:
            flags[i].append("within the run")
            notes.append(f"{runs_df.loc[i, 'run']}: ranks differ from rank 0: {text}")
    return pd.Series({i: ", ".join(f) for i, f in flags.items()}, dtype=object), notes


def timed_mask(epochs: pd.DataFrame, warmup: int) -> np.ndarray:
    """True for the epochs a run's timing uses: all but the first ``warmup`` recorded ones, and
    but a partial epoch (the time box stopped it: ``partial``), which is no epoch's time."""
    mask = np.arange(len(epochs)) >= warmup
    if "partial" in epochs:
        mask &= epochs["partial"].isna().to_numpy()
    return mask


def warmup_reason(n_epochs: int, warmup: int) -> str:
    """Why a run has no timed epoch, e.g. 'only 1 epoch, 1 warm-up epoch excluded'."""
    return f"only {plural(n_epochs, 'epoch')}, {plural(warmup, 'warm-up epoch')} excluded"


def timing_stats(epochs: pd.DataFrame, warmup: int) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof=1) of epoch time and throughput over the timed
    epochs; NaN where there is no timed epoch (and sd NaN with only one); and where the step's
    time goes over them (:func:`clusterbench.report.step_times.run_columns`)."""
    timed = epochs[timed_mask(epochs, warmup)]
    sec, ips = timed["epoch_seconds"], timed["images_per_second"]
    return {
        **step_times.run_columns(timed),
        "timing_warmup_epochs": warmup,
        "timed_epochs": len(timed),
        "mean_epoch_seconds": float(sec.mean()) if len(timed) else np.nan,
        "std_epoch_seconds": float(sec.std(ddof=1)) if len(timed) > 1 else np.nan,
        "images_per_second": float(ips.mean()) if len(timed) else np.nan,
        "std_images_per_second": float(ips.std(ddof=1)) if len(timed) > 1 else np.nan,
        "timing_note": "" if len(timed) else warmup_reason(len(epochs), warmup),
    }


def efficiency_stats(info: dict[str, Any], epochs: pd.DataFrame, warmup: int) -> dict[str, Any]:
    """Model FLOPs over the timed epochs (:func:`clusterbench.records.flops.efficiency`: FLOPs
    per sample, a device's peak TFLOP/s, achieved TFLOP/s, MFU; NaN where not known) and the
    compilation: whether the network was compiled, and in how many seconds (not in the
    epochs)."""
    timed = epochs[timed_mask(epochs, warmup)].to_dict("records")
    effective = info.get("effective") or {}
    return {
        **flops.efficiency(info, timed),
        "compiled": bool(effective.get("compile", False)),
        "compile_seconds": float(info.get("compile_seconds") or 0.0),
    }


def token_stats(epochs: pd.DataFrame, warmup: int) -> dict[str, Any]:
    """A language model's tokens per second over the timed epochs (mean, sample sd) and its
    final validation perplexity; NaN for a run that trains on images."""
    if "tokens_per_second" not in epochs:
        return dict.fromkeys(
            ("tokens_per_second", "std_tokens_per_second", "final_val_perplexity"), np.nan
        )
    timed = epochs[timed_mask(epochs, warmup)]["tokens_per_second"]
    return {
        "tokens_per_second": float(timed.mean()) if len(timed) else np.nan,
        "std_tokens_per_second": float(timed.std(ddof=1)) if len(timed) > 1 else np.nan,
        "final_val_perplexity": float(epochs["val_perplexity"].iloc[-1]),
    }


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Speed-up and efficiency of each run against its baseline: the 1-worker run with the same
    dataset, model, global batch, device, backend and BN mode on the same site
    (``BASELINE_KEY``; whatever its ``NO_USE_ON_ONE_WORKER`` settings).

    Throughput (mean images/s over the timed epochs) is compared; with several 1-worker runs the
    fastest is the baseline (``baseline_candidates`` says how many qualified). A run without such
    a run, or without a timed epoch, gets no speed-up (NaN): no other run is borrowed.
    """
    df = with_settings(df)
    df["baseline_run"] = pd.Series([None] * len(df), index=df.index, dtype=object)
    df["baseline_candidates"] = 0
    df["speedup"] = np.nan
    df["efficiency"] = np.nan
    matched = [k for k in BASELINE_KEY if k not in NO_USE_ON_ONE_WORKER]
    for _, group in df.groupby(matched, sort=False, dropna=False):
        base = group[(group["workers"] == 1) & np.isfinite(group["images_per_second"])]
        if base.empty:
            continue
        best = base.loc[base["images_per_second"].idxmax()]
        speedup = group["images_per_second"] / best["images_per_second"]
        timed = group.index[np.isfinite(speedup)]
        df.loc[timed, "baseline_run"] = best["run"]
        df.loc[timed, "baseline_candidates"] = len(base)
        df.loc[timed, "speedup"] = speedup[timed]
        df.loc[timed, "efficiency"] = speedup[timed] / group.loc[timed, "workers"]
    return df


def with_settings(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a column for every speed setting the comparisons group runs by
    (:data:`SETTING_KEYS`): one a table lacks (a runs.csv of an older version, a table made by
    hand) holds the setting's default, as :func:`runs_table` writes it."""
    missing = [k for k in SETTING_KEYS if k not in df]
    if not missing:
        return df
    df = df.copy()
    for key in missing:
        default = TRAIN_DEFAULTS.get(key, "")  # own_training: none
        df[key] = default if isinstance(default, bool) else str(default)
    return df


def own_training(cfg: dict[str, Any]) -> str:
    """A run's own loss and optimiser in words (``loss m:f, optimizer m:g``; none: "")."""
    return ", ".join(f"{k} {cfg[k]}" for k in OWN_TRAINING if cfg.get(k))


def later_settings(cfg: dict[str, Any]) -> dict[str, str]:
    """The speed settings of :data:`SETTING_KEYS` that :func:`runs_table` has no column of its
    own for, as text; an older run.json's missing key: its default (what it trained with)."""
    named = ("dataset", "model", "backend", "bn", "deterministic", "precision", "grad_compression")
    found = {
        k: str(cfg.get(k, LATER_TRAIN_DEFAULTS.get(k))) for k in SETTING_KEYS if k not in named
    }
    return {**found, "own_training": own_training(cfg)}


def runs_table(runs: list[RunData], warmup: int = 1) -> pd.DataFrame:
    """One row per run (runs.csv), sorted by validation accuracy, best first. Timing columns
    leave out the first ``warmup`` epochs of each run (see ``timing_stats``)."""
    rows = []
    for r in runs:
        cfg, world, ep = r.info["run"], r.info.get("world") or {}, r.epochs
        eff = r.info["effective"]
        loss = r.metrics.get("loss")
        rows.append(
            {
                "run": r.name,
                "dataset": cfg["dataset"],
                "model": cfg["model"],
                "workers": int(cfg["workers"]),
                "nodes": int(cfg["nodes"]),
                "gpus_per_node": int(cfg.get("gpus_per_node") or 0),
                "device": world.get("device", "unknown"),
                "backend": str(world.get("backend") or cfg["backend"]),
                "bn": str(cfg["bn"]),
                # run.json files written before the rename name the scheduler "launcher"
                "scheduler": world.get("scheduler", world.get("launcher", "unknown")),
                "hosts": " ".join(dict.fromkeys(map(str, world.get("hosts", [])))),
                "epochs": int(r.info.get("epochs_completed", len(ep))),
                "batch_size": int(cfg["batch_size"]),
                "batch_scaling": str(eff["batch_scaling"]),
                "global_batch": int(eff["global_batch"]),
                "lr": float(cfg["lr"]),
                "effective_lr": float(eff["lr"]),
                "lr_schedule": str(cfg.get("lr_schedule") or "constant"),
                "deterministic": bool(cfg["deterministic"]),
                "precision": str(cfg["precision"]),
                "channels_last": str(cfg["channels_last"]),
                "memory_format": memory_format(r.info),
                # the setting (run.json's `effective` says "none" for one worker)
                "grad_compression": str(cfg.get("grad_compression") or "none"),
                **later_settings(cfg),
                "eval_split": r.metrics["split"],
                "eval_n": int(r.metrics["n"]),
                "accuracy": float(r.metrics["accuracy"]),
                "loss": float(loss) if loss is not None else np.nan,
                "macro_precision": r.metrics.get("macro_precision", np.nan),
                "macro_recall": r.metrics.get("macro_recall", np.nan),
                # a language model's accuracy is per token; synthetic data's means nothing
                "task": str(r.metrics.get("task") or "classification"),
                "synthetic": bool(r.metrics.get("synthetic", False)),
                "perplexity": _number(r.metrics.get("perplexity")),
                # a language model's tokens per sequence (its evaluation's tokens per sample)
                "seq_len": r.metrics["tokens"] // r.metrics["n"] if "tokens" in r.metrics else 0,
                **token_stats(ep, warmup),
                "final_val_accuracy": float(ep["val_accuracy"].iloc[-1]),
                "final_val_loss": float(ep["val_loss"].iloc[-1]),
                "best_val_accuracy": float(ep["val_accuracy"].max()),
                **timing_stats(ep, warmup),
                **efficiency_stats(r.info, ep, warmup),
                **throughput_columns(r.info),  # Horovod's summary lines, as trained
                "train_seconds": float(r.info["train_seconds"]),
                **provenance_columns(r.info),
                **network_columns(r.info),
                **time_box_columns(r.info),
                **experiment_columns(r.info),
            }
        )
    df = pd.DataFrame(rows)
    df["images_per_second_per_worker"] = df["images_per_second"] / df["workers"]
    df["provenance_differs"] = provenance_differences(df)[0]
    df = add_scaling(df)
    return sort_by_validation(df)


def sort_by_validation(df: pd.DataFrame) -> pd.DataFrame:
    """Best first by the final validation accuracy (the model kept is the final one; the test
    split never chooses), then the lower final validation loss, then the name. Runs whose
    accuracy says nothing come after the others: language models (their own order: the lower
    final validation loss first), then runs on synthetic data (images, then tokens)."""
    task = df["task"] if "task" in df else pd.Series("classification", index=df.index)
    synthetic = df["synthetic"] if "synthetic" in df else pd.Series(False, index=df.index)
    language = task == "language-model"
    keys = pd.DataFrame(
        {
            "group": 2 * synthetic.astype(bool).astype(int) + language.astype(int),
            # a language model's order: its loss alone
            "accuracy": np.where(language, 0.0, -df["final_val_accuracy"]),
            "loss": df["final_val_loss"],
            "run": df["run"],
        },
        index=df.index,
    )
    order = keys.sort_values(["group", "accuracy", "loss", "run"], kind="stable").index
    return df.loc[order].reset_index(drop=True)


def _number(value: Any) -> float:
    """A number of a JSON file; NaN for null or absent."""
    return np.nan if value is None else float(value)


def experiment_columns(info: dict[str, Any]) -> dict[str, Any]:
    """Where a run came from (run.json's ``experiment``; empty for a hand-written run), its
    site, and for an elastic run the world sizes it had."""
    origin = info.get("experiment") or {}
    elastic = (info.get("world") or {}).get("elastic") or {}
    sizes = [s for s in elastic.get("sizes") or [] if s is not None]
    resets = elastic.get("resets") or []
    return {
        "experiment": origin.get("name") or "",
        "environment": origin.get("environment") or "",
        "point": json.dumps(origin.get("point") or {}, sort_keys=True),
        "repeat": int(origin.get("repeat") or 0),
        "site": str(info.get("site") or ""),
        "minutes": _minutes(info["run"].get("minutes")),
        "elastic": bool(elastic),
        "world_sizes": " ".join(map(str, dict.fromkeys(sizes))),
        "resets": len(resets),
        # the time the resets took, in all (seconds; 0 without resets)
        "reset_seconds": float(
            sum(
                r["seconds"]
                for r in resets
                if isinstance(r, dict) and isinstance(r.get("seconds"), int | float)
            )
        ),
        "grow": str(elastic.get("grow") or ("none" if elastic else "")),
        **device_hours(info),
    }


def device_hours(info: dict[str, Any]) -> dict[str, Any]:
    """What an elastic run used: its world size over its training time, in GPU-hours on GPUs
    (one per rank) or CPU-hours (a rank's CPUs), against what a fixed run of ``max_workers``
    would have held over the same time (``device_hours``, ``fixed_device_hours``, and
    ``device_hours_unit``: ``GPU`` or ``CPU``); NaN for a run without that record (not
    elastic, or a run.json written before it)."""
    world = info.get("world") or {}
    elastic = world.get("elastic") or {}
    used, fixed = elastic.get("rank_hours"), elastic.get("max_workers_rank_hours")
    if not isinstance(used, int | float) or not isinstance(fixed, int | float):
        return {"device_hours": np.nan, "fixed_device_hours": np.nan, "device_hours_unit": ""}
    gpu = world.get("device") == "cuda"
    per_rank = 1 if gpu else int(elastic.get("cpus_per_rank") or 1)
    return {
        "device_hours": float(used) * per_rank,
        "fixed_device_hours": float(fixed) * per_rank,
        "device_hours_unit": "GPU" if gpu else "CPU",
    }


def _minutes(value: Any) -> float:
    """A run's time box in minutes; NaN without one."""
    return np.nan if value is None else float(value)


#: results.csv: the answer to the question, one row per run, best (on validation) first.
RESULTS_COLUMNS = (
    "rank",
    "run",
    "experiment",
    "environment",
    "point",
    "repeat",
    "site",
    "workers",
    "nodes",
    "gpus_per_node",
    "epochs",
    "final_val_accuracy",
    "final_val_loss",
    "accuracy",
    "eval_split",
    "mean_epoch_seconds",
    "std_epoch_seconds",
    "images_per_second",
    "train_seconds",
    # what the accuracy means: a language model's (then its perplexity and tokens/s), synthetic
    "task",
    "synthetic",
    "final_val_perplexity",
    "perplexity",
    "tokens_per_second",
)


def results_table(runs_df: pd.DataFrame) -> pd.DataFrame:
    """results.csv: :data:`RESULTS_COLUMNS` of every run, sorted by validation accuracy."""
    df = sort_by_validation(runs_df)
    df.insert(0, "rank", range(1, len(df) + 1))
    return df[list(RESULTS_COLUMNS)]


def best_run(runs_df: pd.DataFrame) -> pd.Series:
    """The best run, chosen on validation (:func:`sort_by_validation`), never on the test
    split."""
    if runs_df.empty:
        raise ValueError("no run to choose the best of")
    return sort_by_validation(runs_df).iloc[0]


def swept_keys(runs_df: pd.DataFrame) -> dict[str, list[str]]:
    """Experiment -> the keys its matrix sweeps (in the order its points name them)."""
    keys: dict[str, list[str]] = {}
    for exp, point in zip(runs_df["experiment"], runs_df["point"], strict=True):
        if exp:
            names = keys.setdefault(exp, [])
            names += [k for k in json.loads(point) if k not in names]
    return keys


def point_table(runs_df: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """One row per matrix point, environment and site of ``experiment``: its swept values as
    columns (as the point names them: a ``null`` stays ``None``, an integer an integer), the
    mean, sd and count over its repeats (its runs with different seeds) of the final validation
    accuracy, the test accuracy, the time per epoch and the images/s. Runs of two sites are
    never one point's repeats; ``point_label`` names the site only when there are several."""
    part = runs_df[runs_df["experiment"] == experiment]
    keys = swept_keys(part).get(experiment, [])
    several_sites = part["site"].nunique() > 1
    rows = []
    for (site, env, point), group in part.groupby(
        ["site", "environment", "point"], sort=False, dropna=False
    ):
        values = json.loads(point)
        label = [f"site={site}"] if several_sites else []
        label += [f"env={env}"] if env else []
        label += [f"{k}={format_value(values[k])}" for k in keys if k in values]
        timed = group["mean_epoch_seconds"]
        rows.append(
            {
                "site": site,
                "environment": env,
                "point": point,
                **{k: values.get(k) for k in keys},
                "point_label": ", ".join(label) or group["run"].iloc[0],
                "val_accuracy": group["final_val_accuracy"].mean(),
                "val_accuracy_sd": group["final_val_accuracy"].std(),
                "accuracy": group["accuracy"].mean(),
                "accuracy_sd": group["accuracy"].std(),
                "epoch_seconds": timed.mean(),
                "epoch_seconds_sd": timed.std(),
                "images_per_second": group["images_per_second"].mean(),
                "epochs": group["epochs"].mean(),
                "repeats": len(group),
                "timed_repeats": int(timed.notna().sum()),
            }
        )
    columns = ["site", "environment", "point", *keys, "point_label", "val_accuracy"]
    columns += ["val_accuracy_sd", "accuracy", "accuracy_sd", "epoch_seconds"]
    columns += ["epoch_seconds_sd", "images_per_second", "epochs", "repeats", "timed_repeats"]
    out = pd.DataFrame(rows, columns=columns)
    for k in keys:  # the values as the points have them (no NaN for null, no 64.0 for 64)
        out[k] = pd.Series([r[k] for r in rows], index=out.index, dtype=object)
    return out


#: The columns of :func:`environment_table`.
ENVIRONMENT_COLUMNS = (
    "site",
    "experiment",
    "environment",
    "point",
    "workers",
    "nodes",
    "gpus_per_node",
    "epoch_seconds",
    "epoch_seconds_sd",
    "sd_over",
    "images_per_second",
    "epochs",
    "val_accuracy",
    "repeats",
    "time_boxed",
)


def environment_table(runs_df: pd.DataFrame) -> pd.DataFrame:
    """One row per site, experiment, environment and point of the runs that ran in an
    environment preset: the mean over its repeats (the runs with different seeds) of the time
    per epoch, images/s, epochs reached and validation accuracy. ``epoch_seconds_sd`` is the
    sd over the repeats' mean times per epoch (``sd_over`` = 'repeats'), or, for a point that
    ran once, that run's sd over its timed epochs ('epochs'). ``time_boxed``: its runs had a
    time box (``minutes``)."""
    part = runs_df[runs_df["environment"] != ""]
    rows = []
    for (site, exp, env, point), group in part.groupby(
        ["site", "experiment", "environment", "point"], sort=False, dropna=False
    ):
        first = group.iloc[0]
        if len(group) > 1:
            sd, over = group["mean_epoch_seconds"].std(), "repeats"
        else:
            sd, over = first["std_epoch_seconds"], "epochs"
        minutes = group["minutes"] if "minutes" in group else pd.Series(dtype=float)
        rows.append(
            {
                "site": site,
                "experiment": exp,
                "environment": env,
                "point": point,
                "workers": first["workers"],
                "nodes": first["nodes"],
                "gpus_per_node": first["gpus_per_node"],
                "epoch_seconds": group["mean_epoch_seconds"].mean(),
                "epoch_seconds_sd": float(sd),
                "sd_over": over,
                "images_per_second": group["images_per_second"].mean(),
                "epochs": group["epochs"].mean(),
                "val_accuracy": group["final_val_accuracy"].mean(),
                "repeats": len(group),
                "time_boxed": bool(minutes.notna().any()),
            }
        )
    return pd.DataFrame(rows, columns=list(ENVIRONMENT_COLUMNS))


def skipped_table(skipped: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The skipped runs (``--skipped``, or a comparison's skipped.csv files), one row each in
    the order given: run, site, experiment, environment, swept values (``point``, as text) and
    the reason."""
    rows = []
    for s in skipped:
        point = s.get("point")
        if isinstance(point, dict):
            point = ", ".join(f"{k}={format_value(v)}" for k, v in point.items())
        rows.append(
            {
                "run": str(s["run"]),
                "site": str(s.get("site") or ""),
                "experiment": str(s.get("experiment") or ""),
                "environment": str(s.get("environment") or ""),
                "point": str(point or ""),
                "reason": str(s.get("reason") or ""),
            }
        )
    columns = ["run", "site", "experiment", "environment", "point", "reason"]
    return pd.DataFrame(rows, columns=columns)


def epochs_table(runs: list[RunData], warmup: int = 1) -> pd.DataFrame:
    """One row per run and epoch (epochs.csv); ``timed`` is False for the warm-up epochs that
    the timing leaves out."""
    frames = []
    for r in runs:
        cfg = r.info["run"]
        ident = {"run": r.name, **{k: cfg[k] for k in RUN_ID_COLUMNS[1:]}}
        ep = r.epochs.drop(columns=[c for c in ident if c in r.epochs.columns])
        ep = ep.assign(timed=timed_mask(ep, warmup))
        frames.append(pd.concat([pd.DataFrame(ident, index=ep.index), ep], axis=1))
    return pd.concat(frames, ignore_index=True)


def backend_comparison(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Runs that differ only in their backend (same ``BACKEND_MATCH_KEY``), one row per
    configuration and backend: the fastest timed run of that backend, its throughput, and the
    ratio to the reference backend (horovod if present, else the first by name). ``throughput``
    and ``std_throughput`` are in ``unit``: images/s, a language model's tokens/s."""
    runs_df = with_settings(runs_df)
    timed = runs_df[np.isfinite(runs_df["images_per_second"])]
    rows = []
    for key, group in timed.groupby(list(BACKEND_MATCH_KEY), sort=True, dropna=False):
        backends = sorted(group["backend"].unique())
        if len(backends) < 2:
            continue
        ref = REFERENCE_BACKEND if REFERENCE_BACKEND in backends else backends[0]
        best = {
            b: group.loc[group.loc[group["backend"] == b, "images_per_second"].idxmax()]
            for b in backends
        }
        config = dict(zip(BACKEND_MATCH_KEY, key, strict=True))
        tokens = "task" in group and bool((group["task"] == "language-model").all())
        rate = "tokens_per_second" if tokens else "images_per_second"
        for b in [ref, *(b for b in backends if b != ref)]:
            row = best[b]
            rows.append(
                {
                    **config,
                    "backend": b,
                    "reference_backend": ref,
                    "run": row["run"],
                    "runs": int((group["backend"] == b).sum()),
                    "images_per_second": row["images_per_second"],
                    "std_images_per_second": row["std_images_per_second"],
                    "ratio": row["images_per_second"] / best[ref]["images_per_second"],
                    "throughput": row[rate],
                    "std_throughput": row[f"std_{rate}"],
                    "unit": "tokens/s" if tokens else "images/s",
                }
            )
    columns = [*BACKEND_MATCH_KEY, "backend", "reference_backend", "run", "runs"]
    columns += ["images_per_second", "std_images_per_second", "ratio"]
    columns += ["throughput", "std_throughput", "unit"]
    return pd.DataFrame(rows, columns=columns)
