"""clusterbench.plan: the plan matches what the profiles would submit (the executor plugins' own
sbatch/qsub builders, as in test_resources), totals, jobs per rule, skips."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterbench import config as cb
from clusterbench.plan import format_plan, make_plan, train_job
from clusterbench.resources import train_resources
from conftest import default_config
from test_resources import last_l, option, qsub_line, sbatch_line


def resolved_runs(experiments: dict) -> list[dict]:
    cfg = default_config()
    cfg["runs"] = cfg["runs"][:1]
    cfg["experiments"] = experiments
    cfg["environment_defaults"] = {"gpus_per_node": 2, "nodes": 3, "cores_per_node": 8}
    return cb.validate(cfg)["runs"]


RUNS = resolved_runs(
    {
        "e": {
            "dataset": "digits",
            "runtime": 45,
            "cpus_per_worker": 2,
            "environments": ["cpu", "cpu-parallel", "gpu", "multi-gpu", "multi-node"],
        }
    }
)


@pytest.mark.parametrize("run", RUNS, ids=[r["name"] for r in RUNS])
def test_each_job_is_what_sbatch_is_asked_for(run):
    resources = train_resources(run)
    job = train_job(run["name"], resources)
    argv = sbatch_line(resources, threads=run["workers"] * run["cpus_per_worker"])
    nodes = int(option(argv, "--nodes") or 1)
    ranks = int(option(argv, "--ntasks") or 1)
    assert (job.nodes, job.ranks) == (nodes, ranks)
    assert job.cpus == ranks * int(option(argv, "--cpus-per-task"))
    assert job.gpus == nodes * int(option(argv, "--gpus-per-node") or 0)
    assert job.runtime == int(option(argv, "-t"))
    # and what the config asked for
    assert (job.nodes, job.ranks) == (run["nodes"], run["workers"])
    assert job.gpus == run["nodes"] * run["gpus_per_node"]


@pytest.mark.parametrize("run", RUNS, ids=[r["name"] for r in RUNS])
def test_each_job_is_what_qsub_is_asked_for(run, tmp_path: Path):
    resources = train_resources(run)
    job = train_job(run["name"], resources)
    argv = qsub_line(resources, tmp_path)
    slots = int(argv[argv.index("-pe") + 2])
    # SGE slots: one per rank (mpi PE) or a one-rank job's CPUs (smp PE)
    assert slots == (job.ranks if job.ranks > 1 else job.cpus)
    assert last_l(argv, "h_rt") == f"00:{job.runtime:02d}:00"


def test_totals_jobs_per_rule_and_skips():
    resources = {run["name"]: train_resources(run) for run in RUNS}
    skipped = {"e--env=gpu": "no GPU here"}
    plan = make_plan(RUNS, resources, skipped)
    assert [job.run for job in plan.jobs] == [r["name"] for r in RUNS if r["name"] != "e--env=gpu"]
    # cpu 1x2, cpu-parallel 4x2, multi-gpu 2x2 (2 GPUs), multi-node 6x2 (6 GPUs), 45 min each;
    # the hand-written run: 1 worker x 1 CPU, 30 min
    assert plan.cpu_hours == pytest.approx((2 + 8 + 4 + 12) * 0.75 + 1 * 0.5)
    assert plan.gpu_hours == pytest.approx((2 + 6) * 0.75)
    assert plan.jobs_per_rule == {
        "download": 1,
        "preprocess": 1,
        "train": 5,
        "evaluate": 5,
        "report": 1,
        "all": 1,
    }
    assert plan.skipped == skipped
    text = format_plan(plan, "slurm")
    assert "clusterbench plan (slurm executor)" in text
    assert "e--env=multi-node" in text and "    e--env=gpu: no GPU here" in text
    assert "25.50 CPU-hours, 6.00 GPU-hours" not in text  # the sum, checked above
    assert f"{plan.cpu_hours:.2f} CPU-hours, {plan.gpu_hours:.2f} GPU-hours" in text
    assert "train 5, evaluate 5" in text


def test_nothing_skipped_says_so():
    plan = make_plan(RUNS[:1], {RUNS[0]["name"]: train_resources(RUNS[0])}, {})
    assert "skipped: none" in format_plan(plan, "local")
