"""image_folder: the streamed image folder's loader against what training consumes (F8).

The data: ``--folder-images`` JPEGs of ``--folder-size`` pixels square (smooth synthetic
photos, quality 90, two classes), preprocessed by clusterbench as an image folder stored as
files and decoded at ``--folder-input`` pixels square (the dataset's ``image_size``), with
``augment: standard`` (random-resized-crop and flip in the loader processes).

F8 = the loader alone (``folder_loader.py``: the trainer's data source, no model,
``loader_workers`` = the usable CPUs) / the 1-worker ResNet-20 trainer's images/s on the same
images (its default ``loader_workers``): above 1 the loader keeps up. Reported; the issue's
goal, >= 1, is for a GPU. Also the data-wait share of that trainer's step time (reported).
One backend, the first of ``--backends``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_data import extract_folder, jpeg_folder
from benchlib.figures import Figure, ratio_figure, share_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 80
TITLE = "the image-folder loader alone / the 1-worker trainer's consumption (F8)"
OPTIONS = {
    "folder_images": (int, 768, 192, "JPEGs of the image-folder rows"),
    "folder_size": (int, 256, 128, "their side, pixels"),
    "folder_input": (int, 64, 32, "the input side they are decoded at, pixels"),
    "folder_epochs": (int, 3, 2, "epochs of the image-folder rows"),
}
NEEDS: tuple[str, ...] = ()
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    print("making the image folder (JPEGs, preprocessed as files) ...", flush=True)
    archive = jpeg_folder(
        work / "folder" / "raw" / "photos.zip", args.folder_images, args.folder_size
    )
    side = args.folder_input
    data = extract_folder(archive, work / "folder" / "data", [side, side])
    case = Case("image-folder", "photos", "resnet", data, args.folder_epochs, 64, 0.05)
    return {"image-folder": case}


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    b = args.backends[0]
    extra = ("--epochs", str(args.folder_epochs))
    augment = (("augment", "standard"),)
    loader = Spec("image-folder", "folder_loader", run=augment, args=extra, label="loader alone")
    trainer = Spec("image-folder", "cb", 1, b, "aggregate", run=augment)
    for spec in (loader, trainer) if runner.round % 2 else (trainer, loader):
        runner.get(spec)
    what = f"image folder: loader alone (loader_workers = CPUs) / clusterbench {b} 1 worker"
    share = f"image folder: clusterbench {b} 1 worker: data wait / step time"
    return [
        ratio_figure(runner, "F8 loader/trainer", what, None, loader, trainer),
        share_figure(runner, "F8 trainer data wait", share, trainer),
    ]
