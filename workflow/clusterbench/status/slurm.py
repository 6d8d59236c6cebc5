"""Slurm's queue, read for the status: ``squeue`` once (every user's jobs), the jobs of one
workflow found by their working directory (``%Z``: snakemake-executor-plugin-slurm submits
with ``-D <the workflow's directory>``; the launcher submits worker jobs from it).

What a job is comes from what the plugins name: the Slurm plugin calls every job of one
Snakemake run by the run's uuid (``%j``) and comments it ``rule_<rule>_wildcards_<values>``
(``%k``; ``rule_<rule>`` without wildcards), so a train job's comment names its run
(``rule_train_wildcards_<run>``), queued or running, before the run has written any file; the
launcher names a worker job ``cbgrow-<the run's job id>`` (:mod:`clusterbench.launch.
schedulers._slurm_grow`). :func:`parse_squeue` is pure (tested on squeue's text)."""

from __future__ import annotations

import os
import re

from clusterbench.status.queue import (
    ENDING,
    OTHER,
    QUEUED,
    RUNNING,
    SUSPENDED,
    TRAIN,
    WORKER,
    QueueJob,
    ask,
    is_train_rule,
    same_dir,
    worker_of,
)

#: squeue's fields: job id, state, name, comment, working directory (last: it may hold a ``|``).
FORMAT = "%i|%T|%j|%k|%Z"
#: squeue's states, in the status's words (a state not here is one of a job that ended).
STATES = {
    "PENDING": QUEUED,
    "REQUEUED": QUEUED,
    "REQUEUE_HOLD": QUEUED,
    "REQUEUE_FED": QUEUED,
    "RESIZING": QUEUED,
    "CONFIGURING": RUNNING,
    "RUNNING": RUNNING,
    "SUSPENDED": SUSPENDED,
    "STOPPED": SUSPENDED,
    "COMPLETING": ENDING,
    "SIGNALING": ENDING,
    "STAGE_OUT": ENDING,
}
_COMMENT = re.compile(r"rule_(.+?)(?:_wildcards_(.*))?")


def command() -> list[str]:
    return ["squeue", "--noheader", "--format", FORMAT]


def parse_squeue(text: str, workdir: str | os.PathLike[str]) -> list[QueueJob]:
    """The jobs of ``squeue --noheader --format`` :data:`FORMAT` output that work in
    ``workdir``, still queued or running."""
    jobs = []
    ours: dict[str, bool] = {}  # working directory -> whether it is ``workdir``
    for line in text.splitlines():
        parts = line.split("|", 4)
        if len(parts) < 5 or parts[1] not in STATES:
            continue
        job, state, name, comment, where = parts
        if where not in ours:
            ours[where] = same_dir(where, workdir)
        if not ours[where]:
            continue
        kind, run, run_job = OTHER, None, worker_of(name)
        match = _COMMENT.fullmatch(comment)
        if run_job is not None:
            kind = WORKER
        elif match and is_train_rule(match.group(1)):
            kind, run = TRAIN, match.group(2) or None
        jobs.append(QueueJob("slurm", job, STATES[state], kind, run, run_job, where))
    return jobs


def read_queue(workdir: str | os.PathLike[str]) -> list[QueueJob]:
    """The workflow's jobs in Slurm's queue now (:class:`~.queue.QueueError` when squeue
    fails)."""
    return parse_squeue(ask(command()), workdir)
