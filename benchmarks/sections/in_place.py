"""in_place: a folder of ``--in-place-files`` files read in place (ImageNet's 1.28 M training
images: ``--in-place-files 1280000`` in 1,000 class folders, the default), tiny PNGs made by the
bench in its work dir: what the folder's size costs, not its bytes.

* F14: seconds to index it (``index_folder.py``: the preprocess stage's steps, each timed:
  the walk, the split, the statistics' sample, writing the index), goal <= 600 s on 2 cores;
  the median over the repeats after the first.
* F15: the seconds a dry run of a finished workflow over it takes beyond the same workflow on
  the digits (``dry_run.py``; each a workflow of one 1-worker run of one epoch, trained,
  evaluated and reported once when the section's data is made), goal <= 3 s; with
  ``check: auto`` (which compares the folders' modification times at this size) and, reported,
  with ``check: files`` (every file's size and modification time).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml
from bench_data import tiny_tree
from benchlib.figures import Figure, rate
from benchlib.rows import REPO, Case, Runner, Spec

ORDER = 95
TITLE = "a folder of 1.28 M files read in place: indexing it (F14), a dry run over it (F15)"
OPTIONS = {
    "in_place_files": (int, 1_280_000, 20_000, "tiny files of the folder read in place"),
    "in_place_classes": (int, 1000, 100, "its class folders"),
    "dry_runs": (int, 4, 2, "dry runs per F15 row (the first is the warm-up)"),
}
NEEDS: tuple[str, ...] = ()
GPU = False


def dataset(folder: Path, check: str = "auto") -> dict:
    """The folder as a dataset read in place. What a dry run checks is the same whatever the
    splits; for the workflow to finish in minutes, its run trains on 0.1 % of the images and is
    evaluated on its validation split (as many), the test split (the rest) is never read."""
    return {
        "format": "image-folder",
        "path": str(folder),
        "image_size": [8, 8],
        "val_fraction": 0.001,
        "test_fraction": 0.998,
        "min_split_size": 5,
        "check": check,
    }


def finished(work: Path, data: dict) -> Path:
    """A working directory whose workflow (one 1-worker run of one epoch on ``data``, no comm
    job) has run to its end; run now unless a dry run finds nothing to do."""
    run = {"name": "one", "dataset": next(iter(data)), "workers": 1, "epochs": 1}
    run.update(batch_size=128, loader_workers=2, model="small_cnn", augment="none")
    cfg = {
        "datasets": data,
        "runs": [run],
        "evaluate": {"split": "val"},
        "comm": {"enabled": False},
        "report": {"title": "dry-run cost"},
        "download": {"cache_dir": str(work / "cache")},
    }
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    cmd += ["--directory", str(work), "--configfile", str(work / "config.yaml")]
    cmd += ["--profile", str(REPO / "profiles" / "local")]
    dry = subprocess.run([*cmd, "--dry-run"], cwd=REPO, capture_output=True, text=True)
    if "Nothing to be done" not in dry.stdout + dry.stderr:
        print(f"running the workflow in {work} to its end ...", flush=True)
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
    return work


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    root = work / "in_place"
    print(f"making a folder of {args.in_place_files:,} tiny files ...", flush=True)
    folder = tiny_tree(root / "folder", args.in_place_files, args.in_place_classes)
    finished(root / "digits-work", {"digits": {}})
    finished(root / "folder-work", {"big": dataset(folder)})
    data = root / "folder-work" / "results" / "data" / "big"  # its index (the rows take a data dir)
    return {"in-place": Case("in-place", "big", "small_cnn", data, 1, 1, 0.0)}


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    root = runner.work / "in_place"
    index = Spec(
        "in-place", "index_folder", args=("--folder", str(root / "folder")), label="indexing"
    )
    repeats = ("--repeats", str(args.dry_runs))
    digits = Spec(
        "in-place",
        "dry_run",
        args=("--work", str(root / "digits-work"), *repeats),
        label="dry run, digits",
    )
    auto = Spec(
        "in-place",
        "dry_run",
        args=("--work", str(root / "folder-work"), *repeats),
        label="dry run, folder, check auto",
    )
    every = Spec(
        "in-place",
        "dry_run",
        args=("--work", str(root / "folder-work"), *repeats, "--check", "files"),
        label="dry run, folder, check files",
    )
    order = [index, digits, auto, every]
    for spec in order if runner.round % 2 else order[::-1]:
        runner.get(spec)
    n = f"{args.in_place_files:,}"
    figs = [
        seconds_figure(
            runner, "F14 index seconds", f"indexing a folder of {n} files read in place", 600, index
        )
    ]
    for name, spec, check, goal in (
        ("F15 dry-run added s", auto, "auto", 3.0),
        ("F15 check files added s", every, "files", None),
    ):
        what = (
            f"a finished workflow's dry run over {n} files read in place (check: {check}), "
            "less the same on the digits"
        )
        figs.append(added_figure(runner, name, what, goal, spec, digits))
    return figs


def seconds_figure(runner: Runner, name: str, what: str, goal: float, spec: Spec) -> Figure:
    fig = Figure(name, what, goal, rows=[f"{spec.case}: {spec.name}"], at_most=True)
    row = runner.row(spec)
    value, why = rate(runner, spec, "seconds")
    if value is None:
        fig.detail = why
        return fig
    fig.value = value
    phases = {p: row.median(p) for p in ("walk", "split", "sample", "write")}
    fig.detail = ", ".join(f"{p} {v:.1f} s" for p, v in phases.items() if v is not None)
    return fig


def added_figure(
    runner: Runner, name: str, what: str, goal: float | None, spec: Spec, base: Spec
) -> Figure:
    fig = Figure(name, what, goal, rows=[f"{s.case}: {s.name}" for s in (spec, base)], at_most=True)
    a, why_a = rate(runner, spec, "seconds")
    b, why_b = rate(runner, base, "seconds")
    if a is None or b is None:
        fig.detail = "; ".join(w for w in (why_a, why_b) if w)
        return fig
    fig.value = a - b
    cpu = [runner.row(s).median("cpu_seconds") for s in (spec, base)]
    fig.detail = f"wall {a:.2f} s - {b:.2f} s" + (
        f"; CPU {cpu[0]:.2f} s - {cpu[1]:.2f} s" if None not in cpu else ""
    )
    return fig
