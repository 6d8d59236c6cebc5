"""SGE worker jobs of an elastic run that grows through jobs (``grow: jobs``; see
:mod:`clusterbench.launch.grow`).

SGE starts a task in another running job of the same user: ``qrsh -inherit`` with that job's
``JOB_ID`` in its environment, on a host of the job's parallel environment (a PE with
``control_slaves TRUE``), is accepted by the host's execution daemon, which runs the task under
that job (seen on the test cell: the task's ``qrsh_starter`` ran in the worker job's
``active_jobs/<job>.1/``; a ``JOB_ID`` of no running job is refused, "didn't accept task").

A worker job is ``qsub -pe <the run's PE> 1`` with the run's job's per-slot requests
(``qstat -j``: its hard resource list, a GPU complex of ``consumable JOB`` asked as 1), its
priority (``-p``) and queue unless ``grow_resources`` names an ``sge_queue``, named
``cbgrow-<run's job id>``. Its script holds the slot and watches the run's job (``qstat -j``):
it exits once that job is gone. SGE keeps no reason for a job that left ``qstat`` (``qacct``
lags by its flush time): a worker job that ended is recorded as gone from the queue, or as
cancelled by the launcher when the run ended. A running worker job that SGE suspended (its
queue a subordinate of a full queue: docs/elastic.md, "SGE: a subordinate queue for worker
jobs") was taken back for another job: the launcher deletes it (``taken back (suspended)``).

Pure parts (:func:`parse_qstat_j`, :func:`parse_qstat_xml`, :func:`qsub_command`) are
unit-tested on real SGE 8.1.9 text.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from clusterbench.launch.schedulers._base import (
    ENDING,
    PENDING,
    RUNNING,
    SIGNAL_TIMEOUT_S,
    SUSPENDED,
    TAKEN_BACK,
    JobStatus,
    LaunchError,
    run_tool,
    submit_job,
)

#: The name of every worker job of the run in SGE job J: ``cbgrow-J``.
NAME_PREFIX = "cbgrow-"
#: Seconds between two looks of a worker job's script at the run's job.
WATCH_S = 5


@dataclass(frozen=True)
class SgeWorkerSpec:
    """What one worker job asks SGE for (one slot)."""

    run_job: str
    pe: str
    resources: str  # the hard resource list, per slot (``-l``)
    priority: int
    queue: str | None

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}{self.run_job}"


def parse_qstat_j(text: str) -> dict[str, str]:
    """``key: value`` lines of ``qstat -j <job>`` (the first of each key)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith(" "):
            out.setdefault(key.strip(), value.strip())
    return out


def worker_spec(
    run_job: str, qstat_j: str, overrides: Mapping[str, str], default_pe: str
) -> SgeWorkerSpec:
    """The worker job of the run in SGE job ``run_job`` (``qstat_j``: ``qstat -j`` of it), with
    the run's ``grow_resources`` (``sge_queue``; ``sge_gpu_complex``, whose request is one GPU
    per worker)."""
    fields = parse_qstat_j(qstat_j)
    pe = (fields.get("parallel environment") or "").split()
    requests = [r for r in fields.get("hard resource_list", "").split(",") if r]
    gpu = overrides.get("sge_gpu_complex")
    if gpu:
        requests = [f"{gpu}=1" if r.split("=")[0] == gpu else r for r in requests]
    priority = fields.get("priority", "0")
    return SgeWorkerSpec(
        run_job=run_job,
        pe=pe[0] if pe else default_pe,
        resources=",".join(requests),
        priority=int(priority) if re.fullmatch(r"-?\d+", priority) else 0,
        queue=overrides.get("sge_queue") or fields.get("hard_queue_list") or None,
    )


def worker_script(run_job: str, watch_s: int = WATCH_S) -> str:
    """The worker job's script: it holds the slot, in which the launcher starts the rank
    (``qrsh -inherit`` with this job's ``JOB_ID``), until the run's job ``run_job`` is gone."""
    return f"""#!/bin/bash
# clusterbench: a worker job of the elastic run in SGE job {run_job} (grow: jobs). It holds one
# worker's slot; the run's launcher starts a rank in it (JOB_ID=<this job> qrsh -inherit). It
# ends when the run's job is gone, and when the launcher deletes it (the run ended).
trap '' USR1 USR2
echo "worker job $JOB_ID on $HOSTNAME for the run in job {run_job}"
while :; do
    seen=$(qstat -j {run_job} 2>&1)
    case $seen in
        *"do not exist"*) echo "the run's job {run_job} is gone"; exit 0 ;;
        *job_number:*) ;;
        *) echo "qstat did not answer (asking again): $seen" ;;
    esac
    sleep {watch_s}
done
"""


def qsub_command(spec: SgeWorkerSpec, log_dir: Path | None, cwd: str) -> list[str]:
    """``qsub`` of one worker job (its script on standard input)."""
    cmd = ["qsub", "-terse", "-V", "-N", spec.name, "-pe", spec.pe, "1", "-wd", cwd]
    cmd += ["-S", "/bin/bash"]
    cmd += ["-j", "y", "-o", str(log_dir / "sge-$JOB_ID.log") if log_dir else "/dev/null"]
    if spec.resources:
        cmd += ["-l", spec.resources]
    if spec.priority:
        cmd += ["-p", str(spec.priority)]
    if spec.queue:
        cmd += ["-q", spec.queue]
    return cmd


def _sge_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value).timestamp()  # local time
    except ValueError:
        return None


#: Letters of a job's ``qstat`` state that say it is suspended: ``s`` the job (``qmod -sj``),
#: ``S`` its queue (a subordinate queue, suspended while its superordinate one is full), ``T``
#: its queue's suspend threshold. They combine (``Ss``; ``dS`` once deleted).
SUSPENDED_LETTERS = frozenset("sST")


def parse_qstat_xml(text: str, name: str) -> dict[str, JobStatus]:
    """Job id -> :class:`JobStatus` of the jobs called ``name`` in ``qstat -xml`` output (running
    jobs' ``queue@host`` gives the node; a job being deleted, ``d``, is ending; a suspended one,
    :data:`SUSPENDED_LETTERS`, was taken back)."""
    out = {}
    for job in ET.fromstring(text).iter("job_list"):
        if (job.findtext("JB_name") or "") != name:
            continue
        state = job.findtext("state") or ""
        node = (job.findtext("queue_name") or "").partition("@")[2] or None
        start = _sge_time(job.findtext("JAT_start_time"))
        if "d" in state:
            status = JobStatus(ENDING, node, start)
        elif SUSPENDED_LETTERS & set(state):
            status = JobStatus(SUSPENDED, node, start, why=TAKEN_BACK)
        elif state in ("r", "t", "Rr", "Rt"):
            status = JobStatus(RUNNING, node, start)
        else:  # qw, hqw, Eqw, ...: not running
            status = JobStatus(PENDING)
        out[job.findtext("JB_job_number") or ""] = status
    return out


def job_priority(job: str) -> int | None:
    """Queued or running ``job``'s priority now (``qstat -j``); None when qstat does not say."""
    try:
        found = parse_qstat_j(run_tool(["qstat", "-j", job])).get("priority", "")
    except LaunchError:
        return None
    return int(found) if re.fullmatch(r"-?\d+", found) else None


class SgeWorkerQueue:
    """The worker jobs of the run in SGE job ``spec.run_job`` (a :class:`WorkerQueue`)."""

    how = "JOB_ID=<worker job> qrsh -inherit (a task of the worker job)"

    def __init__(self, spec: SgeWorkerSpec, env: Mapping[str, str], cwd: str, log_dir: Path | None):
        self.spec, self.env, self.cwd, self.log_dir = spec, dict(env), cwd, log_dir

    def submit(self) -> str:
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.spec = replace(self.spec, priority=self.run_priority())
        cmd = qsub_command(self.spec, self.log_dir, self.cwd)
        return submit_job(cmd, worker_script(self.spec.run_job), self.env, ".")

    def run_priority(self) -> int:
        """The run's job's priority now (``qstat -j``): a worker job queued after the run's
        priority changed (``python -m clusterbench.priority``) gets the new one (the last
        known if qstat does not answer)."""
        found = job_priority(self.spec.run_job)
        return self.spec.priority if found is None else found

    def status(self, jobs: Sequence[str]) -> dict[str, JobStatus]:
        found = parse_qstat_xml(run_tool(["qstat", "-xml"]), self.spec.name)
        return {job: found[job] for job in jobs if job in found}

    def cancel(self, jobs: Sequence[str]) -> None:
        if jobs:  # quietly: qdel of a job that is gone already fails
            subprocess.run(
                ["qdel", *jobs], capture_output=True, timeout=SIGNAL_TIMEOUT_S, check=False
            )
