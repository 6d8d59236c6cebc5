"""Elastic runs that grow through worker jobs (``grow: jobs``) on the real test clusters.

Slurm (two nodes of 4 CPUs and 4000 MB; preemption by partition priority: a job in ``debug``
preempts the jobs of ``scavenger`` it needs room from, tests/clusters/slurm.py). Each training
asks 3000 MB for its one rank, so one rank fits a node: the run's own job takes one node, a
worker job needs the other (the sharing test's ranks ask 1800 MB: two fit a node, holders
fill all but one slot of each). Nothing is faked: the workflow submits the run's job through the
Slurm executor plugin, the launcher in it submits the worker jobs with sbatch and starts their
ranks with ``srun --jobid``; the tests hold nodes, cancel and preempt jobs with Slurm's own
tools. The SGE test does the same on the one-host SGE cell (4 slots), its worker jobs in
grow.q, which SGE suspends while all.q is full: a second run's minimum takes one back.

Each test prints FIGURE lines: how long a join took (a worker job's start, as Slurm says, to
the world having grown, as the ranks recorded it) and a leave (``scancel``, or the preemption,
to the run going on with fewer ranks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from clusterbench.launch.schedulers._sge_grow import NAME_PREFIX as SGE_WORKER
from clusterbench.launch.schedulers._slurm_grow import NAME_PREFIX as SLURM_WORKER
from conftest import (
    REPO,
    SGE_POLL,
    SLURM_POLL,
    default_config,
    popen_snakemake,
    snakemake,
    snakemake_cmd,
    write_config,
)
from test_status import status_of

pytestmark = pytest.mark.slow


#: One rank per node: 3000 MB of a node's 4000 (the run's job, and each worker job).
RANK_MB = 3000


def grow_run(name: str, **overrides) -> dict:
    """A digits run of 1 rank that may grow to 2 through worker jobs, time-boxed (its length
    is the test's: the events it waits for happen within it). A minute: on a quiet machine the
    last event a test waits for came 17-24 s after the run started (2026-11-27); what is left
    of the minute, the run trains on, one or two ranks busy."""
    return {
        "name": name,
        "dataset": "digits",
        "workers": 1,
        "min_workers": 1,
        "max_workers": 2,
        "grow": "jobs",
        "epochs": None,
        "minutes": 1.0,
        "batch_size": 64,
        "mem_mb": RANK_MB,
        "runtime": 15,
        "warning_seconds": 0,
        **overrides,
    }


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """The digits preprocessed once, locally: each test copies them next to its config."""
    workdir = tmp_path_factory.mktemp("grow-data")
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    write_config(workdir, cfg)
    snakemake(
        workdir, "--profile", str(REPO / "profiles" / "local"), "results/data/digits/meta.json"
    )
    return workdir / "results"


def config_with(digits: Path, workdir: Path, runs: list[dict]) -> list[str]:
    """A config of ``runs`` in ``workdir``, next to the preprocessed digits (copied, mtimes
    kept); commits every 3 steps. The targets: each run's run.json."""
    for part in ("raw", "data"):
        shutil.copytree(digits / part, workdir / "results" / part)
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["runs"] = runs
    cfg["checkpoints"] = {"elastic_commit_steps": 3}
    write_config(workdir, cfg)
    return [f"results/runs/{run['name']}/run.json" for run in runs]


def start(cmd: list[str], env: dict) -> subprocess.Popen:
    return popen_snakemake(cmd, env, new_session=True)


class Watch:
    """Waits on a training (its log) and the cluster, with one deadline for the test."""

    def __init__(self, proc: subprocess.Popen, log: Path, seconds: float = 420) -> None:
        self.proc, self.log = proc, log
        self.deadline = time.time() + seconds

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def until(self, what: str, ok: Callable[[], object], every: float = 0.2) -> object:
        while True:
            found = ok()
            if found:
                return found
            if self.proc.poll() is not None or time.time() > self.deadline:
                out = self.proc.stdout.read() if self.proc.poll() is not None else ""
                raise AssertionError(
                    f"waited in vain for {what}:\n{self.text()[-4000:]}\n{out[-3000:]}"
                )
            time.sleep(every)

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.text()))

    def resets(self, before: int, after: int) -> int:
        """How often rank 0 said the world was reset from ``before`` to ``after`` ranks."""
        return self.count(rf"train: rank 0 of {after}: the world was reset \([^;]*; {before} -> ")


def grown(watch: Watch, times: int) -> None:
    watch.until(
        f"the world grown to 2 ranks ({times} time(s))", lambda: watch.resets(1, 2) >= times
    )


def shrunk(watch: Watch, times: int) -> None:
    watch.until(f"the world back to 1 rank ({times} time(s))", lambda: watch.resets(2, 1) >= times)


def slurm_jobs(cluster, name: str, states: str = "PD,R,CG") -> list[tuple[str, str, str]]:
    """(id, state, node) of the jobs called ``name``."""
    out = cluster.run(["squeue", "-h", f"--name={name}", f"--states={states}", "-o", "%i|%T|%N"])
    return [tuple(line.split("|")) for line in out.stdout.split()]


def run_job(cluster, workdir: Path, watch: Watch) -> str:
    """The id of the run's own (train) job, running in ``workdir``."""

    def find() -> str | None:
        out = cluster.run(["squeue", "-h", "-t", "R", "-o", "%i|%Z|%j"]).stdout
        rows = [ln.split("|", 2) for ln in out.splitlines()]
        # the worker jobs work in the same directory (told by their name, not the line: the
        # directory's path may hold the name's prefix)
        ours = [(job, name) for job, cwd, name in rows if cwd == str(workdir)]
        jobs = [job for job, name in ours if not name.startswith(SLURM_WORKER)]
        return jobs[0] if len(jobs) == 1 else None

    return watch.until("the run's job running", find)


def queue_empty(cluster, timeout: float = 30) -> str:
    """Wait until nothing of ours is queued or running; what squeue says then."""
    deadline = time.time() + timeout
    while True:
        out = cluster.run(["squeue", "-h", "-o", "%i %j %T %N"]).stdout.strip()
        if not out or time.time() > deadline:
            return out
        time.sleep(0.5)


def seconds(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso).timestamp()


def assert_every_epoch_once(out: Path) -> list[dict]:
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == list(range(1, len(metrics) + 1)), metrics
    assert (out / "model.pt").is_file()
    return metrics


# --------------------------------------------------------------------------------- Slurm


def snakemake_on_slurm(cluster, workdir: Path, target: str, *extra: str) -> subprocess.Popen:
    cmd = snakemake_cmd(workdir, "--profile", str(REPO / "profiles" / "slurm"), *SLURM_POLL)
    return start([*cmd, *extra, target], cluster.environ())


def end_time(cluster, job: str) -> float:
    """A job's end (Slurm's EndTime, local time, to the second), seconds since the epoch."""
    import datetime as dt

    out = cluster.run(["squeue", "-h", "-j", job, "-t", "all", "-o", "%e"]).stdout.strip()
    return dt.datetime.fromisoformat(out).timestamp()


def final_state(cluster, job: str) -> str:
    """A job's state as Slurm keeps it after its end (for MinJobAge)."""
    out = cluster.run(["squeue", "-h", "-j", job, "-t", "all", "-o", "%T"], check=False)
    return out.stdout.strip()


@pytest.mark.slurm
def test_interrupting_snakemake_cancels_the_worker_jobs(slurm_cluster, digits, tmp_path):
    """SIGINT to Snakemake while the run trains on two nodes (its own job and a worker job):
    the executor plugin cancels the run's job, whose launcher, stopped, cancels the worker job
    at once; nothing is left queued or running."""
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    workdir = tmp_path / "w"
    (target,) = config_with(digits, workdir, [grow_run("stopped")])
    # Snakemake's status polls as rare as a user's: the executor interface (9.4) takes the jobs
    # out of the list that Ctrl-C cancels while it polls, so a SIGINT during a poll cancels
    # nothing (with the tests' polls every second, it failed this test once in a run)
    proc = snakemake_on_slurm(
        slurm_cluster, workdir, target, "--seconds-between-status-checks", "60"
    )
    watch = Watch(proc, workdir / "results" / "logs" / "train" / "stopped.log")
    try:
        job = run_job(slurm_cluster, workdir, watch)
        grown(watch, 1)
        ((worker, _, _),) = slurm_jobs(slurm_cluster, f"{SLURM_WORKER}{job}", "R")
        proc.send_signal(signal.SIGINT)
        sent = time.time()
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = queue_empty(slurm_cluster)
    assert left == "", left
    # the launcher cancelled it (its batch script's watch would have ended it too, COMPLETED)
    assert final_state(slurm_cluster, worker) == "CANCELLED"
    record = json.loads((workdir / "results" / "runs" / "stopped" / "worker_jobs.json").read_text())
    assert [(j["job"], j["why"]) for j in record["jobs"]] == [(worker, "the launcher was stopped")]
    run_end, worker_end = (end_time(slurm_cluster, j) for j in (job, worker))
    print(
        f"\nFIGURE slurm: SIGINT to Snakemake -> the run's job ended {run_end - sent:.0f} s "
        f"later, its worker job {worker_end - sent:.0f} s later (Slurm's end times, to the "
        "second)"
    )


def launcher_pid(workdir: Path) -> int | None:
    """The launcher training in ``workdir`` (found by its command line and directory)."""
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if (
            b"clusterbench.launch" in cmdline
            and b"--grow-record" in cmdline
            and cwd == str(workdir)
        ):
            return int(entry.name)
    return None


@pytest.mark.slurm
def test_a_worker_job_ends_by_itself_when_its_launcher_is_killed(slurm_cluster, digits, tmp_path):
    """SIGKILL to the launcher (no chance to cancel anything): the run's job fails and ends;
    the worker job's batch script sees it gone and ends the worker job (COMPLETED) within its
    watch interval; nothing is left queued or running."""
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    workdir = tmp_path / "w"
    (target,) = config_with(digits, workdir, [grow_run("killed")])
    proc = snakemake_on_slurm(slurm_cluster, workdir, target, "--retries", "0")
    watch = Watch(proc, workdir / "results" / "logs" / "train" / "killed.log")
    try:
        job = run_job(slurm_cluster, workdir, watch)
        grown(watch, 1)
        ((worker, _, _),) = slurm_jobs(slurm_cluster, f"{SLURM_WORKER}{job}", "R")
        os.kill(watch.until("the launcher's pid", lambda: launcher_pid(workdir)), signal.SIGKILL)
        killed = time.time()
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, out[-3000:]
    left = queue_empty(slurm_cluster)
    assert left == "", left
    assert final_state(slurm_cluster, worker) == "COMPLETED"  # its own script ended it
    run_end, worker_end = (end_time(slurm_cluster, j) for j in (job, worker))
    log = workdir / "results" / "runs" / "killed" / "worker_jobs" / f"slurm-{worker}.log"
    assert f"the run's job {job} no longer runs" in log.read_text()
    print(
        f"\nFIGURE slurm: launcher SIGKILLed -> the run's job ended {run_end - killed:.0f} s "
        f"later, its worker job {worker_end - run_end:.0f} s after that (Slurm's end times, to "
        "the second)"
    )


#: Two ranks per node (1800 MB each of a node's 4000), for the sharing test: holders leave one
#: slot free on each node.
HALF_MB = 1800
#: The profile key that sends worker jobs to the preemptible partition (docs/elastic.md).
TO_SCAVENGER = ["--set-resources=train:grow_slurm_partition=scavenger"]


def run_job_of(workdir: Path, run: str) -> str | None:
    """The scheduler job a run's launcher holds its lock in (once it started)."""
    lock = workdir / "results" / "runs" / run / "train.lock"
    try:
        return json.loads(lock.read_text())["holder"]["job"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def worker_ids(workdir: Path, run: str, ended: bool = False) -> list[str]:
    """The run's worker jobs (its launcher's record): those not ended, or (``ended``) all."""
    path = workdir / "results" / "runs" / run / "worker_jobs.json"
    try:
        jobs = json.loads(path.read_text())["jobs"]
    except (OSError, ValueError, KeyError):
        return []
    return [j["job"] for j in jobs if ended or not j["end"]]


def slurm_times(cluster, job: str) -> dict[str, float | None]:
    """A job's submit, start and end (Slurm's, local time, to the second)."""
    import datetime as dt

    out = cluster.run(["squeue", "-h", "-j", job, "-t", "all", "-o", "%V|%S|%e"]).stdout.strip()

    def stamp(text: str) -> float | None:
        return dt.datetime.fromisoformat(text).timestamp() if text[:1].isdigit() else None

    return dict(zip(("submit", "start", "end"), map(stamp, out.split("|")), strict=True))


def job_state(cluster, job: str) -> str:
    return final_state(cluster, job)


@pytest.mark.slurm
def test_a_minimum_takes_a_worker_job_back_and_a_raised_priority_goes_first(
    slurm_cluster, digits, tmp_path
):
    """Two growing runs of equal priority share the two nodes (a slot free on each: holders
    fill the rest). A starts and grows into both nodes, its worker job in the preemptible
    partition (the profile key). Snakemake is then closed outright (SIGKILL): A's jobs stay in
    the queue and train on. B, started by a second Snakemake in the same directory, takes its
    minimum at once: Slurm preempts A's worker job for B's job (a higher partition tier); A
    shrinks without losing an epoch and queues a new worker job, B queues its own, both wait.
    B's priority is raised above A's (python -m clusterbench.priority): when a node frees,
    B's worker job starts, A's (queued first) gives way. B ends: A grows again. Every epoch is
    recorded once, the change is in B's run.json, the queue ends empty."""
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    workdir = tmp_path / "w"
    runs = [
        grow_run("a", mem_mb=HALF_MB, minutes=2.5, runtime=20),
        grow_run("b", mem_mb=HALF_MB, minutes=1.0),
    ]
    target_a, target_b = config_with(digits, workdir, runs)
    hold = ["sbatch", "--parsable", "--cpus-per-task=1", "--output=/dev/null", "-J", "holder"]
    holders = [
        slurm_cluster.run([*hold, "-w", node, f"--mem={mb}", "--wrap", "sleep 900"]).stdout.strip()
        for node, mb in (("node1", 4000 - HALF_MB - 400), ("node2", 4000 - HALF_MB - 200))
    ]
    first = snakemake_on_slurm(slurm_cluster, workdir, target_a, *TO_SCAVENGER)
    second = None
    logs = workdir / "results" / "logs" / "train"
    watch_a = Watch(first, logs / "a.log", seconds=600)
    try:
        grown(watch_a, 1)  # A on both nodes
        os.killpg(first.pid, signal.SIGKILL)  # Snakemake closed, A's jobs left in the queue
        first.wait()
        watch_a.proc = second = snakemake_on_slurm(slurm_cluster, workdir, target_b, *TO_SCAVENGER)
        watch_b = Watch(second, logs / "b.log", seconds=600)
        job_b = watch_b.until("B's job running", lambda: run_job_of(workdir, "b"))
        shrunk(watch_a, 1)
        waited = slurm_times(slurm_cluster, job_b)
        (taken,) = worker_ids(workdir, "a", ended=True)[:1]
        # both runs queue a worker job; A's first
        queued_a = watch_b.until("A's new worker job", lambda: worker_ids(workdir, "a"))[0]
        queued_b = watch_b.until("B's worker job", lambda: worker_ids(workdir, "b"))[0]
        assert int(queued_a) < int(queued_b)
        raised = subprocess.run(
            [sys.executable, "-m", "clusterbench.priority", "b", "5", "--profile",
             str(REPO / "profiles" / "slurm")],
            cwd=workdir, env=slurm_cluster.environ(), capture_output=True, text=True,
        )  # fmt: skip
        assert raised.returncode == 0, raised.stderr
        assert f"b: priority 0 -> 5: job {job_b} and worker job(s) {queued_b}" in raised.stdout
        # every training at a glance, the first Snakemake closed and the second running
        lines = status_of(workdir, slurm_cluster.environ())
        job_a = run_job_of(workdir, "a")
        for run, job, worker in (("a", job_a, queued_a), ("b", job_b, queued_b)):
            assert lines[run][1:3] == ["running", f"slurm {job}"], lines
            assert f"{worker} queued" in lines[run][-1], lines
        slurm_cluster.run(["scancel", holders[0]])  # a slot frees on node1
        grown(watch_b, 1)
        assert job_state(slurm_cluster, queued_a) == "PENDING"  # A's gave way
        out_b, _ = second.communicate(timeout=400)
        assert second.returncode == 0, out_b[-5000:]
        b_ended = slurm_times(slurm_cluster, job_b)["end"]
        # Snakemake is gone: wait on A's job alone
        watch_a.proc = subprocess.Popen(["sleep", "600"], stdout=subprocess.PIPE, text=True)
        grown(watch_a, 2)
        # scancel of A's worker job: its rank leaves (a new one is queued)
        slurm_cluster.run(["scancel", queued_a])
        cancelled = time.time()
        shrunk(watch_a, 2)
        watch_a.until("A's job ended", lambda: job_state(slurm_cluster, job_a) == "COMPLETED")
        node_a = slurm_cluster.run(["squeue", "-h", "-j", job_a, "-t", "all", "-o", "%N"])
        watch_a.proc.kill()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        slurm_cluster.run(["scancel", *holders], check=False)
    assert queue_empty(slurm_cluster) == ""
    results = workdir / "results" / "runs"
    info = {r: json.loads((results / r / "run.json").read_text()) for r in ("a", "b")}
    for run in ("a", "b"):
        assert_every_epoch_once(results / run)
    elastic_a = info["a"]["world"]["elastic"]
    jobs_a = elastic_a["worker_jobs"]
    assert (jobs_a[0]["job"], jobs_a[0]["why"]) == (taken, "preempted"), jobs_a
    assert (jobs_a[1]["job"], jobs_a[1]["why"]) == (queued_a, "cancelled")
    assert jobs_a[0]["node"] != node_a.stdout.strip()  # A grew into the other node
    sizes = [t["size"] for t in elastic_a["timeline"]]
    assert sizes[:4] == [1, 2, 1, 2], elastic_a["timeline"]
    change = info["b"]["priority"]["changes"]
    assert [(c["from"], c["to"], c["jobs"]) for c in change] == [(0, 5, [job_b, queued_b])]
    (grew_b,) = info["b"]["world"]["elastic"]["worker_jobs"]
    assert grew_b["job"] == queued_b and grew_b["start"] is not None
    joins = [r for r in elastic_a["resets"] if (r["from"], r["to"]) == (1, 2)]
    leave, gone = [r for r in elastic_a["resets"] if (r["from"], r["to"]) == (2, 1)][:2]
    zero = seconds(elastic_a["timeline"][0]["time"])
    for run in ("a", "b"):
        line = info[run]["world"]["elastic"]["timeline"]
        steps = " ".join(f"{seconds(t['time']) - zero:.0f}s:{t['size']}" for t in line)
        print(f"\nFIGURE slurm share: run {run}'s ranks over time (from A's start): {steps}")
    print(
        f"\nFIGURE slurm share: B's minimum started {waited['start'] - waited['submit']:.0f} s "
        "after its submission (Slurm's times, to the second: A's worker job preempted)"
    )
    print(
        f"FIGURE slurm share: A shrank {seconds(leave['time']) - seconds(jobs_a[0]['end']):.1f} s "
        f"after the preemption (reset {leave['seconds']:.2f} s)"
    )
    for reset, worker in zip(joins, jobs_a, strict=False):
        print(
            f"FIGURE slurm join: worker job {worker['job']} started -> world of 2 after "
            f"{seconds(reset['time']) - seconds(worker['start']):.1f} s (Slurm's start time, to "
            f"the second; reset {reset['seconds']:.2f} s)"
        )
    print(
        f"FIGURE slurm leave (scancel): {seconds(gone['time']) - cancelled:.2f} s to the world of "
        f"1 (reset {gone['seconds']:.2f} s, {gone['stalled_seconds']:.2f} s since the last commit)"
    )
    print(
        f"FIGURE slurm share: A grew again {seconds(joins[1]['time']) - b_ended:.1f} s after B's "
        f"job ended (reset {joins[1]['seconds']:.2f} s); rank-hours A "
        f"{elastic_a['rank_hours']:.4f} of {elastic_a['max_workers_rank_hours']:.4f} fixed"
    )


# --------------------------------------------------------------------------------- SGE


def sge_jobs(cluster) -> dict[str, tuple[str, str, int]]:
    """Every job SGE lists: id -> (state, queue instance, slots) (``qstat -xml``)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(cluster.run(["qstat", "-xml"]).stdout)
    return {
        job.findtext("JB_job_number"): (
            job.findtext("state") or "",
            job.findtext("queue_name") or "",
            int(job.findtext("slots") or 1),
        )
        for job in root.iter("job_list")
    }


def running_slots(cluster) -> int:
    """The slots of the jobs that run now (suspended ones, s/S/T, hold theirs but stopped)."""
    return sum(
        slots
        for state, _, slots in sge_jobs(cluster).values()
        if "r" in state and not set(state) & set("sST")
    )


def worker_record(workdir: Path, run: str) -> list[dict]:
    """The worker jobs the run's launcher recorded so far (``worker_jobs.json``)."""
    path = workdir / "results" / "runs" / run / "worker_jobs.json"
    try:
        return json.loads(path.read_text())["jobs"]
    except (OSError, ValueError):
        return []


def worker_in(cluster, workdir: Path, run: str, state: str) -> str | None:
    """The run's worker job in ``state`` (qstat's letters), the last one recorded."""
    jobs = sge_jobs(cluster)
    ids = [j["job"] for j in worker_record(workdir, run) if j["job"] in jobs]
    found = [job for job in ids if jobs[job][0] == state]
    return found[-1] if found else None


def new_job_in(cluster, queue: str, known: set[str]) -> str | None:
    """A job running in ``queue`` that is not one of ``known``."""
    jobs = sge_jobs(cluster).items()
    found = [j for j, (_, where, _) in jobs if j not in known and where.startswith(f"{queue}@")]
    return found[0] if found else None


def sge_queue_empty(cluster, timeout: float = 30) -> str:
    """Wait until SGE lists no job; what qstat says then."""
    deadline = time.time() + timeout
    while cluster.run(["qstat"]).stdout.strip() and time.time() < deadline:
        time.sleep(0.5)
    return cluster.run(["qstat"]).stdout.strip()


def qacct_times(cluster, job: str) -> dict[str, float]:
    """A finished job's qsub_time, start_time and end_time (``qacct -j``, local time, to the
    second), seconds since the epoch; waits for the accounting's flush."""
    import datetime as dt

    deadline = time.time() + 30
    while True:
        out = cluster.run(["qacct", "-j", job], check=False).stdout
        fields = dict(re.findall(r"^(qsub_time|start_time|end_time)\s+(.+?)\s*$", out, re.M))
        if len(fields) == 3 or time.time() > deadline:
            break
        time.sleep(1)
    return {
        key: dt.datetime.strptime(value, "%a %b %d %H:%M:%S %Y").timestamp()
        for key, value in fields.items()
    }


@pytest.mark.sge
def test_an_sge_runs_minimum_takes_a_worker_jobs_slot_back_from_another_runs_growth(
    sge_cluster, digits, tmp_path
):
    """Run A (1 rank, up to 2) grows through worker jobs in grow.q, all.q's queue-wise
    subordinate (tests/clusters/sge.py: suspended while all.q's 4 slots are full). All.q is
    full when A starts (its job, holders of 2 and 1 slots): its worker job waits. The 1-slot
    holder is deleted: the worker job runs and its rank joins. The worker job is deleted
    (`qdel`): its rank leaves, a new one is queued and joins; the host is full. Run B, of equal
    priority, is then started by a second Snakemake in the same directory: SGE starts B's job
    in all.q at once and suspends grow.q; A's launcher deletes its suspended worker job ("taken
    back (suspended)"), A goes on with 1 rank, its new worker job waits while all.q is full.
    B ends: grow.q is resumed, A grows again. Both runs have every epoch once; no more than
    the host's 4 slots run at once; the queue ends empty."""
    workdir = tmp_path / "w"
    run_a = grow_run("a-sge", mem_mb=2000, minutes=1.25)
    run_b = grow_run("b-sge", mem_mb=2000, minutes=None, epochs=3)
    target_a, target_b = config_with(digits, workdir, [run_a, run_b])
    sleep = ["-b", "y", "sleep", "600"]
    holders = [
        sge_cluster.run(["qsub", "-terse", *pe, *sleep]).stdout.strip()
        for pe in (["-pe", "mpi", "2"], [])
    ]
    cmd = snakemake_cmd(workdir, "--profile", str(REPO / "profiles" / "sge"), *SGE_POLL)
    # (the SGE plugin ignores --envvars: the job needs this environment, qsub -V); the
    # profile key that sends worker jobs to grow.q (docs/elastic.md)
    export = [
        "--set-resources",
        "train:sge_export_env=True",
        f"train:grow_sge_queue={sge_cluster.grow_queue}",
    ]
    proc = start([*cmd, target_a, *export], sge_cluster.environ())
    watch = Watch(proc, workdir / "results" / "logs" / "train" / "a-sge.log")
    proc_b = None

    def worker(state: str) -> str | None:
        return worker_in(sge_cluster, workdir, "a-sge", state)

    try:
        watch.until("epoch 2 on one slot", lambda: "train: epoch 2:" in watch.text())
        assert watch.resets(1, 2) == 0 and watch.until("a worker job queued", lambda: worker("qw"))
        sge_cluster.run(["qdel", holders.pop()])
        grown(watch, 1)
        first = worker("r")
        about = sge_cluster.run(["qstat", "-j", first]).stdout
        assert re.search(rf"^job_name:\s+{SGE_WORKER}\d+$", about, re.M), about
        assert re.search(rf"^hard_queue_list:\s+{sge_cluster.grow_queue}$", about, re.M), about
        sge_cluster.run(["qdel", first])
        deleted = time.time()
        shrunk(watch, 1)
        grown(watch, 2)
        second = worker("r")
        assert running_slots(sge_cluster) == 4  # the host is full: A's 2, the holder's 2
        known = set(sge_jobs(sge_cluster))
        proc_b = start([*cmd, target_b, *export], sge_cluster.environ())
        watch_b = Watch(proc_b, workdir / "results" / "logs" / "train" / "b-sge.log")
        b_job = watch_b.until(
            "B's job running in all.q", lambda: new_job_in(sge_cluster, sge_cluster.queue, known)
        )
        shrunk(watch, 2)
        watch_b.until("B's first epoch", lambda: "train: epoch 1:" in watch_b.text())
        assert running_slots(sge_cluster) <= 4
        out_b, _ = proc_b.communicate(timeout=300)
        assert proc_b.returncode == 0, out_b[-5000:]
        grown(watch, 3)
        assert running_slots(sge_cluster) <= 4
        out, _ = proc.communicate(timeout=600)
    finally:
        for p in (proc, proc_b):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        sge_cluster.run(["qdel", *holders], check=False)
    assert proc.returncode == 0, out[-5000:]
    elastic = assert_taken_back_and_regrown(workdir / "results" / "runs", first, second)
    print_takeback_figures(elastic, deleted, qacct_times(sge_cluster, b_job), run_a["minutes"])
    assert sge_queue_empty(sge_cluster) == ""


def assert_taken_back_and_regrown(runs: Path, first: str, second: str) -> dict:
    """Both runs' records: every epoch once; A's worker jobs qdel'd, taken back, ended with
    the run; A's world 1, 2, 1, 2, 1, 2; B's worker job never started. A's ``elastic``."""
    assert_every_epoch_once(runs / "a-sge")
    assert len(assert_every_epoch_once(runs / "b-sge")) == 3
    info = {r: json.loads((runs / r / "run.json").read_text()) for r in ("a-sge", "b-sge")}
    elastic = info["a-sge"]["world"]["elastic"]
    jobs = elastic["worker_jobs"]
    assert [(j["job"], j["why"]) for j in jobs] == [
        (first, "gone from the scheduler's queue"),
        (second, "taken back (suspended)"),
        (jobs[2]["job"], "the run ended"),
    ], jobs
    sizes = [t["size"] for t in elastic["timeline"]]
    assert sizes[:6] == [1, 2, 1, 2, 1, 2] and set(sizes[6:]) <= {2}, elastic["timeline"]
    b_elastic = info["b-sge"]["world"]["elastic"]
    assert [t["size"] for t in b_elastic["timeline"]] == [1, 1], b_elastic["timeline"]
    assert [(j["start"], j["why"]) for j in b_elastic["worker_jobs"]] == [(None, "the run ended")]
    return elastic


def print_takeback_figures(elastic: dict, deleted: float, b: dict, minutes: float) -> None:
    """FIGURE lines: A's joins, its leave after `qdel` (at ``deleted``), B's wait, A's shrink
    and regrowth (``b``: B's job's SGE times, :func:`qacct_times`)."""
    jobs = elastic["worker_jobs"]
    joins = [r for r in elastic["resets"] if (r["from"], r["to"]) == (1, 2)]
    leaves = [r for r in elastic["resets"] if (r["from"], r["to"]) == (2, 1)]
    for reset, worker_job in zip(joins, jobs, strict=False):
        print(
            f"\nFIGURE sge join: worker job {worker_job['job']} started -> world of 2 after "
            f"{seconds(reset['time']) - seconds(worker_job['start']):.1f} s (SGE's start time, "
            f"to the second; reset {reset['seconds']:.2f} s)"
        )
    print(
        f"FIGURE sge leave (qdel): {seconds(leaves[0]['time']) - deleted:.2f} s to the world "
        f"of 1 (reset {leaves[0]['seconds']:.2f} s)"
    )
    print(
        f"FIGURE sge B's wait for its minimum: {b['start_time'] - b['qsub_time']:.0f} s from "
        f"its job's submission to its start (SGE's times, to the second)"
    )
    print(
        f"FIGURE sge A's shrink: {seconds(leaves[1]['time']) - b['start_time']:.1f} s from B's "
        f"start (SGE, to the second) to A's world of 1; "
        f"{seconds(leaves[1]['time']) - seconds(jobs[1]['end']):.2f} s from the launcher "
        f"seeing its worker job suspended (reset {leaves[1]['seconds']:.2f} s)"
    )
    print(
        f"FIGURE sge A's regrowth: {seconds(joins[2]['time']) - b['end_time']:.1f} s from B's "
        f"end (SGE, to the second) to A's world of 2 (worker job {jobs[2]['job']} started "
        f"{seconds(jobs[2]['start']) - b['end_time']:.0f} s after B's end; "
        f"{seconds(joins[2]['time']) - seconds(elastic['timeline'][0]['time']):.0f} s into A's "
        f"{minutes} min)"
    )
