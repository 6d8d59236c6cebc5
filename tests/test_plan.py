"""clusterbench.plan (``make plan``): Snakemake's dry run made into a plan.

- The parser on dry-run text captured from Snakemake 9.27.1 (the Slurm and local profiles).
- Each training job's figures against what the executor plugins' own sbatch/qsub builders make
  of the same resources (as in test_resources), through Snakemake's own resource formatting.
- ``make plan`` itself (its command, run for real on small configs): a finished job is not
  listed, the best rule is counted, ``--set-resources train:runtime=7`` is what the plan shows,
  a run no partition can hold is listed as skipped, and nothing is submitted.
"""
# ruff: noqa: E501  (the samples are Snakemake's output as it printed it, long lines included)

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from clusterbench import config as cb
from clusterbench.core import integrity
from clusterbench.launch.schedulers import SCHEDULERS
from clusterbench.launch.schedulers.sge import SgeScheduler
from clusterbench.launch.schedulers.slurm import SlurmScheduler
from clusterbench.pipeline.resources import train_resources
from clusterbench.plan import (
    DryRunJob,
    PlanError,
    format_plan,
    make_plan,
    parse_dry_run,
    parse_pairs,
    planned_executor,
    train_job,
)
from conftest import REPO, SLURM_POLL, default_config, snakemake, snakemake_env, write_config
from snakemake.logging import format_resources, format_wildcards
from test_resources import last_l, option, qsub_line, sbatch_line

# `CLUSTERBENCH_EXECUTOR=slurm snakemake --profile profiles/slurm -n --set-resources
# train:runtime=7` (Snakemake 9.27.1; sinfo: `gpu*|4|16|gpu:a100:2`), every block but one cut
# to the lines the plan reads, the report's and best's inputs cut short.
SLURM_DRY_RUN = """\
Building DAG of jobs...
skipping run 'too-big': run 'too-big' asks for 64 workers x 1 CPU(s) on one node, more than partition 'gpu' (4 node(s), 64 CPUs, at most 16 per node, 2 GPU(s) per node) can ever give: it would wait in the queue forever. Lower workers/nodes/cpus_per_worker/gpus_per_node or choose another partition (slurm_partition).
Job stats:
job           count
----------  -------
download          1
preprocess        1
train             2
evaluate          2
report            1
best              1
all               1
total             9


[Wed Nov 25 08:28:54 2026]
rule download:
    jobid: 4
    wildcards: dataset=digits
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=1000, disk=1 GB, disk_mib=954, runtime=60

[Wed Nov 25 08:28:54 2026]
rule train:
    input: /work/main/scripts/train.py, /work/main/workflow/clusterbench/train.py, results/data/digits/train_x.npy, results/data/digits/train_y.npy, results/data/digits/val_x.npy, results/data/digits/val_y.npy, results/data/digits/test_x.npy, results/data/digits/test_y.npy, results/data/digits/meta.json
    output: results/runs/gpu-2x2/run.json, results/runs/gpu-2x2/metrics.jsonl, results/runs/gpu-2x2/tensorboard, results/runs/gpu-2x2/model.pt
    log: results/logs/train/gpu-2x2.log
    jobid: 5
    benchmark: results/benchmarks/train/gpu-2x2.tsv
    reason: Missing output files: results/runs/gpu-2x2/metrics.jsonl, results/benchmarks/train/gpu-2x2.tsv, results/runs/gpu-2x2/run.json, results/runs/gpu-2x2/model.pt; Input files updated by another job: results/data/digits/test_y.npy, results/data/digits/val_y.npy, results/data/digits/val_x.npy, results/data/digits/meta.json, results/data/digits/train_y.npy, results/data/digits/test_x.npy, results/data/digits/train_x.npy
    wildcards: run=gpu-2x2
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, runtime=7, nodes=2, ranks=4, gpus_per_node=2, mem_mb_per_cpu=250, mpi=srun, tasks=4, cpus_per_task=2, slurm_extra=--gpus-per-node=2 --ntasks-per-node=2 --signal=B:USR1@120, threads=4, sge_pe=mpi, sge_resources=h_vmem=INFINITY,tmem=500M
Shell command: python -m clusterbench.launch --np 4 -- python /work/main/scripts/train.py --data-dir results/data/digits --run '{"backend":"horovod","batch_scaling":"global","batch_size":128,"bn":"aggregate","channels_last":false,"dataset":"digits","deterministic":false,"epochs":1,"gpus_per_node":2,"lr":0.05,"max_workers":null,"min_workers":null,"minutes":null,"model":"small_cnn","momentum":0.9,"name":"gpu-2x2","nodes":2,"precision":"fp32","seed":1,"warmup_epochs":1,"weight_decay":0.0005,"workers":4}' --out-dir results/runs/gpu-2x2 > results/logs/train/gpu-2x2.log 2>&1

[Wed Nov 25 08:28:54 2026]
rule train:
    jobid: 2
    wildcards: run=one
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, runtime=7, nodes=1, ranks=1, gpus_per_node=0, mem_mb_per_cpu=2000, cpus_per_task=1, slurm_extra=--signal=B:USR1@120, threads=1, sge_resources=h_vmem=INFINITY,tmem=2000M

[Wed Nov 25 08:28:54 2026]
rule evaluate:
    jobid: 7
    wildcards: run=gpu-2x2
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, runtime=60

[Wed Nov 25 08:28:54 2026]
rule report:
    input: /work/main/scripts/report.py, results/runs/one/run.json
    jobid: 1
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, runtime=60
Shell command: python /work/main/scripts/report.py --skipped '[{"run":"too-big"}]' > results/logs/report/report.log 2>&1

[Wed Nov 25 08:28:54 2026]
rule best:
    jobid: 8
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, runtime=60

[Wed Nov 25 08:28:54 2026]
rule all:
    input: results/report/report.pdf, results/best/summary.json
    jobid: 0
    reason: Input files updated by another job: results/report/report.pdf, results/best/summary.json
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, runtime=60
Shell command: None
Job stats:
job           count
----------  -------
download          1
preprocess        1
train             2
evaluate          2
report            1
best              1
all               1
total             9

Reasons:
    (check individual jobs above for details)
    input files updated by another job:
        all, best, evaluate, preprocess, report, train
This was a dry-run (flag -n). The order of jobs does not reflect the order of execution.
"""

# `snakemake --profile profiles/local -n` (Snakemake 9.27.1, 2 cores, no GPU), cut likewise:
# the local executor gives a job its `threads` (a line Snakemake leaves out when it is 1).
LOCAL_DRY_RUN = """\
Building DAG of jobs...
skipping run 'gpu': run 'gpu' asks for 1 GPU(s) per node (gpus_per_node) and this machine has none usable (no nvidia-smi GPU, or CUDA_VISIBLE_DEVICES): run it where GPUs are (a cluster profile), or set gpus_per_node: 0 to train on the CPU
Job stats:
job           count
----------  -------
download          1
preprocess        1
train             2
evaluate          2
report            1
best              1
all               1
total             9


[Wed Nov 25 08:29:11 2026]
rule train:
    jobid: 5
    wildcards: run=pair
    threads: 2
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, timing_slot=1, nodes=1, ranks=2, gpus_per_node=0, mem_mb_per_cpu=1000, runtime=30, mpi=srun, tasks=2, cpus_per_task=1, slurm_extra=--signal=B:USR1@120, threads=2, sge_pe=mpi, sge_resources=h_vmem=INFINITY,tmem=1000M

[Wed Nov 25 08:29:11 2026]
rule train:
    jobid: 2
    wildcards: run=one
    resources: tmpdir=/tmp, mem_mb=2000, mem=2 GB, mem_mib=1908, disk_mb=<TBD>, disk=<TBD>, disk_mib=<TBD>, timing_slot=1, nodes=1, ranks=1, gpus_per_node=0, mem_mb_per_cpu=2000, runtime=30, cpus_per_task=1, slurm_extra=--signal=B:USR1@120, threads=1, sge_resources=h_vmem=INFINITY,tmem=2000M
This was a dry-run (flag -n). The order of jobs does not reflect the order of execution.
"""

NOTHING_TO_DO = """\
Building DAG of jobs...
Nothing to be done (all requested files are present and up to date).
"""


# ------------------------------------------------------------------------------ the parser
def test_parse_the_slurm_dry_run():
    dry = parse_dry_run(SLURM_DRY_RUN)
    assert dry.stats == {
        "download": 1,
        "preprocess": 1,
        "train": 2,
        "evaluate": 2,
        "report": 1,
        "best": 1,
        "all": 1,
    }
    assert [job.rule for job in dry.jobs] == [
        *("download", "train", "train", "evaluate", "report", "best", "all")
    ]
    train = dry.jobs[1]
    assert train.wildcards == {"run": "gpu-2x2"} and train.threads == 1
    res = train.resources
    assert (res["runtime"], res["nodes"], res["ranks"], res["gpus_per_node"]) == (7, 2, 4, 2)
    assert res["slurm_extra"] == "--gpus-per-node=2 --ntasks-per-node=2 --signal=B:USR1@120"
    assert res["sge_resources"] == "h_vmem=INFINITY,tmem=500M"  # a value with a comma
    assert res["disk_mb"] is None  # <TBD>
    assert res["mem"] == "2 GB"
    assert list(dry.skipped) == ["too-big"]
    assert dry.skipped["too-big"].startswith("run 'too-big' asks for 64 workers")
    assert dry.unchecked == []


def test_limits_that_could_not_be_checked_are_said():
    text = NOTHING_TO_DO.replace(
        "Building DAG of jobs...\n",
        "Building DAG of jobs...\nthe plan cannot check the slurm limits: cannot ask Slurm for "
        "its partitions (sinfo): [Errno 2] No such file or directory: 'sinfo'\n",
    )
    plan = make_plan(parse_dry_run(text), "slurm")
    assert format_plan(plan, "slurm").endswith(
        "\n  not checked: the plan cannot check the slurm limits: cannot ask Slurm for its "
        "partitions (sinfo): [Errno 2] No such file or directory: 'sinfo'"
    )


def test_pairs_split_only_where_a_new_name_starts():
    assert parse_pairs("run=sweep--lr=0.1,momentum=0.9") == {"run": "sweep--lr=0.1,momentum=0.9"}
    assert parse_pairs("a=1, b=x, y, c=") == {"a": "1", "b": "x, y", "c": ""}
    assert parse_pairs("") == {}
    with pytest.raises(PlanError, match="not 'name=value'"):
        parse_pairs("novalue")


def test_nothing_to_do_is_an_empty_plan():
    plan = make_plan(parse_dry_run(NOTHING_TO_DO), "slurm")
    assert plan.jobs == [] and plan.jobs_per_rule == {}
    text = format_plan(plan, "slurm")
    assert "0.00 CPU-hours, 0.00 GPU-hours (0 training job(s)" in text
    assert "jobs per rule: none (nothing to be done)" in text


def test_the_slurm_plan_is_what_sbatch_is_asked_for():
    plan = make_plan(parse_dry_run(SLURM_DRY_RUN), "slurm")
    assert [(j.run, j.nodes, j.ranks, j.cpus, j.gpus, j.runtime) for j in plan.jobs] == [
        ("gpu-2x2", 2, 4, 8, 4, 7),  # 4 tasks x 2 CPUs, 2 nodes x 2 GPUs
        ("one", 1, 1, 1, 0, 7),
    ]
    assert plan.cpu_hours == pytest.approx(9 * 7 / 60)
    assert plan.gpu_hours == pytest.approx(4 * 7 / 60)
    text = format_plan(plan, "slurm")
    assert "clusterbench plan (slurm executor)" in text
    assert "  gpu-2x2      2      4     8     4     7 min" in text
    assert "1.05 CPU-hours, 0.47 GPU-hours (2 training job(s)" in text
    assert (
        "jobs per rule (9 in all): download 1, preprocess 1, train 2, evaluate 2, report 1, "
        "best 1, all 1"
    ) in text
    assert "  skipped (1):\n    too-big: run 'too-big' asks for 64 workers" in text


def test_the_same_dry_run_planned_for_sge_counts_its_slots():
    plan = make_plan(parse_dry_run(SLURM_DRY_RUN), "sge")
    # -pe mpi 4: four ranks on 4 slots; the one-worker job: one rank on its `threads` slots
    assert [(j.run, j.ranks, j.cpus, j.gpus) for j in plan.jobs] == [
        ("gpu-2x2", 4, 4, 4),
        ("one", 1, 1, 0),
    ]


def test_the_local_plan_gives_each_job_its_threads():
    dry = parse_dry_run(LOCAL_DRY_RUN)
    plan = make_plan(dry, "local")
    assert [(j.run, j.nodes, j.ranks, j.cpus, j.runtime) for j in plan.jobs] == [
        ("one", 1, 1, 1, 30),
        ("pair", 1, 2, 2, 30),
    ]
    assert list(plan.skipped) == ["gpu"]
    assert plan.jobs_per_rule["best"] == 1


def test_a_quiet_dry_run_or_another_rule_name_is_refused():
    quiet = SLURM_DRY_RUN.split("[Wed")[0]  # the job stats, without the job blocks
    with pytest.raises(PlanError, match="count 2 train job\\(s\\) but it printed 0"):
        make_plan(parse_dry_run(quiet), "slurm")
    with pytest.raises(PlanError, match="no bench_train job but 2 train job\\(s\\)"):
        make_plan(parse_dry_run(SLURM_DRY_RUN), "slurm", train_rule="bench_train")


def test_a_train_job_without_a_runtime_names_the_run():
    job = DryRunJob("train", {"run": "r"}, 1, {"runtime": None, "nodes": 1})
    with pytest.raises(PlanError, match="run 'r' has no wall-clock limit"):
        train_job(job, SlurmScheduler)


def test_an_executor_without_a_scheduler_is_refused():
    with pytest.raises(PlanError, match="no plan for the 'kubernetes' executor"):
        make_plan(parse_dry_run(NOTHING_TO_DO), "kubernetes")


def test_the_executor_planned_for(tmp_path: Path):
    profile = tmp_path / "mysite"
    profile.mkdir()
    (profile / "config.yaml").write_text("executor: sge\njobs: 4\n")
    assert planned_executor(str(profile), [], {}) == "sge"
    assert planned_executor(str(profile), ["--executor", "slurm"], {}) == "slurm"
    assert planned_executor(str(profile), ["-e", "local"], {}) == "local"
    assert planned_executor(str(profile), [], {"CLUSTERBENCH_EXECUTOR": "slurm"}) == "slurm"
    assert planned_executor(None, [], {}) == "local"
    assert planned_executor(str(tmp_path / "none"), [], {"XDG_CONFIG_HOME": "/x"}) == "local"


# ------------------------------------------------- against the executor plugins' own builders
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


def planned(run: dict, executor: str):
    """The plan's training job of ``run``: its train resources printed as Snakemake prints a
    dry run's job block (Snakemake's own formatting), parsed back."""
    threads = cb.allocated_workers(run) * run["cpus_per_worker"]
    text = "\n".join(
        [
            "rule train:",
            "    jobid: 1",
            f"    wildcards: {format_wildcards({'run': run['name']})}",
            *([f"    threads: {threads}"] if threads != 1 else []),
            f"    resources: {format_resources(dict(tmpdir='/tmp', **train_resources(run)))}",
            "Job stats:",
            "job      count",
            "-----  -------",
            "train        1",
            "total        1",
        ]
    )
    (job,) = make_plan(parse_dry_run(text), executor).jobs
    return job


@pytest.mark.parametrize("run", RUNS, ids=[r["name"] for r in RUNS])
def test_each_job_is_what_sbatch_is_asked_for(run):
    resources = train_resources(run)
    job = planned(run, "slurm")
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
    job = planned(run, "sge")
    argv = qsub_line(resources, tmp_path)
    slots = int(argv[argv.index("-pe") + 2])
    assert job.cpus == slots
    # one rank per slot in the mpi PE; a one-worker job is one rank on its smp slots
    assert job.ranks == (slots if argv[argv.index("-pe") + 1] == "mpi" else 1)
    assert job.ranks == run["workers"]
    assert last_l(argv, "h_rt") == f"00:{job.runtime:02d}:00"
    assert job.gpus == run["nodes"] * run["gpus_per_node"]  # SGE: the neutral request


def test_every_scheduler_sizes_a_job():
    resources = train_resources(RUNS[-1])  # multi-node: 6 ranks x 2 CPUs on 3 nodes
    sizes = {name: cls.job_request(resources, 12) for name, cls in SCHEDULERS.items()}
    assert {(s.nodes, s.ranks) for s in sizes.values()} == {(3, 6)}
    assert (sizes["slurm"].cpus, sizes["sge"].cpus, sizes["local"].cpus) == (12, 6, 12)
    assert SgeScheduler.job_request({}, 1).ranks == 1


# --------------------------------------------------------------------- make plan, for real
def make_plan_command(profile: Path, *snakemake_args: str) -> str:
    """The command `make plan PROFILE=... SNAKEMAKE_ARGS=...` runs (`make -n`: not the
    set-up it runs first)."""
    out = subprocess.run(
        [
            "make",
            "-n",
            "plan",
            f"PROFILE={profile}",
            f"SNAKEMAKE_ARGS={shlex.join(snakemake_args)}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (command,) = [line for line in out.splitlines() if "clusterbench.plan" in line]
    return command


def make_plan_for_real(workdir: Path, profile: str, *args: str, env=None):
    command = make_plan_command(
        REPO / "profiles" / profile,
        *("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)),
        *("--configfile", str(workdir / "config.yaml"), *args),
    )
    return subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=snakemake_env(env),
    )


def fake_slurm(directory: Path, sinfo: str) -> dict[str, str]:
    """``sinfo`` answering ``sinfo``; the Slurm commands that submit log their call and fail."""
    directory.mkdir(parents=True)
    calls = directory / "calls"
    (directory / "sinfo").write_text(f"#!/bin/sh\necho sinfo >> {calls}\necho '{sinfo}'\n")
    for command in ("sbatch", "srun", "squeue", "sacct", "scontrol"):
        (directory / command).write_text(f'#!/bin/sh\necho "{command} $*" >> {calls}\nexit 1\n')
    for tool in directory.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{directory}:{snakemake_env()['PATH']}"}


def plan_lines(text: str) -> list[str]:
    return text[text.index("clusterbench plan (") :].splitlines()


def per_rule(line: str) -> dict[str, int]:
    """``  jobs per rule (N in all): a 1, b 2`` -> {"a": 1, "b": 2} (in Snakemake's order)."""
    _, _, listed = line.partition("): ")
    return {rule: int(n) for rule, n in (item.split() for item in listed.split(", "))}


@pytest.mark.horovod
def test_make_plan_shows_what_the_slurm_profile_would_submit(tmp_path: Path):
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    cfg["runs"] = [
        {"name": "one", "dataset": "digits", "workers": 1},
        {"name": "gpus", "dataset": "digits", "workers": 4, "nodes": 2, "gpus_per_node": 2},
        {"name": "too-big", "dataset": "digits", "workers": 64},
    ]
    workdir = tmp_path / "work"
    write_config(workdir, cfg)
    env = fake_slurm(tmp_path / "bin", "gpu*|2|8|gpu:a100:2")
    proc = make_plan_for_real(
        workdir, "slurm", "--set-resources", "train:runtime=7", "train:mem_mb=999", env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = plan_lines(proc.stdout)
    assert lines[0].startswith("clusterbench plan (slurm executor)")
    assert lines[2].split() == ["gpus", "2", "4", "4", "4", "7", "min"]
    assert lines[3].split() == ["one", "1", "1", "1", "0", "7", "min"]
    assert "0.58 CPU-hours, 0.47 GPU-hours (2 training job(s)" in lines[4]
    assert lines[5].startswith("  jobs per rule (10 in all): ")
    assert per_rule(lines[5]) == dict(
        download=1, preprocess=1, train=2, evaluate=2, history=1, report=1, best=1, all=1
    )
    assert lines[6:8] == ["  skipped (1):", lines[7]]
    assert lines[7].startswith("    too-big: run 'too-big' asks for 64 workers")
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    assert calls.count("sinfo") == 1  # asked once (the plugin reads `scontrol show config`)
    assert not [call for call in calls if call.startswith(("sbatch", "srun"))], calls
    assert not (workdir / "results").exists()


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_make_plan_leaves_out_a_finished_job(tmp_path: Path, dataset_cache: Path):
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(dataset_cache)
    cfg["runs"] = [
        {"name": "done", "dataset": "digits", "workers": 1, "epochs": 1},
        {"name": "todo", "dataset": "digits", "workers": 1, "epochs": 1, "runtime": 20},
    ]
    workdir = tmp_path / "work"
    write_config(workdir, cfg)
    snakemake(workdir, "--cores", "1", "results/data/digits/meta.json")  # for real
    # `done` trained: its outputs (and benchmark), marked up to date
    run = workdir / "results" / "runs" / "done"
    (run / "tensorboard").mkdir(parents=True)
    for name in integrity.RUN_FILES:
        (run / name).touch()
    integrity.write_checksums(run, integrity.RUN_FILES)  # as the train step does, last
    (workdir / "results" / "benchmarks" / "train").mkdir(parents=True)
    (workdir / "results" / "benchmarks" / "train" / "done.tsv").touch()
    snakemake(workdir, "--cores", "1", "--touch", "results/runs/done/model.pt")

    proc = make_plan_for_real(workdir, "local")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = plan_lines(proc.stdout)
    assert lines[0].startswith("clusterbench plan (local executor)")
    assert lines[2].split() == ["todo", "1", "1", "1", "0", "20", "min"]
    assert "(1 training job(s)" in lines[3]
    assert per_rule(lines[4]) == dict(train=1, evaluate=2, history=1, report=1, best=1, all=1)
    assert lines[5] == "  skipped: none"
    assert "done" not in "\n".join(lines[1:3])


# ------------------------------------------------------ the real Slurm test cluster (unfaked)
@pytest.mark.slow
@pytest.mark.slurm
def test_the_slurm_plan_is_what_slurm_granted(slurm_cluster, tmp_path: Path):
    """`make plan` against the real cluster (its sinfo), then the same workflow run: each train
    job Slurm was given (`scontrol show job`) has the plan's nodes, ranks, CPUs and time limit,
    and a run no partition holds is in the plan's skips, never submitted, and skipped while the
    rest of the workflow goes on to the report (skipped.csv) and the best run."""
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    cfg["runs"] = [
        {"name": "one", "dataset": "digits", "workers": 1, "epochs": 1, "runtime": 9},
        {"name": "spread", "dataset": "digits", "workers": 2, "nodes": 2, "epochs": 1},
        {"name": "too-big", "dataset": "digits", "workers": 64, "epochs": 1},
    ]
    workdir = tmp_path / "work"
    write_config(workdir, cfg)
    proc = make_plan_for_real(
        workdir, "slurm", "--set-resources", "train:runtime=11", env=slurm_cluster.env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = plan_lines(proc.stdout)
    planned = {
        fields[0]: tuple(int(x) for x in fields[1:6])
        for fields in (line.split() for line in lines[2:4])
    }
    # --set-resources wins over the run's runtime (the profile's defaults are under both)
    assert planned == {"one": (1, 1, 1, 0, 11), "spread": (2, 2, 2, 0, 11)}, lines
    assert any(line.startswith("    too-big: run 'too-big' asks for 64") for line in lines)

    run = snakemake(
        workdir,
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--set-resources",
        "train:runtime=11",
        *SLURM_POLL,
        env=slurm_cluster.env,
        timeout=1500,
    )
    out = run.stdout + run.stderr
    # the whole workflow went on without the run no partition holds, to the report and best
    skipped = (workdir / "results" / "report" / "skipped.csv").read_text()
    assert skipped.startswith("run,experiment,environment,reason\ntoo-big,"), skipped
    assert "asks for 64 workers" in skipped, skipped
    assert not (workdir / "results" / "runs" / "too-big").exists()
    assert (workdir / "results" / "best" / "summary.json").is_file()
    submitted = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+)\)", out)
    job_of = {Path(log).parent.name: job for job, log in submitted if "rule_train" in log}
    assert set(job_of) == {"one", "spread"}, out
    for name, job in job_of.items():
        # job records stay MinJobAge (300 s) after the job ends
        text = slurm_cluster.run(["scontrol", "show", "job", job]).stdout
        field = {k: v for k, v in re.findall(r"\b([\w/]+)=(\S+)", text)}
        nodes, ranks, cpus, _gpus, runtime = planned[name]
        assert int(field["NumNodes"].split("-")[0]) == nodes, text
        assert int(field["NumTasks"]) == ranks, text
        assert int(field["NumTasks"]) * int(field["CPUs/Task"]) == cpus, text
        assert field["TimeLimit"] == f"00:{runtime:02d}:00", text
