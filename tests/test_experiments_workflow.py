"""Experiments and skips in the real workflow, on the local profile (issue 7).

An experiment expands to the run directories its names promise, each run.json recording where
the run came from; a run that cannot run here (GPUs on a GPU-less machine, more ranks than the
local cores) is skipped with its reason while the rest finishes, and skipped.csv and a dry run
list it; ``on_unavailable: fail`` stops the workflow before any job, naming the run.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from clusterbench.pipeline.preflight import local_gpus
from conftest import REPO, default_config, snakemake, snakemake_args, write_config

SWEEP = {
    "dataset": "digits",
    "epochs": 1,
    "matrix": {"lr": [0.05, 0.1]},
    "environments": ["cpu", "gpu"],
}
CPU_RUNS = ["sweep--env=cpu,lr=0.05", "sweep--env=cpu,lr=0.1"]
GPU_RUNS = ["sweep--env=gpu,lr=0.05", "sweep--env=gpu,lr=0.1"]
TOO_BIG = "too-many-workers"

no_gpu = pytest.mark.skipif(local_gpus() > 0, reason="this machine has a usable GPU")


def experiment_config(cache: Path, **too_big) -> dict:
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(cache)
    cfg["runs"] = [{"name": TOO_BIG, "dataset": "digits", "workers": 64, "epochs": 1, **too_big}]
    cfg["experiments"] = {"sweep": SWEEP}
    cfg["report"]["title"] = "experiments and skips"
    return cfg


def local(workdir: Path, *extra: str, check: bool = True):
    return snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), *extra, check=check)


@pytest.mark.horovod
@no_gpu
def test_a_dry_run_lists_the_skips_and_plans_without_them(tmp_path: Path):
    workdir = tmp_path / "work"
    write_config(workdir, experiment_config(tmp_path / "cache"))
    # make plan's command: Snakemake's dry run, then the plan made of it
    args = snakemake_args(workdir)  # the Snakefile, the directory and the config file
    proc = subprocess.run(
        [sys.executable, "-m", "clusterbench.plan", "--profile", str(REPO / "profiles" / "local")]
        + ["--", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    text = proc.stdout + proc.stderr
    for run in GPU_RUNS:
        assert f"skipping run {run!r}: run {run!r} asks for 1 GPU(s) per node" in text, text
    assert f"skipping run {TOO_BIG!r}: run {TOO_BIG!r} needs 64 cores" in text
    assert "clusterbench plan (local executor)" in text
    assert (
        "download 1, preprocess 1, train 2, evaluate 2, history 1, report 1, best 1, all 1" in text
    ), text
    for run in GPU_RUNS + [TOO_BIG]:
        assert f"results/runs/{run}/" not in text
    for run in CPU_RUNS:
        assert f"results/runs/{run}/run.json" in text
    assert not (workdir / "results").exists()


@pytest.mark.horovod
@no_gpu
def test_on_unavailable_fail_stops_before_any_job_naming_the_run(tmp_path: Path):
    workdir = tmp_path / "work"
    write_config(workdir, experiment_config(tmp_path / "cache", on_unavailable="fail"))
    proc = local(workdir, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"run {TOO_BIG!r} needs 64 cores" in text, text
    assert "on_unavailable: fail" in text
    assert_message_alone(text)
    assert not (workdir / "results").exists()


@pytest.mark.horovod
@no_gpu
def test_on_unavailable_fail_for_a_gpu_run_without_a_gpu_stops_with_the_message_alone(
    tmp_path: Path,
):
    workdir = tmp_path / "work"
    cfg = experiment_config(tmp_path / "cache")
    cfg["runs"] = [
        {"name": "gpu-run", "dataset": "digits", "workers": 1, "gpus_per_node": 1},
        {"name": "cpu-run", "dataset": "digits", "workers": 1},
    ]
    cfg["runs"][0]["on_unavailable"] = "fail"
    del cfg["experiments"]
    write_config(workdir, cfg)
    for extra in (("--dry-run",), ()):
        proc = local(workdir, *extra, check=False)
        text = proc.stdout + proc.stderr
        assert proc.returncode == 1, text
        assert "run 'gpu-run' asks for 1 GPU(s) per node" in text, text
        assert "(on_unavailable: fail for 'gpu-run';" in text, text
        assert_message_alone(text)
    assert not (workdir / "results").exists()


def assert_message_alone(text: str) -> None:
    """Our message, not inside Snakemake's report of an exception in an input function."""
    for word in ("Traceback", "InputFunctionException", "WorkflowError", "Wildcards:"):
        assert word not in text, text


@pytest.mark.slow
@no_gpu
def test_an_experiment_runs_its_points_and_skips_what_cannot_run_here(
    tmp_path: Path, dataset_cache: Path
):
    workdir = tmp_path / "work"
    write_config(workdir, experiment_config(dataset_cache))
    local(workdir)
    results = workdir / "results"
    assert (results / "report" / "report.pdf").read_bytes().startswith(b"%PDF")
    assert sorted(p.name for p in (results / "runs").iterdir()) == CPU_RUNS
    for run, lr in zip(CPU_RUNS, (0.05, 0.1), strict=True):
        info = json.loads((results / "runs" / run / "run.json").read_text())
        assert info["experiment"] == {
            "name": "sweep",
            "environment": "cpu",
            "point": {"lr": lr},
            "repeat": 0,
        }
        assert info["run"]["name"] == run and info["run"]["lr"] == lr
        assert "experiment" not in info["run"]
        assert (results / "eval" / run / "metrics.json").exists()
    runs_csv = (results / "report" / "runs.csv").read_text()
    assert all(run in runs_csv for run in CPU_RUNS)
    assert not any(run in runs_csv for run in GPU_RUNS + [TOO_BIG])
    with open(results / "report" / "skipped.csv", newline="") as fh:
        skipped = {row["run"]: row for row in csv.DictReader(fh)}
    assert list(skipped) == [TOO_BIG, *GPU_RUNS]
    assert skipped[TOO_BIG]["experiment"] == "" and "needs 64 cores" in skipped[TOO_BIG]["reason"]
    for run in GPU_RUNS:
        assert (skipped[run]["experiment"], skipped[run]["environment"]) == ("sweep", "gpu")
        assert "GPU(s) per node" in skipped[run]["reason"]
    # nothing is left to do, and the skips are said again
    proc = local(workdir, "--dry-run")
    assert "Nothing to be done" in proc.stdout + proc.stderr
    assert f"skipping run {GPU_RUNS[0]!r}" in proc.stdout + proc.stderr
    # the HTML report (no executor: the same runs are left out, none is missing)
    local(workdir, "--report", str(results / "report" / "report.html"))
    assert (results / "report" / "report.html").stat().st_size > 0


@pytest.mark.horovod
@no_gpu
def test_a_skipped_run_named_as_a_target_is_refused_with_its_reason(tmp_path: Path):
    workdir = tmp_path / "work"
    write_config(workdir, experiment_config(tmp_path / "cache"))
    proc = local(workdir, "--dry-run", f"results/runs/{GPU_RUNS[0]}/run.json", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"run {GPU_RUNS[0]!r} asks for 1 GPU(s) per node" in text, text
    assert "is skipped here, and a target asks for it" in text
    assert_message_alone(text)
    # a target that needs only runs that can run here is fine, skips or not
    local(workdir, "--dry-run", f"results/runs/{CPU_RUNS[0]}/run.json")


@pytest.mark.horovod
@no_gpu
def test_a_config_none_of_whose_runs_can_run_here_stops_naming_each(tmp_path: Path):
    workdir = tmp_path / "work"
    cfg = experiment_config(tmp_path / "cache")
    cfg["experiments"]["sweep"]["environments"] = ["gpu"]
    write_config(workdir, cfg)
    proc = local(workdir, "--dry-run", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "no run can run under the local executor here" in text, text
    assert f"run {TOO_BIG!r} needs 64 cores" in text
    assert all(f"run {run!r} asks for 1 GPU(s)" in text for run in GPU_RUNS)
    assert_message_alone(text)


@pytest.mark.horovod
def test_cores_per_node_must_be_given_to_plan_cpu_parallel_for_a_cluster(tmp_path: Path):
    """`workers: cores` with cores_per_node null takes this machine's cores: fine locally, not
    for a cluster, whose jobs read the config again on a compute node."""
    workdir = tmp_path / "work"
    cfg = experiment_config(tmp_path / "cache")
    cfg["runs"] = []
    cfg["experiments"]["sweep"]["environments"] = ["cpu", "cpu-parallel"]
    write_config(workdir, cfg)
    env = {"CLUSTERBENCH_EXECUTOR": "sge"}
    proc = snakemake(workdir, "--dry-run", env=env, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "environment_defaults.cores_per_node: null takes the cores of this machine" in text
    assert "'sweep--env=cpu-parallel,lr=0.05'" in text
    cfg["environment_defaults"] = {"cores_per_node": 2}
    write_config(workdir, cfg)
    snakemake(workdir, "--dry-run", env=env)
