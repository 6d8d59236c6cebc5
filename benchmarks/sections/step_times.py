"""step_times: what the step-time breakdown costs (F12): a 1-worker ResNet-20 run with the
breakdown (the default) over the same run with ``CLUSTERBENCH_STEP_TIMES=off``, per backend
(goal >= 0.98), on the resnet section's data. The rows alternate their order from round to
round."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 60
TITLE = "the step-time breakdown's overhead: with / without (F12)"
OPTIONS: dict[str, tuple] = {}
NEEDS = ("resnet",)
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # the resnet section's case (NEEDS)


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    figs = []
    for b in args.backends:
        timed = Spec("resnet", "cb", 1, b, "aggregate")
        untimed = Spec("resnet", "cb", 1, b, "aggregate", env=(("CLUSTERBENCH_STEP_TIMES", "off"),))
        # the two rows alternate their order from round to round: what runs second in a round
        # (a warmer machine, or a neighbour's job starting) hits each alike over the rounds
        for spec in (timed, untimed) if runner.round % 2 else (untimed, timed):
            runner.get(spec)
        what = f"resnet: clusterbench {b} 1 worker with the step-time breakdown / without"
        figs.append(ratio_figure(runner, f"F12 {b}", what, 0.98, timed, untimed))
    return figs
