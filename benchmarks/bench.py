"""`make bench`: the clusterbench trainer against readable references, in one run.

```
.venv/bin/python benchmarks/bench.py [--quick] [--only digits,resnet,...] [--verbose]
```

Every row is one training (or measurement) in its own process, run one after the other, never
two at once: ``clusterbench`` rows through ``python -m clusterbench.launch --np W -- python
scripts/train.py`` exactly as the workflow runs them; the references are scripts of
``benchmarks/`` written the way a user would write them (``hand_loop.py``, ``plain_ddp.py``,
...). A row's images/s is the median over its epochs after the first ``--warmup-epochs``
(default 1), training phase only. The sections are the modules of ``benchmarks/sections/``
(one each: its data, rows and figures); benchmarks/README.md lists them and their figures.

Rounds interleave the rows (all rows of round 1, then of round 2, ...), so that a slow spell of
the machine hits every row alike; each figure is a ratio within a round, and the median over
the rounds is reported with every round's value.

CPU sections hide any GPU (``CUDA_VISIBLE_DEVICES=``) and drop ``OMP_NUM_THREADS`` /
``MKL_NUM_THREADS`` from the environment, so that every row uses the CPUs of its affinity mask
(divided among its processes). Failed rows are reported with the tail of their output and do
not stop the others; the exit status is 1 when any row failed, else 0 (nothing is asserted).
Results: ``benchmarks/results/<short hostname>-<YYYY-MM-DD>[-quick].json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from benchlib.figures import Figure, combine_rounds
from benchlib.output import case_json, machine, print_tables, write_results
from benchlib.rows import Case, Runner
from sections import ordered

BACKENDS = ("horovod", "ddp")


def parse_args(argv: list[str] | None, sections: list[tuple[str, ModuleType]]) -> Any:
    names = [name for name, _ in sections]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, few epochs (development)")
    p.add_argument("--only", default=",".join(names), help=f"sections: {', '.join(names)}")
    p.add_argument("--backends", default=",".join(BACKENDS), help="trainer backends to run")
    p.add_argument("--warmup-epochs", type=int, default=1, help="epochs left out of the medians")
    p.add_argument("--rounds", type=int, help="times every row runs, interleaved (default 3)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per row before killing it")
    p.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/...)")
    p.add_argument("--work-dir", type=Path, help="keep data, run dirs and logs here")
    p.add_argument("--verbose", action="store_true", help="stream every row's output")
    options = {key: spec for _, module in sections for key, spec in module.OPTIONS.items()}
    for key, (kind, default, quick, text) in options.items():
        flag = "--" + key.replace("_", "-")
        p.add_argument(flag, type=kind, help=f"{text}: default {default} (quick: {quick})")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [s for s in args.sections if s not in names] + [
        b for b in args.backends if b not in BACKENDS
    ]
    if bad:
        p.error(f"unknown section(s)/backend(s) {bad}: sections {names}, backends {BACKENDS}")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    for key, (_, default, quick, _) in options.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else default)
    return args


def make_cases(args: Any, sections: dict[str, ModuleType], work: Path) -> dict[str, Case]:
    """The cases of the chosen sections and of those they need."""
    wanted = list(args.sections)
    for name in args.sections:
        wanted += [n for n in sections[name].NEEDS if n not in wanted]
    cases: dict[str, Case] = {}
    for name in wanted:
        cases.update(sections[name].cases(args, work))
    for name in args.sections:  # sections whose cases are made of others' (assembly)
        prepare = getattr(sections[name], "prepare", None)
        if prepare is not None:
            cases.update(prepare(cases))
    return cases


def run_rounds(runner: Runner, args: Any, chosen: list[tuple[str, ModuleType]]) -> list[Figure]:
    per_round: list[Figure] = []
    for runner.round in range(1, args.rounds + 1):
        for _, module in chosen:
            per_round += module.run(runner, args)
    return combine_rounds(per_round)


def main(argv: list[str] | None = None) -> int:
    import torch

    sections = ordered()
    args = parse_args(argv, sections)
    has_gpu = torch.cuda.is_available()
    info = machine()
    print(
        f"clusterbench benchmark{' (--quick)' if args.quick else ''}: {info['host']}, "
        f"{info['cpu_model']}, {info['cpus_usable']} usable CPU(s), GPUs: {info['gpus']}, "
        f"torch {info['versions']['torch']}, horovod {info['versions']['horovod']}, "
        f"python {info['versions']['python']}"
    )
    chosen = [(n, m) for n, m in sections if n in args.sections]
    skipped = [
        f"{n}: skipped (no GPU: torch.cuda.is_available() is False)"
        for n, m in chosen
        if m.GPU and not has_gpu
    ]
    chosen = [(n, m) for n, m in chosen if has_gpu or not m.GPU]
    args.sections = [n for n, _ in chosen]
    print(
        f"sections {','.join(args.sections)}; backends {','.join(args.backends)}; medians over "
        f"epochs > {args.warmup_epochs} (epoch 1 includes one-off start-up costs)"
    )
    for line in skipped:
        print(line, flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="clusterbench-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cases = make_cases(args, dict(sections), work)
        runner = Runner(cases, work, args)
        figures = run_rounds(runner, args, chosen)
        cases_json = {k: case_json(c) for k, c in cases.items()}  # before tmp goes
    rows = list(runner.rows.values())
    order = {
        case: i
        for i, (name, _) in enumerate(sections)
        for case in cases
        if case.endswith(name) or case == name
    }
    print_tables(rows, figures, args.warmup_epochs, order)
    for line in skipped:
        print(line)
    failed = [r for r in rows if r.status != "ok"]
    total = time.monotonic() - started
    print(f"{len(rows)} row(s) in {total:.0f} s; {len(failed)} failed")
    settings = {
        k: v
        for k, v in vars(args).items()
        if k not in ("out", "work_dir", "only") and not isinstance(v, Path)
    }
    result = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": info,
        "settings": settings,
        "cases": cases_json,
        "medians_exclude_epochs": list(range(1, args.warmup_epochs + 1)),
        "rows": [r.as_json() for r in rows],
        "figures": [f.as_json() for f in figures],
        "skipped": skipped,
        "total_seconds": total,
    }
    print(f"results: {write_results(args, result, work)}")
    if failed:
        print("failed rows: " + "; ".join(f"{r.spec.case}: {r.spec.name}" for r in failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
