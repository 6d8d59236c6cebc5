"""decode (only with CUDA): the loader section's ImageNet-sized JPEGs made into ResNet-50's
training batches (random-resized-crop 224, flip, normalised) for one GPU, decoded and augmented
on the GPU (``decode: gpu``) against the CPU path on the same node (``decode: cpu``: the loader
processes decode and augment, the batches are copied to the GPU), no model.

``folder_loader.py --device cuda`` for each, with the usable CPUs as loader processes (with
``decode: gpu`` they only read the files). G = images/s decoded and augmented on one GPU /
the CPU path's images/s on this node, median over the epochs after the first; reported.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_data import cpu_cores
from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 83
TITLE = "JPEG batches decoded and augmented on one GPU / on this node's CPUs (G)"
OPTIONS: dict[str, tuple] = {}
NEEDS: tuple[str, ...] = ("loader",)
GPU = True


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # the loader section's case (NEEDS)


def spec(decode: str, epochs: int) -> Spec:
    workers = str(cpu_cores())
    return Spec(
        "loader",
        "folder_loader",
        run=(("augment", "standard"), ("gpus_per_node", 1), ("decode", decode)),
        args=("--epochs", str(epochs), "--loader-workers", workers, "--device", "cuda"),
        label=f"decode {decode}: {workers} loader processes, batches for one GPU",
    )


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    gpu, cpu = spec("gpu", args.loader_epochs), spec("cpu", args.loader_epochs)
    for one in (gpu, cpu) if runner.round % 2 else (cpu, gpu):
        runner.get(one)
    what = (
        "500 x 375 JPEGs to ResNet-50's training batches on one GPU: decoded and augmented on "
        "the GPU / by this node's CPUs (images/s)"
    )
    return [ratio_figure(runner, "G decode gpu/cpu", what, None, gpu, cpu)]
