"""resnet18: torchvision's ResNet-18 on synthetic 64x64 images (``format: synthetic``, generated
on the device, as the workflow's synthetic datasets are), the default settings.

F1 = clusterbench 1 worker / hand loop (goal >= 0.95), per backend.
F3 = clusterbench 2 workers / plain DDP 2 processes (goal >= 0.9), per backend, with the
default ``bn: aggregate``.

Its case (the data, global batch 32, lr 0.01) is also the synthetic section's (F6). The
references read the same images (:func:`bench_data.load_arrays` generates them as the trainer
does) as uint8 arrays resident in memory.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bench_data import build_synthetic
from benchlib.figures import Figure
from benchlib.rows import Case, Runner

from sections.digits import one_and_two_workers

ORDER = 25
TITLE = "torchvision ResNet-18 on synthetic 64x64 images: F1 and F3 with the defaults"
OPTIONS = {
    "resnet18_train": (int, 768, 256, "training images of the resnet18 and synthetic rows"),
    "resnet18_size": (int, 64, 64, "image height and width of the resnet18 and synthetic rows"),
    "resnet18_batch": (int, 32, 32, "global batch of the resnet18 and synthetic rows"),
    "resnet18_epochs": (int, 5, 3, "epochs (F6's reference: timed iterations) of those rows"),
}
NEEDS: tuple[str, ...] = ()
GPU = False
MODEL = "torchvision.resnet18"
CASE = "resnet18"


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    logging.disable(logging.INFO)  # the download/preprocess stages' progress lines
    data = build_synthetic(work / "synthetic", args.resnet18_size, args.resnet18_train)
    logging.disable(logging.NOTSET)
    epochs, batch = args.resnet18_epochs, args.resnet18_batch
    return {CASE: Case(CASE, "bench-synthetic", MODEL, data, epochs, batch, 0.01)}


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    return one_and_two_workers(runner, CASE, ("aggregate",))
