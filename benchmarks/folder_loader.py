"""The image-folder loader alone: images/s of the streamed training batches of an image folder
stored as files, exactly as the trainer's data source makes them, with no model (F8's
numerator).

```
.venv/bin/python benchmarks/folder_loader.py --data-dir DATA --run JSON [--epochs 3]
    [--loader-workers N] [--device cpu|cuda] [--out-dir OUT]
```

``--device cuda``: the batches are made for the first GPU, as a GPU rank's are: with the run's
``decode: cpu`` decoded in the loader processes and copied there, with ``decode: gpu`` decoded
and augmented there (:mod:`clusterbench.data.device_decode`); each epoch's clock stops after
the GPU has finished.

The train stage's own data source (:func:`clusterbench.data.source.open_source`, one rank,
``loading: stream``; the run's ``augment``, ``on_bad_file``, ``seed`` and ``batch_size``),
with ``--loader-workers`` loader processes (default: the CPUs of the affinity mask): each
process reads its batch's JPEG files, decodes them and crops/resizes them to the input size
(random-resized-crop and flip under ``augment: standard``); this process takes every training
batch of an epoch, normalised, and nothing else. ``metrics.jsonl`` gets images/s per epoch
(the first one includes starting the loader processes).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from bench_data import cpu_cores, write_metrics
from clusterbench.data.order import global_batches
from clusterbench.data.source import Reading, open_source


def measure(
    data_dir: Path, run: dict[str, Any], epochs: int, workers: int, device: str = "cpu"
) -> list[dict[str, Any]]:
    torch.set_num_threads(cpu_cores())
    reading = Reading({"loading": "stream", "loader_workers": workers}, 1, cpu_cores())
    where = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    source = open_source(data_dir, run, reading, where)
    batches = global_batches(source.train_size, run["batch_size"], 1)
    records = []
    try:
        for epoch in range(epochs):
            began, images = time.perf_counter(), 0
            for _, labels in source.epoch_batches(epoch, batches, 0, 0, 1):
                images += len(labels)
            if where.type == "cuda":
                torch.cuda.synchronize(where)
            seconds = time.perf_counter() - began
            records.append(
                {
                    "epoch": epoch + 1,
                    "images_per_second": images / seconds,
                    "epoch_seconds": seconds,
                    "images": images,
                    "loader_workers": workers,
                    "decode": source.describe().get("decode"),
                }
            )
            print(f"folder_loader: epoch {epoch + 1}: {images / seconds:.0f} images/s", flush=True)
    finally:
        source.close()
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="an image folder as files")
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    parser.add_argument("--run", required=True, help="the trainer's run JSON")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--loader-workers", type=int, help="default: the usable CPUs")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)
    workers = args.loader_workers or cpu_cores()
    records = measure(args.data_dir, json.loads(args.run), args.epochs, workers, args.device)
    if args.out_dir:
        write_metrics(args.out_dir, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
