"""Reference 1: a minimal hand-written single-process PyTorch training loop.

```
.venv/bin/python benchmarks/hand_loop.py --data-dir DATA [--model small_cnn] [--epochs 8]
    [--batch-size 128] [--lr 0.05] [--run RUN_JSON] [--out-dir OUT]
```

It does what ``clusterbench.train`` does for one worker, and nothing else, so that the two can be
diffed: the same model (``build_model``) and seed, the whole data set resident as tensors on the
device, one permutation per epoch from ``numpy.random.default_rng([seed, epoch])``, global
batches taken in that order (the last one may be smaller), ``normalize_images`` on the uint8
batch, forward, cross-entropy (mean over the batch), backward, SGD with momentum and weight decay.
Not done: LR warm-up (a constant LR costs the same), validation, checkpoints, logging.

Each batch is made contiguous in the model's memory format: NCHW, or NHWC with
``channels_last`` (``normalize_images`` returns an NHWC-strided view). Threads: all the CPUs of
this process's affinity mask (as the trainer with one worker). On GPU:
``torch.backends.cudnn.benchmark = True``; ``precision="bf16"`` runs forward and loss under
``torch.autocast(dtype=torch.bfloat16)``; ``channels_last`` also converts the model.

Each epoch is timed with ``time.perf_counter`` (after ``torch.cuda.synchronize`` on GPU);
``--out-dir`` gets ``metrics.jsonl`` in the trainer's format (epoch, epoch_seconds,
images_per_second, train_loss). ``--run`` takes the trainer's run JSON slice instead of flags.
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
from clusterbench.data.images import normalize_images
from clusterbench.models import build_model

DEFAULTS = {**TRAINING_DEFAULTS, "precision": "fp32", "channels_last": False}


def train(data_dir: Path, out_dir: Path | None = None, **settings: Any) -> list[dict[str, Any]]:
    """Train on one device; returns (and writes to ``out_dir``) one record per epoch."""
    s = {**DEFAULTS, **settings}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(cpu_cores())
    memory_format = torch.channels_last if s["channels_last"] else torch.contiguous_format

    x_np, y_np, meta = load_arrays(data_dir)
    height, width, channels = meta["image_shape"]
    train_x = torch.from_numpy(x_np).to(device)
    train_y = torch.from_numpy(y_np).to(device)
    mean = torch.tensor(meta["mean"], dtype=torch.float32, device=device)
    std = torch.tensor(meta["std"], dtype=torch.float32, device=device)

    torch.manual_seed(s["seed"])
    model = build_model(s["model"], meta["num_classes"], [channels, height, width])
    model = model.to(device, memory_format=memory_format)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"]
    )

    n, batch = len(train_y), s["batch_size"]
    records = []
    for epoch in range(s["epochs"]):
        model.train()
        order = torch.from_numpy(np.random.default_rng([s["seed"], epoch]).permutation(n))
        order = order.to(device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            idx = order[start : start + batch]
            inputs = normalize_images(train_x[idx], mean, std)
            inputs = inputs.contiguous(memory_format=memory_format)
            with torch.autocast(device.type, torch.bfloat16, enabled=s["precision"] == "bf16"):
                loss = F.cross_entropy(model(inputs), train_y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(idx)
        train_loss = float(loss_sum) / n  # .item() waits for the GPU, like synchronize
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
