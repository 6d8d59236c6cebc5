"""Change a run's priority while it is queued or trains.

    python -m clusterbench.priority RUN N [--profile DIR]

run in the workflow's directory, gives run ``RUN``'s job and its worker jobs (``grow: jobs``)
that are still queued or running the priority ``N`` (clusterbench's: -1023..1024, higher goes
first, as a run's ``priority`` in the config), through the scheduler of the profile's executor
(``--profile``, as Snakemake's; without it the one whose tools are here: Slurm, then SGE):
Slurm ``scontrol update JobId=J Nice=-N``, SGE ``qalter -p N J``. Above 0 needs the
scheduler's operator (Slurm: a negative nice; SGE: a positive priority).

- The run's job is its train job in the queue (queued or running: found as ``make status``
  finds it), else the one its launcher holds the run's lock in (``results/runs/RUN/
  train.lock``); its worker jobs are those of ``results/runs/RUN/worker_jobs.json`` not ended.
  The worker jobs the launcher queues later get the run's job's new priority too (it asks
  the scheduler for it at each submission).
- The change is recorded, with its time, in ``results/runs/RUN/priority.json``
  (:mod:`clusterbench.core.priority_changes`); the run's ``run.json`` has it when the run
  ends (``priority``), and the report's one-clock page marks it.
- Pending jobs are reordered at the scheduler's next pass: a raised run's queued worker job
  starts before the others' on the next node that frees. Running jobs keep their nodes:
  taking nodes back from running worker jobs is the scheduler's preemption
  (docs/elastic.md, "Sharing a cluster").

Refused, naming why, before anything changes: a run with no job in the queue nor a record
of one, a job no longer in the queue, a priority out of
range, a scheduler without a queue (local: a run's ``priority`` in the config orders the jobs
Snakemake starts).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterbench.core.priority_changes import PriorityFileError, add_change, read_changes
from clusterbench.launch.schedulers import SCHEDULERS, LaunchError, Scheduler
from clusterbench.plan import PlanError, profile_executor
from clusterbench.status import sge as sge_queue
from clusterbench.status import slurm as slurm_queue
from clusterbench.status.files import read_run
from clusterbench.status.queue import TRAIN, QueueError

#: The queue readers of the schedulers that have a queue (the status's).
QUEUE_READERS = {"slurm": slurm_queue.read_queue, "sge": sge_queue.read_queue}

#: A run's priority range (the config schema's).
LOWEST, HIGHEST = -1023, 1024


class PriorityError(RuntimeError):
    """The change cannot be made; the message says why."""


def scheduler_of(profile: str | None) -> type[Scheduler]:
    """The scheduler of ``profile``'s executor; without one, Slurm's where ``squeue`` is on
    PATH, else SGE's where ``qstat`` is."""
    if profile:
        try:
            executor = profile_executor(profile) or "local"
        except PlanError as exc:
            raise PriorityError(str(exc)) from None
        found = [cls for cls in SCHEDULERS.values() if cls.snakemake_executor() == executor]
        if not found:
            raise PriorityError(f"profile {profile}: no scheduler for executor {executor!r}")
        return SCHEDULERS.get(executor, found[0])
    for name, tool in (("slurm", "squeue"), ("sge", "qstat")):
        if name in SCHEDULERS and shutil.which(tool):
            return SCHEDULERS[name]
    raise PriorityError("no scheduler's tools here (squeue, qstat): give --profile")


def queued_train_job(run: str, scheduler: type[Scheduler]) -> str | None:
    """The run's train job in the scheduler's queue (queued or running), as the status finds
    it (:mod:`clusterbench.status`: its comment or name, in this directory); None when it is
    not there, or the queue could not be read."""
    reader = QUEUE_READERS.get(scheduler.name)
    if reader is None:
        return None
    try:
        jobs = reader(Path.cwd())
    except QueueError:
        return None
    found = [job.id for job in jobs if job.kind == TRAIN and job.run == run]
    return found[0] if found else None


def run_jobs(run_dir: Path, scheduler: type[Scheduler]) -> tuple[str, list[str]]:
    """The run's job (its train job in the queue, else its lock's holder) and its worker jobs
    not ended (their record)."""
    files = read_run(run_dir)  # the lock and the worker jobs' record, as make status reads them
    damaged = [p for p in files.problems if "metrics.jsonl" not in p]
    if damaged:
        raise PriorityError("; ".join(damaged))
    lock = files.lock
    holder = ((lock or {}).get("holder") or {}).get("job")
    job = queued_train_job(run_dir.name, scheduler) or holder
    if not job:
        raise PriorityError(
            f"run {run_dir.name}: no job of it in the {scheduler.name} queue, and no job has "
            f"started ({run_dir / 'train.lock'} "
            f"{'names no scheduler job' if lock else 'does not exist'})"
        )
    jobs = files.worker_jobs if str(job) == str(holder) else []
    workers = [str(j["job"]) for j in jobs if "job" in j and not j.get("end")]
    return str(job), workers


def change(run_dir: Path, priority: int, scheduler: type[Scheduler]) -> dict[str, Any]:
    """Change the run's jobs' priority and record it; the recorded change."""
    if not LOWEST <= priority <= HIGHEST:
        raise PriorityError(f"priority {priority}: out of range {LOWEST}..{HIGHEST}")
    try:
        read_changes(run_dir)  # a damaged record is named before anything changes
    except PriorityFileError as exc:
        raise PriorityError(str(exc)) from None
    job, workers = run_jobs(run_dir, scheduler)
    before = scheduler.job_priority(job)
    try:
        if not scheduler.change_priority(job, priority):
            raise PriorityError(f"run {run_dir.name}: its job {job} is no longer in the queue")
        changed = [job] + [w for w in workers if scheduler.change_priority(w, priority)]
    except LaunchError as exc:
        raise PriorityError(f"run {run_dir.name}: {exc}") from None
    run_dir.mkdir(parents=True, exist_ok=True)  # a queued run's folder, before its job starts
    return add_change(run_dir, before, priority, changed, time.time())


def describe(run: str, change: dict[str, Any]) -> str:
    job, *workers = change["jobs"]
    was = "?" if change["from"] is None else change["from"]
    also = f" and worker job(s) {' '.join(workers)}" if workers else ""
    return f"{run}: priority {was} -> {change['to']}: job {job}{also} (recorded in priority.json)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clusterbench.priority", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run", help="the run's name (results/runs/RUN)")
    parser.add_argument("priority", type=int, help=f"the new priority, {LOWEST}..{HIGHEST}")
    parser.add_argument("--profile", default=None, help="the Snakemake profile the run went by")
    parser.add_argument("--results", default="results", help="the results folder (results)")
    args = parser.parse_args(argv)
    run_dir = Path(args.results) / "runs" / args.run
    try:
        done = change(run_dir, args.priority, scheduler_of(args.profile))
    except PriorityError as exc:
        print(f"clusterbench.priority: {exc}", file=sys.stderr)
        return 2
    print(describe(args.run, done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
