"""What ``make bench`` prints and keeps: the rows and figures tables, and the results file
``benchmarks/results/<short hostname>-<YYYY-MM-DD>[-quick].json`` (no machine paths in it)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib.figures import Figure
from benchlib.rows import HERE, REPO, Case, Row


def machine() -> dict[str, Any]:
    from clusterbench.core.provenance import collect

    info = collect(REPO)
    info["cpus_usable"] = len(os.sched_getaffinity(0))
    info["gpus"] = info["gpus"] or "none"
    return info


def print_tables(
    rows: Sequence[Row], figures: Sequence[Figure], warmup: int, order: dict[str, int]
) -> None:
    print()
    print(
        f"Rows (images/s, epoch s and the trainer's MFU: medians or means over epochs > {warmup}; "
        "compile s: apart from the epochs; wall s: whole command)"
    )
    print(
        f"{'section':<18} {'row':<58} {'round':>5} {'status':<7} {'images/s':>9} "
        f"{'epoch s':>8} {'MFU':>6} {'compile s':>9} {'wall s':>7}"
    )
    for r in sorted(rows, key=lambda r: (order.get(r.spec.case, 99), r.spec.name, r.round)):
        ips = f"{r.images_per_second:.0f}" if r.images_per_second is not None else "-"
        eps = f"{r.epoch_seconds:.3f}" if r.epoch_seconds is not None else "-"
        mfu = r.facts.get("mfu")
        mfu_text = "-" if mfu is None else f"{100 * mfu:.1f}%"
        compiled = r.facts.get("compile_seconds") if r.facts.get("compiled") else None
        compile_text = "-" if compiled is None else f"{compiled:.0f}"
        print(
            f"{r.spec.case:<18} {r.spec.name:<58} {r.round:>5} {r.status:<7} {ips:>9} "
            f"{eps:>8} {mfu_text:>6} {compile_text:>9} {r.wall_seconds:>7.1f}"
        )
    print()
    print("Figures (ratios of the rows' median images/s within a round; median over the rounds)")
    print(f"{'figure':<28} {'value':>8} {'goal':>8} {'met':<4} detail")
    for f in figures:
        value = "-" if f.value is None else f"{f.value:.{3 if f.value < 100 else 0}f}"
        goal = "-" if f.goal is None else f"{'<=' if f.at_most else '>='} {f.goal:g}"
        print(f"{f.name:<28} {value:>8} {goal:>8} {f.met:<4} {f.detail}")
        print(f"{'':<28} {'':>8} {'':>8} {'':<4} {f.what}")


def case_json(case: Case) -> dict[str, Any]:
    meta = json.loads((case.data_dir / "meta.json").read_text())
    return {**dataclasses.asdict(case), "data_dir": None, "images": meta.get("counts")}


def results_path(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return args.out
    host = socket.gethostname().split(".")[0] or "unknown"
    suffix = "-quick" if args.quick else ""
    return HERE / "results" / f"{host}-{dt.date.today().isoformat()}{suffix}.json"


def write_results(args: argparse.Namespace, result: dict[str, Any], work: Path) -> Path:
    """The results file, machine paths replaced by names."""
    path = results_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, default=str) + "\n"
    for where, name in ((sys.executable, "python"), (str(work), "<work>"), (str(REPO), "<repo>")):
        text = text.replace(json.dumps(where)[1:-1], name)
    path.write_text(text)
    return path
