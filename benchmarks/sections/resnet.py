"""resnet: ResNet-20 on synthetic CIFAR-shaped arrays (compute-bound), the default settings.

F1 = clusterbench 1 worker / hand loop (goal >= 0.95), per backend.
F3 = clusterbench 2 workers / plain DDP 2 processes (goal >= 0.9), per backend (bn aggregate,
the default, and local, like for like).
F2 = (clusterbench 2 / clusterbench 1) / (plain DDP 2 / hand loop), per backend (goal >= 0.9).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_data import make_cifar_like
from benchlib.figures import Figure, formula_figure
from benchlib.rows import Case, Runner, Spec

from sections.digits import one_and_two_workers

ORDER = 20
TITLE = "ResNet-20 on CIFAR-shaped arrays: F1, F3 and the 2-worker scaling F2"
OPTIONS = {
    "resnet_train": (int, 768, 192, "training images of the resnet rows"),
    "resnet_batch": (int, 128, 64, "global batch of the resnet rows"),
    "resnet_epochs": (int, 6, 3, "epochs of the resnet rows"),
}
NEEDS: tuple[str, ...] = ()
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    data = make_cifar_like(work / "data" / "cifar-cpu", args.resnet_train)
    case = Case("resnet", "cifar10", "resnet", data, args.resnet_epochs, args.resnet_batch, 0.05)
    return {"resnet": case}


def scaling(backend: str) -> tuple[list[Spec], str]:
    specs = [
        Spec("resnet", "cb", 2, backend, "aggregate"),
        Spec("resnet", "cb", 1, backend, "aggregate"),
        Spec("resnet", "plain_ddp", 2),
        Spec("resnet", "hand_loop"),
    ]
    return specs, f"resnet: (clusterbench {backend} 2w / 1w) / (plain DDP 2p / hand loop)"


def speedups(c2: float, c1: float, d2: float, h1: float) -> tuple[float, str]:
    return (c2 / c1) / (d2 / h1), f"speed-up {c2 / c1:.2f} (clusterbench) vs {d2 / h1:.2f}"


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    figs = one_and_two_workers(runner, "resnet", ("aggregate", "local"))
    for b in args.backends:
        specs, what = scaling(b)
        figs.append(formula_figure(runner, f"F2 resnet {b}", what, 0.9, specs, speedups))
    return figs
