"""streaming: streamed against resident arrays (F7) on the resnet section's data: the
1-worker trainer with ``loading: stream`` (the memory-mapped arrays through its DataLoader,
the default ``loader_workers``) over the same run with ``loading: resident`` (goal >= 0.9),
and the data-wait share of the streamed row's step time (the step-time breakdown's ``data``
phase over the whole step; reported). One backend, the first of ``--backends``: how the data
is read does not depend on it. The two rows alternate their order from round to round."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchlib.figures import Figure, ratio_figure, share_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 70
TITLE = "streamed / resident arrays, 1 worker, ResNet-20 (F7), and the streamed data wait"
OPTIONS: dict[str, tuple] = {}
NEEDS = ("resnet",)
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # the resnet section's case (NEEDS)


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    b = args.backends[0]
    stream = Spec("resnet", "cb", 1, b, "aggregate", data=(("loading", "stream"),))
    resident = Spec("resnet", "cb", 1, b, "aggregate", data=(("loading", "resident"),))
    for spec in (resident, stream) if runner.round % 2 else (stream, resident):
        runner.get(spec)
    what = f"resnet: clusterbench {b} 1 worker, loading: stream / loading: resident"
    share = f"resnet: clusterbench {b} 1 worker, loading: stream: data wait / step time"
    return [
        ratio_figure(runner, "F7 stream/resident", what, 0.9, stream, resident),
        share_figure(runner, "F7 stream data wait", share, stream),
    ]
