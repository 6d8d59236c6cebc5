"""Slurm worker jobs of an elastic run that grows through jobs (``grow: jobs``; see
:mod:`clusterbench.launch.grow`).

A worker job is ``sbatch`` of one task with one worker's share of the run's own job: its CPUs
per task, its memory per rank, one GPU when the run's job has GPUs, the account, and the run's
priority (the job's ``Nice``), QOS and partition unless ``grow_resources`` names others; its
time limit is what is left of the run's job's (a worker job outliving the run would hold its
node for nothing). It is named ``cbgrow-<run's job id>`` and never requeued (a preempted one
is replaced by a new one, queued). Its batch script holds the allocation and watches the run's
job (:func:`worker_script`): it exits once that job no longer runs, so nothing it holds outlives
the run even when the launcher was killed outright. The launcher starts the rank into it as a
step, ``srun --jobid=<worker job>``: Slurm lets a user start steps in any of their running
jobs, and the batch script's own step takes none of the job's CPUs from it.

Pure parts (:func:`worker_spec` from ``scontrol show job -d``, :func:`sbatch_command`,
:func:`parse_status` of ``squeue``) are unit-tested on real Slurm 22.05 text.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from clusterbench.launch.schedulers._base import (
    ENDED,
    ENDING,
    PENDING,
    RUNNING,
    JobStatus,
    LaunchError,
    run_tool,
    submit_job,
)
from clusterbench.launch.schedulers._slurm_parsing import parse_scontrol_job

#: The name of every worker job of the run in Slurm job J: ``cbgrow-J``.
NAME_PREFIX = "cbgrow-"
#: Seconds between two looks of a worker job's batch script at the run's job.
WATCH_S = 5

#: squeue's states of a job that ended, and why in words (the grower's record).
ENDED_WHY = {
    "CANCELLED": "cancelled",
    "PREEMPTED": "preempted",
    "TIMEOUT": "its time limit",
    "DEADLINE": "its deadline",
    "NODE_FAIL": "node failure",
    "BOOT_FAIL": "node failure (boot)",
    "FAILED": "failed",
    "OUT_OF_MEMORY": "out of memory",
    # the batch script exits 0 only when the run's job no longer runs
    "COMPLETED": "the run's job ended",
}
#: squeue's states of a job not running yet (a step cannot start in it), and of one ending.
WAITING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING"}
ENDING_STATES = {"COMPLETING", "STAGE_OUT", "SIGNALING", "STOPPED", "SUSPENDED", "SPECIAL_EXIT"}
SQUEUE_FORMAT = "%i|%T|%N|%S|%e"


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker job asks Slurm for (one task, one node)."""

    run_job: str
    partition: str | None
    qos: str | None
    account: str | None
    nice: int
    cpus_per_task: int
    mem_mb: int | None  # the rank's share of its node's memory in the run's job
    gpus: int  # 1 when the run's job has GPUs, else 0
    minutes: int | None  # the time limit: what is left of the run's job's (None: unlimited)

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}{self.run_job}"


def _field(text: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", text)
    return m.group(1) if m else None


def _slurm_time(value: str | None) -> float | None:
    """Seconds since the epoch of a Slurm time (``2026-11-27T11:17:40``, this machine's local
    time); None for ``N/A``, ``Unknown``, ``None``, ``NONE`` or nothing."""
    if not value or not value[0].isdigit():
        return None
    try:
        return dt.datetime.fromisoformat(value).timestamp()  # naive: local time
    except ValueError:
        return None


def worker_spec(job_text: str, overrides: Mapping[str, str], now: float) -> WorkerSpec:
    """The worker job of the run whose job ``scontrol show job -d`` describes (``job_text``),
    with the run's ``grow_resources`` (``overrides``: ``slurm_partition``, ``qos``), at ``now``
    (seconds since the epoch)."""
    alloc = parse_scontrol_job(job_text)
    first = alloc.hosts[0]
    end = _slurm_time(_field(job_text, "EndTime"))
    unlimited = (_field(job_text, "TimeLimit") or "").upper() in ("UNLIMITED", "INFINITE", "")
    minutes = None if unlimited or end is None else max(1, math.ceil((end - now) / 60))
    nice = _field(job_text, "Nice")
    return WorkerSpec(
        run_job=str(alloc.job_id),
        partition=overrides.get("slurm_partition") or _field(job_text, "Partition"),
        qos=overrides.get("qos") or _field(job_text, "QOS"),
        account=_field(job_text, "Account"),
        nice=int(nice) if nice and re.fullmatch(r"-?\d+", nice) else 0,
        cpus_per_task=alloc.cpus_per_task,
        mem_mb=first.mem_mb // max(1, first.slots) if first.mem_mb else None,
        gpus=1 if any(h.gpus for h in alloc.hosts) else 0,
        minutes=minutes,
    )


def worker_script(run_job: str, watch_s: int = WATCH_S) -> str:
    """The worker job's batch script: it holds the allocation, into which the launcher starts
    the rank as a step, until the run's job ``run_job`` no longer runs (or the job is
    cancelled). It ignores the preemption warnings, as the run's batch shell does: the rank
    handles them."""
    return f"""#!/bin/bash
# clusterbench: a worker job of the elastic run in Slurm job {run_job} (grow: jobs). It holds one
# worker's resources; the run's launcher starts a rank in it (srun --jobid). It ends when the
# run's job no longer runs, and when the launcher cancels it (the run ended).
trap '' USR1 USR2
echo "worker job $SLURM_JOB_ID on $SLURMD_NODENAME for the run in job {run_job}"
while :; do
    seen=$(scontrol show job {run_job} 2>&1)
    case $seen in
        *JobState=RUNNING*|*JobState=CONFIGURING*) ;;
        *JobState=*|*"Invalid job id"*)
            state=$(echo "$seen" | grep -o 'JobState=[A-Z_]*')
            echo "the run's job {run_job} no longer runs (${{state:-gone}})"
            exit 0 ;;
        *) echo "scontrol did not answer (asking again): $seen" ;;
    esac
    sleep {watch_s}
done
"""


def sbatch_command(spec: WorkerSpec, log_dir: Path | None, cwd: str) -> list[str]:
    """``sbatch`` of one worker job (its script on standard input)."""
    cmd = [
        "sbatch",
        "--parsable",
        f"--job-name={spec.name}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={spec.cpus_per_task}",
        "--no-requeue",
        f"--chdir={cwd}",
        f"--output={log_dir / 'slurm-%j.log' if log_dir else '/dev/null'}",
    ]
    if spec.mem_mb:
        cmd.append(f"--mem={spec.mem_mb}M")
    if spec.gpus:
        cmd.append(f"--gres=gpu:{spec.gpus}")
    if spec.minutes:
        cmd.append(f"--time={spec.minutes}")
    if spec.nice:
        cmd.append(f"--nice={spec.nice}")
    for flag, value in (("partition", spec.partition), ("qos", spec.qos)):
        if value:
            cmd.append(f"--{flag}={value}")
    if spec.account:
        cmd.append(f"--account={spec.account}")
    return cmd


def parse_status(text: str) -> dict[str, JobStatus]:
    """Job id -> :class:`JobStatus` from ``squeue --format=`` :data:`SQUEUE_FORMAT` output."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5 or not parts[0]:
            continue
        job, state, node, start, end = parts
        if state in WAITING:
            status = JobStatus(PENDING)
        elif state == "RUNNING":
            status = JobStatus(RUNNING, node or None, _slurm_time(start))
        elif state in ENDING_STATES:
            status = JobStatus(ENDING, node or None, _slurm_time(start), _slurm_time(end))
        else:
            why = ENDED_WHY.get(state, state.lower())
            status = JobStatus(ENDED, node or None, _slurm_time(start), _slurm_time(end), why)
        out[job] = status
    return out


def job_nice(job: str) -> int | None:
    """Queued or running ``job``'s ``Nice`` now (``scontrol show job``); None when scontrol
    does not say."""
    try:
        nice = _field(run_tool(["scontrol", "show", "job", job]), "Nice")
    except LaunchError:
        return None
    return int(nice) if nice and re.fullmatch(r"-?\d+", nice) else None


class SlurmWorkerQueue:
    """The worker jobs of the run in Slurm job ``spec.run_job`` (a :class:`WorkerQueue`)."""

    how = "srun --jobid=<worker job> (a step in the worker job's allocation)"

    def __init__(self, spec: WorkerSpec, env: Mapping[str, str], cwd: str, log_dir: Path | None):
        self.spec, self.env, self.cwd, self.log_dir = spec, dict(env), cwd, log_dir

    def submit(self) -> str:
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.spec = replace(self.spec, nice=self.run_nice())
        cmd = sbatch_command(self.spec, self.log_dir, self.cwd)
        return submit_job(cmd, worker_script(self.spec.run_job), self.env, ";")

    def run_nice(self) -> int:
        """The run's job's ``Nice`` now: a worker job queued after the run's priority changed
        (``python -m clusterbench.priority``) gets the new one (the last known if scontrol
        does not answer)."""
        nice = job_nice(self.spec.run_job)
        return self.spec.nice if nice is None else nice

    def status(self, jobs: Sequence[str]) -> dict[str, JobStatus]:
        cmd = ["squeue", "--me", f"--name={self.spec.name}", "--states=all", "--noheader"]
        found = parse_status(run_tool([*cmd, f"--format={SQUEUE_FORMAT}"]))
        return {job: found[job] for job in jobs if job in found}

    def cancel(self, jobs: Sequence[str]) -> None:
        if jobs:
            run_tool(["scancel", *jobs])
