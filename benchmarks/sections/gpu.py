"""gpu (only with CUDA): ResNet-20, CIFAR-shaped arrays, batch 512, bf16 autocast and
channels-last: clusterbench 1 GPU / hand loop 1 GPU (F5, goal >= 0.95); and the same run with
``compile: true`` beside the default (C gpu: compiled / default, reported; on one GPU nothing is
exchanged, so one backend's rows stand for both)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from bench_data import make_cifar_like
from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

from sections.compile import compile_note

ORDER = 40
TITLE = "ResNet-20 bf16 + channels-last on one GPU / hand loop (F5)"
OPTIONS = {
    "gpu_train": (int, 50000, 4096, "training images of the gpu rows"),
    "gpu_epochs": (int, 6, 3, "epochs of the gpu rows"),
}
NEEDS: tuple[str, ...] = ()
GPU = True


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    data = make_cifar_like(work / "data" / "cifar-gpu", args.gpu_train)
    case = Case(
        "gpu", "cifar10", "resnet", data, args.gpu_epochs, 512, 0.05,
        gpu=True, precision="bf16", channels_last=True,
    )  # fmt: skip
    return {"gpu": case}


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    hand = Spec("gpu", "hand_loop")
    runner.get(hand)
    figs = []
    for b in args.backends:
        cb1 = Spec("gpu", "cb", 1, b, "aggregate")
        runner.get(cb1)
        what = f"gpu resnet bf16+channels_last: clusterbench {b} 1 GPU / hand loop 1 GPU"
        figs.append(ratio_figure(runner, f"F5 {b}", what, 0.95, cb1, hand))
    default = Spec("gpu", "cb", 1, args.backends[-1], "aggregate")
    compiled = dataclasses.replace(default, run=(("compile", True),))
    runner.get(compiled)
    what = (
        f"gpu resnet bf16+channels_last: clusterbench {args.backends[-1]} 1 GPU, "
        "compile: true / default"
    )
    fig = ratio_figure(runner, "C gpu", what, None, compiled, default)
    fig.detail += compile_note(runner, compiled)
    return [*figs, fig]
