"""How the workflow itself scales with the number of runs: parse time and a no-op dry run.

```
.venv/bin/python benchmarks/workflow_scale.py [--runs 100] [--rounds 3]
```

A sweep of ``--runs`` runs (an experiment: a ``lr`` x ``momentum`` matrix on the digits) is
planned in a scratch directory. The data stages run for real (their integrity records are
checked at every invocation); the train, evaluate and report outputs of every run are then
marked done with ``snakemake --touch``, so that the workflow finds nothing to do. Measured,
each ``--rounds`` times (median reported), in the same run:

* parse: ``snakemake --list-rules`` on that config (Snakemake reads the Snakefile, validates and
  expands the config, defines the rules; no job graph);
* no-op dry run: ``snakemake -n`` on the finished sweep (parse, job graph, every output's
  timestamps and the integrity checks: "Nothing to be done");
* the reference: ``snakemake --list-rules`` on a one-rule Snakefile: the cost of starting
  Python and importing Snakemake, which every invocation pays whatever the workflow.

Figures: parse and dry run minus the reference (what the workflow adds; goals: parse <= 1 s,
no-op dry run <= 3 s for 100 runs on the 2-core reference machine), and the raw times. Cluster
jobs parse the Snakefile again, so the parse figure is paid once per job. Nothing is asserted.
Results: ``benchmarks/results/workflow-<short hostname>-<YYYY-MM-DD>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GOALS = {"parse": 1.0, "noop_dry_run": 3.0}


def sweep_config(runs: int) -> dict:
    """An experiment of about ``runs`` runs: a lr x momentum matrix, 1 epoch each."""
    side = max(1, round(runs**0.5))
    lrs = [round(0.01 * (i + 1), 4) for i in range(side)]
    momenta = [round(0.5 + 0.49 * j / max(1, side - 1), 4) for j in range(-(-runs // side))]
    return {
        "experiments": {
            "sweep": {
                "dataset": "digits",
                "epochs": 1,
                "workers": 1,
                "matrix": {"lr": lrs, "momentum": momenta},
            }
        },
        "report": {"title": f"{len(lrs) * len(momenta)}-run sweep"},
    }


def run_names(cfg: dict) -> list[str]:
    """The names of the runs ``cfg`` expands to (as the workflow reads it)."""
    sys.path.insert(0, str(REPO / "workflow"))
    from clusterbench.config import validate

    return [run["name"] for run in validate(cfg)["runs"]]


def snakemake(
    workdir: Path, *args: str, snakefile: Path = REPO / "Snakefile", expect: str = ""
) -> float:
    """Seconds one snakemake invocation took (it must succeed, and print ``expect``)."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--cores", "1"]
    start = time.perf_counter()
    proc = subprocess.run([*cmd, *args], cwd=workdir, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or expect not in proc.stdout + proc.stderr:
        raise RuntimeError(
            f"{' '.join(args)} failed or did not say {expect!r}:\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return seconds


def prepare(workdir: Path, runs: int) -> int:
    """The finished sweep in ``workdir``; returns the number of runs."""
    cfg = sweep_config(runs)
    (workdir / "config").mkdir(parents=True)
    (workdir / "config" / "config.yaml").write_text(json.dumps(cfg))
    snakemake(workdir, "results/data/digits/meta.json")  # the data stages, for real
    plan = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-n", "-q"],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    if plan.returncode != 0:
        raise RuntimeError(plan.stdout[-3000:] + plan.stderr[-3000:])
    # every output Snakemake would still make (its --summary), created empty (a name without a
    # suffix is a directory output), and the benchmark files the report reads; then --touch
    summary = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--summary"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in summary.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) >= 5 and fields[4] == "missing":
            path = workdir / fields[0]
            if path.suffix:
                _touch(path)
            else:
                path.mkdir(parents=True, exist_ok=True)
    names = run_names(cfg)
    for name in names:
        for rule in ("train", "evaluate"):
            _touch(workdir / "results" / "benchmarks" / rule / f"{name}.tsv")
    snakemake(workdir, "--touch")
    return len(names)


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="cb-scale-"))
    try:
        sweep = root / "sweep"
        n = prepare(sweep, args.runs)
        trivial = root / "trivial"
        trivial.mkdir()
        (trivial / "Snakefile").write_text('rule a:\n    output: "a"\n    shell: "touch a"\n')
        times: dict[str, list[float]] = {"reference": [], "parse": [], "noop_dry_run": []}
        for _ in range(args.rounds):  # interleaved: a slow spell hits every row alike
            times["reference"].append(
                snakemake(trivial, "--list-rules", snakefile=trivial / "Snakefile")
            )
            times["parse"].append(snakemake(sweep, "--list-rules"))
            times["noop_dry_run"].append(snakemake(sweep, "-n", expect="Nothing to be done"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    figures = {}
    print(f"workflow scale: {n} runs, median of {args.rounds} round(s)")
    print(
        f"  reference (start Python + Snakemake, one-rule Snakefile): {median['reference']:.2f} s"
    )
    for key, label in (("parse", "parse (--list-rules)"), ("noop_dry_run", "no-op dry run (-n)")):
        added = median[key] - median["reference"]
        figures[key] = added
        status = "ok" if added <= GOALS[key] else "ABOVE GOAL"
        rounds = ", ".join(f"{t:.2f}" for t in times[key])
        print(
            f"  {label}: {median[key]:.2f} s raw, {added:.2f} s above the reference "
            f"(goal <= {GOALS[key]:g} s: {status}); rounds {rounds}"
        )
    out = (
        HERE
        / "results"
        / (f"workflow-{socket.gethostname().split('.')[0]}-{dt.date.today().isoformat()}.json")
    )
    out.write_text(
        json.dumps(
            {"runs": n, "rounds": args.rounds, "seconds": times, "added": figures, "goals": GOALS},
            indent=1,
        )
        + "\n"
    )
    print(f"-> {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
