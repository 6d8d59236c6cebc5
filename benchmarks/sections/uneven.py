"""uneven: workers of mixed speed (MXNet's ``work_load_list``, the run key ``shares``). Two
ranks on the resnet section's data, each pinned to a core, rank 1's core shared with a busy
loop (``slowed_rank.py``: it computes at about half speed). F16 = images/s with ``shares:
auto`` (each rank's pace timed over its first steps) / with the even split, both slowed, per
backend; reported beside it: the even split with no rank slowed (the ceiling). The median
leaves out the first epoch (auto's timing is in it). Horovod's background threads stay awake
(``CLUSTERBENCH_HOROVOD_QUIET=0``, as on nodes whose cores other work shares)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from benchlib.figures import Figure, ratio_figure
from benchlib.rows import HERE, Case, Runner, Spec

ORDER = 65
TITLE = "uneven workers: shares auto / even, one of 2 ranks on a shared core (F16)"
OPTIONS: dict[str, tuple] = {}
NEEDS = ("resnet",)
GPU = False

#: Each rank on a core of its own, rank 1's shared with a busy loop.
SLOWED = (sys.executable, str(HERE / "slowed_rank.py"))


#: Horovod's background threads awake: on a core another process keeps busy, quiet ones
#: (``SCHED_IDLE``, the CPU default) would get no time (clusterbench.backends._background).
AWAKE = (("CLUSTERBENCH_HOROVOD_QUIET", "0"),)


def specs(backend: str) -> tuple[Spec, Spec, Spec]:
    """The auto and even rows with rank 1 slowed, and the even row without (the ceiling)."""
    slow = (("BENCH_SLOW_RANK", "1"), *AWAKE)
    auto = Spec("resnet", "cb", 2, backend, "aggregate", run=(("shares", "auto"),), env=slow)
    even = Spec("resnet", "cb", 2, backend, "aggregate", env=slow)
    fair = Spec("resnet", "cb", 2, backend, "aggregate", env=(("BENCH_SLOW_RANK", "-1"), *AWAKE))
    return (
        replace(auto, wrap=SLOWED, label=f"{backend} shares auto, rank 1 slowed"),
        replace(even, wrap=SLOWED, label=f"{backend} even split, rank 1 slowed"),
        replace(fair, wrap=SLOWED, label=f"{backend} even split, no rank slowed"),
    )


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # the resnet section's case (NEEDS)


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    figs = []
    for b in args.backends:
        auto, even, fair = specs(b)
        order = (auto, even, fair) if runner.round % 2 else (fair, even, auto)
        for spec in order:  # alternating: what runs later in a round hits each alike
            runner.get(spec)
        what = f"resnet: clusterbench {b} 2 workers, rank 1 on a shared core: shares auto / even"
        figs.append(ratio_figure(runner, f"F16 {b}", what, 1.0, auto, even))
        ceiling = f"resnet: clusterbench {b} 2 workers: even, rank 1 slowed / no rank slowed"
        figs.append(ratio_figure(runner, f"F16 {b} slowed/fair", ceiling, None, even, fair))
    return figs
