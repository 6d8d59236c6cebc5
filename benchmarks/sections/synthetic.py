"""synthetic: Horovod's own synthetic benchmark as the reference (F6): torchvision's ResNet-18
at a reduced resolution (64x64 by default), clusterbench 2 workers / Horovod's
``pytorch_synthetic_benchmark.py`` written anew (``benchmarks/horovod_synthetic.py``: the
torchvision model, ``hvd.DistributedOptimizer``, one fixed fake batch per rank, ``timeit``,
2 ranks under ``horovodrun``), per backend, with the trainer's defaults (``bn: aggregate``;
goal >= 0.95). ``bn: local`` stands beside it (reported, no goal): the reference's torchvision
BatchNorm normalises each rank's own batch and exchanges no statistics.

The case is the resnet18 section's (synthetic images generated on the device, ``format:
synthetic``; ``--resnet18-*`` sets its sizes). The reference's timed iterations are the
trainer's epochs: as many steps each (the training images over the global batch), the same
per-rank batch, its first iteration left out of the median as the trainer's first epoch is.
The trainer takes a new batch each step (normalised on the device); the reference reuses one
float batch: what that costs is in the ratio.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

from sections.resnet18 import CASE

ORDER = 75
TITLE = "torchvision ResNet-18, 2 workers / Horovod's synthetic benchmark 2 ranks (F6)"
OPTIONS: dict[str, tuple] = {}
NEEDS = ("resnet18",)
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # the resnet18 section's case (NEEDS)


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    reference = Spec(CASE, "horovod_synthetic", 2)
    runner.get(reference)
    figs = []
    size = args.resnet18_size
    for b in args.backends:
        for bn, goal in (("aggregate", 0.95), ("local", None)):
            cb2 = Spec(CASE, "cb", 2, b, bn)
            runner.get(cb2)
            what = (
                f"resnet18 {size}px: clusterbench {b} 2 workers (bn {bn}"
                f"{', the default' if bn == 'aggregate' else ''}) / Horovod's synthetic "
                "benchmark, 2 ranks"
            )
            name = f"F6 {b}" + ("" if bn == "aggregate" else f" bn={bn}")
            figs.append(ratio_figure(runner, name, what, goal, cb2, reference))
    return figs
