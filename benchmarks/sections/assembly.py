"""assembly: batch assembly images/s (the trainer's own data source, no model) over the
clusterbench 1-worker consumption, on the digits and on the resnet case (F4, goal >= 20)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 30
TITLE = "batch assembly alone / the trainer's consumption (F4)"
OPTIONS = {"assembly_epochs": (int, 8, 3, "epochs of the assembly rows")}
NEEDS = ("digits", "resnet")
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # its cases are made from the digits and resnet ones (NEEDS) by prepare()


def prepare(all_cases: dict[str, Case]) -> dict[str, Case]:
    """An assembly case of each case it measures, the same data and batch."""
    return {
        f"assembly-{name}": dataclasses.replace(all_cases[name], name=f"assembly-{name}")
        for name in NEEDS
        if name in all_cases
    }


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    figs = []
    seconds = "0.2" if args.quick else "0.5"
    for case in NEEDS:
        extra = ("--epochs", str(args.assembly_epochs), "--min-seconds", seconds)
        assembly = Spec(f"assembly-{case}", "assembly", args=extra, label="batch assembly only")
        runner.get(assembly)
        for b in args.backends:
            cb1 = Spec(case, "cb", 1, b, "aggregate")
            runner.get(cb1)  # already run by its own section, unless that was left out
            what = f"{case}: batch assembly / clusterbench {b} 1-worker consumption"
            figs.append(ratio_figure(runner, f"F4 {case} {b}", what, 20.0, assembly, cb1))
    return figs
