"""What a training records: each epoch's metrics (``metrics.jsonl``), and in ``run.json`` the
world it trained in and the provenance every rank saw where it ran.

``run.json``'s ``provenance`` is what every rank saw (host, CPU, GPUs and driver, package
versions, git commit), gathered once per world (re)start and written by rank 0, one entry per
host (:func:`rank_provenance`, :func:`clusterbench.core.provenance.merge_ranks`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterbench.core.priority_changes import PriorityFileError, changes_of_job
from clusterbench.data.order import global_batches
from clusterbench.training.device import node_name, scheduler_name
from clusterbench.training.schedule import global_batch_size
from clusterbench.training.state import Place


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def epoch_record(
    run: Mapping[str, Any],
    epoch: int,
    place: Place,
    seconds: float,
    validation: tuple[float, float],
    world_size: int,
    data: Any,
) -> dict[str, Any]:
    """The metrics of epoch ``epoch`` (1-based): ``place`` holds its summed loss and samples
    (``images``), ``seconds`` its training time (device synchronised), ``validation`` (loss,
    accuracy, per unit). A language model's (``data.task``) adds ``tokens_per_second`` and
    ``val_perplexity``."""
    val_loss, val_accuracy = validation
    units = place.images * data.units_per_sample
    record = {
        "epoch": epoch,
        "train_loss": place.loss_sum / units,
        "val_loss": val_loss,
        "val_accuracy": val_accuracy,
        "epoch_seconds": seconds,
        "images_per_second": place.images / seconds,
        "workers": world_size,
        "world_size": world_size,
        "global_batch": global_batch_size(run),
        "lr": place.lr,
        "time": now_iso(),
    }
    if data.task == "language-model":
        record["tokens_per_second"] = units / seconds
        record["val_perplexity"] = math.exp(min(val_loss, 700.0))
    return record


def time_box_record(
    run: Mapping[str, Any], records: list[Mapping[str, Any]], train_seconds: float
) -> dict[str, Any]:
    """run.json's ``time_box`` of a run with ``minutes``: the box and the time it used
    (``used_seconds``: ``train_seconds``), and where it stopped (``partial``: within an epoch,
    ``{"epoch", "steps", "of"}``; None: at an epoch's end, or not by the box). Nothing
    without a box."""
    if run.get("minutes") is None:
        return {}
    last = records[-1] if records else {}
    part = last.get("partial")
    where = {"epoch": last["epoch"], **part} if part else None
    box = {"seconds": 60 * float(run["minutes"]), "used_seconds": train_seconds, "partial": where}
    return {"time_box": box}


def epoch_line(record: Mapping[str, Any]) -> str:
    """Rank 0's log line at an epoch's end (a language model's rate in tokens/s)."""
    if "tokens_per_second" in record:
        rate = f"{record['tokens_per_second']:.0f} tokens/s"
    else:
        rate = f"{record['images_per_second']:.0f} images/s"
    return (
        f"train: epoch {record['epoch']}: loss {record['train_loss']:.4f}, "
        f"val loss {record['val_loss']:.4f}, val accuracy {record['val_accuracy']:.4f}, "
        f"{record['epoch_seconds']:.2f} s, {rate}, lr {record['lr']:.4g}"
    )


def rank_provenance(rank: int, local_rank: int, device: Any) -> dict[str, Any]:
    """This rank's provenance facts (:func:`clusterbench.core.provenance.rank_facts`; the git state
    from one rank per node) and the name of the GPU it trains on (None on the CPU)."""
    import torch

    from clusterbench.core import provenance

    facts = provenance.rank_facts(rank, node_name(), with_git=local_rank == 0)
    cuda = torch.device(device).type == "cuda"
    facts["device_name"] = torch.cuda.get_device_name(device) if cuda else None
    return facts


def run_provenance(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """``run.json``'s ``provenance`` from every rank's :func:`rank_provenance`, dated now."""
    from clusterbench.core import provenance

    return {**provenance.merge_ranks(facts), "date": provenance.now()}


def world_record(
    backend: str, size: int, device: Any, facts: list[dict[str, Any]]
) -> dict[str, Any]:
    """run.json's ``world``: the ranks, hosts and devices the run trained on."""
    return {
        "size": size,
        "hosts": list(dict.fromkeys(f["node"] for f in facts)),
        "device": device.type,
        "gpus": size if device.type == "cuda" else 0,
        "gpu_names": sorted({f["device_name"] for f in facts if f["device_name"]}),
        "scheduler": scheduler_name(),
        "backend": backend,
    }


#: Where a network setting came from, in run.json's words: the launcher's flag is the config's
#: run key where the run sets it (the train rule passes it so).
ORIGIN_WORDS = {
    "--iface": "--iface",
    "--log-level": "--log-level",
    "CLUSTERBENCH_IFACE": "$CLUSTERBENCH_IFACE",
    "CLUSTERBENCH_LOG_LEVEL": "$CLUSTERBENCH_LOG_LEVEL",
}


def network_record(run: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """run.json's ``network``: the interface the ranks talk over and the communication log
    level, each with where it came from (``config``: the run's ``iface`` / ``log_level``; the
    launcher's flag given by hand; its environment variable; null: the launcher chose the
    interface, the libraries' default level), and the variables the libraries read
    (:func:`clusterbench.core.rank_env.network_facts`)."""
    from clusterbench.core.rank_env import network_facts

    facts = network_facts(env)
    for key in ("iface", "log_level"):
        came = facts[f"{key}_from"]
        config = came is not None and came.startswith("--") and run.get(key) == facts[key]
        facts[f"{key}_from"] = "config" if config else ORIGIN_WORDS.get(came, came)
    return facts


def step_work_record(
    model: Any, data: Any, run: Mapping[str, Any], size: int, max_steps: int | None
) -> dict[str, Any]:
    """run.json's ``step_work``: the values each step's gradient allreduce carries (the model's
    trainable parameters) and the optimiser steps of an epoch at the final world size: the
    report's scaling model turns epoch times into step times and gradients into bytes."""
    steps = len(global_batches(data.train_size, global_batch_size(run), size))
    return {
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "steps_per_epoch": steps if max_steps is None else min(steps, max_steps),
    }


def throughput_summary(records: list[Mapping[str, Any]], device_type: str) -> dict[str, Any] | None:
    """run.json's ``throughput``: Horovod's synthetic benchmark's summary of the run, over its
    timed epochs (every epoch after the first; the only one of a 1-epoch run), as Horovod
    computes it over its timed iterations: the mean per device (rank) of each epoch's rate
    over its workers, ``+-`` 1.96 times their standard deviation (``numpy.std``: the population
    sd), and the total on the final world's devices. The rate is images/s, or a language
    model's tokens/s. ``lines``: what rank 0 prints (:func:`throughput_lines`). None without
    epochs."""
    if not records:
        return None
    whole = [r for r in records if "partial" not in r] or list(records)  # a box's partial: no
    timed = list(whole[1:] if len(whole) > 1 else whole)  # epoch's time, unless it is all
    key = "tokens_per_second" if "tokens_per_second" in timed[0] else "images_per_second"
    per_device = [float(r[key]) / int(r["workers"]) for r in timed]
    mean = statistics.fmean(per_device)
    ci95 = 1.96 * statistics.pstdev(per_device)
    devices = int(records[-1]["workers"])
    summary = {
        "unit": key.replace("_per_second", "/s"),
        "device": "GPU" if device_type == "cuda" else "CPU worker",
        "devices": devices,
        "per_device": mean,
        "per_device_ci95": ci95,
        "total": devices * mean,
        "total_ci95": devices * ci95,
        "timed_epochs": [int(r["epoch"]) for r in timed],
    }
    return {**summary, "lines": throughput_lines(summary)}


def throughput_lines(summary: Mapping[str, Any]) -> list[str]:
    """Horovod's two summary lines (``pytorch_synthetic_benchmark.py``'s format):
    ``Img/sec per GPU: 123.4 +-5.6`` and ``Total img/sec on 2 GPU(s): 246.8 +-11.2``; on the
    CPU "per CPU worker", for a language model "Tokens/sec"."""
    what = "Tokens" if summary["unit"] == "tokens/s" else "Img"
    device, n = summary["device"], summary["devices"]
    return [
        f"{what}/sec per {device}: {summary['per_device']:.1f} +-{summary['per_device_ci95']:.1f}",
        f"Total {what.lower()}/sec on {n} {device}(s): {summary['total']:.1f} "
        f"+-{summary['total_ci95']:.1f}",
    ]


def priority_record(out_dir: Path) -> dict[str, Any]:
    """run.json's ``priority``: the changes ``python -m clusterbench.priority`` made to the job
    this training ran in (the run's lock file names it) while it was queued or trained
    (:mod:`clusterbench.core.priority_changes`), and the priority it was ``submitted`` with
    (the first change's ``from``; None without a change: the priority is no training setting)."""
    try:
        holder = json.loads((out_dir / "train.lock").read_text()).get("holder") or {}
    except (OSError, ValueError, AttributeError):
        holder = {}  # no lock (a launch without --lock): no job to match changes to
    try:
        changes = changes_of_job(out_dir, holder.get("job"))
    except PriorityFileError as exc:
        print(f"train: warning: the run's priority changes are left out of run.json: {exc}")
        changes = []
    return {"submitted": changes[0]["from"] if changes else None, "changes": changes}
