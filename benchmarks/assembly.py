"""Batch assembly alone: images/s of building training batches exactly as the trainer does.

```
.venv/bin/python benchmarks/assembly.py --data-dir DATA [--batch-size 128] [--epochs 8]
    [--seed 1] [--out-dir OUT]
```

Per epoch, as ``clusterbench.train`` with one worker, but without the model: the epoch's
permutation (``numpy.random.default_rng([seed, epoch])``) moved to the device, then for each
global batch the resident uint8 tensor indexed with its slice of it, ``normalize_images`` made
NCHW-contiguous (the trainer without ``channels_last``) and the labels indexed. Threads: all
CPUs of the affinity mask. After one warm-up pass, each "epoch" here repeats that pass over the
training set (with a new permutation each time) until ``--min-seconds`` have passed (small data
sets take milliseconds per pass); ``metrics.jsonl`` gets images/s per epoch.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_data import cpu_cores, load_arrays, write_metrics
from clusterbench.data.images import normalize_images


def measure(
    data_dir: Path,
    batch_size: int = 128,
    epochs: int = 8,
    seed: int = 1,
    min_seconds: float = 0.5,
    out_dir: Path | None = None,
) -> list[dict[str, Any]]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(cpu_cores())
    x_np, y_np, meta = load_arrays(data_dir)
    train_x, train_y = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)
    mean = torch.tensor(meta["mean"], dtype=torch.float32, device=device)
    std = torch.tensor(meta["std"], dtype=torch.float32, device=device)
    n = len(train_y)

    def one_pass(epoch: int) -> None:
        order = torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(n))
        order = order.to(device)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            inputs = normalize_images(train_x[idx], mean, std).contiguous()
            target = train_y[idx]
        del inputs, target
        if device.type == "cuda":
            torch.cuda.synchronize()

    one_pass(0)  # warm-up
    records = []
    for epoch in range(epochs):
        passes, t0 = 0, time.perf_counter()
        while passes == 0 or time.perf_counter() - t0 < min_seconds:
            one_pass(1 + epoch * 1000 + passes)
            passes += 1
        seconds = time.perf_counter() - t0
        records.append(
            {
                "epoch": epoch + 1,
                "epoch_seconds": seconds,
                "images_per_second": passes * n / seconds,
                "passes": passes,
            }
        )
        print(
            f"assembly: epoch {epoch + 1}: {passes} pass(es), {seconds:.2f} s, "
            f"{passes * n / seconds:.0f} images/s",
            flush=True,
        )
    if out_dir is not None:
        write_metrics(out_dir, records)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a preprocessed data dir")
    parser.add_argument("--batch-size", type=int, default=128, help="global batch")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-seconds", type=float, default=0.5, help="per epoch (repeats)")
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    args = parser.parse_args(argv)
    measure(args.data_dir, args.batch_size, args.epochs, args.seed, args.min_seconds, args.out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
