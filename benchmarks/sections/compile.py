"""compile: ``compile: true`` (``torch.compile``) beside the defaults, on the CPU: ResNet-20 with 1
and 2 workers (the resnet case), torchvision ResNet-18 (the resnet18 case) and gpt-tiny (the lm
case), 1 worker, per backend.

Figures ``C <case> <workers>w <backend>``: the compiled row's median images/s (tokens/s for
gpt-tiny) over the epochs after the first, over the default row's in the same round; reported,
no goal (it decides ``compile: auto``'s rule, clusterbench/training/compiled.py). The compile
time is not in the epochs: each compiled row's ``compile_seconds`` (run.json) is in the
figure's detail and the results (the first round's compiles start with Inductor's cache cold,
the later rounds' find it warm).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 75
TITLE = "compile: true beside the defaults: ResNet-20 1 and 2 workers, ResNet-18, gpt-tiny (C)"
OPTIONS: dict[str, tuple] = {}
NEEDS: tuple[str, ...] = ("resnet", "resnet18", "lm")
GPU = False
#: (case, workers) of the rows, and the rate each is compared by.
ROWS = (
    ("resnet", 1, "images_per_second"),
    ("resnet", 2, "images_per_second"),
    ("resnet18", 1, "images_per_second"),
    ("lm", 1, "tokens_per_second"),
)


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # the resnet, resnet18 and lm sections' cases (NEEDS)


def compiled(spec: Spec) -> Spec:
    """``spec`` with ``compile: true``."""
    return dataclasses.replace(spec, run=(*spec.run, ("compile", True)))


def compile_note(runner: Runner, spec: Spec) -> str:
    """The compiled row's compile time, as its run.json records it."""
    row = runner.row(spec)
    seconds = None if row is None else row.facts.get("compile_seconds")
    return "" if seconds is None else f"; compiled in {seconds:.0f} s (not in the epochs)"


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    figs = []
    for backend in args.backends:
        for case, workers, key in ROWS:
            default = Spec(case, "cb", workers, backend, "aggregate")
            both = (default, compiled(default))
            for spec in both:
                runner.get(spec)
            what = f"{case}: clusterbench {backend} {workers} worker(s), compile: true / default"
            fig = ratio_figure(
                runner, f"C {case} {workers}w {backend}", what, None, *both[::-1], key
            )
            fig.detail += compile_note(runner, both[1])
            figs.append(fig)
    return figs
