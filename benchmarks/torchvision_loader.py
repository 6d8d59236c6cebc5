"""Reference of F13: ``torchvision.datasets.ImageFolder`` and a ``DataLoader``, written as a user
writes it (PyTorch's ImageNet example: ResNet-50's training transforms), images/s with no model.

```
.venv/bin/python benchmarks/torchvision_loader.py --folder DIR --run JSON [--epochs 3]
    [--loader-workers N] [--out-dir OUT]
```

``ImageFolder(DIR, transform)`` with ``RandomResizedCrop(224)`` (the run's input size),
``RandomHorizontalFlip()``, ``ToTensor()`` and ``Normalize`` with ImageNet's mean and std;
``DataLoader(batch_size, shuffle=True, num_workers=N)`` (the run's ``batch_size``; N as the
clusterbench row's ``loader_workers``). Every batch of an epoch is taken, and nothing else is
done. ``metrics.jsonl`` gets images/s per epoch (the first one includes starting the loader
processes; later ones too: PyTorch starts them at each epoch unless told otherwise).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from bench_data import cpu_cores, write_metrics

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def measure(folder: Path, size: int, batch: int, epochs: int, workers: int) -> list[dict]:
    from torchvision import datasets, transforms

    torch.set_num_threads(cpu_cores())
    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    dataset = datasets.ImageFolder(str(folder), transform)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch, shuffle=True, num_workers=workers
    )
    records = []
    for epoch in range(epochs):
        began, images = time.perf_counter(), 0
        for _, labels in loader:
            images += len(labels)
        seconds = time.perf_counter() - began
        records.append(
            {
                "epoch": epoch + 1,
                "images_per_second": images / seconds,
                "epoch_seconds": seconds,
                "images": images,
                "loader_workers": workers,
            }
        )
        print(f"torchvision_loader: epoch {epoch + 1}: {images / seconds:.0f} images/s", flush=True)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="class folders of images")
    parser.add_argument("--data-dir", type=Path, help="(unused: the rows' common argument)")
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    parser.add_argument("--run", required=True, help="the trainer's run JSON (batch_size)")
    parser.add_argument("--size", type=int, default=224, help="RandomResizedCrop's size")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--loader-workers", type=int, help="default: the usable CPUs")
    args = parser.parse_args(argv)
    run = json.loads(args.run)
    workers = args.loader_workers or cpu_cores()
    records = measure(args.folder, args.size, run["batch_size"], args.epochs, workers)
    if args.out_dir:
        write_metrics(args.out_dir, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
