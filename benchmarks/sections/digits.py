"""digits: small_cnn on the real digits data set (built offline), global batch 128, lr 0.05.

F1 = clusterbench 1 worker / hand loop (goal >= 0.95), per backend.
F3 = clusterbench 2 workers / plain DDP 2 processes (goal >= 0.9), per backend and bn mode
(bn ``local`` is like for like: plain DDP keeps each rank's own BatchNorm statistics).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bench_data import build_digits
from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 10
TITLE = "small_cnn on the digits: 1 worker / hand loop, 2 workers / plain DDP"
OPTIONS = {"digits_epochs": (int, 20, 3, "epochs of the digits rows")}
NEEDS: tuple[str, ...] = ()
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    print("building the digits data set (offline) ...", flush=True)
    logging.disable(logging.INFO)  # the download/preprocess stages' progress lines
    data = build_digits(work / "digits")
    logging.disable(logging.NOTSET)
    return {"digits": Case("digits", "digits", "small_cnn", data, args.digits_epochs, 128, 0.05)}


def one_and_two_workers(runner: Runner, case: str, bn_modes: tuple[str, ...]) -> list[Figure]:
    """F1 (1 worker / hand loop) and F3 (2 workers / plain DDP) of ``case``, per backend."""
    hand, ddp = Spec(case, "hand_loop"), Spec(case, "plain_ddp", 2)
    backends = runner.args.backends
    for spec in (hand, *(Spec(case, "cb", 1, b, "aggregate") for b in backends), ddp):
        runner.get(spec)
    for b in backends:
        for bn in bn_modes:
            runner.get(Spec(case, "cb", 2, b, bn))
    figs = [
        ratio_figure(
            runner,
            f"F1 {case} {b}",
            f"{case}: clusterbench {b} 1 worker / hand loop",
            0.95,
            Spec(case, "cb", 1, b, "aggregate"),
            hand,
        )
        for b in backends
    ]
    for b in backends:
        for bn in bn_modes:
            what = f"{case}: clusterbench {b} 2 workers (bn {bn}) / plain DDP 2 processes"
            cb2 = Spec(case, "cb", 2, b, bn)
            figs.append(ratio_figure(runner, f"F3 {case} {b} bn={bn}", what, 0.9, cb2, ddp))
    return figs


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    return one_and_two_workers(runner, "digits", ("aggregate", "local"))
