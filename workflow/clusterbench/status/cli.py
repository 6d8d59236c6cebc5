"""``python -m clusterbench.status`` (``make status``): every training of a workflow, a line
each, as it stands now (docs/running.md, "Following every training").

    python -m clusterbench.status [--configfile FILE ...] [--directory DIR]
                                  [--scheduler auto|local|slurm|sge] [--watch [SECONDS]]

Run in the workflow's directory (or name it, ``--directory``), with the config files Snakemake
was given (``--configfile``, merged over ``config/config.yaml`` as Snakemake merges them). It
reads the runs' files and asks the scheduler for its queue: ``auto`` asks Slurm where the Slurm
executor plugin has run in the directory (``.snakemake/slurm_logs/``), SGE where the SGE
plugin has (``.snakemake/sge_logs/``); a local launcher is found by its pid. It writes nothing,
needs no Snakemake running, and works the same after Snakemake was stopped with jobs still in
the queue. ``--watch`` redraws it every few seconds (5 by default) until Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from clusterbench.config import ConfigError, bad_settings
from clusterbench.status import sge, slurm
from clusterbench.status.collect import collect
from clusterbench.status.queue import QueueError, QueueJob
from clusterbench.status.render import table
from clusterbench.status.runs import workflow_runs

#: Each scheduler's queue reader, and the folder its executor plugin makes in the workflow's
#: directory (what ``--scheduler auto`` looks for).
QUEUES = {
    "slurm": (slurm.read_queue, ".snakemake/slurm_logs"),
    "sge": (sge.read_queue, ".snakemake/sge_logs"),
}
#: ``--watch``'s seconds between two redraws when it names none.
WATCH_S = 5.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m clusterbench.status",
        description="Every training of the workflow, a line each: state, job ids, ranks, "
        "epoch, throughput, time so far and left. Writes nothing.",
    )
    parser.add_argument(
        "--configfile",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help="the config files Snakemake was given (merged over config/config.yaml)",
    )
    parser.add_argument(
        "--directory",
        "-d",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="the workflow's directory (default: this one)",
    )
    parser.add_argument(
        "--scheduler",
        choices=("auto", "local", *QUEUES),
        default="auto",
        help="whose queue to ask (auto: the executors that ran here)",
    )
    parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=WATCH_S,
        metavar="SECONDS",
        help=f"redraw every SECONDS (default {WATCH_S:g}) until Ctrl-C",
    )
    args = parser.parse_args(argv)
    if args.watch is not None and not args.watch > 0:
        parser.error(f"--watch: {args.watch:g} seconds: give more than 0")
    return args


def read_queues(workdir: Path, scheduler: str) -> tuple[list[QueueJob], bool, list[str]]:
    """The workflow's jobs in the queues asked, whether any answered, and what failed."""
    names = [n for n, (_, made) in QUEUES.items() if (workdir / made).is_dir()]
    if scheduler != "auto":
        names = [] if scheduler == "local" else [scheduler]
    jobs: list[QueueJob] = []
    asked, notes = False, []
    for name in names:
        try:
            jobs += QUEUES[name][0](workdir)
            asked = True
        except QueueError as exc:
            notes.append(f"the {name} queue could not be read: {exc}")
    return jobs, asked, notes


def snapshot(workdir: Path, runs: list, scheduler: str) -> str:
    jobs, asked, notes = read_queues(workdir, scheduler)
    return table(collect(workdir, runs, jobs, asked), notes)


def watch(workdir: Path, runs: list, scheduler: str, seconds: float) -> int:
    """Redraw the status every ``seconds`` until Ctrl-C (exit 0)."""
    try:
        while True:
            text = snapshot(workdir, runs, scheduler)
            when = time.strftime("%H:%M:%S")
            sys.stdout.write(f"\033[H\033[2J{when}  every {seconds:g} s, Ctrl-C ends\n{text}\n")
            sys.stdout.flush()
            time.sleep(seconds)
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.directory
    if not workdir.is_dir():
        print(f"status: error: {workdir}: no such folder (--directory)", file=sys.stderr)
        return 2
    try:
        runs = workflow_runs(workdir, args.configfile)
    except ConfigError as exc:
        return bad_settings("status", exc)
    if args.watch is not None:
        return watch(workdir, runs, args.scheduler, args.watch)
    try:
        print(snapshot(workdir, runs, args.scheduler))
    except KeyboardInterrupt:  # while the queue is asked: no traceback
        return 130
    return 0
