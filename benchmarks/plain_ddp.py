"""Reference 2: plain PyTorch DistributedDataParallel, N processes started by this script,
written the way a user would write it.

```
.venv/bin/python benchmarks/plain_ddp.py --data-dir DATA --nproc 2 [--model small_cnn]
    [--epochs 8] [--batch-size 128] [--lr 0.05] [--run RUN_JSON] [--out-dir OUT]
```

The textbook set-up, nothing tuned: ``torch.multiprocessing.spawn`` starts ``--nproc`` ranks on
this host (``MASTER_ADDR=127.0.0.1``, a free port), process group ``gloo`` on CPU (``nccl`` and
one GPU per rank on GPU), ``DistributedDataParallel`` with its defaults, *local* BatchNorm
(each rank normalises with its own shard's statistics). Threads per rank: CPUs / ranks.

The data as stored (uint8 images, height x width x channels), resident as tensors on every
rank, one permutation per epoch from ``numpy.random.default_rng([seed, epoch])`` (the same on
every rank: the trainer's batches), global batches of ``batch_size`` in that order (a last one
smaller than the number of ranks is dropped), each rank training its contiguous shard (``B // N``,
one more for the first ``B % N`` ranks) as ``x[idx].permute(0, 3, 1, 2).float() / 255``
normalised with the dataset's mean and std, the model in PyTorch's default memory format, loss
``sum * N / B`` so that DDP's gradient average is the global-batch mean, SGD with momentum and
weight decay, constant LR, no validation. What it does differently from the trainer is listed in
benchmarks/README.md.

Timing: a barrier, then the epoch on ``time.perf_counter``; an all-reduce of the loss at the end
of the epoch (as the trainer's) lines the ranks up again before rank 0 stops the clock.
Rank 0 prints each epoch and writes ``metrics.jsonl`` (images/s over all ranks) to ``--out-dir``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from bench_data import (
    TRAINING_DEFAULTS,
    cpu_cores,
    free_port,
    load_arrays,
    parsed_settings,
    settings_cli,
    write_metrics,
)
from clusterbench.models import build_model
from torch.nn.parallel import DistributedDataParallel as DDP

DEFAULTS = TRAINING_DEFAULTS


def shard(batch: int, ranks: int, rank: int) -> tuple[int, int]:
    """``[lo, hi)`` of ``rank``'s contiguous share of a batch of ``batch`` samples."""
    base, extra = divmod(batch, ranks)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def _rank_main(rank: int, nproc: int, data_dir: Path, out_dir: Path | None, s: dict) -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=nproc)
    try:
        _train(rank, nproc, data_dir, out_dir, s, cuda)
    finally:
        dist.destroy_process_group()


def _train(rank: int, nproc: int, data_dir: Path, out_dir: Path | None, s: dict, cuda: bool):
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, cpu_cores() // nproc))

    x_np, y_np, meta = load_arrays(data_dir)
    height, width, channels = meta["image_shape"]
    train_x = torch.from_numpy(x_np).to(device)
    train_y = torch.from_numpy(y_np).to(device)
    mean = torch.tensor(meta["mean"], device=device).view(1, -1, 1, 1)
    std = torch.tensor(meta["std"], device=device).view(1, -1, 1, 1)

    torch.manual_seed(s["seed"])
    model = build_model(s["model"], meta["num_classes"], [channels, height, width]).to(device)
    model = DDP(model, device_ids=[device.index] if cuda else None)  # broadcasts rank 0's
    optimizer = torch.optim.SGD(
        model.parameters(), lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"]
    )

    n, batch = len(train_y), s["batch_size"]
    starts = [b for b in range(0, n, batch) if min(b + batch, n) - b >= nproc]
    records = []
    for epoch in range(s["epochs"]):
        model.train()
        order = torch.from_numpy(np.random.default_rng([s["seed"], epoch]).permutation(n))
        order = order.to(device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        images = 0
        dist.barrier()
        t0 = time.perf_counter()
        for start in starts:
            size = min(start + batch, n) - start
            lo, hi = shard(size, nproc, rank)
            idx = order[start + lo : start + hi]
            x = (train_x[idx].permute(0, 3, 1, 2).float() / 255 - mean) / std
            logits = model(x)
            summed = F.cross_entropy(logits, train_y[idx], reduction="sum")
            optimizer.zero_grad()
            (summed * (nproc / size)).backward()  # DDP averages: the global-batch mean
            optimizer.step()
            loss_sum += summed.detach()
            images += size
        dist.all_reduce(loss_sum)
        train_loss = float(loss_sum) / images
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        if rank == 0:
            record = {
                "epoch": epoch + 1,
                "epoch_seconds": seconds,
                "images_per_second": images / seconds,
                "train_loss": train_loss,
                "workers": nproc,
            }
            records.append(record)
            print(
                f"plain_ddp: epoch {epoch + 1}: loss {train_loss:.4f}, {seconds:.2f} s, "
                f"{record['images_per_second']:.0f} images/s",
                flush=True,
            )
    if rank == 0 and out_dir is not None:
        write_metrics(out_dir, records)


def train(data_dir: Path, nproc: int = 2, out_dir: Path | None = None, **settings: Any) -> None:
    """Start ``nproc`` ranks on this host and train; rank 0 writes ``out_dir/metrics.jsonl``."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    s = {**DEFAULTS, **settings}
    mp.spawn(_rank_main, args=(nproc, Path(data_dir), out_dir, s), nprocs=nproc, join=True)


def main(argv: list[str] | None = None) -> int:
    parser = settings_cli(__doc__.split("\n\n")[0], DEFAULTS)
    parser.add_argument("--nproc", type=int, default=2, help="number of ranks (processes)")
    args = parser.parse_args(argv)
    train(args.data_dir, args.nproc, args.out_dir, **parsed_settings(args, DEFAULTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
