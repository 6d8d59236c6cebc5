"""A scheduler's queue, as the status reads it: :class:`QueueJob` (one job of the workflow)
and the words for its state. Each scheduler's module (:mod:`.slurm`, :mod:`.sge`) reads its
own queue into these; :mod:`.collect` matches them to the runs. Standard library only."""

from __future__ import annotations

import os
from dataclasses import dataclass

#: A job's state in the queue, in the status's words.
QUEUED, RUNNING, SUSPENDED, ENDING = "queued", "running", "suspended", "ending"
#: What a job is to the workflow: a run's train job, a worker job of a run (``grow: jobs``), or
#: another of its jobs (a preprocess, an evaluation: not shown).
TRAIN, WORKER, OTHER = "train", "worker", "other"
#: The name of every worker job of the run in job J (Slurm's and SGE's: ``cbgrow-J``).
WORKER_PREFIX = "cbgrow-"


@dataclass(frozen=True)
class QueueJob:
    """One job of the scheduler's queue: its id, state (:data:`QUEUED`, ...), what it is
    (:data:`TRAIN`, ...), the run a train job trains (None: not known from the queue), the
    run's job a worker job works for, and its working directory."""

    scheduler: str
    id: str
    state: str
    kind: str
    run: str | None = None
    run_job: str | None = None
    workdir: str | None = None


def worker_of(name: str) -> str | None:
    """The run's job a worker job named ``name`` (``cbgrow-J``) works for; None for any other
    name."""
    if name.startswith(WORKER_PREFIX) and name[len(WORKER_PREFIX) :]:
        return name[len(WORKER_PREFIX) :]
    return None


def is_train_rule(rule: str) -> bool:
    """Whether Snakemake's rule ``rule`` is the train rule (``train``, or a module's renamed
    ``<prefix>_train``)."""
    return rule == "train" or rule.endswith("_train")


def same_dir(a: str | os.PathLike[str] | None, b: str | os.PathLike[str]) -> bool:
    """Whether the folders ``a`` and ``b`` are one (symbolic links resolved)."""
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


class QueueError(RuntimeError):
    """The scheduler's queue could not be read; the message names the tool and what it said."""


#: Seconds a scheduler's tool may take to answer.
TOOL_TIMEOUT_S = 30


def ask(cmd: list[str]) -> str:
    """The standard output of the scheduler's tool ``cmd``; :class:`QueueError` naming it and
    what it said when it is missing, fails or does not answer in :data:`TOOL_TIMEOUT_S`."""
    import subprocess

    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise QueueError(f"{cmd[0]}: not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise QueueError(f"{cmd[0]}: no answer within {TOOL_TIMEOUT_S} s") from None
    except OSError as exc:
        raise QueueError(f"{cmd[0]}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split())[:300] or "nothing"
        raise QueueError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {said}")
    return proc.stdout
