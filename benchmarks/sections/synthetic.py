"""synthetic: Horovod's own synthetic benchmark as the reference (F6): a torchvision ResNet-18
at a reduced resolution (64x64 by default), clusterbench 2 workers / Horovod's
``pytorch_synthetic_benchmark.py`` written anew (``benchmarks/horovod_synthetic.py``: the
torchvision model, ``hvd.DistributedOptimizer``, one fixed fake batch per rank, ``timeit``,
2 ranks under ``horovodrun``), per backend (goal >= 0.95).

The reference's timed iterations are the trainer's epochs: as many steps each (the training
images over the global batch), the same per-rank batch, its first iteration left out of the
median as the trainer's first epoch is. ``bn: local`` is like for like: the reference's
torchvision BatchNorm normalises each rank's own batch and exchanges no statistics. The
trainer reads its random images from uint8 arrays (a new batch each step, normalised on the
device); the reference reuses one float batch: what that costs is in the ratio.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_data import make_cifar_like
from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 75
TITLE = "torchvision ResNet-18, 2 workers / Horovod's synthetic benchmark 2 ranks (F6)"
OPTIONS = {
    "synthetic_train": (int, 768, 256, "training images of the synthetic rows"),
    "synthetic_size": (int, 64, 32, "image height and width of the synthetic rows"),
    "synthetic_batch": (int, 64, 64, "global batch of the synthetic rows (2 ranks share it)"),
    "synthetic_epochs": (int, 5, 3, "epochs (reference: timed iterations) of the synthetic rows"),
}
NEEDS: tuple[str, ...] = ()
GPU = False
MODEL = "torchvision.resnet18"


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    size = args.synthetic_size
    data = make_cifar_like(work / "data" / f"synthetic-{size}", args.synthetic_train, size=size)
    case = Case(
        "synthetic", "cifar10", MODEL, data, args.synthetic_epochs, args.synthetic_batch, 0.01
    )
    return {"synthetic": case}


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    reference = Spec("synthetic", "horovod_synthetic", 2)
    runner.get(reference)
    figs = []
    for b in args.backends:
        cb2 = Spec("synthetic", "cb", 2, b, "local")
        runner.get(cb2)
        what = (
            f"resnet18 {args.synthetic_size}px: clusterbench {b} 2 workers (bn local) / "
            "Horovod's synthetic benchmark, 2 ranks"
        )
        figs.append(ratio_figure(runner, f"F6 {b}", what, 0.95, cb2, reference))
    return figs
