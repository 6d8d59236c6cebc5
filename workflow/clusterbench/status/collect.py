"""Each training's status, made from what its files say and what the queue says (pure:
:func:`run_status` takes both, and the time; :func:`collect` reads them).

The states (docs/running.md, "Following every training"), the first that holds:

=============  =================================================================================
``running``    its train job runs (in the queue), or its launcher's pid lives on this machine
``suspended``  its train job is suspended by the scheduler
``ending``     its train job is ending (Slurm's COMPLETING, SGE's ``d``)
``queued``     its train job waits in the queue
``done``       it finished: the train stage's done marker (``checksums.json``) is written
``preempted``  its last launch stopped at a checkpoint (exit 75): a retry continues from it
``failed``     its last launch failed (its exit status, in the lock file)
``stopped``    its last launch ended without saying how: killed, its job cancelled or its node
               lost (no exit status; no job of it in the queue, no launcher here)
``waiting``    none of the above: not submitted yet (or skipped by the workflow: its log says;
               or trained, and its outputs removed since: Snakemake trains it again)
=============  =================================================================================
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench.config import grows_through_jobs, worker_bounds
from clusterbench.status import local
from clusterbench.status.files import RunFiles, read_run
from clusterbench.status.queue import ENDING, QUEUED, RUNNING, SUSPENDED, TRAIN, WORKER, QueueJob

#: The launcher's exit status of a run preempted and checkpointed (clusterbench.core.preemption).
PREEMPTED_EXIT = 75


@dataclass
class RunStatus:
    """One line of the status (times in seconds; None: not known)."""

    run: str
    state: str
    job: str | None = None  # "slurm 123", "sge 45", "local pid 678"
    ranks: int | None = None
    bounds: tuple[int, int] | None = None  # an elastic run's fewest and most ranks
    epoch: int = 0  # whole epochs done
    epochs: int | None = None  # of (None: a time box alone)
    minutes: float | None = None  # a time box
    rate: float | None = None
    unit: str = "images/s"
    elapsed: float | None = None
    left: float | None = None
    workers: list[tuple[str, str]] = field(default_factory=list)  # (job id, state)
    notes: list[str] = field(default_factory=list)  # its files that could not be read


def stamp(value: Any) -> float | None:
    """An ISO 8601 time (metrics.jsonl's) as seconds since the epoch (None: no time)."""
    try:
        return dt.datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def train_job(name: str, holder_job: Any, jobs: Sequence[QueueJob]) -> QueueJob | None:
    """The run's train job in the queue: the one whose comment or manifest names the run, or
    the lock holder's job; a running one before a queued one (a requeued job and Snakemake's
    retry of it may both be there)."""
    mine = [
        j
        for j in jobs
        if j.kind == TRAIN and (j.run == name or (holder_job and j.id == str(holder_job)))
    ]
    order = {RUNNING: 0, ENDING: 1, SUSPENDED: 2, QUEUED: 3}
    return min(mine, key=lambda j: order.get(j.state, 9), default=None)


def worker_jobs(
    files: RunFiles, run_job: str | None, jobs: Sequence[QueueJob], asked: bool
) -> list[tuple[str, str]]:
    """The run's worker jobs still queued or running: (id, state), the queue's word for each
    it lists; without a queue (``asked`` False) the launcher's record's."""
    queue = {j.id: j for j in jobs if j.kind == WORKER}
    ids = [str(j.get("job")) for j in files.worker_jobs if j.get("state") != "ended"]
    ids += [j.id for j in queue.values() if run_job and j.run_job == run_job and j.id not in ids]
    found = []
    for job_id in ids:
        if job_id in queue:
            found.append((job_id, queue[job_id].state))
        elif not asked:
            record = next(j for j in files.worker_jobs if str(j.get("job")) == job_id)
            found.append((job_id, QUEUED if record.get("state") == "pending" else RUNNING))
    return found


def holder_label(holder: Mapping[str, Any]) -> str | None:
    """The lock holder, as the JOB column shows one the queue does not: ``job <id>`` (a
    scheduler's job), ``pid <pid>`` (a launcher of this machine's)."""
    if holder.get("job"):
        return f"job {holder['job']}"
    if holder.get("pid"):
        return f"pid {holder['pid']}"
    return None


def state_of(files: RunFiles, job: QueueJob | None, asked: bool) -> tuple[str, str | None]:
    """The run's state (module docstring) and its JOB column."""
    holder, lock = files.holder, files.lock or {}
    if job is not None:
        return job.state, f"{job.scheduler} {job.id}"
    label = holder_label(holder)
    launched = bool(lock) and lock.get("ended") is None and lock.get("exit") is None
    if launched and local.on_this_host(holder) and local.launcher_alive(holder):
        return RUNNING, label
    if files.done:
        return "done", label
    if lock.get("exit") == PREEMPTED_EXIT:
        return "preempted", label
    if lock.get("exit") not in (None, 0):
        return "failed", label
    if launched:
        gone = asked or local.on_this_host(holder)
        return ("stopped" if gone else "unknown"), label
    # not launched yet, or trained and its outputs since removed (Snakemake trains it again)
    return "waiting", None


def times(
    files: RunFiles, run: Mapping[str, Any], state: str, now: float
) -> tuple[float | None, float | None]:
    """The time so far of the run's launch and an estimate of the time left (running only)."""
    lock = files.lock or {}
    started = lock.get("started") if isinstance(lock.get("started"), int | float) else None
    active = state in (RUNNING, SUSPENDED, ENDING)
    if started is None or (active and lock.get("ended") is not None):
        return None, None  # no launch yet, or an earlier launch's record
    if not active:
        end = lock.get("ended")
        return (end - started if isinstance(end, int | float) else None), None
    whole = [r for r in files.epochs if "partial" not in r]
    stamps = [s for s in (stamp(r.get("time")) for r in whole) if s is not None]
    last = stamps[-1] if stamps else started
    estimates = []
    if run.get("minutes") is not None:
        trained = sum(float(r.get("epoch_seconds") or 0) for r in whole) + (now - last)
        estimates.append(60 * float(run["minutes"]) - trained)
    if run.get("epochs") and stamps:
        per = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else last - started
        estimates.append(per * (run["epochs"] - len(whole)) - (now - last))
    left = max(0.0, min(estimates)) if estimates else None
    return now - started, left


def rate_of(epochs: Sequence[Mapping[str, Any]]) -> tuple[float | None, str]:
    """The latest epoch's rate: a language model's tokens/s, else images/s."""
    for record in reversed(epochs):
        for key, unit in (("tokens_per_second", "tokens/s"), ("images_per_second", "images/s")):
            if isinstance(record.get(key), int | float):
                return float(record[key]), unit
    return None, "images/s"


def run_status(
    run: Mapping[str, Any],
    files: RunFiles,
    jobs: Sequence[QueueJob],
    asked: bool,
    now: float,
) -> RunStatus:
    """The status of ``run`` (its resolved config) from its ``files`` and the workflow's
    ``jobs`` in the queue (``asked``: whether a queue was read), at time ``now``."""
    job = train_job(run["name"], files.holder.get("job"), jobs)
    state, label = state_of(files, job, asked)
    elapsed, left = times(files, run, state, now)
    rate, unit = rate_of(files.epochs)
    last = files.epochs[-1] if files.epochs else {}
    ranks = last.get("world_size") or last.get("workers") or run["workers"]
    run_job = job.id if job is not None else files.holder.get("job")
    low, high = worker_bounds(run)
    return RunStatus(
        run=run["name"],
        state=state,
        job=label,
        ranks=ranks if isinstance(ranks, int) else None,
        bounds=(low, high) if (low, high) != (run["workers"], run["workers"]) else None,
        epoch=sum(1 for r in files.epochs if "partial" not in r),
        epochs=run.get("epochs"),
        minutes=run.get("minutes"),
        rate=rate,
        unit=unit,
        elapsed=elapsed,
        left=left,
        workers=worker_jobs(files, str(run_job) if run_job else None, jobs, asked)
        if grows_through_jobs(run)
        else [],
        notes=list(files.problems),
    )


def collect(
    workdir: Path, runs: Sequence[Mapping[str, Any]], jobs: Sequence[QueueJob], asked: bool
) -> list[RunStatus]:
    """Every run's status now, from its files under ``workdir/results/runs``."""
    now = time.time()
    return [
        run_status(run, read_run(workdir / "results" / "runs" / run["name"]), jobs, asked, now)
        for run in runs
    ]
