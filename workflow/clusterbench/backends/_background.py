"""Horovod's background threads, kept from interrupting the ranks' compute on CPUs.

``hvd.init()`` starts a background thread (and Gloo's own threads) that wakes every cycle
(``HOROVOD_CYCLE_TIME``) for a coordination exchange with the other ranks, busy or idle. On a
CPU the ranks' compute threads fill the cores, so each wake pre-empts a rank's forward or
backward: on the 2-core reference machine two ResNet-20 ranks that never communicated
computed 15-20 % slower once ``hvd.init()`` had run (benchmarks/README.md, "Where Horovod's 2
workers lose on ResNet-20"). With one gradient buffer per step (``grad_allreduce: one``)
nothing needs those threads while a rank computes, only while it waits for a collective.

:meth:`BackgroundThreads.quiet` moves them to ``SCHED_IDLE``: the kernel runs them when their
core has nothing else to run, and a wake never pre-empts the compute thread. A rank waiting
for a collective must then leave its core idle, but Horovod's ``synchronize`` waits by spinning
on ``sched_yield``, which starves a ``SCHED_IDLE`` thread (a ResNet-20 step's allreduce waited
130-150 ms instead of 5-25 ms). :func:`install_sleeping_wait` therefore makes every
``synchronize`` of ``horovod.torch`` poll the handle and sleep :data:`POLL_SECONDS` between
polls, Horovod's own ``hvd.poll`` loop; the last call is Horovod's ``synchronize``, which
then returns at once (results and errors exactly as before).

The cost: a quiet thread gets a core only when nothing else wants it. Where other work keeps
every core busy (another job on the same cores, more runnable threads than cores), a waiting
rank's collective then waits for that work to pause. ``make test`` (three test processes
beside each 2-rank training on 2 cores) took its usual time, but a site whose nodes' cores are
shared sets :data:`QUIET_ENV` to ``0``, and the threads stay awake, as Horovod starts them.

An unprivileged thread may enter ``SCHED_IDLE`` but not leave it (Linux allows the way back
only within ``RLIMIT_NICE``), so a quiet process stays quiet: the training asks for it
(:meth:`clusterbench.backends.horovod.HorovodRuntime.wrap`); the comm stage, which times
Horovod's collectives as a Horovod user calls them, does not.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

#: Seconds a waiting rank sleeps between two polls of a Horovod handle, once quiet.
POLL_SECONDS = 1e-4
#: The environment variable that keeps Horovod's threads awake when ``0`` (unset or ``1``:
#: quiet): a site's knob, no run setting.
QUIET_ENV = "CLUSTERBENCH_HOROVOD_QUIET"


def quiet_wanted(env: Mapping[str, str]) -> bool:
    """Whether :data:`QUIET_ENV` in ``env`` lets the training quiet the threads; an error
    naming it unless it is unset, ``0`` or ``1``."""
    value = env.get(QUIET_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"${QUIET_ENV} must be 0 (threads awake) or 1 (quiet), got {value!r}")
    return value != "0"


def thread_ids() -> frozenset[int]:
    """The ids of this process's threads (Linux ``/proc/self/task``; empty elsewhere)."""
    try:
        return frozenset(int(tid) for tid in os.listdir("/proc/self/task"))
    except OSError:
        return frozenset()


class BackgroundThreads:
    """The threads that a library call started (:meth:`started_by`), to be made quiet."""

    def __init__(self, tids: frozenset[int]) -> None:
        self.tids = tids

    @classmethod
    def started_by(cls, start: Callable[[], Any]) -> BackgroundThreads:
        """Call ``start()``; the threads that exist after it and did not before."""
        before = thread_ids()
        start()
        return cls(thread_ids() - before)

    def quiet(self) -> list[int]:
        """Move the threads to ``SCHED_IDLE``; returns those moved. A thread that has ended is
        left out (its id may be another process's thread by now), as is every thread where
        the kernel has no such policy."""
        moved: list[int] = []
        policy = getattr(os, "SCHED_IDLE", None)
        if policy is None:
            return moved
        for tid in sorted(self.tids & thread_ids()):
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
            except OSError:  # it ended since, or the policy is refused here
                continue
            moved.append(tid)
        return moved


def sleeping_wait(synchronize: Callable[[Any], Any], poll: Callable[[Any], bool]) -> Any:
    """``synchronize`` that sleeps between polls of the handle until it is done, then calls
    ``synchronize`` (which returns at once)."""

    @functools.wraps(synchronize)
    def wait(handle: Any) -> Any:
        while not poll(handle):
            time.sleep(POLL_SECONDS)
        return synchronize(handle)

    return wait


def install_sleeping_wait(mpi_ops: Any) -> list[str]:
    """Make every module of ``horovod.torch`` that holds ``mpi_ops.synchronize`` (``mpi_ops``
    itself, the package, ``functions``, ``optimizer``, ``sync_batch_norm``) hold the sleeping
    wait instead; returns the modules changed. Idempotent."""
    original = getattr(mpi_ops.synchronize, "__wrapped__", mpi_ops.synchronize)
    handles = mpi_ops._handle_map

    def poll(handle: Any) -> bool:  # an unknown handle: synchronize returns None at once
        return handle not in handles or mpi_ops.poll(handle)

    wait = sleeping_wait(original, poll)
    changed = []
    for name, module in list(sys.modules.items()):
        if name.startswith("horovod.torch") and getattr(module, "synchronize", None) is original:
            module.synchronize = wait
            changed.append(name)
    return changed
