"""lm: ``gpt-tiny`` (a GPT-style language model on byte tokens) on a real English text, the
default settings.

F10 = clusterbench 1 worker / ``gpt_hand_loop.py`` (a single-process loop written as a user
writes it), tokens/s, per backend (goal >= 0.95).

The text is config/examples/text's notes repeated to ``--lm-kilobytes`` KiB, in windows of
``--lm-seq-len`` tokens, made by the download and preprocess stages (``format: text``); both
rows train on the same windows in the same order (``numpy.random.default_rng([seed, epoch])``).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bench_data import build_text
from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 70
TITLE = "gpt-tiny on byte tokens: 1 worker / a hand loop, tokens/s (F10)"
OPTIONS = {
    "lm_kilobytes": (int, 128, 12, "KiB of text the lm rows train on"),
    "lm_seq_len": (int, 64, 64, "tokens per sequence of the lm rows"),
    "lm_batch": (int, 32, 32, "global batch (sequences) of the lm rows"),
    "lm_epochs": (int, 5, 2, "epochs of the lm rows"),
}
NEEDS: tuple[str, ...] = ()
GPU = False
CASE = "lm"


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    print("building the lm rows' text (byte tokens, offline) ...", flush=True)
    logging.disable(logging.INFO)  # the download/preprocess stages' progress lines
    data = build_text(work / "text", args.lm_kilobytes, args.lm_seq_len)
    logging.disable(logging.NOTSET)
    return {CASE: Case(CASE, "bench-text", "gpt-tiny", data, args.lm_epochs, args.lm_batch, 0.05)}


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    hand = Spec(CASE, "gpt_hand_loop")
    ones = {b: Spec(CASE, "cb", 1, b, "aggregate") for b in args.backends}
    for spec in (hand, *ones.values()):
        runner.get(spec)
    return [
        ratio_figure(
            runner,
            f"F10 {b}",
            f"gpt-tiny: clusterbench {b} 1 worker / gpt hand loop (tokens/s)",
            0.95,
            one,
            hand,
            key="tokens_per_second",
        )
        for b, one in ones.items()
    ]
