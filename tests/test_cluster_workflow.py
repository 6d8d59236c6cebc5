"""The real workflow on the real test clusters: `snakemake --profile profiles/slurm|sge`.

The clusters are started by the session fixtures of tests/clusters (Debian's Slurm 22.05 with two
nodes and slurmdbd, SGE 8.1.9). Nothing here is faked: jobs go through the executor plugins,
training ranks are started by clusterbench.launch with srun / qrsh -inherit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from clusterbench.training import checkpoints
from conftest import (
    REPO,
    SGE_POLL,
    SLURM_POLL,
    default_config,
    pdf_text,
    popen_snakemake,
    snakemake,
    snakemake_cmd,
    write_config,
)

pytestmark = pytest.mark.slow

EPOCHS = 3
TWO = "digits-cnn-2w"  # the default config's 2-worker run (Horovod)
TWO_DDP = "digits-cnn-2w-ddp"  # ... and its twin under torch.distributed DDP


def cluster_config(workdir: Path, *, nodes: int) -> dict:
    """The demo config, shortened to one 1-worker run and the 2-worker runs of both backends,
    these spread over ``nodes`` nodes."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["run_defaults"]["epochs"] = EPOCHS
    cfg["run_defaults"]["runtime"] = 15
    cfg["runs"] = [r for r in cfg["runs"] if r["name"] in ("digits-cnn-1w", TWO, TWO_DDP)]
    for run in cfg["runs"]:
        if run["workers"] == 2:
            run["nodes"] = nodes
    write_config(workdir, cfg)
    return cfg


def rank_lines(log: Path, backend: str = "horovod") -> dict[int, dict]:
    """The identity line each rank prints at start (see clusterbench.train)."""
    ranks, mark = {}, f"train: {backend} rank "
    for line in log.read_text().splitlines():
        if mark in line:
            info = json.loads(line.split(mark, 1)[1].split(" ", 1)[1])
            ranks[info["rank"]] = info
    return ranks


def assert_identical_weights(weights: Path) -> None:
    import torch

    files = sorted(weights.glob("rank-*.pt"))
    assert [f.name for f in files] == ["rank-0.pt", "rank-1.pt"], files
    a, b = (torch.load(f, weights_only=True) for f in files)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def assert_pipeline_outputs(workdir: Path, scheduler: str) -> None:
    res = workdir / "results"
    for two, backend in ((TWO, "horovod"), (TWO_DDP, "ddp")):
        info = json.loads((res / "runs" / two / "run.json").read_text())
        assert info["world"]["scheduler"] == scheduler and info["world"]["size"] == 2
        assert info["world"]["backend"] == backend
        assert_identical_weights(workdir / "weights" / two)
    for run in (p.name for p in (res / "runs").iterdir()):
        assert len((res / "runs" / run / "metrics.jsonl").read_text().splitlines()) == EPOCHS
        assert json.loads((res / "eval" / run / "metrics.json").read_text())["accuracy"] > 0.5
    assert (res / "report" / "report.pdf").read_bytes().startswith(b"%PDF")


def run_on(cluster, workdir: Path, profile: str, *extra: str, check=True, timeout=1500, env=None):
    env = {
        **cluster.environ(),
        "CLUSTERBENCH_DUMP_WEIGHTS": str(workdir / "weights"),
        **(env or {}),
    }
    return snakemake(
        workdir,
        "--profile",
        str(REPO / "profiles" / profile),
        "--envvars",
        "CLUSTERBENCH_DUMP_WEIGHTS",
        *extra,
        env=env,
        check=check,
        timeout=timeout,
    )


# --------------------------------------------------------------------------------- Slurm


@pytest.fixture(scope="module")
def slurm_finished(slurm_cluster, tmp_path_factory) -> Path:
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    workdir = tmp_path_factory.mktemp("slurm-pipeline")
    cluster_config(workdir, nodes=2)
    run_on(slurm_cluster, workdir, "slurm", *SLURM_POLL)
    return workdir


@pytest.mark.slurm
def test_slurm_runs_the_pipeline_with_a_two_node_training_job(slurm_cluster, slurm_finished):
    workdir = slurm_finished
    assert_pipeline_outputs(workdir, "slurm")

    ranks = rank_lines(workdir / "results" / "logs" / "train" / f"{TWO}.log")
    assert sorted(ranks) == [0, 1]
    assert {r["size"] for r in ranks.values()} == {2}
    assert sorted(r["cross_rank"] for r in ranks.values()) == [0, 1]
    assert {r["cross_size"] for r in ranks.values()} == {2}
    assert {r["local_size"] for r in ranks.values()} == {1}
    assert sorted(r["hostname"] for r in ranks.values()) == ["node1", "node2"]
    log = (workdir / "results" / "logs" / "train" / f"{TWO}.log").read_text()
    assert "slurm scheduler (srun steps): 2 rank(s)" in log, log
    # the DDP twin: the same allocation and placement, through torch.distributed
    ddp = rank_lines(workdir / "results" / "logs" / "train" / f"{TWO_DDP}.log", "ddp")
    assert sorted(ddp) == [0, 1]
    assert sorted(r["hostname"] for r in ddp.values()) == ["node1", "node2"]
    assert sorted(r["cross_rank"] for r in ddp.values()) == [0, 1]

    # sacct (slurmdbd) saw every job of this workflow, the training one on two nodes
    deadline = time.time() + 60
    while True:
        out = slurm_cluster.run(
            [
                "sacct",
                "-a",
                "-X",
                "-P",
                "-n",
                "-S",
                "now-2hours",
                "-o",
                "JobID,NNodes,State,WorkDir%300",
            ]
        ).stdout
        jobs = [line.split("|") for line in out.splitlines() if line.endswith(str(workdir))]
        if len(jobs) >= 7 or time.time() > deadline:
            break
        time.sleep(2)
    # preprocess, 3x train, 3x evaluate (download and report run on the submit host)
    assert len(jobs) == 7, out
    assert {state for _, _, state, _ in jobs} == {"COMPLETED"}, out
    assert sorted(int(nodes) for _, nodes, _, _ in jobs).count(2) == 2, out


@pytest.mark.slurm
def test_switching_profile_reruns_nothing(slurm_cluster, sge_cluster, slurm_finished):
    for profile, cluster in (("local", None), ("sge", sge_cluster)):
        env = cluster.environ() if cluster else None
        proc = snakemake(
            slurm_finished, "--profile", str(REPO / "profiles" / profile), "--dry-run", env=env
        )
        assert "Nothing to be done" in proc.stdout + proc.stderr, (profile, proc.stdout)
    # and no profile setting leaked into what Snakemake compares to rerun a job: the params and
    # the input (its `code` is the rule's text, the same under every profile, which names the
    # train rule's grow_* resources; `shellcmd`, the command as run, is a record, no trigger)
    records = [
        json.loads(p.read_text()) for p in (slurm_finished / ".snakemake" / "metadata").iterdir()
    ]
    recorded = json.dumps([[r.get("params"), r.get("input")] for r in records])
    assert any(r.get("params") for r in records)
    for word in ("slurm", "srun", "sge", "partition", "mem_mb"):
        assert word not in recorded


#: A run larger than either test cluster.
TOO_BIG = {"name": "too-big", "workers": 64, "batch_size": 128}


def submit_too_big(cluster, finished: Path, workdir: Path, profile: str, nodes: int, poll):
    """Ask for training 64 workers next to a finished pipeline's data; the failed run."""
    shutil.copytree(finished / "results", workdir / "results")  # data ready, mtimes kept
    cfg = cluster_config(workdir, nodes=nodes)
    cfg["runs"] = [dict(cfg["runs"][1], name="too-big", workers=64, nodes=nodes)]
    write_config(workdir, cfg)
    proc = run_on(cluster, workdir, profile, *poll, "results/runs/too-big/model.pt", check=False)
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def one_worker_run(cfg: dict) -> dict:
    """The 1-worker run of a :func:`cluster_config`: the base the tests write their runs over."""
    return next(r for r in cfg["runs"] if r["workers"] == 1)


def train_next_to(finished: Path, workdir: Path, runs: list[dict], nodes: int) -> list[str]:
    """A config of tiny 1-epoch digits ``runs`` (over the 1-worker run) in ``workdir``, next to a
    finished pipeline's data (copied, mtimes kept); the targets: their run.json files."""
    shutil.copytree(finished / "results" / "raw", workdir / "results" / "raw")
    shutil.copytree(finished / "results" / "data", workdir / "results" / "data")
    cfg = cluster_config(workdir, nodes=nodes)
    one = dict(one_worker_run(cfg), epochs=1)
    cfg["runs"] = [{**one, **run} for run in runs]
    write_config(workdir, cfg)
    return [f"results/runs/{run['name']}/run.json" for run in runs]


@pytest.mark.slurm
def test_slurm_train_jobs_carry_their_runs_priority_and_qos(
    slurm_cluster, slurm_finished, tmp_path
):
    """A run's priority P is its train job's nice -P (Slurm's nice lowers a job's priority),
    its qos the job's QOS; without them, nice 0 and the default QOS."""
    runs = [
        {"name": "urgent", "priority": 7, "qos": slurm_cluster.qos},
        {"name": "patient", "priority": -3},
        {"name": "plain"},
    ]
    targets = train_next_to(slurm_finished, tmp_path / "w", runs, nodes=1)
    proc = run_on(slurm_cluster, tmp_path / "w", "slurm", *SLURM_POLL, *targets)
    out = proc.stdout + proc.stderr
    submitted = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+)\)", out)
    job_of = {Path(log).parent.name: job for job, log in submitted if "rule_train" in log}
    assert set(job_of) == {r["name"] for r in runs}, out

    def nice_and_qos(job: str) -> tuple[str, str]:
        # job records stay MinJobAge = 300 s after the job ends
        text = slurm_cluster.run(["scontrol", "show", "job", job]).stdout
        return re.search(r"\bNice=(\S+)", text)[1], re.search(r"\bQOS=(\S+)", text)[1]

    assert nice_and_qos(job_of["urgent"]) == ("-7", slurm_cluster.qos)
    assert nice_and_qos(job_of["patient"]) == ("3", "normal")
    assert nice_and_qos(job_of["plain"]) == ("0", "normal")


@pytest.mark.slurm
def test_impossible_slurm_request_fails_before_submission(slurm_cluster, slurm_finished, tmp_path):
    text = submit_too_big(slurm_cluster, slurm_finished, tmp_path / "w", "slurm", 2, SLURM_POLL)
    # refused before submission (Slurm itself would accept it and leave it pending forever)
    assert "run 'too-big' asks for 64 workers" in text and "forever" in text, text
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""


@pytest.mark.slurm
def test_local_and_slurm_results_in_one_comparative_pdf(slurm_cluster, slurm_finished, tmp_path):
    """The same config run locally and on the Slurm test cluster: clusterbench-compare merges
    both results trees into one PDF, every run matched across the two sites."""
    local = tmp_path / "local"
    shutil.copytree(slurm_finished / "results" / "raw", local / "results" / "raw")
    shutil.copytree(slurm_finished / "results" / "data", local / "results" / "data")
    cluster_config(local, nodes=2)
    snakemake(local, "--profile", str(REPO / "profiles" / "local"))
    out = tmp_path / "compare" / "compare.pdf"
    proc = subprocess.run(
        [sys.executable, "-m", "clusterbench.compare", str(local), str(slurm_finished), "-o",
         str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_csv(out.with_name("compare.csv"))
    sites = set(table["site"])
    assert sites == {socket.gethostname().split(".")[0], "clusterbench"}, sites
    assert set(table["benchmark"]) == {"digits-cnn-1w", TWO, TWO_DDP}
    text = pdf_text(out, layout=False)
    assert "Sites compared" in text and "Runs that could not be matched" not in text


# --------------------------------------------------------------------------------- preemption

#: Two trainings of 79 steps per epoch (batch 16), a few seconds long: one on two nodes (half a
#: second per epoch here), one alone (a fifth of a second).
PREEMPTED = {
    "2w": {"name": "long-2w", "workers": 2, "nodes": 2, "epochs": 12, "batch_size": 16},
    "1w": {"name": "long-1w", "workers": 1, "nodes": 1, "epochs": 30, "batch_size": 16},
}


@pytest.fixture(scope="module")
def slurm_uninterrupted(slurm_cluster, slurm_finished, tmp_path_factory) -> Path:
    """Both trainings, run on Slurm without interruption: the reference."""
    workdir = tmp_path_factory.mktemp("slurm-uninterrupted")
    targets = train_next_to(slurm_finished, workdir, list(PREEMPTED.values()), nodes=2)
    run_on(slurm_cluster, workdir, "slurm", *SLURM_POLL, *targets)
    return workdir / "results" / "runs"


#: Lines with which a launcher's log ends.
LAUNCH_ENDED = ("[launch] preempted", "exited with code", "rank(s) finished", "stopping every rank")


def _until_the_launcher_ends(log: Path, deadline: float) -> tuple[str, float]:
    """The training log once its launcher has ended (before a retry overwrites it), and when
    that was seen (time.time())."""
    text = ""
    while not any(mark in text for mark in LAUNCH_ENDED):
        assert time.time() < deadline, f"the launcher did not end: {text[-3000:]}"
        time.sleep(0.05)
        text = log.read_text() if log.exists() else text
    return text, time.time()


def _assert_preempted_then_resumed(first: str, final: str) -> str:
    """The first attempt stopped at a checkpoint at a step boundary (mid-epoch, or the epoch's
    end when the warning came during its last steps); the last one continued from it."""
    from test_resume import checkpoint_after_warning

    where = checkpoint_after_warning(first)
    assert "exited with code" not in first, first[-3000:]
    assert f"train: continuing from the checkpoint {where}" in final, final[-3000:]
    return where


def _start_training(
    cmd: list[str], env: dict, log: Path, early: list | None = None
) -> tuple[subprocess.Popen, float]:
    """Start ``snakemake`` (``cmd``) and wait until its training has finished epoch 2: the
    process and a deadline (time.time()) for what follows. ``early``: [workdir, run], to which
    the status's line of the run is appended once it names a job before the run has written a
    file (:func:`_seen_before_its_files`)."""
    proc = popen_snakemake(cmd, env)
    deadline = time.time() + 600
    while not (log.exists() and "train: epoch 2:" in log.read_text()):
        if early is not None and len(early) == 2:
            workdir, run = early
            lock = workdir / "results" / "runs" / run / "train.lock"
            if not lock.exists() and (line := _seen_before_its_files(workdir, env, run, lock)):
                early.append(line)
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            out, _ = proc.communicate()
            raise AssertionError(f"training did not reach epoch 2: {out[-5000:]}")
        time.sleep(0.2)
    return proc, deadline


def _slurm_job_of(cluster, workdir: Path, deadline: float) -> str:
    """The id of the one running Slurm job working in ``workdir``."""
    while time.time() < deadline:
        out = cluster.run(["squeue", "-h", "-t", "R", "-o", "%i|%Z"]).stdout
        jobs = [line.split("|")[0] for line in out.splitlines() if line.endswith(f"|{workdir}")]
        if len(jobs) == 1:
            return jobs[0]
        time.sleep(0.5)
    raise AssertionError(f"no running job of {workdir}: {out}")


@pytest.mark.slurm
@pytest.mark.parametrize(
    "how, which",
    [("warning", "2w"), ("warning", "1w"), ("requeue", "2w")],
    ids=["usr1-two-nodes", "usr1-one-worker", "scontrol-requeue-two-nodes"],
)
def test_a_warned_or_requeued_slurm_training_ends_as_if_never_stopped(
    slurm_cluster, slurm_finished, slurm_uninterrupted, tmp_path, how, which
):
    """Mid-training, Slurm's preemption warning (what `--signal=B:USR1@N` sends: SIGUSR1 to the
    batch script's process alone, here by `scancel --batch --signal=USR1`) makes the ranks
    checkpoint at a step boundary and the job exit 75; Snakemake's retry (the profile's
    `retries`) continues from that step. `scontrol requeue` kills the job and queues it again (the
    profile's `--requeue`); it continues from its last checkpoint. Either way the training ends
    bit for bit as the uninterrupted one on Slurm, every epoch once. The status says the run
    runs in its job before, and is queued in it once requeued."""
    from test_resume import assert_same_training

    run = PREEMPTED[which]
    workdir = tmp_path / "w"
    (target,) = train_next_to(slurm_finished, workdir, [run], nodes=2)
    log = workdir / "results" / "logs" / "train" / f"{run['name']}.log"
    cmd = snakemake_cmd(workdir, "--profile", str(REPO / "profiles" / "slurm"), *SLURM_POLL)
    proc, deadline = _start_training([*cmd, target], slurm_cluster.environ(), log)
    try:
        job = _slurm_job_of(slurm_cluster, workdir, deadline)
        held = _assert_status(workdir, slurm_cluster.environ(), run, "running", "slurm")
        assert held["holder"]["job"] == job, held
        sent = time.time()
        if how == "warning":
            slurm_cluster.run(["scancel", "--batch", "--signal=USR1", job])
            first, ended = _until_the_launcher_ends(log, deadline)
        else:
            slurm_cluster.run(["scontrol", "requeue", job])
            while slurm_cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() != (
                "PENDING"
            ):
                assert time.time() < deadline, "the requeued job never went back to the queue"
                time.sleep(0.5)
            _assert_status(workdir, slurm_cluster.environ(), run, "queued", "slurm", held)
            _start_requeued_now(slurm_cluster, job)
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-5000:]
    final = log.read_text()
    if how == "warning":
        where = _assert_preempted_then_resumed(first, final)
        state = slurm_cluster.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,ExitCode"])
        # the job says "preempted" (75), then Snakemake's retry
        assert state.stdout.split()[0] == "FAILED|75:0", state.stdout
        print(f"\nFIGURE slurm {which}: warning -> job exited 75 in {ended - sent:.2f} s, {where}")
    else:
        shown = slurm_cluster.run(["scontrol", "show", "job", job]).stdout
        assert "Restarts=1" in shown, shown
        resumed = re.search(r"train: continuing from the checkpoint (after epoch \d+)", final)
        assert resumed, final[-3000:]
        # Slurm restarts the requeued job; the Slurm executor plugin may have taken the killed
        # run for a failure first (sacct between the kill and the requeue) and submitted
        # Snakemake's retry. Either attempt must continue from the checkpoint.
        state = re.search(r"JobState=(\S+)", shown)[1]
        by = (
            "the requeued job" if state == "COMPLETED" else f"Snakemake's retry (requeued: {state})"
        )
        print(f"\nFIGURE slurm requeue: {by} continued from {resumed[1]}")
    assert_same_training(
        workdir / "results" / "runs" / run["name"], slurm_uninterrupted / run["name"]
    )


def _start_requeued_now(slurm_cluster, job: str) -> None:
    """A requeued job waits for a BeginTime about 2 min ahead: start it now, but not within the
    second of its requeue. slurmd revokes the ended instance's job credential by the second,
    and a restart within that second is killed ("Job credential revoked": seen once in CI, a
    restart 0.8 s after the requeue). Slurm's own delay avoids that; 2 s of ours do too."""
    time.sleep(2.0)
    slurm_cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])


@pytest.mark.slurm
def test_with_requeue_exit_75_slurm_itself_requeues_a_preempted_job_which_resumes(
    slurm_cluster, slurm_finished, slurm_uninterrupted, tmp_path
):
    """A site whose slurm.conf has `RequeueExit=75` (set for this test only): the warned
    two-node training checkpoints and its job exits 75; Slurm requeues that job itself (the same
    job id, `Restarts=1`), which continues from the checkpoint and ends bit for bit as the
    uninterrupted training. Snakemake sees no failure: it runs with `--retries 0`."""
    from test_resume import assert_same_training

    run = PREEMPTED["2w"]
    workdir = tmp_path / "w"
    (target,) = train_next_to(slurm_finished, workdir, [run], nodes=2)
    log = workdir / "results" / "logs" / "train" / f"{run['name']}.log"
    profile = str(REPO / "profiles" / "slurm")
    cmd = snakemake_cmd(workdir, "--profile", profile, *SLURM_POLL, "--retries", "0", target)
    with slurm_cluster.settings(RequeueExit="75"):
        proc, deadline = _start_training(cmd, slurm_cluster.environ(), log)
        try:
            job = _slurm_job_of(slurm_cluster, workdir, deadline)
            slurm_cluster.run(["scancel", "--batch", "--signal=USR1", job])
            first, _ = _until_the_launcher_ends(log, deadline)
            while "Restarts=1" not in slurm_cluster.run(["scontrol", "show", "job", job]).stdout:
                assert time.time() < deadline, "Slurm did not requeue the job that exited 75"
                time.sleep(0.5)
            requeued = time.time()
            _start_requeued_now(slurm_cluster, job)
            out, _ = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, out[-5000:]
    where = _assert_preempted_then_resumed(first, log.read_text())
    shown = slurm_cluster.run(["scontrol", "show", "job", job]).stdout
    assert "Restarts=1" in shown and "JobState=COMPLETED" in shown, shown
    submitted = re.findall(r"submitted with SLURM jobid (\d+)", out)
    assert submitted == [job], out[-5000:]  # no second submission: Slurm requeued it
    assert_same_training(
        workdir / "results" / "runs" / run["name"], slurm_uninterrupted / run["name"]
    )
    print(
        f"\nFIGURE slurm RequeueExit=75: exit 75 -> requeued by Slurm (job {job}, Restarts=1), "
        f"resumed {where}; workflow done {time.time() - requeued:.0f} s after the requeue"
    )


@pytest.mark.slurm
def test_slurms_own_warning_before_the_time_limit_reaches_the_ranks(
    slurm_cluster, slurm_finished, tmp_path
):
    """Slurm itself sends the warning: a 2-node training far longer than its job's time limit
    (2 min) with `warning_seconds: 100` gets `--signal=B:USR1@100` at Slurm's first time-limit
    check from 20 s in (at most 30 s later), through the batch script's stand-in to the launcher
    and on to the ranks; they checkpoint and the job exits 75 (sacct), long before the limit.
    (That the next attempt continues from such a checkpoint as if never stopped is the test
    above. A warning due at the job's very start, `warning_seconds: 119`, may come before the
    stand-in listens: tests/test_slurm_batch.py shows that it is then lost, not fatal.)"""
    from test_resume import checkpoint_after_warning

    run = {**PREEMPTED["2w"], "name": "time-limited", "epochs": 300, "runtime": 2}
    workdir = tmp_path / "w"
    (target,) = train_next_to(slurm_finished, workdir, [{**run, "warning_seconds": 100}], nodes=2)
    log = workdir / "results" / "logs" / "train" / f"{run['name']}.log"
    started = time.time()
    proc = run_on(
        slurm_cluster, workdir, "slurm", *SLURM_POLL, "--retries", "0", target, check=False
    )
    took = time.time() - started
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said[-3000:]
    first = log.read_text()
    job = re.search(r"Job \S+ has been submitted with SLURM jobid (\d+)", said)
    assert job, said[-3000:]
    state = slurm_cluster.run(
        ["sacct", "-X", "-n", "-P", "-j", job[1], "-o", "State,ExitCode"]
    ).stdout.split()[0]
    assert state == "FAILED|75:0", (state, first[-3000:])
    # Slurm's first time-limit check may come before the ranks' first step (it did on CI):
    # stopping before any training is still the ranks acting on the warning, with nothing to
    # keep (the next attempt starts at epoch 1); after a step, its checkpoint is there
    where = checkpoint_after_warning(first, before_training_ok=True)
    out = workdir / "results" / "runs" / run["name"]
    assert not (out / "model.pt").exists()
    if where != checkpoints.Position(0).describe():
        assert list((out / "checkpoints").glob("*/epoch-*.pt")), where
    print(
        f"\nFIGURE slurm time limit: Slurm's own warning -> checkpoint {where}, job exit 75, "
        f"workflow ended {took:.0f} s after it started (time limit 120 s)"
    )


def test_unknown_profile_setting_is_an_error(tmp_path):
    profile = tmp_path / "profile"
    shutil.copytree(REPO / "profiles" / "slurm", profile)
    with open(profile / "config.yaml", "a") as fh:
        fh.write("slurm-partiton: gpu\n")  # sic: a typo
    workdir = tmp_path / "w"
    cluster_config(workdir, nodes=1)
    proc = snakemake(workdir, "--profile", str(profile), "--dry-run", check=False)
    assert proc.returncode != 0
    assert "slurm-partiton" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------------- killing a rank


def _rank_pid(rank: int, workdir: Path) -> int | None:
    """Pid of the training process of rank ``rank`` (torch.distributed's RANK, which every
    backend's ranks get) working for ``workdir``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if (
            any(arg.endswith(b"scripts/train.py") for arg in cmdline)
            and f"RANK={rank}".encode() in environ
            and cwd == str(workdir)
        ):
            return int(entry.name)
    return None


def kill_rank_during_training(
    workdir: Path, profile: str, env: dict, extra=(), backend: str = "horovod"
) -> tuple:
    """Start the workflow, SIGKILL rank 1 once training runs; return (proc, log text, seconds)."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    run = dict(cfg["runs"][1], name="doomed", epochs=500, runtime=15, backend=backend)
    cfg["runs"] = [run]
    write_config(workdir, cfg)
    log = workdir / "results" / "logs" / "train" / "doomed.log"
    cmd = snakemake_cmd(
        workdir,
        "--profile",
        str(REPO / "profiles" / profile),
        "--retries",
        "0",
        *extra,
        "results/runs/doomed/model.pt",
    )
    proc = popen_snakemake(cmd, env)
    scheduler = "local" if profile == "local" else "slurm"
    lock = workdir / "results" / "runs" / "doomed" / "train.lock"
    try:
        deadline = time.time() + 600
        pid = early = None
        while time.time() < deadline and proc.poll() is None:
            if scheduler != "local" and early is None and not lock.exists():
                early = _seen_before_its_files(workdir, env, "doomed", lock)
            if log.exists() and "epoch 1:" in log.read_text():
                pid = _rank_pid(1, workdir)
                if pid:
                    break
            time.sleep(1)
        assert pid, f"training never started: {log.read_text() if log.exists() else 'no log'}"
        held = _assert_status(workdir, env, run, "running", scheduler)
        if scheduler != "local":  # its train job, known by the queue alone
            assert early and early[1:3] in (
                ["queued", f"{scheduler} {held['holder']['job']}"],
                ["running", f"{scheduler} {held['holder']['job']}"],
            ), early
        os.kill(pid, signal.SIGKILL)
        killed = time.time()
        _, launcher_ended = _until_the_launcher_ends(log, killed + 300)
        out, _ = proc.communicate(timeout=300)  # a hang fails the test here
        _assert_status(workdir, env, run, "failed", scheduler, held)
        print(
            f"\nFIGURE {profile}: rank 1 killed -> its launcher failed the job in "
            f"{launcher_ended - killed:.2f} s (seen by polling the log every 50 ms)"
        )
        return proc.returncode, out, log.read_text(), time.time() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _seen_before_its_files(workdir: Path, env: dict, run: str, lock: Path) -> list | None:
    """The status's line of ``run`` once it names a job while the run has written nothing (no
    lock file before nor after the status was read: the job found in the queue by the
    plugin's comment or manifest alone); None until then."""
    from test_status import status_of

    line = status_of(workdir, env)[run]
    return line if line[2] != "-" and not lock.exists() else None


def _assert_status(
    workdir: Path, env: dict, run: dict, state: str, scheduler: str, holder: dict | None = None
) -> dict:
    """`python -m clusterbench.status` in ``workdir`` says ``run`` is in ``state`` (a job still
    ending first: asked again for up to 30 s), on its ranks, of its epochs (running: at least
    one done, and its rate); its JOB is the lock holder's (``holder``, or the lock
    file's now): the ``scheduler``'s job in the queue while it runs or waits, the job once it
    ended, a local launcher's pid. The holder."""
    from test_status import status_of

    lock = workdir / "results" / "runs" / run["name"] / "train.lock"
    holder = holder or json.loads(lock.read_text())
    deadline = time.time() + 30
    while (line := (shown := status_of(workdir, env))[run["name"]])[1] == "ending":
        assert time.time() < deadline, line
        time.sleep(1)
    who = holder["holder"]
    job = f"pid {who['pid']}" if scheduler == "local" else f"job {who['job']}"
    if scheduler != "local" and state in ("running", "queued"):
        job = f"{scheduler} {who['job']}"
    assert line[1:4] == [state, job, str(run["workers"])], shown
    done, of = line[4].split("/")
    assert of == str(run["epochs"]), line
    if state == "running":  # (Snakemake deletes a failed job's outputs, metrics.jsonl too)
        assert int(done) >= 1 and line[5].endswith(" images/s"), line
    return holder


def _assert_failed_fast(returncode, out, log, seconds):
    print(f"workflow failed {seconds:.1f} s after rank 1 was killed")
    assert returncode != 0
    assert "rank 1 of 2" in log and "exited with code" in log, log
    assert "Error in rule train" in out, out


@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_killing_a_rank_fails_the_local_job(tmp_path, backend):
    workdir = tmp_path / "w"
    returncode, out, log, seconds = kill_rank_during_training(workdir, "local", {}, backend=backend)
    _assert_failed_fast(returncode, out, log, seconds)
    assert _rank_pid(0, workdir) is None  # the surviving rank was stopped too


@pytest.mark.slurm
def test_killing_a_rank_fails_the_slurm_job(slurm_cluster, tmp_path):
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    workdir = tmp_path / "w"
    returncode, out, log, seconds = kill_rank_during_training(
        workdir, "slurm", slurm_cluster.environ(), SLURM_POLL
    )
    _assert_failed_fast(returncode, out, log, seconds)
    assert _rank_pid(0, workdir) is None
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""


# --------------------------------------------------------------------------------- SGE


@pytest.fixture(scope="module")
def sge_finished(sge_cluster, tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("sge-pipeline")
    cfg = cluster_config(workdir, nodes=1)
    # skipped (test_sge_job_no_queue_could_run_is_skipped_and_the_rest_goes_on)
    cfg["runs"].append({**one_worker_run(cfg), **TOO_BIG})
    write_config(workdir, cfg)
    # The profile as shipped exports the environment Snakemake runs in to the jobs (qsub -V;
    # the SGE plugin ignores --envvars): what the README promises of CLUSTERBENCH_IFACE and the
    # test's CLUSTERBENCH_DUMP_WEIGHTS reach the training jobs.
    run_on(sge_cluster, workdir, "sge", *SGE_POLL, env={"CLUSTERBENCH_IFACE": "lo"})
    return workdir


@pytest.mark.sge
def test_sge_runs_the_pipeline_with_a_two_slot_training_job(sge_cluster, sge_finished):
    workdir = sge_finished
    assert_pipeline_outputs(workdir, "sge")
    ranks = rank_lines(workdir / "results" / "logs" / "train" / f"{TWO}.log")
    assert sorted(ranks) == [0, 1]
    assert {r["size"] for r in ranks.values()} == {2}
    assert sorted(r["local_rank"] for r in ranks.values()) == [0, 1]
    log = (workdir / "results" / "logs" / "train" / f"{TWO}.log").read_text()
    assert "sge scheduler (qrsh -inherit): 2 rank(s)" in log, log
    # exported by the profile as shipped: the launcher saw the variable
    assert "Gloo interface lo, rendezvous on 127.0.0.1: requested with --iface" in log, log
    assert (workdir / "weights" / TWO / "rank-1.pt").is_file()
    ddp = rank_lines(workdir / "results" / "logs" / "train" / f"{TWO_DDP}.log", "ddp")
    assert sorted(ddp) == [0, 1]


@pytest.mark.sge
def test_sge_train_jobs_carry_their_runs_priority(sge_cluster, sge_finished, tmp_path):
    """A run's priority P is its train job's `qsub -p P`, seen with `qstat -j` while the job is
    queued or runs, for two jobs ready at once (the profile's `sge-array-limit: 1` keeps the
    plugin from giving both the first one's resources in one array job). The profile is used as
    shipped."""
    workdir = tmp_path / "w"
    runs = [{"name": "patient", "priority": -3}, {"name": "urgent", "priority": 5}]
    targets = train_next_to(sge_finished, workdir, runs, nodes=1)
    seen: dict[str, str] = {}
    done = threading.Event()

    def watch() -> None:  # qstat -j of every job in the cell, until the workflow ends
        while not done.is_set():
            qstat = sge_cluster.run(["qstat"], check=False).stdout
            for job in re.findall(r"^\s*(\d+)\s", qstat, re.M):
                text = sge_cluster.run(["qstat", "-j", job], check=False).stdout
                name = re.search(r"^job_name:\s*train_", text, re.M)
                # the array's log folder: <run tag>_chunk<N>_<sub-chunk>_<sub-range>
                chunk = re.search(r"/(\w+_chunk\d+)_\d+_\d+/", text)
                priority = re.search(r"^priority:\s*(\S+)", text, re.M)
                if name and chunk and priority and str(workdir) in text:
                    seen[chunk[1]] = priority[1]
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # the profile exactly as shipped
        run_on(sge_cluster, workdir, "sge", *SGE_POLL, *targets)
    finally:
        done.set()
        watcher.join(timeout=30)
    meta = workdir / ".snakemake" / "sge_logs" / ".meta" / "rule_train"
    priority_of = {}
    for chunk, priority in seen.items():  # the plugin's manifest: which run each chunk is
        manifest = json.loads((meta / f"task_manifest_{chunk}.json").read_text())
        for task in manifest.values():
            priority_of[task["wildcards"]["run"]] = priority
    assert priority_of == {"patient": "-3", "urgent": "5"}, seen


@pytest.mark.sge
def test_sge_job_no_queue_could_run_is_skipped_and_the_rest_goes_on(sge_cluster, sge_finished):
    """A run whose job asks for more slots than the cell's PE offers (the SGE pipeline's
    too-big run) is skipped before any job (`qsub -w v`: what the profile's `qsub -w e` would
    refuse), named with SGE's reason in a dry run and in skipped.csv; the other runs trained and
    the report and the best run were made."""
    dry = snakemake(
        sge_finished, "-n", env={**sge_cluster.environ(), "CLUSTERBENCH_EXECUTOR": "sge"}
    )
    said = dry.stdout + dry.stderr
    assert "skipping run 'too-big'" in said and "`qsub -w v` says" in said, said
    skipped = (sge_finished / "results" / "report" / "skipped.csv").read_text()
    assert skipped.startswith("run,experiment,environment,reason\ntoo-big,"), skipped
    assert "cannot run in PE" in skipped or "no suitable queues" in skipped, skipped
    assert (sge_finished / "results" / "runs" / TWO / "model.pt").is_file()
    assert not (sge_finished / "results" / "runs" / "too-big").exists()
    assert (sge_finished / "results" / "best" / "summary.json").is_file()


@pytest.fixture(scope="module")
def sge_uninterrupted(sge_cluster, sge_finished, tmp_path_factory) -> Path:
    """The two-slot training of :data:`PREEMPTED`, run on SGE without interruption."""
    workdir = tmp_path_factory.mktemp("sge-uninterrupted")
    targets = train_next_to(sge_finished, workdir, [dict(PREEMPTED["2w"], nodes=1)], nodes=1)
    run_on(sge_cluster, workdir, "sge", *SGE_POLL, *targets)  # the profile as shipped
    return workdir / "results" / "runs"


@pytest.mark.sge
def test_a_qdel_training_stops_at_a_checkpoint_and_the_retry_ends_as_if_never_stopped(
    sge_cluster, sge_finished, sge_uninterrupted, tmp_path
):
    """`qdel` of the SGE training job mid-training: the profile's `qsub -notify` makes SGE send
    SIGUSR2 (the queue's `notify` time before its SIGKILL); the ranks checkpoint at a step
    boundary and the job exits 75; Snakemake's retry continues from that step and the training
    ends bit for bit as the uninterrupted one. The status names the run's job from the queue
    before the run has written a file, and says it runs in that job before the qdel."""
    from test_resume import assert_same_training

    run = dict(PREEMPTED["2w"], nodes=1)
    workdir = tmp_path / "w"
    (target,) = train_next_to(sge_finished, workdir, [run], nodes=1)
    log = workdir / "results" / "logs" / "train" / f"{run['name']}.log"
    cmd = snakemake_cmd(
        workdir,
        "--profile",
        str(REPO / "profiles" / "sge"),
        *SGE_POLL,
        target,
    )
    early = [workdir, run["name"]]
    proc, deadline = _start_training(cmd, sge_cluster.environ(), log, early)
    try:
        qstat = sge_cluster.run(["qstat"]).stdout
        (job,) = re.findall(r"^\s*(\d+)\s.*\sr\s", qstat, re.M)
        held = _assert_status(workdir, sge_cluster.environ(), run, "running", "sge")
        assert held["holder"]["job"] == job, held
        # its train job, known from the queue and the SGE plugin's manifest alone
        assert early[2:] and early[2][1:3] in (["queued", f"sge {job}"], ["running", f"sge {job}"])
        sent = time.time()
        sge_cluster.run(["qdel", job])
        first, ended = _until_the_launcher_ends(log, deadline)
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-5000:]
    where = _assert_preempted_then_resumed(first, log.read_text())
    print(f"\nFIGURE sge: qdel (-notify) -> job exited 75 in {ended - sent:.2f} s, {where}")
    assert_same_training(
        workdir / "results" / "runs" / run["name"], sge_uninterrupted / run["name"]
    )


@pytest.mark.sge
def test_impossible_sge_request_fails_at_submission(sge_cluster, sge_finished, tmp_path):
    text = submit_too_big(sge_cluster, sge_finished, tmp_path / "w", "sge", 1, SGE_POLL)
    assert "qsub" in text, text  # `-w e`: rejected by qsub, not left waiting in qw
    assert sge_cluster.run(["qstat"]).stdout.strip() == ""
