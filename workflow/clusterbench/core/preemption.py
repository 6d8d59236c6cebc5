"""The preemption warning, as a training rank sees it.

A scheduler warns a job before it stops it: Slurm sends SIGUSR1 ``--signal=B:USR1@GRACE`` before
the time limit, SGE (``qsub -notify``) SIGUSR2 before a kill and SIGUSR1 before a suspension;
the launcher forwards both to every rank. The handler only sets a flag: no lock, no
I/O, so it is safe whatever the rank is doing. The ranks then agree on the flag in one
collective at a step boundary (every ``checkpoints.preemption_check_steps`` steps and at each
epoch's end), so that no rank stops alone; rank 0 writes a checkpoint there and every rank
exits with :data:`EXIT_PREEMPTED`. The next attempt (Snakemake's retry, a requeued Slurm job,
or a plain rerun) continues from that checkpoint.
"""

from __future__ import annotations

import atexit
import signal
from typing import Any

#: The signal Slurm is asked to send as its warning (``sbatch --signal``).
WARNING_SIGNAL = signal.SIGUSR1
#: Every signal taken as a warning: SGE's ``-notify`` sends SIGUSR2 before it kills a job.
WARNING_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
#: The shell command with which a shell between the scheduler and a rank ignores the warnings
#: (and so does what it starts, until it installs its own handlers, as the ranks do).
IGNORE_IN_SHELL = "trap '' " + " ".join(s.name.removeprefix("SIG") for s in WARNING_SIGNALS)
#: Exit status of a rank, and of the launcher, that stopped after checkpointing on a warning
#: (sysexits' EX_TEMPFAIL: run the same command again to continue).
EXIT_PREEMPTED = 75

_warned = False
_ignored_at_exit = False


def _on_warning(signum: int, frame: Any) -> None:
    global _warned
    _warned = True


def install() -> None:
    """Record the warning signals from now on instead of dying of them (their default action,
    or ignored as the launcher starts a rank), and unblock them where they are blocked; ignore
    them from the process's exit on."""
    global _warned, _ignored_at_exit
    _warned = False
    for sig in WARNING_SIGNALS:
        signal.signal(sig, _on_warning)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WARNING_SIGNALS)
    if not _ignored_at_exit:
        # CPython's finalization (after the atexit functions) puts a signal with a Python
        # handler back to its default action, which for the warnings is death: a second copy of
        # a warning (the scheduler's to every process of the step, and the launcher's forward)
        # arriving as the rank exits would turn its 75 (or 0) into 128 + signal, a failure.
        atexit.register(ignore)
        _ignored_at_exit = True


def ignore() -> None:
    """Ignore the warning signals in this process and, by inheritance, in what it starts until
    that installs its own handlers: for the processes between a scheduler and the ranks (a
    Snakemake job's own Snakemake, the rule's shell), which would otherwise die of a warning
    meant for the ranks."""
    for sig in WARNING_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def warned() -> bool:
    """Whether this process has received the warning since :func:`install`."""
    return _warned


def check_due(steps_done: int, steps: int, every: int) -> bool:
    """Whether the ranks agree on the warning after ``steps_done`` of an epoch's ``steps``
    steps: every ``every`` steps, not at the epoch's end (checked there anyway)."""
    return steps_done % every == 0 and steps_done < steps


class Preempted(Exception):
    """Every rank stopped on a warning; the checkpoint to continue from has been written."""

    def __init__(self, where: str) -> None:
        super().__init__(f"preempted: checkpoint written {where}; run again to continue")
