"""Growing an elastic run through worker jobs (``grow: jobs``): the scheduler-neutral part.

An elastic run with ``grow: jobs`` holds ``workers`` ranks in its own job. The launcher keeps one
*worker job* queued for each further slot, up to ``max_workers``: a single-worker job with the
run's per-worker resources, submitted to the scheduler like any other job, so that it waits
its turn by the scheduler's own rules (priority, fair share, partitions, preemption). A
:class:`Grower` (a thread of the launcher) submits them, asks the scheduler about them about
every second, and offers each one that runs to Horovod's host discovery as a host of one slot
of its own (:func:`worker_host`, ``<node>.job<id>``: a rank that fails there blacklists that
job only). Horovod then starts a rank in it (the scheduler starts it *into the worker job's
allocation*: Slurm ``srun --jobid``, SGE ``qrsh -inherit`` with the job's ``JOB_ID``), which
joins at the next commit. A worker job that ends (cancelled, preempted, at its time limit, its
node failed) leaves the offer: its rank is gone and the others go on from the last commit. The
grower replaces it with a new one, queued. One the scheduler suspended to give its resources
to another job (SGE's subordinate queue) was taken back: the grower deletes it, so that its
rank dies at once, and replaces it; one suspended before its rank ran waits as queued. When
the run ends, the launcher stops the grower, which cancels every worker job, queued or running;
a worker job also ends by itself once the run's own job is gone (its batch script watches it),
so a launcher killed outright leaves nothing running for long.

What a scheduler provides is a :class:`WorkerQueue` (``submit``, ``status``, ``cancel``); each
scheduler module that can grow makes one (:meth:`clusterbench.launch.schedulers.Scheduler.
worker_queue`). The grower writes what happened to every worker job (``--grow-record``: id,
node, submitted, start, end, why it ended) as JSON, rewritten atomically at each change: the
ranks read it for ``metrics.jsonl`` and ``run.json``.

Standard library only (the Snakefile imports the launcher's package).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clusterbench.core.atomic import write_json
from clusterbench.launch.schedulers import (
    ENDED,
    ENDING,
    PENDING,
    RUNNING,
    SUSPENDED,
    TAKEN_BACK,
    JobStatus,
    WorkerQueue,
)

log = logging.getLogger("clusterbench.launch")

#: Seconds between two questions to the scheduler about the worker jobs (Horovod's discovery
#: asks the offer about every second too).
POLL_S = 1.0
#: A worker job whose own script failed this many times in a row is not replaced again.
MAX_FAILED_IN_A_ROW = 3
#: Seconds before a failed submission is tried again, and how many failures in a row end it.
SUBMIT_RETRY_S = 30.0
MAX_SUBMIT_FAILURES = 3
#: Seconds :meth:`Grower.stop` waits for the scheduler to say the cancelled jobs ended.
STOP_WAIT_S = 10.0

#: Why a worker job ended when the launcher cancelled it because the run ended.
RUN_ENDED = "the run ended"


def worker_host(node: str, job: str) -> str:
    """The host Horovod's discovery knows a running worker job by: ``<node>.job<id>``, one
    slot of its own (two worker jobs, or a worker job and the run's job, may share a node)."""
    return f"{node}.job{job}"


def iso(seconds: float | None) -> str | None:
    """``seconds`` since the epoch as an ISO 8601 UTC time with milliseconds (None: None)."""
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")


@dataclass
class WorkerJob:
    """One worker job, as the launcher saw it (times: seconds since the epoch)."""

    job: str
    submitted: float
    state: str = PENDING
    node: str | None = None
    start: float | None = None  # the scheduler's start time
    seen: float | None = None  # when the launcher first saw it running (its rank may start)
    end: float | None = None
    why: str | None = None

    @property
    def host(self) -> str | None:
        """Its host for Horovod's discovery while it runs (:func:`worker_host`)."""
        return worker_host(self.node, self.job) if self.node else None

    def record(self) -> dict[str, Any]:
        """The JSON record: times as ISO 8601 UTC."""
        out = asdict(self)
        for key in ("submitted", "start", "seen", "end"):
            out[key] = iso(out[key])
        return out


@dataclass
class Grower:
    """Keeps ``slots`` worker jobs of ``queue`` alive (queued or running) while the run
    trains; see the module docstring. ``record``: where the JSON record goes (None: nowhere);
    ``shutdown``: the launcher's stop event (every worker job is cancelled at once when it is
    set); ``clock``: seconds since the epoch (tests)."""

    queue: WorkerQueue
    slots: int
    record_path: Path | None = None
    shutdown: threading.Event | None = None
    poll_s: float = POLL_S
    clock: Callable[[], float] = time.time
    jobs: dict[str, WorkerJob] = field(default_factory=dict)
    problem: str | None = None  # why the grower stopped submitting, if it did

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed_in_a_row = 0
        self._submit_failures = 0
        self._retry_at = 0.0

    # ---------------------------------------------------------------- the launcher's side

    def start(self) -> None:
        """Submit the worker jobs and start asking about them (a daemon thread)."""
        log.info(
            "grow: jobs: %d worker job(s) of one rank each to be queued; their ranks start with %s",
            self.slots,
            self.queue.how,
        )
        self.fill()
        self.write()
        self._thread = threading.Thread(target=self._watch, name="grow", daemon=True)
        self._thread.start()

    def stop(self, why: str = RUN_ENDED) -> None:
        """Stop growing: cancel every worker job that is queued or running, wait (briefly) for
        the scheduler to say so, and write the final record; those still running after that
        are recorded as ended ``why``. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)  # no submission of its in flight after the cancel
        self.cancel_all(why)
        deadline = time.monotonic() + STOP_WAIT_S
        while self.active() and time.monotonic() < deadline:
            time.sleep(0.2)
            self.poll(replace=False, why=why)
        self.cancel_all(why)  # what is left (a submission that was still in flight, say)
        with self._lock:
            for job in self.jobs.values():
                if job.state != ENDED:
                    job.state, job.end = ENDED, job.end or self.clock()
                    job.why = job.why or why
        self.write()

    def cancel_all(self, why: str = RUN_ENDED) -> None:
        """Cancel every worker job that is queued or running (the run ends)."""
        active = self.active()
        with self._lock:
            for job in self.jobs.values():
                if job.state != ENDED and job.why is None:
                    job.why = why  # the reason, once the scheduler says it ended
        if active:
            log.info("grow: cancelling worker job(s) %s (%s)", " ".join(active), why)
            self._cancel(active)

    def hosts(self) -> dict[str, int]:
        """The running worker jobs as Horovod's discovery offers them: host -> 1 slot."""
        with self._lock:
            return {j.host: 1 for j in self.jobs.values() if j.state == RUNNING and j.host}

    def job_of(self, host: str) -> WorkerJob | None:
        """The worker job offered as ``host`` (None: no worker job's host)."""
        with self._lock:
            return next((j for j in self.jobs.values() if j.host == host), None)

    def left(self, host: str) -> str | None:
        """Why the worker job offered as ``host`` is gone (asked of the scheduler now), None
        when it still runs or ``host`` is no worker job's."""
        job = self.job_of(host)
        if job is None:
            return None
        if job.state == RUNNING:
            self.poll(only=[job.job])
        with self._lock:
            if job.state in (ENDING, ENDED):
                return job.why or "its job is ending"
            return None

    def active(self) -> list[str]:
        """The worker jobs queued or running (as last seen)."""
        with self._lock:
            return [j.job for j in self.jobs.values() if j.state != ENDED]

    # ---------------------------------------------------------------- keeping them alive

    def _watch(self) -> None:
        next_poll = time.monotonic() + self.poll_s
        while not self._stopped.wait(0.1):
            if self.shutdown is not None and self.shutdown.is_set():
                # the launcher is stopping its ranks: cancel at once (the scheduler may kill
                # the launcher soon after it was signalled: Slurm's KillWait)
                self.cancel_all("the launcher was stopped")
                return
            if time.monotonic() < next_poll:
                continue
            next_poll = time.monotonic() + self.poll_s
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - keep watching: the scheduler may be back
                log.warning("grow: could not ask about the worker jobs: %s", exc)

    def poll(
        self, replace: bool = True, only: Sequence[str] | None = None, why: str | None = None
    ) -> None:
        """Ask the scheduler about the active worker jobs (``only`` these), record what
        changed, and (``replace``) queue a new one for each that ended."""
        ids = list(only) if only is not None else self.active()
        if not ids:
            if replace:
                self.fill()
            return
        try:
            statuses = self.queue.status(ids)
        except Exception as exc:  # noqa: BLE001 - the scheduler did not answer: try again later
            log.warning("grow: could not ask about worker job(s) %s: %s", " ".join(ids), exc)
            return
        changed = False
        with self._lock:
            for job_id in ids:
                changed |= self._update(self.jobs[job_id], statuses.get(job_id), why)
        if changed:
            self.write()
        if replace and only is None:
            self.fill()

    def _update(self, job: WorkerJob, status: JobStatus | None, why: str | None) -> bool:
        """``job`` brought up to date with the scheduler's ``status`` (None: it no longer knows
        the job); whether anything changed. ``why``: the reason a job that ends now ended,
        unless one is known already."""
        now = self.clock()
        if status is None:
            status = JobStatus(ENDED, job.node, job.start, now, "gone from the scheduler's queue")
        if status.state == job.state or job.state == ENDED:
            return False
        if status.state == SUSPENDED:
            if job.state != RUNNING:
                # suspended before its rank ran (dispatched into a queue that is suspended at
                # once): it holds no rank; it waits as queued, the scheduler resumes it
                return False
            # taken back: deleted, so that its rank dies at once (a stopped rank would hold
            # the others until their timeout); replaced once gone
            job.why = job.why or status.why or TAKEN_BACK
            status = JobStatus(ENDING, job.node, job.start, now)
            self._cancel([job.job])
        if status.state == PENDING:
            if job.state != RUNNING:
                return False
            # requeued by the scheduler (worker jobs are submitted without requeue, but a site
            # may force it): that tenure ended; the job is cancelled, and replaced
            status = JobStatus(ENDED, job.node, job.start, now, "requeued by the scheduler")
            self._cancel([job.job])
        if status.state == RUNNING:
            if job.state != PENDING:
                return False
            job.state, job.node, job.start, job.seen = RUNNING, status.node, status.start, now
            log.info("grow: worker job %s runs on %s: its rank joins", job.job, job.node)
            return True
        was = job.state
        job.state = status.state  # ENDING or ENDED
        job.node = job.node or status.node
        job.start = job.start or status.start
        job.end = job.end or status.end or now
        if status.state == ENDING:
            if was == RUNNING:
                log.info("grow: worker job %s on %s is ending: its rank leaves", job.job, job.node)
            return True
        job.why = job.why or why or status.why or "ended"
        if was == PENDING:
            log.info("grow: worker job %s left the queue: %s", job.job, job.why)
            return True
        log.info("grow: worker job %s on %s ended: %s", job.job, job.node, job.why)
        quick = job.end - (job.start or job.end) < 60
        self._failed_in_a_row = self._failed_in_a_row + 1 if job.why == "failed" and quick else 0
        return True

    def _cancel(self, jobs: Sequence[str]) -> None:
        try:
            self.queue.cancel(jobs)
        except Exception as exc:  # noqa: BLE001 - report, and go on
            log.warning("grow: could not cancel worker job(s) %s: %s", " ".join(jobs), exc)

    def fill(self) -> None:
        """Queue worker jobs until ``slots`` are queued or running (not once stopping, after
        too many failures, nor before a failed submission's retry time)."""
        while not self._stopped.is_set() and len(self.active()) < self.slots:
            if self.problem is not None or self.clock() < self._retry_at:
                return
            if self._failed_in_a_row >= MAX_FAILED_IN_A_ROW:
                self.problem = (
                    f"{self._failed_in_a_row} worker jobs in a row failed within a minute of "
                    "their start: no more are submitted (see their logs)"
                )
                log.error("grow: %s", self.problem)
                self.write()
                return
            if not self._submit_one():
                return

    def _submit_one(self) -> bool:
        try:
            job_id = self.queue.submit()
        except Exception as exc:  # noqa: BLE001 - the run goes on with what it has
            self._submit_failures += 1
            self._retry_at = self.clock() + SUBMIT_RETRY_S
            if self._submit_failures >= MAX_SUBMIT_FAILURES:
                self.problem = f"worker jobs could not be submitted: {exc}"
                log.error("grow: %s; the run goes on with the ranks it has", self.problem)
            else:
                log.warning("grow: a worker job could not be submitted (%s): trying again", exc)
            self.write()
            return False
        self._submit_failures = 0
        with self._lock:
            self.jobs[job_id] = WorkerJob(job_id, self.clock())
        if self._stopped.is_set():  # stopped while it was submitted
            self.cancel_all(RUN_ENDED)
            return False
        log.info("grow: worker job %s queued", job_id)
        self.write()
        return True

    # ---------------------------------------------------------------- the record

    def describe(self) -> dict[str, Any]:
        """The record (``--grow-record``): the slots and every worker job so far."""
        with self._lock:
            return {
                "grow": "jobs",
                "slots": self.slots,
                "problem": self.problem,
                "jobs": [j.record() for j in self.jobs.values()],
            }

    def write(self) -> None:
        if self.record_path is None:
            return
        try:
            write_json(self.record_path, self.describe())
        except OSError as exc:
            log.warning("grow: cannot write %s: %s", self.record_path, exc)
