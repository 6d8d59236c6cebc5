"""loader: the streamed image-folder loader against ``torchvision.datasets.ImageFolder`` and a
``DataLoader`` on the same folder (F13, goal >= 1.0).

The data: ``--loader-images`` JPEGs of ImageNet's typical size (500 x 375, about 110 KB:
gradients under fine noise, quality 90) in 8 class folders, read in place by clusterbench
(``datasets.<name>.path``: its index alone, :func:`bench_data.index_in_place`) and by
``ImageFolder`` from the same folder. Both make ResNet-50's training batches: a
random-resized-crop to 224 x 224, a horizontal flip, ImageNet's normalisation; with the same
number of loader processes (the usable CPUs) and batch (``--loader-batch``), no model.

F13 = clusterbench's loader (``folder_loader.py``: the trainer's own data source, streamed,
``augment: standard``) / ``torchvision_loader.py`` (the reference, written as PyTorch's
ImageNet example writes it), images/s, median over the epochs after the first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_data import cpu_cores, index_in_place, jpeg_tree
from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 82
TITLE = "the image-folder loader / torchvision ImageFolder + DataLoader, ImageNet-sized JPEGs (F13)"
OPTIONS = {
    "loader_images": (int, 1536, 128, "JPEGs of ImageNet's typical size the F13 rows read"),
    "loader_epochs": (int, 4, 2, "epochs of the F13 rows"),
    "loader_batch": (int, 64, 32, "the F13 rows' batch"),
}
NEEDS: tuple[str, ...] = ()
GPU = False


def folder_of(work: Path) -> Path:
    return work / "loader" / "photos"


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    print("making the ImageNet-sized JPEGs (read in place) ...", flush=True)
    folder = jpeg_tree(folder_of(work), args.loader_images, 8)
    data = index_in_place(folder, work / "loader" / "data", [224, 224])
    case = Case("loader", "photos", "resnet", data, args.loader_epochs, args.loader_batch, 0.1)
    return {"loader": case}


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    workers = str(cpu_cores())
    epochs = ("--epochs", str(args.loader_epochs), "--loader-workers", workers)
    ours = Spec(
        "loader",
        "folder_loader",
        run=(("augment", "standard"),),
        args=epochs,
        label=f"clusterbench loader, {workers} loader processes",
    )
    theirs = Spec(
        "loader",
        "torchvision_loader",
        args=("--folder", str(folder_of(runner.work)), *epochs),
        label=f"torchvision ImageFolder + DataLoader, {workers} workers",
    )
    for spec in (ours, theirs) if runner.round % 2 else (theirs, ours):
        runner.get(spec)
    what = (
        "500 x 375 JPEGs to ResNet-50's training batches (random-resized-crop 224, flip, "
        f"normalised), {workers} loader processes each: clusterbench / torchvision"
    )
    return [ratio_figure(runner, "F13 loader/torchvision", what, 1.0, ours, theirs)]
