"""Stage 3: Horovod data-parallel training, one process per worker.

```
python scripts/train.py --data-dir results/data/NAME --run JSON --out-dir results/runs/RUN
```

Runs unchanged under every launcher (``horovodrun``, ``clusterbench-launch`` on a workstation,
Slurm or SGE, or plain ``python`` for a single worker): rank, size and local rank come from
``hvd.init()`` only.

* The *global* batch (``batch_size``) is split over the workers, the remainder going to the
  first ranks; each rank scales its summed loss by ``workers / global_batch`` so that the
  gradient :class:`hvd.DistributedOptimizer` averages is exactly the global-batch mean gradient.
  A last global batch smaller than the number of workers is dropped.
* Shuffling: one permutation per epoch from ``numpy.random.default_rng([seed, epoch])``,
  identical on every rank.
* LR: SGD with momentum and weight decay; the per-worker ``lr`` is scaled to ``lr * workers``
  with a linear per-step warm-up over ``warmup_epochs``.
* BatchNorm statistics are synchronised across workers every step (:mod:`clusterbench.syncbn`).
* Validation is sharded over the ranks; loss and counts are allreduced.
* Stops after ``epochs`` epochs or after the epoch during which ``minutes`` ran out, whichever
  comes first (rank 0 decides, every rank follows).
* Rank 0 alone writes ``checkpoints/epoch-NNN.pt``, ``metrics.jsonl`` and TensorBoard events
  each epoch, then ``run.json`` and, last, ``model.pt``. TensorBoard events go to
  ``.tensorboard.partial/`` first and are renamed to ``tensorboard/`` at the end.
* ``--resume`` continues from the newest checkpoint (same run config required): the epoch-keyed
  shuffling and LR schedule make the result identical to an uninterrupted run. Without it, a
  start removes an earlier run's checkpoints.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from clusterbench.atomic import atomic_path, write_json, write_text
from clusterbench.config import TRAIN_KEYS, ConfigError, load_schema, run_problems
from clusterbench.evaluate import SplitData, load_split
from clusterbench.params import json_object

#: Validation batch size (per rank); inference only, so larger than any training batch.
EVAL_BATCH = 1024
#: Where TensorBoard events are written during training; renamed to ``tensorboard/`` at the end.
TB_PARTIAL = ".tensorboard.partial"


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


def learning_rate(
    base_lr: float, workers: int, warmup_epochs: float, epoch: int, step: int, steps_per_epoch: int
) -> float:
    """LR of ``step`` (0-based) in ``epoch`` (0-based): linear warm-up from ``base_lr`` to
    ``base_lr * workers`` over ``warmup_epochs`` epochs, then constant."""
    target = base_lr * workers
    if warmup_epochs <= 0:
        return target
    progress = min(1.0, (epoch + step / steps_per_epoch) / warmup_epochs)
    return base_lr + (target - base_lr) * progress


# --------------------------------------------------------------------------------------------
# Input checks (all before any Horovod work)


def validate_run(run: Any) -> dict[str, Any]:
    """Check the ``--run`` slice against the config schema's run settings; names each bad key."""
    if not isinstance(run, dict):
        raise ConfigError(f"--run must be a JSON object, got {type(run).__name__}")
    schema = {**load_schema()["$defs"]["run_settings"], "required": list(TRAIN_KEYS)}
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(run), key=lambda e: list(e.path)
    )
    problems = [f"run{''.join(f'.{p}' for p in e.path)}: {e.message}" for e in errors]
    if not errors:
        problems += run_problems(run)
    if problems:
        raise ConfigError("invalid run config:\n" + "\n".join(f"  {p}" for p in problems))
    return dict(run)


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
    """What every training step needs: Horovod, the run, the model and the device-side data."""

    hvd: Any
    run: dict[str, Any]
    workers: int
    device: Any
    model: Any
    optimizer: Any
    train_x: Any
    train_y: Any
    val_x: Any
    val_y: Any
    mean: Any
    std: Any


def _cpu_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _device(hvd: Any) -> Any:
    """The local rank's GPU (modulo the GPUs visible to this process), else the CPU."""
    import torch

    if torch.cuda.is_available():
        index = hvd.local_rank() % torch.cuda.device_count()
        torch.cuda.set_device(index)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        return torch.device("cuda", index)
    torch.set_num_threads(cpu_threads(hvd.local_size()))
    return torch.device("cpu")


def cpu_threads(local_size: int, env: Mapping[str, str] = os.environ) -> int:
    """Torch threads of one rank: the CPUs it may use, shared among the node's ranks.

    ``OMP_NUM_THREADS`` only caps the node's total: Snakemake sets it to the whole job's
    ``threads``, and taking it per rank oversubscribed a 2-core machine 2x and made 2-worker
    training about 18x slower (measured with benchmarks/bench_train.py).
    """
    cpus = len(os.sched_getaffinity(0))
    if env.get("OMP_NUM_THREADS", "").isdigit():
        cpus = min(cpus, int(env["OMP_NUM_THREADS"]))
    return max(1, cpus // local_size)


def node_name() -> str:
    """The scheduler's name for this node (HOROVOD_HOSTNAME): several may share one machine."""
    return os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())


def _launcher() -> str:
    """What started the ranks: the name clusterbench-launch exports to them, else a guess."""
    name = os.environ.get("CLUSTERBENCH_LAUNCHER", "auto")
    if name != "auto":
        return name
    return "gloo" if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ else "none"


def resume_checkpoint(out_dir: Path, run: Mapping[str, Any]) -> dict[str, Any] | None:
    """The newest ``checkpoints/epoch-NNN.pt`` in ``out_dir``, or None when there is none.

    Refuses (ConfigError) a checkpoint made with a different run config: resuming it would mix
    two trainings.
    """
    import torch

    paths = sorted((out_dir / "checkpoints").glob("epoch-[0-9][0-9][0-9].pt"))
    if not paths:
        return None
    ckpt = torch.load(paths[-1], map_location="cpu", weights_only=True)
    if ckpt["config"] != run:
        keys = sorted(k for k in {*ckpt["config"], *run} if ckpt["config"].get(k) != run.get(k))
        raise ConfigError(
            f"{paths[-1]}: made with a different run config (differs in {', '.join(keys)}); "
            "cannot resume it: run without --resume to start afresh"
        )
    return ckpt


class Outputs:
    """Rank 0's writer: checkpoints, ``metrics.jsonl``, TensorBoard events, ``run.json``,
    ``model.pt`` (last).

    A fresh start removes an earlier run's ``model.pt``, checkpoints and unfinished events; a
    resumed one continues from ``resume`` (a checkpoint), dropping later TensorBoard events.
    """

    def __init__(self, out_dir: Path, run: dict[str, Any], resume: dict[str, Any] | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.out_dir, self.run = out_dir, run
        self.ckpt_dir = out_dir / "checkpoints"
        (out_dir / "model.pt").unlink(missing_ok=True)  # the done marker goes first
        partial, final = out_dir / TB_PARTIAL, out_dir / "tensorboard"
        if resume is None:
            for stale in self.ckpt_dir.glob("epoch-*.pt"):
                stale.unlink()
            shutil.rmtree(partial, ignore_errors=True)
        elif final.is_dir() and not partial.exists():  # the events of a finished earlier try
            os.replace(final, partial)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.records: list[dict[str, Any]] = list(resume["metrics"]) if resume else []
        self.train_seconds = resume["train_seconds"] if resume else 0.0
        self.tb = SummaryWriter(log_dir=str(out_dir / TB_PARTIAL), purge_step=len(self.records) + 1)

    def epoch(
        self, record: dict[str, Any], model: Any, optimizer: Any, train_seconds: float
    ) -> None:
        import torch

        with atomic_path(self.ckpt_dir / f"epoch-{record['epoch']:03d}.pt") as tmp:
            torch.save(
                {
                    "model": _cpu_state(model),
                    "optimizer": optimizer.state_dict(),
                    "epoch": record["epoch"],
                    "config": self.run,
                    # for --resume: the metrics so far and the training time they took
                    "metrics": [*self.records, record],
                    "train_seconds": train_seconds,
                },
                tmp,
            )
        self.records.append(record)
        write_text(
            self.out_dir / "metrics.jsonl",
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records),
        )
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

    def finish(self, world: dict[str, Any], train_seconds: float, model_file: dict) -> None:
        import torch

        from clusterbench.provenance import versions

        self.tb.close()
        final_tb = self.out_dir / "tensorboard"
        shutil.rmtree(final_tb, ignore_errors=True)
        os.replace(self.out_dir / TB_PARTIAL, final_tb)
        write_json(
            self.out_dir / "run.json",
            {
                "run": self.run,
                "world": world,
                "epochs_completed": len(self.records),
                "train_seconds": train_seconds,
                "versions": versions(),
            },
        )
        with atomic_path(self.out_dir / "model.pt") as tmp:
            torch.save(model_file, tmp)


def _run_epoch(ctx: _Context, epoch: int) -> tuple[float, float, int]:
    """One pass over the training set; returns ``(mean train loss, last lr, images trained)``."""
    import torch
    import torch.nn.functional as F

    from clusterbench.models import normalize_images

    hvd, run, workers = ctx.hvd, ctx.run, ctx.workers
    order = torch.from_numpy(epoch_permutation(len(ctx.train_y), run["seed"], epoch))
    batches = global_batches(len(ctx.train_y), run["batch_size"], workers)
    ctx.model.train()
    loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
    lr = run["lr"]
    for step, (start, stop) in enumerate(batches):
        lr = learning_rate(run["lr"], workers, run["warmup_epochs"], epoch, step, len(batches))
        for group in ctx.optimizer.param_groups:
            group["lr"] = lr
        lo, hi = shard_bounds(stop - start, workers, hvd.rank())
        idx = order[start + lo : start + hi].to(ctx.device)
        logits = ctx.model(normalize_images(ctx.train_x[idx], ctx.mean, ctx.std))
        summed = F.cross_entropy(logits, ctx.train_y[idx], reduction="sum")
        ctx.optimizer.zero_grad()
        # DistributedOptimizer averages over the W workers: W / B * (local sum) makes that
        # average the mean over the whole global batch, whatever each rank's share.
        (summed * (workers / (stop - start))).backward()
        ctx.optimizer.step()
        loss_sum += summed.detach()
    images = sum(stop - start for start, stop in batches)
    total = hvd.allreduce(loss_sum.cpu().view(1), op=hvd.Sum, name="train.loss")
    return float(total) / images, lr, images


def _validate(ctx: _Context) -> tuple[float, float]:
    """Validation loss and accuracy over the whole val split, sharded over the ranks."""
    import torch
    import torch.nn.functional as F

    from clusterbench.models import normalize_images

    ctx.model.eval()
    lo, hi = shard_bounds(len(ctx.val_y), ctx.workers, ctx.hvd.rank())
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(lo, hi, EVAL_BATCH):
            stop = min(start + EVAL_BATCH, hi)
            logits = ctx.model(normalize_images(ctx.val_x[start:stop], ctx.mean, ctx.std))
            target = ctx.val_y[start:stop]
            loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
            correct += int((logits.argmax(1) == target).sum())
    totals = ctx.hvd.allreduce(
        torch.tensor([loss_sum, correct, hi - lo], dtype=torch.float64),
        op=ctx.hvd.Sum,
        name="val.totals",
    )
    loss, right, n = totals.tolist()
    return loss / n, right / n


def _broadcast_initial_state(hvd: Any, model: Any, optimizer: Any) -> None:
    """Rank 0's weights and optimizer state to every rank.

    ``hvd.broadcast_optimizer_state`` initialises an empty optimizer state by one SGD step with
    zero gradients; with weight decay off during that step it changes no weight and leaves
    zero momentum buffers, so the first real step equals a fresh optimizer's.
    """
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    decays = [group["weight_decay"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["weight_decay"] = 0.0
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for group, decay in zip(optimizer.param_groups, decays, strict=True):
        group["weight_decay"] = decay


def train(
    run: dict[str, Any],
    data: TrainData,
    out_dir: Path,
    resume: bool = False,
    dump_dir: Path | None = None,
) -> dict[str, Any]:
    """Train on every rank; rank 0 writes the outputs. Returns the last epoch's metrics.

    ``resume``: continue from the newest checkpoint in ``out_dir`` (if any) instead of afresh.
    ``dump_dir`` (debug): every rank saves its final weights there as ``rank-R.pt``.
    """
    import horovod.torch as hvd

    hvd.init()
    try:
        identity = {
            "rank": hvd.rank(),
            "size": hvd.size(),
            "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(),
            "cross_rank": hvd.cross_rank(),
            "cross_size": hvd.cross_size(),
            "hostname": node_name(),
        }
        print(f"train: horovod rank {hvd.rank()} {json.dumps(identity)}", flush=True)
        if hvd.size() != run["workers"]:
            raise RuntimeError(
                f"run.workers={run['workers']} but Horovod started {hvd.size()} process(es): "
                "launch with clusterbench-launch --np WORKERS (or horovodrun -np WORKERS)"
            )
        return _train(hvd, run, data, out_dir, resume, dump_dir)
    finally:
        # also on an error: the other ranks' pending collectives then fail instead of hanging
        hvd.shutdown()


def _train(
    hvd: Any,
    run: dict[str, Any],
    data: TrainData,
    out_dir: Path,
    resume: bool,
    dump_dir: Path | None,
) -> dict[str, Any]:
    import torch

    from clusterbench.models import build_model
    from clusterbench.syncbn import convert_sync_batchnorm

    workers = hvd.size()
    device = _device(hvd)
    meta = data.meta
    height, width, channels = meta["image_shape"]
    arch = {
        "model": run["model"],
        "in_channels": channels,
        "num_classes": meta["num_classes"],
        "image_size": [height, width],
    }
    torch.manual_seed(run["seed"])
    model = convert_sync_batchnorm(build_model(**arch), device).to(device)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=run["lr"],
        momentum=run["momentum"],
        weight_decay=run["weight_decay"],
    )
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    checkpoint = None
    if hvd.rank() == 0 and resume:
        checkpoint = resume_checkpoint(out_dir, run)
        if checkpoint is not None:
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            print(f"train: resuming after epoch {checkpoint['epoch']}", flush=True)
    _broadcast_initial_state(hvd, model, optimizer)
    epoch = hvd.broadcast_object(checkpoint["epoch"] if checkpoint else 0, name="train.start")

    def tensor(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    ctx = _Context(
        hvd=hvd,
        run=run,
        workers=workers,
        device=device,
        model=model,
        optimizer=optimizer,
        train_x=tensor(data.train.x),
        train_y=tensor(data.train.y),
        val_x=tensor(data.val.x),
        val_y=tensor(data.val.y),
        mean=torch.tensor(meta["mean"], dtype=torch.float32, device=device),
        std=torch.tensor(meta["std"], dtype=torch.float32, device=device),
    )
    hosts = list(dict.fromkeys(hvd.allgather_object(node_name())))
    outputs = Outputs(out_dir, run, checkpoint) if hvd.rank() == 0 else None
    done_before = outputs.train_seconds if outputs else 0.0

    def train_seconds() -> float:
        return done_before + time.monotonic() - started

    def finished() -> bool:
        """Rank 0 decides (its clock is the time box's); every rank stops after that epoch."""
        stop = False
        if outputs is not None:
            stop = run["epochs"] is not None and epoch >= run["epochs"]
            stop = stop or run["minutes"] is not None and train_seconds() >= 60 * run["minutes"]
        return hvd.broadcast_object(stop, root_rank=0, name="train.stop")

    record: dict[str, Any] = outputs.records[-1] if outputs and outputs.records else {}
    started = time.monotonic()
    while not finished():
        t0 = time.monotonic()
        train_loss, lr, images = _run_epoch(ctx, epoch)
        seconds = time.monotonic() - t0
        val_loss, val_accuracy = _validate(ctx)
        epoch += 1
        record = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "epoch_seconds": seconds,
            "images_per_second": images / seconds,
            "workers": workers,
            "lr": lr,
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        }
        if outputs is not None:
            outputs.epoch(record, model, optimizer, train_seconds())
            print(
                f"train: epoch {epoch}: loss {train_loss:.4f}, val loss {val_loss:.4f}, "
                f"val accuracy {val_accuracy:.4f}, {seconds:.2f} s, "
                f"{record['images_per_second']:.0f} images/s, lr {lr:.4g}",
                flush=True,
            )
    elapsed = train_seconds()

    if dump_dir is not None:  # debug: every rank's final weights, to compare across ranks
        with atomic_path(Path(dump_dir) / f"rank-{hvd.rank()}.pt") as tmp:
            torch.save(_cpu_state(model), tmp)
    if outputs is not None:
        world = {
            "size": workers,
            "hosts": hosts,
            "device": device.type,
            "gpus": workers if device.type == "cuda" else 0,
            "launcher": _launcher(),
        }
        model_file = {
            "arch": arch,
            "state_dict": _cpu_state(model),
            "mean": [float(m) for m in meta["mean"]],
            "std": [float(s) for s in meta["std"]],
        }
        outputs.finish(world, elapsed, model_file)
        print(f"train: {epoch} epoch(s) in {elapsed:.1f} s -> {out_dir}", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="results/data/NAME")
    parser.add_argument("--run", required=True, help="the run's config slice, as JSON")
    parser.add_argument("--out-dir", type=Path, required=True, help="results/runs/RUN")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in --out-dir (made with the same run config)",
    )
    # Debug/test only: every rank writes its final state_dict to DIR/rank-R.pt.
    # (also $CLUSTERBENCH_DUMP_WEIGHTS, so tests can ask for it through Snakemake's --envvars)
    parser.add_argument(
        "--dump-final-weights",
        type=Path,
        metavar="DIR",
        default=os.environ.get("CLUSTERBENCH_DUMP_WEIGHTS") or None,
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)

    run = validate_run(json_object(args.run, what="--run", error=ConfigError))
    data = load_data(args.data_dir, run)
    train(run, data, args.out_dir, resume=args.resume, dump_dir=args.dump_final_weights)
    return 0
