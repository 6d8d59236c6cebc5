"""How the workflow's own cost grows with the number of runs: parse time and a no-op dry run, each
against plain Snakemake on the same job graph.

```
.venv/bin/python benchmarks/workflow_scale.py [--runs 100 1000 5000] [--rounds 3]
```

For each size, a sweep of about that many runs (an experiment: a ``lr`` x ``momentum`` matrix on
the digits) is planned in a scratch directory. The data stages run for real (their records are
checked at every invocation); the train, evaluate, report and best outputs of every run are then
made empty and marked done with ``snakemake --touch``, so that the workflow finds nothing to do.

The reference is plain Snakemake on a Snakefile of the same shape, which this script writes: the
same rules, each job reading and writing the same files (the stage's script and its code stamp
included: what makes an edit rerun a stage), given as plain lists, with trivial commands and
nothing else (no input, params or resource functions, no config validation, no checks), its
outputs made and marked done the same way. What ours costs above it is clusterbench's own code
and what its rules ask of Snakemake (functions per job).

Measured, each ``--rounds`` times and interleaved (a slow spell hits every row alike), the median
reported:

* parse: ``snakemake --list-rules`` (Snakemake reads the Snakefile; ours also validates and
  expands the config; no job graph);
* no-op dry run: ``snakemake -n`` on the finished sweep ("Nothing to be done": parse, the job
  graph, every file's timestamps, the workflow's checks);
* start-up: ``snakemake --list-rules`` on a one-rule Snakefile: Python and Snakemake alone.

Figures: for each size and step, the seconds of plain Snakemake and of ours and their ratio, in
CPU time of the snakemake process (user + sys: what other work on the machine changes least)
and in wall-clock time; goal: ratio <= 1.3 from 1,000 runs on. For the smallest size also what
the workflow adds above the start-up (goals: parse <= 1 s, no-op dry run <= 3 s for 100 runs).
Cluster jobs parse the Snakefile again, so the parse figure is paid once per job. Nothing is
asserted. Results: ``benchmarks/results/workflow-<short hostname>-<YYYY-MM-DD>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
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
#: What the workflow may add above the start-up, for the smallest sweep (100 runs).
GOALS = {"parse": 1.0, "noop_dry_run": 3.0}
#: Ours / plain Snakemake on the same job graph, from this many runs on.
RATIO_GOAL, RATIO_FROM = 1.3, 1000
STEPS = {"parse": ("--list-rules",), "noop_dry_run": ("-n",)}


def sweep_config(runs: int) -> dict:
    """An experiment of about ``runs`` runs: a lr x momentum matrix, 1 epoch each."""
    side = max(1, round(runs**0.5))
    lrs = [round(0.01 * (i + 1), 4) for i in range(side)]
    count = -(-runs // side)
    momenta = [round(0.5 + 0.49 * j / max(1, count - 1), 4) for j in range(count)]
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


def timed(cmd: list[str], cwd: Path, expect: str = "") -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one command (it must succeed, and print ``expect``); cpu is
    the user + sys time of the command's processes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or expect not in proc.stdout + proc.stderr:
        raise RuntimeError(
            f"{' '.join(cmd[2:])} failed or did not say {expect!r}:\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def snakemake(workdir: Path, snakefile: Path, *args: str, expect: str = "") -> tuple[float, float]:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--cores", "1"]
    return timed([*cmd, *args], workdir, expect)


def prepare(workdir: Path, runs: int) -> list[str]:
    """The finished sweep in ``workdir``, run by this checkout's Snakefile; its run names."""
    cfg = sweep_config(runs)
    (workdir / "config").mkdir(parents=True)
    (workdir / "config" / "config.yaml").write_text(json.dumps(cfg))
    snakefile = REPO / "Snakefile"
    snakemake(workdir, snakefile, "results/data/digits/meta.json")  # the data stages, for real
    # every output Snakemake would still make (its --summary), created empty (a name without a
    # suffix is a directory output), and the benchmark files the report reads; then --touch
    summary = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--summary"],
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
    snakemake(workdir, snakefile, "--touch")
    return names


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def code_inputs(workdir: Path, stage: str, *packages: str) -> list[str]:
    """The files the workflow's ``stage`` rule reads as its code: its script, and the code
    stamp of its module or package (and ``packages``), written in ``workdir`` as the workflow
    writes it (clusterbench.pipeline.code)."""
    from clusterbench.pipeline import code

    stages = (stage, *packages)
    stamp = workdir / code.STAMPS / f"{'+'.join(stages)}.sha256"
    files = [f for name in stages for f in code.stage_files(REPO, name)]
    code.write_stamp(stamp, files, REPO)
    return [str(REPO / "scripts" / f"{stage}.py"), str(stamp.relative_to(workdir))]


#: The plain reference: the workflow's rules with the same files, as plain lists.
PLAIN_SNAKEFILE = """\
RUNS = config["runs"]
CODE = config["code"]
ARRAYS = [f"{{split}}_{{kind}}.npy" for split in ("train", "val", "test") for kind in "xy"]
DATA = [f"results/data/digits/{{name}}" for name in ARRAYS + ["meta.json"]]


rule all:
    input: "results/report/report.pdf", "results/best/summary.json"


rule download:
    input: CODE["download"]
    output: "results/raw/{{dataset}}/MANIFEST.json"
    log: "results/logs/download/{{dataset}}.log"
    benchmark: "results/benchmarks/download/{{dataset}}.tsv"
    shell: "touch {{output}}"


rule preprocess:
    input: CODE["preprocess"], "results/raw/{{dataset}}/MANIFEST.json"
    output: [f"results/data/{{{{dataset}}}}/{{name}}" for name in ARRAYS + ["meta.json"]]
    log: "results/logs/preprocess/{{dataset}}.log"
    benchmark: "results/benchmarks/preprocess/{{dataset}}.tsv"
    shell: "touch {{output}}"


rule train:
    input: CODE["train"], DATA
    output:
        "results/runs/{{run}}/run.json",
        "results/runs/{{run}}/metrics.jsonl",
        directory("results/runs/{{run}}/tensorboard"),
        "results/runs/{{run}}/model.pt",
        "results/runs/{{run}}/checksums.json",
    log: "results/logs/train/{{run}}.log"
    benchmark: "results/benchmarks/train/{{run}}.tsv"
    shell: "touch {{output}}"


rule evaluate:
    input: CODE["evaluate"], "results/runs/{{run}}/model.pt", DATA
    output:
        "results/eval/{{run}}/per_class.csv",
        "results/eval/{{run}}/confusion.csv",
        "results/eval/{{run}}/metrics.json",
        "results/eval/{{run}}/checksums.json",
    log: "results/logs/evaluate/{{run}}.log"
    benchmark: "results/benchmarks/evaluate/{{run}}.tsv"
    shell: "touch {{output}}"


rule report:
    input:
        CODE["report"],
        expand("results/runs/{{run}}/{{name}}", run=RUNS, name=["run.json", "metrics.jsonl"]),
        expand(
            "results/eval/{{run}}/{{name}}",
            run=RUNS,
            name=["metrics.json", "confusion.csv", "per_class.csv"],
        ),
        expand("results/benchmarks/{{rule}}/digits.tsv", rule=["download", "preprocess"]),
        expand("results/benchmarks/{{rule}}/{{run}}.tsv", rule=["train", "evaluate"], run=RUNS),
        "results/history/series.csv",
    output:
        {report_outputs}
    log: "results/logs/report/report.log"
    benchmark: "results/benchmarks/report/report.tsv"
    shell: "touch {{output}}"


rule history:
    input:
        CODE["history"],
        expand("results/runs/{{run}}/{{name}}", run=RUNS, name=["run.json", "metrics.jsonl"]),
        expand("results/eval/{{run}}/metrics.json", run=RUNS),
    output: "results/history/series.csv"
    log: "results/logs/history/history.log"
    shell: "touch {{output}}"


rule best:
    input:
        CODE["best"],
        "results/report/results.csv",
        expand("results/runs/{{run}}/{{name}}", run=RUNS, name=["run.json", "model.pt"]),
        expand("results/eval/{{run}}/metrics.json", run=RUNS),
    output: "results/best/summary.json", "results/best/run.json", "results/best/model.pt"
    log: "results/logs/best/best.log"
    shell: "touch {{output}}"
"""
REPORT_FILES = ["runs.csv", "results.csv", "epochs.csv", "scaling_model.csv", "benchmarks.csv"]
REPORT_FILES += ["skipped.csv", "captions.rst"]


def prepare_plain(workdir: Path, names: list[str]) -> None:
    """The plain reference in ``workdir``: its Snakefile, config (the run names and the stage
    code) and every output made, in the order of the graph, then marked done."""
    outputs = [f'"results/report/{name}"' for name in REPORT_FILES]
    outputs += ['directory("results/report/figures")', '"results/report/report.pdf"']
    workdir.mkdir(parents=True)
    (workdir / "Snakefile").write_text(PLAIN_SNAKEFILE.format(report_outputs=", ".join(outputs)))
    stages = ("download", "preprocess", "history", "report", "best")
    code = {s: code_inputs(workdir, s) for s in stages}
    code.update(
        train=code_inputs(workdir, "train", "training"), evaluate=code_inputs(workdir, "evaluate")
    )
    (workdir / "config.json").write_text(json.dumps({"runs": names, "code": code}))
    # in the graph's order, each job's outputs after its inputs (a directory is an output too)
    made = ["results/raw/digits/MANIFEST.json", "results/benchmarks/download/digits.tsv"]
    made += [f"results/data/digits/{s}_{k}.npy" for s in ("train", "val", "test") for k in "xy"]
    made += ["results/data/digits/meta.json", "results/benchmarks/preprocess/digits.tsv"]
    for name in names:
        made += [f"results/runs/{name}/{f}" for f in ("run.json", "metrics.jsonl", "model.pt")]
        made += [f"results/runs/{name}/tensorboard/", f"results/runs/{name}/checksums.json"]
        made.append(f"results/benchmarks/train/{name}.tsv")
    for name in names:
        made += [f"results/eval/{name}/{f}" for f in ("per_class.csv", "confusion.csv")]
        made += [f"results/eval/{name}/{f}" for f in ("metrics.json", "checksums.json")]
        made.append(f"results/benchmarks/evaluate/{name}.tsv")
    made.append("results/history/series.csv")
    made += [f"results/report/{name}" for name in REPORT_FILES]
    made += ["results/report/figures/", "results/report/report.pdf"]
    made += [f"results/best/{f}" for f in ("summary.json", "run.json", "model.pt")]
    for path in made:
        if path.endswith("/"):
            (workdir / path).mkdir(parents=True)
        else:
            _touch(workdir / path)
    plain_snakemake(workdir, "--touch")


def plain_snakemake(workdir: Path, *args: str, expect: str = "") -> tuple[float, float]:
    return snakemake(
        workdir, workdir / "Snakefile", "--configfile", "config.json", *args, expect=expect
    )


def measure(root: Path, runs: int, rounds: int) -> dict:
    """Each step's ``{"ours": [(wall, cpu), ...], "plain": [...]}`` for a sweep of ``runs``."""
    ours, plain = root / f"sweep-{runs}", root / f"plain-{runs}"
    names = prepare(ours, runs)
    prepare_plain(plain, names)
    times: dict = {step: {"ours": [], "plain": []} for step in STEPS}
    expect = {"parse": "", "noop_dry_run": "Nothing to be done"}
    for _ in range(rounds):  # interleaved: a slow spell hits every row alike
        for step, args in STEPS.items():
            times[step]["plain"].append(plain_snakemake(plain, *args, expect=expect[step]))
            times[step]["ours"].append(
                snakemake(ours, REPO / "Snakefile", *args, expect=expect[step])
            )
    shutil.rmtree(ours, ignore_errors=True)
    shutil.rmtree(plain, ignore_errors=True)
    return {"runs": len(names), "seconds": times}


def startup(root: Path, rounds: int) -> list[tuple[float, float]]:
    """Python and Snakemake alone: ``--list-rules`` on a one-rule Snakefile."""
    trivial = root / "trivial"
    trivial.mkdir()
    (trivial / "Snakefile").write_text('rule a:\n    output: "a"\n    shell: "touch a"\n')
    return [snakemake(trivial, trivial / "Snakefile", "--list-rules") for _ in range(rounds)]


def median(pairs: list[tuple[float, float]], which: int) -> float:
    return statistics.median(pair[which] for pair in pairs)


def print_header(rounds: int) -> None:
    print(f"workflow scale: median of {rounds} round(s); CPU = user+sys of snakemake; seconds")
    print(
        f"  {'runs':>5}  {'step':<14} {'plain CPU':>9} {'ours CPU':>9} {'ratio':>6}   "
        f"{'plain wall':>10} {'ours wall':>9} {'ratio':>6}  goal"
    )


def print_size(size: dict) -> dict[str, dict[str, float]]:
    """Print one size's rows; return its ratios (CPU and wall) by step."""
    ratios = {}
    for step, label in (("parse", "parse"), ("noop_dry_run", "no-op dry run")):
        got = size["seconds"][step]
        cpu = (median(got["plain"], 1), median(got["ours"], 1))
        wall = (median(got["plain"], 0), median(got["ours"], 0))
        ratios[step] = {"cpu": cpu[1] / cpu[0], "wall": wall[1] / wall[0]}
        goal = ""
        if size["runs"] >= RATIO_FROM:
            ok = ratios[step]["cpu"] <= RATIO_GOAL
            goal = f"<= {RATIO_GOAL}: {'ok' if ok else 'ABOVE GOAL'}"
        print(
            f"  {size['runs']:>5}  {label:<14} {cpu[0]:>9.2f} {cpu[1]:>9.2f} "
            f"{ratios[step]['cpu']:>6.2f}   {wall[0]:>10.2f} {wall[1]:>9.2f} "
            f"{ratios[step]['wall']:>6.2f}  {goal}"
        )
    return ratios


def print_startup(start: list[tuple[float, float]], smallest: dict) -> dict[str, float]:
    """Print what the workflow adds above the start-up for the smallest size; return it."""
    base = median(start, 0)
    added = {step: median(smallest["seconds"][step]["ours"], 0) - base for step in GOALS}
    verdicts = ", ".join(
        f"{step} {added[step]:.2f} s (goal <= {GOALS[step]:g} s: "
        f"{'ok' if added[step] <= GOALS[step] else 'ABOVE GOAL'})"
        for step in GOALS
    )
    print(
        f"  start-up (Python + Snakemake, one-rule Snakefile): {base:.2f} s wall; above it, "
        f"{smallest['runs']} runs: {verdicts}"
    )
    return added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, nargs="+", default=[100, 1000, 5000])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="cb-scale-"))
    print_header(args.rounds)
    sizes, ratios = [], {}
    try:
        start = startup(root, args.rounds)
        for runs in sorted(args.runs):  # each size printed when measured
            sizes.append(measure(root, runs, args.rounds))
            ratios[sizes[-1]["runs"]] = print_size(sizes[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    added = print_startup(start, sizes[0])
    out = (
        HERE
        / "results"
        / (f"workflow-{socket.gethostname().split('.')[0]}-{dt.date.today().isoformat()}.json")
    )
    out.write_text(
        json.dumps(
            {
                "rounds": args.rounds,
                "startup": start,
                "sizes": sizes,
                "ratios": ratios,
                "added": added,
                "goals": {"added": GOALS, "ratio": RATIO_GOAL, "ratio_from_runs": RATIO_FROM},
            },
            indent=1,
        )
        + "\n"
    )
    print(f"-> {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
