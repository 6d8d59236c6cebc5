"""Reference 1: a single-process PyTorch training loop, written the way a user would write it.

```
.venv/bin/python benchmarks/hand_loop.py --data-dir DATA [--model small_cnn] [--epochs 8]
    [--batch-size 128] [--lr 0.05] [--run RUN_JSON] [--out-dir OUT]
```

The data as stored (uint8 images, height x width x channels), in the simplest correct form and
with PyTorch's defaults: the training arrays resident as tensors on the device, one shuffle per
epoch, each batch ``x[idx].permute(0, 3, 1, 2).float() / 255`` normalised with the dataset's
per-channel mean and std, forward, ``F.cross_entropy`` (the batch mean), ``backward``, SGD with
momentum and weight decay. The model in PyTorch's default memory format, unless ``--run`` asks
for ``channels_last: true``; bf16 autocast where ``precision`` is ``bf16``; on GPU
``torch.backends.cudnn.benchmark = True`` (what every GPU training script sets). Not done: LR
warm-up (a constant LR costs the same), validation, checkpoints, logging.

What it does differently from the trainer (``clusterbench.train`` with one worker) is listed in
benchmarks/README.md. The shuffle is ``numpy.random.default_rng([seed, epoch])`` so that both
train on the same batches; the last batch may be smaller (the trainer's too, with one worker).

Threads: the CPUs of this process's affinity mask. Each epoch is timed with
``time.perf_counter`` (after ``torch.cuda.synchronize`` on GPU); ``--out-dir`` gets
``metrics.jsonl`` in the trainer's format (epoch, epoch_seconds, images_per_second, train_loss).
``--run`` takes the trainer's run JSON slice instead of flags.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from bench_data import (
    TRAINING_DEFAULTS,
    cpu_cores,
    load_arrays,
    parsed_settings,
    settings_cli,
    write_metrics,
)
from clusterbench.models import build_model

DEFAULTS = {**TRAINING_DEFAULTS, "precision": "fp32", "channels_last": "auto"}


def train(data_dir: Path, out_dir: Path | None = None, **settings: Any) -> list[dict[str, Any]]:
    """Train on one device; returns (and writes to ``out_dir``) one record per epoch."""
    s = {**DEFAULTS, **settings}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # what every GPU training script sets
    else:
        torch.set_num_threads(cpu_cores())

    x_np, y_np, meta = load_arrays(data_dir)
    height, width, channels = meta["image_shape"]
    train_x = torch.from_numpy(x_np).to(device)
    train_y = torch.from_numpy(y_np).to(device)
    mean = torch.tensor(meta["mean"], device=device).view(1, -1, 1, 1)
    std = torch.tensor(meta["std"], device=device).view(1, -1, 1, 1)

    torch.manual_seed(s["seed"])
    model = build_model(s["model"], meta["num_classes"], [channels, height, width]).to(device)
    if s["channels_last"] is True:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"]
    )

    n, batch = len(train_y), s["batch_size"]
    records = []
    for epoch in range(s["epochs"]):
        model.train()
        order = torch.from_numpy(np.random.default_rng([s["seed"], epoch]).permutation(n))
        order = order.to(device)
        loss_sum = 0.0
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            idx = order[start : start + batch]
            x = (train_x[idx].permute(0, 3, 1, 2).float() / 255 - mean) / std
            with torch.autocast(device.type, torch.bfloat16, enabled=s["precision"] == "bf16"):
                loss = F.cross_entropy(model(x), train_y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(idx)
        train_loss = float(loss_sum) / n  # waits for the device, like synchronize
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        record = {
            "epoch": epoch + 1,
            "epoch_seconds": seconds,
            "images_per_second": n / seconds,
            "train_loss": train_loss,
        }
        records.append(record)
        print(
            f"hand_loop: epoch {epoch + 1}: loss {train_loss:.4f}, {seconds:.2f} s, "
            f"{record['images_per_second']:.0f} images/s",
            flush=True,
        )
    if out_dir is not None:
        write_metrics(out_dir, records)
    return records


def main(argv: list[str] | None = None) -> int:
    args = settings_cli(__doc__.split("\n\n")[0], DEFAULTS).parse_args(argv)
    train(args.data_dir, args.out_dir, **parsed_settings(args, DEFAULTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
