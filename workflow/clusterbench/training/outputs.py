"""Rank 0's writer of a run's outputs in ``results/runs/RUN/``: checkpoints, ``metrics.jsonl``,
TensorBoard events, ``run.json``, ``model.pt`` (last), then the run's checkpoints go.

* A checkpoint (:mod:`clusterbench.training.checkpoints`) at every epoch's end and at a preemption,
  keeping the newest ``checkpoints.keep`` of the run's training slice.
* ``metrics.jsonl``: the state's records, one JSON object per epoch, rewritten atomically.
* TensorBoard events go to ``.tensorboard.partial/`` first and are renamed to ``tensorboard/``
  at the end.
* A start removes an earlier attempt's ``model.pt`` (the done marker) first. Started afresh,
  it drops unfinished TensorBoard events; continuing from a checkpoint, it keeps that
  checkpoint's metrics and drops the events logged after it.
* ``checksums.json`` last: the size and sha256 of ``run.json``, ``metrics.jsonl`` and
  ``model.pt`` (:data:`clusterbench.core.integrity.RUN_FILES`), which the workflow checks before
  a job reads them.

Where the records' fields are made: a checkpoint's in :meth:`Outputs.checkpoint`; a line of
``metrics.jsonl`` by :func:`clusterbench.training.record.epoch_record` (the loop adds the
step-time breakdown, ``step_seconds``, and an elastic run's ``world_sizes``, ``resets`` and
``worker_jobs``); ``run.json`` (``run``, ``experiment``, ``world``, ``effective``,
``step_work``, ``throughput``, ``provenance``, ``data``, ...) and ``model.pt`` (``arch``,
``state_dict``, the data's normalisation) by ``Trainer.finish`` in
:mod:`clusterbench.training.loop`. They are read back by :mod:`clusterbench.records.runs`;
``model.pt`` loads with ``torch.load(..., weights_only=True)`` and
:func:`clusterbench.models.build_model` rebuilds its network.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterbench.core import integrity
from clusterbench.core.atomic import atomic_path, write_json, write_text
from clusterbench.training import checkpoints
from clusterbench.training.device import node_name
from clusterbench.training.state import Partial

#: Where TensorBoard events are written during training; renamed to ``tensorboard/`` at the end.
TB_PARTIAL = ".tensorboard.partial"
#: The TensorBoard scalars of each epoch: tag -> key of the epoch's record.
TB_SCALARS = {
    "loss/train": "train_loss",
    "loss/val": "val_loss",
    "accuracy/val": "val_accuracy",
    "throughput/images_per_second": "images_per_second",
    "throughput/epoch_seconds": "epoch_seconds",
    "lr": "lr",
}


def cpu_state(model: Any) -> dict[str, Any]:
    """The model's weights and buffers, on the CPU."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


class Outputs:
    """Rank 0's writer (module docstring). ``records`` are the metrics the run starts from
    (a checkpoint's, or none), ``resumed`` whether it continues from a checkpoint, ``code``
    your own model's code digest (kept with each checkpoint; None: a built-in model), ``data``
    the identity of the data it trains on (kept with each checkpoint)."""

    def __init__(
        self,
        out_dir: Path,
        run: Mapping[str, Any],
        records: list[dict],
        resumed: bool,
        keep: int,
        code: str | None = None,
        data: str | None = None,
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.out_dir, self.run = Path(out_dir), dict(run)
        self.ckpt_dir = checkpoints.slice_dir(out_dir, run)
        self.keep = keep  # checkpoints.keep
        self.code = code
        self.data = data  # the data's identity (clusterbench.data.source.identity)
        #: your own loss's and optimiser's code digest, kept with each checkpoint (None: none)
        self.training_code: str | None = None
        (self.out_dir / "model.pt").unlink(missing_ok=True)  # the done marker goes first
        partial, final = self.out_dir / TB_PARTIAL, self.out_dir / "tensorboard"
        if not resumed:
            shutil.rmtree(partial, ignore_errors=True)
        elif final.is_dir() and not partial.exists():  # the events of a finished earlier try
            os.replace(final, partial)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.tb = SummaryWriter(log_dir=str(partial), purge_step=len(records) + 1)
        self.write_metrics(records)  # what the checkpoint holds, nothing logged after it

    def checkpoint(
        self, state: Any, position: checkpoints.Position, ranks: list[dict[str, Any]]
    ) -> Path:
        """A checkpoint of ``state`` (:mod:`clusterbench.training.state`) at ``position``, with
        each rank's own state (``ranks``: its RNG and, within a stretch of steps, its
        :class:`~clusterbench.training.state.Partial` sums)."""
        path = checkpoints.save(
            self.ckpt_dir,
            position,
            {
                "model": cpu_state(state.model),
                "optimizer": state.optimizer.state_dict(),
                "epoch": position.epoch,
                "config": self.run,
                "model_code": self.code,
                "data": self.data,
                "training_code": self.training_code,
                "metrics": list(state.records),
                "train_seconds": state.train_seconds,
                "place": state.place.as_dict(),
                "resets": list(state.resets),
                "timeline": list(getattr(state, "timeline", [])),
                "ranks": ranks,
            },
        )
        # only the newest `keep`: a long run must not fill the disk with one file per epoch
        checkpoints.prune(self.ckpt_dir, self.keep)
        return path

    def epoch(self, state: Any, ranks: list[dict[str, Any]]) -> None:
        """The epoch ``state.records[-1]`` has ended: its checkpoint, metrics and events."""
        record = state.records[-1]
        self.checkpoint(state, checkpoints.Position(record["epoch"]), ranks)
        self.record(state.records)

    def record(self, records: list[dict[str, Any]]) -> None:
        """``records`` in metrics.jsonl, and the last one's events (an epoch's, or a partial
        one's, which the time box stopped: its checkpoint written before)."""
        record = records[-1]
        self.write_metrics(records)
        for tag, key in TB_SCALARS.items():
            if record.get(key) is not None:
                self.tb.add_scalar(tag, record[key], record["epoch"])
        self.tb.flush()

    def write_metrics(self, records: list[dict[str, Any]]) -> None:
        write_text(
            self.out_dir / "metrics.jsonl",
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in records),
        )

    def finish(self, summary: dict[str, Any], model_file: dict[str, Any]) -> None:
        """``run.json`` (``summary``: the world, the effective settings, the epochs, times and
        provenance), then ``model.pt``, last; then the checkpoints go."""
        import torch

        self.tb.close()
        final_tb = self.out_dir / "tensorboard"
        shutil.rmtree(final_tb, ignore_errors=True)
        os.replace(self.out_dir / TB_PARTIAL, final_tb)
        write_json(
            self.out_dir / "run.json",
            {
                "run": {k: v for k, v in self.run.items() if k != "experiment"},
                # where an expanded run came from (clusterbench.config.experiments); null: by hand
                "experiment": self.run.get("experiment"),
                # the cluster it ran on: the config's `site`, else the scheduler's name for it
                "site": os.environ.get("CLUSTERBENCH_SITE") or node_name(),
                **summary,
            },
        )
        with atomic_path(self.out_dir / "model.pt") as tmp:
            torch.save(model_file, tmp)
        # last: the workflow checks run.json, metrics.jsonl and model.pt against it before use
        integrity.write_checksums(self.out_dir, integrity.RUN_FILES)
        checkpoints.remove_all(self.out_dir)  # only now: the run is complete


def rank_entry(rng: dict[str, Any], partial: Partial | None) -> dict[str, Any]:
    """One rank's part of a checkpoint: its RNG state and its own sums (None at an epoch's
    end, where every sum is in the place)."""
    return {"rng": rng, "partial": None if partial is None else vars(partial).copy()}
