"""Stage 3: data-parallel training, one process per worker, under Horovod or DDP.

```
python scripts/train.py --data-dir results/data/NAME --run JSON --out-dir results/runs/RUN
```

Runs unchanged under every scheduler (local, Slurm, SGE) and whatever starts its ranks
(``clusterbench-launch``, ``horovodrun``, or plain ``python`` for a single worker). Everything
distributed goes through the run's ``backend`` (:mod:`clusterbench.dist`: ``horovod`` or
``ddp``); this module has no backend branches.

* Batch and LR convention (``batch_scaling``):
  - ``global`` (default): ``batch_size`` is the global batch, split over the workers (the
    remainder going to the first ranks), and ``lr`` is the rate for that global batch, not
    rescaled by the worker count: runs that differ only in ``workers`` solve the same
    optimisation problem, up to the order of floating-point sums.
  - ``per_worker`` (Horovod's convention): ``batch_size`` per worker, a global batch of
    ``batch_size * workers``, and an LR of ``lr * workers`` reached by a linear per-step warm-up
    over ``warmup_epochs``.
  Each rank scales its summed loss by ``workers / global_batch``, so the gradient the backend
  averages is exactly the global-batch mean gradient, whatever each rank's share. A last global
  batch smaller than the number of workers is dropped.
* Shuffling: one permutation per epoch from ``numpy.random.default_rng([seed, epoch])``,
  identical on every rank.
* BatchNorm across workers follows ``bn`` (:mod:`clusterbench.syncbn`): ``aggregate`` (default;
  running statistics combined after each step in one collective), ``sync`` or ``local``.
* Device: ``gpus_per_node: 0`` trains on the CPU even where a GPU is visible; ``gpus_per_node
  > 0`` needs a usable CUDA GPU (else a clear error naming the run, before any training) and
  uses the GPU of the rank's local rank. ``deterministic: false`` lets cuDNN autotune;
  ``true`` asks for deterministic algorithms. ``precision: bf16`` trains under autocast;
  ``channels_last`` uses that memory format. The data sets stay resident on the device.
* Timing: each epoch's clock stops after the device is synchronised. ``metrics.jsonl`` holds
  every epoch; the report excludes warm-up epochs from its averages.
* Progress: rank 0 logs ``train: epoch E step S/N (P%), R images/s, ETA T s`` lines within an
  epoch, at most every ``PROGRESS_INTERVAL`` (10) seconds and at least once per epoch, from its
  host clock (no synchronisation), then one summary line per epoch.
* Validation is sharded over the ranks; loss and counts are summed over them.
* Stops after ``epochs`` epochs or after the epoch during which ``minutes`` ran out, whichever
  comes first (rank 0 decides, every rank follows).
* Rank 0 alone writes a checkpoint (:mod:`clusterbench.checkpoints`: keeping the newest
  ``checkpoints.keep`` of the run's training slice), ``metrics.jsonl`` and TensorBoard events
  each epoch, then ``run.json`` and ``model.pt``, and only then deletes the checkpoints.
  TensorBoard events go to ``.tensorboard.partial/`` first and are renamed to ``tensorboard/``
  at the end.
* ``run.json``'s ``provenance`` is what every rank saw where it ran (host, CPU, GPUs and
  driver, package versions, git commit), gathered once before training and written by rank 0,
  one entry per host (:func:`rank_provenance`, :func:`clusterbench.provenance.merge_ranks`).
* Resume, always: a start continues from the newest intact checkpoint made for the same
  training slice (others are passed over, with the reason in the log). The epoch-keyed
  shuffling and LR schedule, and each rank's saved RNG and partial sums, make the result
  identical to an uninterrupted run, weights and ``metrics.jsonl`` alike.
* Preemption (:mod:`clusterbench.preemption`): on a warning signal (SIGUSR1) the ranks agree
  at the next check (every ``checkpoints.preemption_check_steps`` steps, and each epoch's end),
  rank 0 writes a checkpoint at that step, and every rank exits with
  ``EXIT_PREEMPTED`` (75); running the same command again continues from there.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from clusterbench import checkpoints, preemption
from clusterbench.atomic import atomic_path, write_json, write_text
from clusterbench.config import ConfigError, bad_settings, is_elastic, stage_params
from clusterbench.evaluate import SplitData, load_split

if TYPE_CHECKING:
    from clusterbench.dist.base import Runtime

#: Validation batch size (per rank); inference only, so larger than any training batch.
EVAL_BATCH = 1024
#: Where TensorBoard events are written during training; renamed to ``tensorboard/`` at the end.
TB_PARTIAL = ".tensorboard.partial"
#: Seconds between two progress lines of rank 0 within an epoch (see :func:`progress_due`).
PROGRESS_INTERVAL = 10.0


# --------------------------------------------------------------------------------------------
# Pure helpers: batch split, shuffling, learning-rate schedule


def shard_sizes(global_batch: int, workers: int) -> list[int]:
    """Samples of a global batch per rank: ``B // W``, plus one for the first ``B % W`` ranks."""
    if workers < 1 or global_batch < 0:
        raise ValueError(f"need workers >= 1 and global_batch >= 0, got {workers}, {global_batch}")
    base, extra = divmod(global_batch, workers)
    return [base + (1 if r < extra else 0) for r in range(workers)]


def shard_bounds(global_batch: int, workers: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous share of a global batch (:func:`shard_sizes`)."""
    sizes = shard_sizes(global_batch, workers)
    start = sum(sizes[:rank])
    return start, start + sizes[rank]


def global_batches(n: int, batch_size: int, workers: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each global batch over ``n`` samples; a last batch smaller than
    ``workers`` is dropped so that every rank gets at least one sample per step."""
    return [
        (start, min(start + batch_size, n))
        for start in range(0, n, batch_size)
        if min(start + batch_size, n) - start >= workers
    ]


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of ``epoch``: reproducible from ``(seed, epoch)``, equal on every rank."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def global_batch_size(run: Mapping[str, Any]) -> int:
    """Images per optimiser step over all workers, under the run's ``batch_scaling``."""
    if run["batch_scaling"] == "per_worker":
        return run["batch_size"] * run["workers"]
    return run["batch_size"]


def lr_scale(run: Mapping[str, Any]) -> int:
    """Factor from ``lr`` to the effective LR: ``workers`` under ``per_worker``, else 1."""
    return run["workers"] if run["batch_scaling"] == "per_worker" else 1


def effective_settings(run: Mapping[str, Any]) -> dict[str, Any]:
    """What the run's convention makes of its settings (recorded in run.json)."""
    return {
        "batch_scaling": run["batch_scaling"],
        "global_batch": global_batch_size(run),
        "per_worker_batch": shard_sizes(global_batch_size(run), run["workers"]),
        "lr": run["lr"] * lr_scale(run),
    }


def learning_rate(
    base_lr: float, scale: int, warmup_epochs: float, epoch: int, step: int, steps_per_epoch: int
) -> float:
    """LR of ``step`` (0-based) in ``epoch`` (0-based): linear warm-up from ``base_lr`` to
    ``base_lr * scale`` over ``warmup_epochs`` epochs, then constant (``scale`` 1: constant)."""
    target = base_lr * scale
    if warmup_epochs <= 0 or scale == 1:
        return target
    progress = min(1.0, (epoch + step / steps_per_epoch) / warmup_epochs)
    return base_lr + (target - base_lr) * progress


def progress_due(
    now: float,
    last: float,
    step: int,
    steps: int,
    printed: bool,
    interval: float = PROGRESS_INTERVAL,
) -> bool:
    """Whether rank 0 logs a progress line after ``step`` of the epoch's ``steps`` (1-based):
    once ``interval`` seconds have passed since ``last`` (its previous line, or the epoch's
    start), and after the last step of an epoch that has ``printed`` no line yet."""
    return now - last >= interval or (step == steps and not printed)


def progress_line(epoch: int, step: int, steps: int, images: int, seconds: float) -> str:
    """``images`` trained (all ranks) in the ``seconds`` of the ``epoch``'s first ``step`` steps
    (1-based), as one log line: the rate and the epoch's ETA at that rate."""
    rate = images / seconds if seconds > 0 else 0.0
    eta = seconds * (steps - step) / step
    return (
        f"train: epoch {epoch} step {step}/{steps} ({100 * step // steps}%), "
        f"{rate:.0f} images/s, ETA {eta:.0f} s"
    )


# --------------------------------------------------------------------------------------------
# Input checks (all before any Horovod work)


def validate_run(run: str | dict[str, Any]) -> dict[str, Any]:
    """The ``--run`` slice (JSON text or object), checked against the config schema's run
    settings (:func:`clusterbench.config.stage_params`); names each bad key."""
    return stage_params("train", run, what="--run")


@dataclass(frozen=True)
class TrainData:
    train: SplitData
    val: SplitData

    @property
    def meta(self) -> dict[str, Any]:
        return self.train.meta


def load_data(data_dir: Path, run: Mapping[str, Any]) -> TrainData:
    """Load and check ``meta.json`` and the train/val arrays of a preprocessed data dir."""
    train, val = load_split(data_dir, "train"), load_split(data_dir, "val")
    meta, where = train.meta, data_dir / "meta.json"
    missing = [k for k in ("dataset", "mean", "std") if k not in meta]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}")
    if meta["dataset"] != run["dataset"]:
        raise ValueError(
            f"{where}: dataset {meta['dataset']!r}, but run.dataset={run['dataset']!r}"
        )
    channels = meta["image_shape"][2]
    for key in ("mean", "std"):
        if len(meta[key]) != channels:
            raise ValueError(f"{where}: {key} has {len(meta[key])} values for {channels} channels")
    if any(s <= 0 for s in meta["std"]):
        raise ValueError(f"{where}: std {meta['std']} has a value <= 0")
    if len(train.y) < run["workers"]:
        raise ValueError(
            f"{data_dir}: {len(train.y)} training samples cannot feed workers={run['workers']}"
        )
    return TrainData(train=train, val=val)


# --------------------------------------------------------------------------------------------
# Training


@dataclass
class _Context:
    """What every training step needs: the runtime, the run, the model and the device data."""

    rt: Runtime
    run: dict[str, Any]
    device: Any
    model: Any  # the network itself (saved)
    net: Any  # what is called in training (the backend's wrapper around ``model``)
    optimizer: Any
    train_x: Any
    train_y: Any
    val_x: Any
    val_y: Any
    mean: Any
    std: Any

    @property
    def workers(self) -> int:
        return self.rt.size

    def inputs(self, images: Any) -> Any:
        """uint8 NHWC images on the device -> the normalised network input."""
        from clusterbench.models import normalize_images

        x = normalize_images(images, self.mean, self.std)
        # normalize_images permutes NHWC to NCHW: that view already is channels_last in memory
        return x if self.run["channels_last"] else x.contiguous()

    def autocast(self) -> Any:
        import torch

        return torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.run["precision"] == "bf16"
        )

    def synchronize(self) -> None:
        """Wait for the device's queued work (the clock must not stop before it)."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class DeviceError(ConfigError):
    """The run asks for a device this machine cannot give it."""


def _rng_state() -> dict[str, Any]:
    """This process's torch random state (CPU, and the current CUDA device's if any)."""
    import torch

    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _cpu_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def check_device(run: Mapping[str, Any]) -> str:
    """The device type the run asks for: ``cpu`` for ``gpus_per_node: 0`` (even where a GPU is
    visible), ``cuda`` otherwise; :class:`DeviceError` when no usable GPU is there."""
    if run["gpus_per_node"] == 0:
        return "cpu"
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise DeviceError(
            f"run {run['name']!r} asks for gpus_per_node={run['gpus_per_node']}, but "
            f"{node_name()} has no usable CUDA GPU (torch.cuda.is_available() is False"
            + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
            + f", torch {torch.__version__}): not training it on the CPU instead"
        )
    return "cuda"


def setup_device(run: Mapping[str, Any], device_type: str, local_rank: int, local_size: int):
    """The rank's device (the GPU of its local rank, modulo the visible GPUs), with the run's
    determinism and the CPU threads set."""
    import torch

    if run["deterministic"]:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by cuBLAS
        torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = bool(run["deterministic"])
    torch.backends.cudnn.benchmark = not run["deterministic"]
    if device_type == "cuda":
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    torch.set_num_threads(cpu_threads(local_size))
    return torch.device("cpu")


def cpu_threads(local_size: int, env: Mapping[str, str] = os.environ) -> int:
    """Torch threads of one rank: the CPUs it may use, shared among the node's ranks.

    ``OMP_NUM_THREADS`` only caps the node's total: Snakemake sets it to the whole job's
    ``threads``, and taking it per rank oversubscribed a 2-core machine 2x and made 2-worker
    training about 18x slower (measured with the 2-worker trainer on the digits).
    """
    cpus = len(os.sched_getaffinity(0))
    if env.get("OMP_NUM_THREADS", "").isdigit():
        cpus = min(cpus, int(env["OMP_NUM_THREADS"]))
    return max(1, cpus // local_size)


def node_name() -> str:
    """The scheduler's name for this node (HOROVOD_HOSTNAME): several may share one machine.
    A local elastic launch's slot hosts (``<host>-slot<i>``) are their host."""
    name = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())
    if os.environ.get("CLUSTERBENCH_SCHEDULER") == "local":
        from clusterbench.launch.schedulers.local import SLOT_HOST

        m = SLOT_HOST.fullmatch(name)
        name = m.group("host") if m else name
    return name


def rank_provenance(rank: int, local_rank: int, device: Any) -> dict[str, Any]:
    """This rank's provenance facts (:func:`clusterbench.provenance.rank_facts`; the git state
    from one rank per node) and the name of the GPU it trains on (None on the CPU)."""
    import torch

    from clusterbench import provenance

    facts = provenance.rank_facts(rank, node_name(), with_git=local_rank == 0)
    cuda = torch.device(device).type == "cuda"
    facts["device_name"] = torch.cuda.get_device_name(device) if cuda else None
    return facts


def run_provenance(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """``run.json``'s ``provenance`` from every rank's :func:`rank_provenance`, dated now."""
    from clusterbench import provenance

    return {**provenance.merge_ranks(facts), "date": provenance.now()}


def _scheduler() -> str:
    """Whose allocation the ranks ran in: the scheduler clusterbench-launch exports to them
    (local, slurm, sge); else "gloo" (another Gloo launcher started them) or "none"."""
    name = os.environ.get("CLUSTERBENCH_SCHEDULER", "auto")
    if name != "auto":
        return name
    return "gloo" if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ else "none"


class Outputs:
    """Rank 0's writer: checkpoints, ``metrics.jsonl``, TensorBoard events, ``run.json``,
    ``model.pt`` (last), then the run's checkpoints go.

    A start removes an earlier attempt's ``model.pt`` (the done marker) first. Started afresh,
    it drops unfinished TensorBoard events; continuing from ``resume`` (a checkpoint), it keeps
    that checkpoint's metrics and drops the events logged after it.
    """

    def __init__(
        self, out_dir: Path, run: dict[str, Any], resume: dict[str, Any] | None, keep: int
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.out_dir, self.run = out_dir, run
        self.ckpt_dir = checkpoints.slice_dir(out_dir, run)
        self.keep = keep  # checkpoints.keep
        (out_dir / "model.pt").unlink(missing_ok=True)  # the done marker goes first
        partial, final = out_dir / TB_PARTIAL, out_dir / "tensorboard"
        if resume is None:
            shutil.rmtree(partial, ignore_errors=True)
        elif final.is_dir() and not partial.exists():  # the events of a finished earlier try
            os.replace(final, partial)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.records: list[dict[str, Any]] = list(resume["metrics"]) if resume else []
        self.train_seconds = resume["train_seconds"] if resume else 0.0
        self.tb = SummaryWriter(log_dir=str(out_dir / TB_PARTIAL), purge_step=len(self.records) + 1)
        self._write_metrics()  # what the checkpoint holds, nothing an earlier try logged after it

    def checkpoint(
        self,
        position: checkpoints.Position,
        model: Any,
        optimizer: Any,
        train_seconds: float,
        ranks: list[dict[str, Any]],
        epoch_seconds: float = 0.0,
        elastic: dict[str, Any] | None = None,
    ) -> Path:
        """A checkpoint at ``position``: the weights, optimiser, metrics so far, and each
        rank's state (``ranks``: its RNG and, within an epoch, its partial sums)."""
        path = checkpoints.save(
            self.ckpt_dir,
            position,
            {
                "model": _cpu_state(model),
                "optimizer": optimizer.state_dict(),
                "epoch": position.epoch,
                "config": self.run,
                "metrics": list(self.records),
                "train_seconds": train_seconds,
                "epoch_seconds": epoch_seconds,  # within an epoch: its training time so far
                "ranks": ranks,
                # an elastic run's place within the epoch, summed over the ranks (any world size)
                "elastic": elastic,
            },
        )
        # only the newest `keep`: a long run must not fill the disk with one file per epoch
        checkpoints.prune(self.ckpt_dir, self.keep)
        return path

    def epoch(
        self,
        record: dict[str, Any],
        model: Any,
        optimizer: Any,
        train_seconds: float,
        ranks: list[dict[str, Any]],
    ) -> None:
        self.records.append(record)
        where = checkpoints.Position(record["epoch"])
        self.checkpoint(where, model, optimizer, train_seconds, ranks)
        self._write_metrics()
        for tag, key in (
            ("loss/train", "train_loss"),
            ("loss/val", "val_loss"),
            ("accuracy/val", "val_accuracy"),
            ("throughput/images_per_second", "images_per_second"),
            ("throughput/epoch_seconds", "epoch_seconds"),
            ("lr", "lr"),
        ):
            self.tb.add_scalar(tag, record[key], record["epoch"])
        self.tb.flush()

    def _write_metrics(self) -> None:
        write_text(
            self.out_dir / "metrics.jsonl",
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records),
        )

    def finish(
        self,
        world: dict[str, Any],
        effective: dict[str, Any],
        train_seconds: float,
        model_file: dict,
        provenance: dict[str, Any],
    ) -> None:
        import torch

        self.tb.close()
        final_tb = self.out_dir / "tensorboard"
        shutil.rmtree(final_tb, ignore_errors=True)
        os.replace(self.out_dir / TB_PARTIAL, final_tb)
        write_json(
            self.out_dir / "run.json",
            {
                "run": {k: v for k, v in self.run.items() if k != "experiment"},
                # where an expanded run came from (clusterbench.experiments); null: by hand
                "experiment": self.run.get("experiment"),
                # the cluster it ran on: the config's `site`, else the scheduler's name for it
                "site": os.environ.get("CLUSTERBENCH_SITE") or node_name(),
                "world": world,
                "effective": effective,
                "epochs_completed": len(self.records),
                "train_seconds": train_seconds,
                "versions": provenance["versions"],  # rank 0's, as before provenance existed
                "provenance": provenance,
            },
        )
        with atomic_path(self.out_dir / "model.pt") as tmp:
            torch.save(model_file, tmp)
        checkpoints.remove_all(self.out_dir)  # only now: the run is complete


@dataclass
class EpochProgress:
    """One rank's way through an epoch: enough to continue it exactly where it stopped."""

    step: int = 0  # optimiser steps done
    loss_sum: float = 0.0  # this rank's summed training loss so far (float64)
    first_bad: int = -1  # this rank's first step with a non-finite loss (-1: none)
    images: int = 0  # images of the global batches done
    lr: float = 0.0  # the last step's learning rate
    stopped: bool = False  # stopped early: the ranks agreed on a preemption warning


def epoch_steps(ctx: _Context, max_steps: int | None) -> int:
    """The optimiser steps of one epoch at the current world size."""
    steps = len(global_batches(len(ctx.train_y), global_batch_size(ctx.run), ctx.workers))
    return steps if max_steps is None else min(steps, max_steps)


def _run_epoch(
    ctx: _Context,
    epoch: int,
    max_steps: int | None,
    progress: EpochProgress,
    check_every: int,
    stop_at: int | None = None,
) -> EpochProgress:
    """The training pass of an epoch from ``progress.step`` on; returns where it ended: at the
    epoch's end (the loss summed over the ranks), at step ``stop_at`` (an elastic commit; this
    rank's own sums), or (``stopped``) at the first check, every ``check_every`` steps, at which
    a rank had been warned of preemption (:mod:`clusterbench.preemption`).

    The step has no host synchronisation of its own: the loss is summed on the device and read
    once per epoch. Rank 0 logs progress (:func:`progress_due`) from its host clock alone: no
    collective, no device synchronisation, no loss (reading it would wait for the device); on a
    GPU its rate is approximate, the host running a little ahead of the device.
    """
    import torch
    import torch.nn.functional as F

    run, workers, rank = ctx.run, ctx.workers, ctx.rt.rank
    order = torch.from_numpy(epoch_permutation(len(ctx.train_y), run["seed"], epoch))
    order = order.to(ctx.device)
    batches = global_batches(len(ctx.train_y), global_batch_size(run), workers)
    if max_steps is not None:
        batches = batches[:max_steps]
    scale = lr_scale(run)
    ctx.net.train()
    loss_sum = torch.full((), progress.loss_sum, dtype=torch.float64, device=ctx.device)
    # the first step whose loss is not finite (-1: none), tracked on the device: no sync
    first_bad = torch.full((), progress.first_bad, dtype=torch.int64, device=ctx.device)
    lr, images, stopped = progress.lr or run["lr"], progress.images, False
    started = last = time.monotonic() if rank == 0 else 0.0
    printed, done = False, progress.step
    end = len(batches) if stop_at is None else min(stop_at, len(batches))
    for step in range(progress.step, end):
        start, stop = batches[step]
        lr = learning_rate(run["lr"], scale, run["warmup_epochs"], epoch, step, len(batches))
        for group in ctx.optimizer.param_groups:
            group["lr"] = lr
        lo, hi = shard_bounds(stop - start, workers, rank)
        idx = order[start + lo : start + hi]
        with ctx.autocast():
            logits = ctx.net(ctx.inputs(ctx.train_x[idx]))
            summed = F.cross_entropy(logits.float(), ctx.train_y[idx], reduction="sum")
        ctx.optimizer.zero_grad()
        # The backend averages over the W workers: W / B * (local sum) makes that average the
        # mean over the whole global batch, whatever each rank's share.
        (summed * (workers / (stop - start))).backward()
        ctx.optimizer.step()
        loss_sum += summed.detach()
        first_bad = torch.where(torch.isfinite(summed.detach()) | (first_bad >= 0), first_bad, step)
        images += stop - start
        done = step + 1
        if rank == 0:
            now = time.monotonic()
            if progress_due(now, last, done, len(batches), printed):
                line = progress_line(epoch + 1, done, len(batches), images, now - started)
                print(line, flush=True)
                last, printed = now, True
        if preemption.check_due(done, len(batches), check_every) and _any_warned(ctx.rt):
            stopped = True
            break
    ended = EpochProgress(done, float(loss_sum), int(first_bad), images, lr, stopped)
    if stopped or done < len(batches):
        return ended
    return _reduce_epoch(ctx, epoch, ended, len(batches))


def _reduce_epoch(ctx: _Context, epoch: int, ended: EpochProgress, steps: int) -> EpochProgress:
    """``ended`` with its loss summed over the ranks (a collective); a non-finite sum stops the
    run, naming the first rank and step where the loss went bad."""
    import torch

    total = ctx.rt.allreduce_sum(torch.tensor([ended.loss_sum], dtype=torch.float64), "train.loss")
    if not math.isfinite(float(total)):
        bad = ctx.rt.allgather_object(ended.first_bad, name="train.first_bad")
        raise NonFiniteLossError(
            non_finite_message(ctx.run["name"], epoch + 1, bad, steps, ended.lr)
        )
    ended.loss_sum = float(total)  # from here on: the sum over the ranks
    return ended


def _any_warned(rt: Runtime) -> bool:
    """Whether any rank has been warned of preemption (a collective: every rank calls it)."""
    import torch

    flag = torch.tensor([1.0 if preemption.warned() else 0.0], dtype=torch.float64)
    return float(rt.allreduce_sum(flag, name="train.warned")) > 0


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite: every later step would train on garbage."""


def non_finite_message(run: str, epoch: int, first_bad: list[int], steps: int, lr: float) -> str:
    """Where the loss first stopped being finite: ``first_bad[r]`` is rank r's first such step
    (0-based, -1 for none)."""
    where = [(step, rank) for rank, step in enumerate(first_bad) if step >= 0]
    step, rank = min(where) if where else (None, None)
    at = f"step {step + 1}/{steps} (rank {rank})" if step is not None else "a step"
    return (
        f"run {run!r}: the training loss became non-finite (NaN or inf) at epoch {epoch}, {at}, "
        f"learning rate {lr:g}; the run is stopped. Lower the run's lr (or raise warmup_epochs) "
        "and run it again."
    )


def _validate(ctx: _Context) -> tuple[float, float]:
    """Validation loss and accuracy over the whole val split, sharded over the ranks."""
    import torch
    import torch.nn.functional as F

    ctx.model.eval()
    lo, hi = shard_bounds(len(ctx.val_y), ctx.workers, ctx.rt.rank)
    loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
    correct = torch.zeros((), dtype=torch.float64, device=ctx.device)
    with torch.no_grad(), ctx.autocast():
        for start in range(lo, hi, EVAL_BATCH):
            stop = min(start + EVAL_BATCH, hi)
            logits = ctx.model(ctx.inputs(ctx.val_x[start:stop])).float()
            target = ctx.val_y[start:stop]
            loss_sum += F.cross_entropy(logits, target, reduction="sum")
            correct += (logits.argmax(1) == target).sum()
    local = torch.stack([loss_sum, correct]).cpu()
    local = torch.cat([local, torch.tensor([float(hi - lo)], dtype=torch.float64)])
    loss, right, n = ctx.rt.allreduce_sum(local, name="val.totals").tolist()
    return loss / n, right / n


def train(
    run: dict[str, Any],
    data: TrainData,
    out_dir: Path,
    dump_dir: Path | None = None,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Train on every rank; rank 0 writes the outputs. Returns the last epoch's metrics.

    Continues from the newest intact checkpoint of ``run``'s training slice in ``out_dir``, if
    there is one. Raises :class:`clusterbench.preemption.Preempted` on every rank after a
    preemption warning, once rank 0 has written the checkpoint to continue from.
    ``dump_dir`` (debug): every rank saves its final weights as ``<dump_dir>/<run>/rank-R.pt``.
    ``max_steps`` (debug): at most this many optimiser steps per epoch.
    """
    from clusterbench import dist

    device_type = check_device(run)
    rt = dist.init(run["backend"], device_type)
    try:
        identity = {**asdict(rt.identity), "backend": rt.name, "hostname": node_name()}
        print(f"train: {rt.name} rank {rt.rank} {json.dumps(identity)}", flush=True)
        if is_elastic(run):  # Horovod elastic: the world size may change while it trains
            from clusterbench.elastic import train_elastic

            result = train_elastic(rt, run, data, out_dir, dump_dir, max_steps, device_type)
        else:
            if rt.size != run["workers"]:
                raise RuntimeError(
                    f"run.workers={run['workers']} but the {rt.name} backend has {rt.size} "
                    "process(es): launch with clusterbench-launch --np WORKERS"
                )
            result = _train(rt, run, data, out_dir, dump_dir, max_steps, device_type)
    except BaseException:
        # the other ranks' pending collectives then fail instead of hanging
        rt.shutdown()
        raise
    rt.finish()
    return result


def build(rt: Runtime, run: Mapping[str, Any], meta: Mapping[str, Any], device: Any):
    """The run's architecture description, model (seeded: equal on every rank) and SGD."""
    import torch

    from clusterbench.models import build_model

    height, width, channels = meta["image_shape"]
    arch = {
        "model": run["model"],
        "in_channels": channels,
        "num_classes": meta["num_classes"],
        "image_size": [height, width],
    }
    torch.manual_seed(run["seed"])
    model = rt.prepare_model(build_model(**arch), run["bn"], device).to(device)
    if run["channels_last"]:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=run["lr"],
        momentum=run["momentum"],
        weight_decay=run["weight_decay"],
    )
    return arch, model, optimizer


def make_context(
    rt: Runtime, run: dict[str, Any], data: TrainData, device: Any, model: Any, wrapped: Any
) -> _Context:
    """The step context: ``wrapped`` is the backend's (net, optimiser) from ``rt.wrap``; the
    data sets go to the device."""
    import torch

    def tensor(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    meta = data.meta
    net, dist_optimizer = wrapped
    return _Context(
        rt=rt,
        run=run,
        device=device,
        model=model,
        net=net,
        optimizer=dist_optimizer,
        train_x=tensor(data.train.x),
        train_y=tensor(data.train.y),
        val_x=tensor(data.val.x),
        val_y=tensor(data.val.y),
        mean=torch.tensor(meta["mean"], dtype=torch.float32, device=device),
        std=torch.tensor(meta["std"], dtype=torch.float32, device=device),
    )


def world_record(
    rt: Runtime, device: Any, facts: list[dict[str, Any]], hosts: list[str]
) -> dict[str, Any]:
    """run.json's ``world``: the ranks, hosts and devices the run trained on."""
    workers = rt.size
    return {
        "size": workers,
        "hosts": hosts,
        "device": device.type,
        "gpus": workers if device.type == "cuda" else 0,
        "gpu_names": sorted({f["device_name"] for f in facts if f["device_name"]}),
        "scheduler": _scheduler(),
        "backend": rt.name,
    }


def model_file(arch: dict[str, Any], model: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    """What model.pt holds: the architecture, the weights (on the CPU), the normalisation."""
    return {
        "arch": arch,
        "state_dict": _cpu_state(model),
        "mean": [float(m) for m in meta["mean"]],
        "std": [float(s) for s in meta["std"]],
    }


def _train(
    rt: Runtime,
    run: dict[str, Any],
    data: TrainData,
    out_dir: Path,
    dump_dir: Path | None,
    max_steps: int | None,
    device_type: str,
) -> dict[str, Any]:
    import torch

    device = setup_device(run, device_type, rt.local_rank, rt.local_size)
    meta = data.meta
    arch, model, optimizer = build(rt, run, meta, device)

    # Always continue from the newest intact checkpoint of this training slice, if any.
    found = checkpoints.newest_valid(out_dir, run) if rt.rank == 0 else None
    checkpoint = found[1] if found else None
    if found is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        print(f"train: continuing from the checkpoint {found[0].describe()}", flush=True)
    rt.broadcast_state(model, optimizer)
    position = rt.broadcast_object(found[0] if found else checkpoints.Position(0), name="train.at")
    mine = rt.broadcast_object(checkpoint["ranks"] if checkpoint else None, name="train.ranks")
    progress, epoch_seconds = EpochProgress(), 0.0
    if mine is not None:  # the same slice, so the same number of ranks
        _set_rng_state(mine[rt.rank]["rng"])
        if position.step:
            progress = EpochProgress(**mine[rt.rank]["progress"])
            epoch_seconds = checkpoint["epoch_seconds"] if checkpoint else 0.0
    epoch = position.epoch
    ctx = make_context(rt, run, data, device, model, rt.wrap(model, optimizer, run["bn"]))
    workers = rt.size
    facts = rt.allgather_object(
        rank_provenance(rt.rank, rt.local_rank, device), name="train.provenance"
    )
    hosts = list(dict.fromkeys(f["node"] for f in facts))
    settings = checkpoints.checkpoint_settings()
    outputs = Outputs(out_dir, run, checkpoint, settings["keep"]) if rt.rank == 0 else None
    done_before = outputs.train_seconds if outputs else 0.0
    check_every = settings["preemption_check_steps"]

    def train_seconds() -> float:
        return done_before + time.monotonic() - started

    def rank_states(progress: EpochProgress | None = None) -> list[dict[str, Any]]:
        """Every rank's RNG (and within an epoch its progress), gathered for a checkpoint."""
        state = {"rng": _rng_state(), "progress": asdict(progress) if progress else None}
        return rt.allgather_object(state, name="train.rank_state")

    def finished() -> bool:
        """Rank 0 decides (its clock is the time box's); every rank stops after that epoch."""
        stop = False
        if outputs is not None:
            stop = run["epochs"] is not None and epoch >= run["epochs"]
            stop = stop or run["minutes"] is not None and train_seconds() >= 60 * run["minutes"]
        return rt.broadcast_object(stop, name="train.stop")

    def preempted(where: checkpoints.Position) -> preemption.Preempted:
        rt.broadcast_object(None, name="train.checkpointed")  # rank 0 has written it
        message = preemption.Preempted(where.describe())
        print(f"train: rank {rt.rank} {message}", flush=True)
        return message

    record: dict[str, Any] = outputs.records[-1] if outputs and outputs.records else {}
    started = time.monotonic()
    while not finished():
        if progress.step == 0 and _any_warned(rt):  # at an epoch's end: its checkpoint is
            raise preempted(checkpoints.Position(epoch))
        ctx.synchronize()
        t0 = time.perf_counter()
        progress = _run_epoch(ctx, epoch, max_steps, progress, check_every)
        ctx.synchronize()
        seconds = epoch_seconds + time.perf_counter() - t0
        if progress.stopped:  # warned: a checkpoint at this step, then every rank stops
            where = checkpoints.Position(epoch, progress.step)
            states = rank_states(progress)
            if outputs is not None:
                outputs.checkpoint(where, model, optimizer, train_seconds(), states, seconds)
            raise preempted(where)
        val_loss, val_accuracy = _validate(ctx)
        epoch += 1
        record = {
            "epoch": epoch,
            "train_loss": progress.loss_sum / progress.images,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "epoch_seconds": seconds,
            "images_per_second": progress.images / seconds,
            "workers": workers,
            "world_size": workers,
            "global_batch": global_batch_size(run),
            "lr": progress.lr,
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        }
        states = rank_states()
        if outputs is not None:
            outputs.epoch(record, model, optimizer, train_seconds(), states)
            print(
                f"train: epoch {epoch}: loss {record['train_loss']:.4f}, val loss {val_loss:.4f}, "
                f"val accuracy {val_accuracy:.4f}, {seconds:.2f} s, "
                f"{record['images_per_second']:.0f} images/s, lr {progress.lr:.4g}",
                flush=True,
            )
        progress, epoch_seconds = EpochProgress(), 0.0
    elapsed = train_seconds()

    if dump_dir is not None:  # debug: every rank's final weights, to compare across ranks
        with atomic_path(Path(dump_dir) / run["name"] / f"rank-{rt.rank}.pt") as tmp:
            torch.save(_cpu_state(model), tmp)
    if outputs is not None:
        world = world_record(rt, device, facts, hosts)
        outputs.finish(
            world,
            effective_settings(run),
            elapsed,
            model_file(arch, model, meta),
            run_provenance(facts),
        )
        print(f"train: {epoch} epoch(s) in {elapsed:.1f} s -> {out_dir}", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="results/data/NAME")
    parser.add_argument("--run", required=True, help="the run's config slice, as JSON")
    parser.add_argument("--out-dir", type=Path, required=True, help="results/runs/RUN")
    # Debug/test only: every rank writes its final state_dict to DIR/<run name>/rank-R.pt.
    # (also $CLUSTERBENCH_DUMP_WEIGHTS, so tests can ask for it through Snakemake's --envvars)
    parser.add_argument(
        "--dump-final-weights",
        type=Path,
        metavar="DIR",
        default=os.environ.get("CLUSTERBENCH_DUMP_WEIGHTS") or None,
        help=argparse.SUPPRESS,
    )
    # Debug/test only: at most N optimiser steps per epoch (e.g. to compare first steps).
    parser.add_argument("--max-steps", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    preemption.install()  # from now on a warning is recorded, not fatal

    try:
        run = validate_run(args.run)
        checkpoints.checkpoint_settings()
        check_device(run)  # before reading data or starting any backend
    except ConfigError as exc:
        return bad_settings("train", exc)
    data = load_data(args.data_dir, run)
    try:
        train(run, data, args.out_dir, dump_dir=args.dump_final_weights, max_steps=args.max_steps)
    except preemption.Preempted:
        return preemption.EXIT_PREEMPTED
    return 0
