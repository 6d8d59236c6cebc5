"""Batch assembly alone: images/s of building training batches exactly as the trainer does.

```
.venv/bin/python benchmarks/assembly.py --data-dir DATA [--batch-size 128] [--epochs 8]
    [--seed 1] [--memory-format channels_last|contiguous] [--out-dir OUT]
```

The trainer's own data source (:class:`clusterbench.data.resident.ResidentImages`, one worker)
without the model: its batches of each epoch (the epoch's permutation, each global batch's
indices, the uint8 images indexed and normalised), each made contiguous in the memory format
the trainer would train in (``--memory-format``: a no-op for channels-last, a copy for NCHW),
and the labels. Threads: all CPUs of the affinity mask. After one warm-up pass, each "epoch"
here repeats that pass over the training set (with a new permutation each time) until
``--min-seconds`` have passed (small data sets take milliseconds per pass); ``metrics.jsonl``
gets images/s per epoch.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from bench_data import cpu_cores, write_metrics
from clusterbench.data.arrays import load_training
from clusterbench.data.order import global_batches
from clusterbench.data.resident import ResidentImages
from clusterbench.training.memory_format import torch_format


def measure(
    data_dir: Path,
    batch_size: int = 128,
    epochs: int = 8,
    seed: int = 1,
    min_seconds: float = 0.5,
    out_dir: Path | None = None,
    memory_format: str = "channels_last",
) -> list[dict[str, Any]]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(cpu_cores())
    splits = load_training(Path(data_dir), {"dataset": _dataset(data_dir), "workers": 1})
    data = ResidentImages(splits, device, seed)
    fmt = torch_format(memory_format)
    batches = global_batches(data.train_size, batch_size, 1)
    n = sum(stop - start for start, stop in batches)

    def one_pass(epoch: int) -> None:
        for images, _labels in data.epoch_batches(epoch, batches, 0, 0, 1):
            images.contiguous(memory_format=fmt)
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


def _dataset(data_dir: Path) -> str:
    import json

    return json.loads((Path(data_dir) / "meta.json").read_text())["dataset"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a preprocessed data dir")
    parser.add_argument("--batch-size", type=int, default=128, help="global batch")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-seconds", type=float, default=0.5, help="per epoch (repeats)")
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    parser.add_argument("--run", help="the trainer's run JSON (its batch_size and seed)")
    parser.add_argument(
        "--memory-format", choices=("channels_last", "contiguous"), default="channels_last"
    )
    args = parser.parse_args(argv)
    if args.run:
        import json

        run = json.loads(args.run)
        args.batch_size, args.seed = run["batch_size"], run["seed"]
    measure(
        args.data_dir,
        args.batch_size,
        args.epochs,
        args.seed,
        args.min_seconds,
        args.out_dir,
        args.memory_format,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
