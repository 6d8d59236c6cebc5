"""What a training records: each epoch's metrics (``metrics.jsonl``), and in ``run.json`` the
world it trained in and the provenance every rank saw where it ran.

``run.json``'s ``provenance`` is what every rank saw (host, CPU, GPUs and driver, package
versions, git commit), gathered once per world (re)start and written by rank 0, one entry per
host (:func:`rank_provenance`, :func:`clusterbench.core.provenance.merge_ranks`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

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


def epoch_line(record: Mapping[str, Any]) -> str:
    """Rank 0's log line at an epoch's end."""
    return (
        f"train: epoch {record['epoch']}: loss {record['train_loss']:.4f}, "
        f"val loss {record['val_loss']:.4f}, val accuracy {record['val_accuracy']:.4f}, "
        f"{record['epoch_seconds']:.2f} s, {record['images_per_second']:.0f} images/s, "
        f"lr {record['lr']:.4g}"
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
