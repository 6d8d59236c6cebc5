"""One history entry per run: what it trained, where, with what, how fast and how well, from
its ``run.json``, ``metrics.jsonl`` and the evaluation's ``metrics.json``
(:data:`clusterbench.history.store.RUN_COLUMNS`).

Its timing is the report's: the first ``warmup`` epochs are left out, and the mean and sample
sd of the epoch time and throughput are over the rest (the timed epochs). Every epoch's figures
are kept too (``epoch_metrics``), so that another warm-up can be applied later.

Its series (runs whose throughputs are comparable over time) is its site, environment,
workload and ``speed_settings``: its training settings but those that change what is learnt
and not how fast a step runs (the schema's ``x-speed: false`` keys,
:data:`clusterbench.config.NOT_SPEED_KEYS`), with the effective global batch,
memory format and device. Runs of a series that differ in those (a sweep's learning rates,
repeats' seeds) are repeats of one another for the throughput.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterbench.config import NOT_SPEED_KEYS
from clusterbench.records import flops, runs
from clusterbench.records.runs import memory_format

#: Speed settings added after runs were first stored, left out of a run's series where they
#: are at their default (null): such a run stays in the series of the runs stored before them.
UNSTORED_AT_DEFAULT = ("iface", "log_level", "loss", "optimizer", "shares")


def speed_settings(info: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that set a run's speed (see the module's docstring)."""
    run = info["run"]
    settings = {k: v for k, v in run.items() if k not in NOT_SPEED_KEYS}
    for key in UNSTORED_AT_DEFAULT:
        if settings.get(key) is None:
            settings.pop(key, None)
    effective, world = info.get("effective") or {}, info.get("world") or {}
    settings["global_batch"] = effective.get("global_batch")
    settings["memory_format"] = memory_format(info)
    settings["device"] = world.get("device")
    settings["backend"] = str(world.get("backend") or run.get("backend"))
    settings.setdefault("grad_compression", "none")
    if settings["grad_compression"] is None:
        settings["grad_compression"] = "none"
    return settings


def environment_label(info: Mapping[str, Any]) -> str:
    """The run's environment preset (``experiments``), else its workers, nodes and GPUs in
    words: '2 workers, 1 node', '8 workers, 2 nodes, 4 GPUs per node'."""
    preset = (info.get("experiment") or {}).get("environment")
    if preset:
        return str(preset)
    run = info["run"]
    workers, nodes = int(run["workers"]), int(run["nodes"])
    gpus = int(run.get("gpus_per_node") or 0)
    text = f"{workers} worker{'s' * (workers != 1)}, {nodes} node{'s' * (nodes != 1)}"
    return text + (f", {gpus} GPU{'s' * (gpus != 1)} per node" if gpus else "")


def spread(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample sd (None: no value, or one for the sd)."""
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def timing(records: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Mean and sd over the timed epochs (all but the first ``warmup``, and but a partial one
    the time box stopped), and every epoch's figures (``epoch_metrics``)."""
    timed = [r for r in records[warmup:] if "partial" not in r]
    out: dict[str, Any] = {"warmup_epochs": warmup, "timed_epochs": len(timed)}
    for field in ("epoch_seconds", "images_per_second", "tokens_per_second"):
        values = [float(r[field]) for r in timed if isinstance(r.get(field), int | float)]
        if field == "tokens_per_second" and len(values) != len(timed):
            values = []  # a language model's records have it on every epoch
        out[f"{field}_mean"], out[f"{field}_sd"] = spread(values)
    kept = ("epoch_seconds", "images_per_second", "val_accuracy", "tokens_per_second")
    out["epoch_metrics"] = {
        field: [r.get(field) for r in records] for field in kept if field in records[0]
    }
    return out


def utc_date(stamp: str) -> str:
    """An ISO 8601 time with its offset, in UTC to the millisecond (sorts as text)."""
    when = dt.datetime.fromisoformat(stamp)
    if when.tzinfo is None:
        when = when.astimezone()  # a local time: this host's zone
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds")


def end_time(info: Mapping[str, Any], records: list[dict[str, Any]], run_json: Path) -> str:
    """When the training ended: run.json's provenance date (rank 0 wrote it at the end), else
    the last epoch's time, else run.json's modification time."""
    stamp = (info.get("provenance") or {}).get("date") or records[-1].get("time")
    if isinstance(stamp, str) and stamp:
        try:
            utc_date(stamp)
            return stamp
        except ValueError:
            pass
    return dt.datetime.fromtimestamp(run_json.stat().st_mtime, dt.UTC).isoformat()


def provenance_columns(info: Mapping[str, Any]) -> dict[str, Any]:
    """Hosts, CPU and GPU models, driver, NCCL, package versions and commit, from run.json's
    provenance (an older run.json: its versions and node names only)."""
    prov = info.get("provenance") or {}
    versions = prov.get("versions") or info.get("versions") or {}
    hosts = prov.get("hosts") or []
    gpus = sorted({str(g) for h in hosts for g in h.get("gpus") or []})

    def joined(values: Any) -> str | None:
        distinct = list(dict.fromkeys(str(v) for v in values if v))
        return " + ".join(distinct) or None

    git = prov.get("git") or {}
    dirty = git.get("dirty")
    return {
        "hosts": [h.get("host") for h in hosts] or list((info.get("world") or {}).get("hosts", [])),
        "cpu_model": joined(h.get("cpu_model") for h in hosts),
        "gpu_model": " + ".join(gpus) if gpus else ("none" if hosts else None),
        "gpu_driver": joined(h.get("gpu_driver") for h in hosts if h.get("gpus")),
        "nccl": versions.get("nccl"),
        "python": versions.get("python"),
        "torch": versions.get("torch"),
        "horovod": versions.get("horovod"),
        "commit_sha": git.get("commit"),
        "dirty": None if dirty is None else bool(dirty),
        "provenance": prov or None,
    }


def entry(run_dir: Path, eval_dir: Path, warmup: int) -> dict[str, Any]:
    """The history entry of the run in ``run_dir`` (evaluated in ``eval_dir``), timed after
    ``warmup`` epochs; ``run_dir`` is recorded absolute (the entry's key)."""
    run_json = run_dir / "run.json"
    info, records = runs.read_run(run_dir)
    run, origin = info["run"], info.get("experiment") or {}
    metrics = runs.read_eval_metrics(eval_dir / "metrics.json", str(run["name"]))
    settings = speed_settings(info)
    ended = end_time(info, records, run_json)
    return {
        "run_dir": os.path.abspath(run_dir),
        "end_time": ended,
        "date": utc_date(ended),
        "run": str(run.get("name", run_dir.name)),
        "site": str(info.get("site") or ""),
        "experiment": str(origin.get("name") or ""),
        "environment": environment_label(info),
        "workload": f"{run['dataset']} / {run['model']}",
        "dataset": str(run["dataset"]),
        "model": str(run["model"]),
        "settings": run,
        "speed_settings": json.dumps(settings, sort_keys=True),
        **{k: settings.get(k) for k in ("backend", "bn", "workers", "nodes", "gpus_per_node")},
        **{k: settings.get(k) for k in ("device", "global_batch", "precision", "memory_format")},
        "grad_compression": str(settings["grad_compression"]),
        **provenance_columns(info),
        "epochs": sum(1 for r in records if "partial" not in r),  # whole ones, as run.json
        **timing(records, warmup),
        "final_val_accuracy": float(records[-1]["val_accuracy"]),
        "accuracy": _number(metrics.get("accuracy")),
        "eval_split": metrics.get("split"),
        "train_seconds": _number(info.get("train_seconds")),
        **{k: _number(v) for k, v in efficiency(info, records, warmup).items()},
    }


def efficiency(
    info: Mapping[str, Any], records: list[dict[str, Any]], warmup: int
) -> dict[str, float]:
    """Achieved TFLOP/s and MFU over the timed epochs (:mod:`clusterbench.records.flops`): all
    but the first ``warmup`` and a time box's partial one, as :func:`timing`'s."""
    found = flops.efficiency(info, [r for r in records[warmup:] if "partial" not in r])
    return {"tflops": found["tflops"], "mfu": found["mfu"]}


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
