"""The pre-flight decisions in the real workflow, through the real Snakemake CLI (issue 19): a
scheduler that cannot be asked (its tools absent or failing) stops only a training job to
submit, with its message alone, and a profile with nothing to do exits 0.

The finished tree is made without training: the data stages run for real, every later output is
made empty (with the records the train and evaluate steps write) and marked done with
``snakemake --touch``. The Slurm and SGE tools are stand-ins that log their call and fail as
they do without a running cluster.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from clusterbench.core import integrity
from conftest import REPO, default_config, snakemake, write_config

#: Each test runs Snakemake on the workflow (several seconds each): not the quick tier.
pytestmark = pytest.mark.slow

RUNS = ("one", "two")

#: What each tool answers: sinfo and qsub as without a reachable controller / qmaster.
FAILING = {
    "sinfo": "echo 'slurm_load_partitions: Unable to contact slurm controller' >&2; exit 1",
    "qsub": "echo 'error: unable to send message to qmaster' >&2; exit 1",
}


def stand_ins(directory: Path) -> dict[str, str]:
    """Slurm and SGE commands that log their call to ``directory/calls`` and fail; the PATH
    that finds them first."""
    directory.mkdir(parents=True, exist_ok=True)
    calls = directory / "calls"
    tools = ("sinfo", "sbatch", "srun", "squeue", "sacct", "scontrol", "qsub", "qstat", "qacct")
    for tool in tools:
        body = FAILING.get(tool, "exit 1")
        (directory / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n{body}\n')
        (directory / tool).chmod(0o755)
    return {"PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"}


def calls(directory: Path) -> list[str]:
    path = directory / "calls"
    return path.read_text().splitlines() if path.exists() else []


def submitted(directory: Path) -> list[str]:
    """The calls that would have submitted a job (``qsub -w v`` only verifies one)."""
    return [
        call
        for call in calls(directory)
        if call.startswith(("sbatch", "srun")) or (call.startswith("qsub") and "-w v" not in call)
    ]


def results_state(workdir: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted((workdir / "results").rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory, dataset_cache) -> Path:
    """Two runs' workflow, every output there and up to date (no training: see the module)."""
    workdir = tmp_path_factory.mktemp("finished")
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(dataset_cache)
    cfg["runs"] = [{"name": name, "dataset": "digits", "workers": 1} for name in RUNS]
    write_config(workdir, cfg)
    snakemake(workdir, "--cores", "1", "results/data/digits/meta.json")  # for real
    summary = snakemake(workdir, "--summary").stdout
    for line in summary.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) >= 5 and fields[4] == "missing":
            path = workdir / fields[0]
            if path.suffix:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            else:
                path.mkdir(parents=True, exist_ok=True)
    results = workdir / "results"
    for name in RUNS:
        for stage, files in (("runs", integrity.RUN_FILES), ("eval", integrity.EVAL_FILES)):
            integrity.write_checksums(results / stage / name, files)  # as the steps do, last
        for rule in ("train", "evaluate"):
            bench = results / "benchmarks" / rule / f"{name}.tsv"
            bench.parent.mkdir(parents=True, exist_ok=True)
            bench.touch()
    snakemake(workdir, "--cores", "1", "--touch")
    dry = snakemake(workdir, "--cores", "1", "--dry-run")
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout
    return workdir


def profile(name: str) -> tuple[str, ...]:
    return ("--profile", str(REPO / "profiles" / name))


@pytest.mark.parametrize(
    ("scheduler", "says"),
    [("slurm", "cannot ask Slurm for its partitions (sinfo)"), ("sge", "qmaster")],
)
def test_a_profile_whose_scheduler_is_absent_with_nothing_to_do_exits_0(
    finished: Path, tmp_path: Path, scheduler: str, says: str
):
    workdir = tmp_path / "work"
    shutil.copytree(finished, workdir, symlinks=True)
    before = results_state(workdir)
    env = stand_ins(tmp_path / "bin")
    proc = snakemake(workdir, *profile(scheduler), check=False, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Nothing to be done" in out, out
    assert says in out, out  # said as a warning: nothing needed the scheduler's answer
    assert not submitted(tmp_path / "bin"), calls(tmp_path / "bin")
    assert results_state(workdir) == before


@pytest.mark.parametrize(
    ("scheduler", "says"),
    [
        ("slurm", "cannot ask Slurm for its partitions (sinfo)"),
        ("sge", "unable to send message to qmaster"),
    ],
)
def test_an_absent_scheduler_stops_a_training_job_to_submit_with_its_message_alone(
    finished: Path, tmp_path: Path, scheduler: str, says: str
):
    workdir = tmp_path / "work"
    shutil.copytree(finished, workdir, symlinks=True)
    cfg = yaml.safe_load((workdir / "config.yaml").read_text())
    cfg["runs"].append({"name": "three", "dataset": "digits", "workers": 1})  # to train
    write_config(workdir, cfg)
    before = results_state(workdir)
    env = stand_ins(tmp_path / "bin")
    proc = snakemake(workdir, *profile(scheduler), check=False, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert says in out, out
    assert "1 training job(s) are to be submitted: 'three'" in out, out
    for word in ("Traceback", "InputFunctionException", "WorkflowError", 'File "'):
        assert word not in out, out
    assert not submitted(tmp_path / "bin"), calls(tmp_path / "bin")
    assert results_state(workdir) == before  # nothing ran, nothing was deleted
    # a dry run plans (for the local executor: it has none of its own) and asks no scheduler
    dry = snakemake(workdir, *profile(scheduler), "--dry-run", check=False, env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "rule train:" in dry.stdout
