"""The rank runner: start every rank, watch them, fail fast, pass signals on.

:class:`RankRunner` runs one slot's command (``exec_command``, called on a thread per rank by a
fixed launch, :mod:`clusterbench.launch.fixed`, and by Horovod's elastic driver): it starts it
through the scheduler (:class:`~clusterbench.launch.schedulers.Scheduler`) as a process of this
machine (:mod:`clusterbench.launch.process`: the rank itself, or the ``srun``, ``qrsh`` or
``ssh`` that carries it), streams its output with a ``[rank]`` prefix, and when a rank fails
stops the others (SIGTERM, then SIGKILL after a grace period) and remembers which rank failed
first (:func:`failure_message`). :class:`Reaper` kills what is left. The launcher's own signals
(stop every rank, pass a warning on) are in :mod:`clusterbench.launch.signals`.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from clusterbench.core import preemption
from clusterbench.core.rank_env import NODE_VAR
from clusterbench.launch import process
from clusterbench.launch.schedulers import RANK_ID_VAR, LaunchError, Scheduler

log = logging.getLogger("clusterbench.launch")

TAIL_LINES = 20
GRACE_S = 5.0  # between SIGTERM to a remote rank and killing its srun/qrsh

# Once a rank has exited as preempted (its checkpoint written, every rank agreed to stop), the
# others are given this long to exit too before they are stopped like after a failure.
PREEMPTED_WAIT_S = 60.0


# The rank's command runs with `sh -c` (clusterbench.launch.process). A shell that exec's its
# last command would *be* the rank, and the termination (SIGTERM the shell's children, then
# SIGSTOP the shell, then SIGKILL) would stop the rank instead of letting it handle SIGTERM.
# With a trailing `exit` the shell stays the rank's parent and the rank gets SIGTERM first. The
# shell ignores the preemption warnings (see RankRunner.exec_command).
def _keep_shell(command: str) -> str:
    return f"{preemption.IGNORE_IN_SHELL}; {command}; exit $?"


class _TailStream:
    """A text stream that writes to ``target`` and keeps the last lines for the error report;
    ``drop(text)`` may withhold a line."""

    def __init__(
        self,
        target: IO[str],
        tail: collections.deque[str],
        lock: threading.Lock,
        drop: Callable[[str], bool],
    ):
        self._target, self._tail, self._lock, self._drop = target, tail, lock, drop

    def write(self, text: str) -> None:
        if self._drop(text):
            return
        with self._lock:
            self._target.write(text)
            self._target.flush()
            self._tail.extend(text.splitlines())

    def flush(self) -> None:
        with self._lock:
            self._target.flush()


@dataclass
class RankResult:
    rank: int
    host: str
    exit_code: int
    ended: float
    after_stop: bool  # it ended after the launcher had started stopping it (or every rank)
    tail: list[str]


def torch_dist_env(slot_info: Any, master: tuple[str, int]) -> dict[str, str]:
    """The ``torch.distributed`` (env://) variables of one slot, beside Horovod's own: every
    backend's ranks are started the same way, from the same allocation."""
    return {
        "RANK": str(slot_info.rank),
        "WORLD_SIZE": str(slot_info.size),
        "LOCAL_RANK": str(slot_info.local_rank),
        "LOCAL_WORLD_SIZE": str(slot_info.local_size),
        "GROUP_RANK": str(slot_info.cross_rank),
        "GROUP_WORLD_SIZE": str(slot_info.cross_size),
        "MASTER_ADDR": master[0],
        "MASTER_PORT": str(master[1]),
    }


class RankRunner:
    """``exec_command(command, slot_info, events)``: runs one slot's command through
    ``scheduler`` with :func:`clusterbench.launch.process.run` (``[rank]``-prefixed output) and
    stops all ranks when one fails or an event (the launcher's shutdown event, set by
    :class:`StopSignals`) is set: a remote rank first through ``scheduler.signal_rank``
    (SIGTERM, then SIGKILL, each followed by a grace period), then
    :func:`~clusterbench.launch.process.terminate`'s SIGTERM/SIGKILL of the local process (srun,
    qrsh or the rank). :meth:`kill_all` is the short way: SIGKILL to every rank at once.
    :meth:`forward` passes a signal on to every rank and stops nothing.

    Every rank gets ``CLUSTERBENCH_RANK_ID=<tag>.<rank>`` (how the local scheduler finds its
    process) and the ``torch.distributed`` variables (:func:`torch_dist_env`)."""

    def __init__(
        self,
        scheduler: Scheduler,
        devices: Mapping[int, str | None],
        master: tuple[str, int] = ("127.0.0.1", 29500),
    ):
        self.scheduler = scheduler
        self.devices = devices
        self.master = master
        self.stop_all = threading.Event()
        # by start (an elastic launch renumbers its ranks, and may start a rank number again)
        self.results: dict[int, RankResult] = {}
        self.slots: dict[int, Any] = {}  # the slots whose rank was started
        self._starts = itertools.count()
        self.reaper = Reaper()
        self._lock = threading.Lock()
        self._out_lock = threading.Lock()
        self._preempted_timer: threading.Timer | None = None

    def exec_command(self, command: str, slot_info: Any, events: list | None) -> tuple[int, float]:
        rank, host = slot_info.rank, slot_info.hostname
        extra = {
            RANK_ID_VAR: f"{self.scheduler.tag}.{rank}",
            NODE_VAR: self.scheduler.node_of(host),
            **torch_dist_env(slot_info, self.master),
        }
        device = self.device_of(slot_info)
        if device is not None:
            extra["CUDA_VISIBLE_DEVICES"] = device
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items())
        command = f"env {assignments} {command}"
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        external = list(events or [])
        done, kill = threading.Event(), threading.Event()

        def stop() -> None:
            try:
                # A local rank gets process.terminate's SIGTERM (and SIGKILL) at once.
                for sig in (signal.SIGTERM, signal.SIGKILL) if self.scheduler.remote else ():
                    sent = self.scheduler.signal_rank(slot_info, sig)
                    log.debug("rank %d: %s %s", rank, sig.name, "sent" if sent else "not sent")
                    if not sent or done.wait(GRACE_S):
                        break
            finally:
                kill.set()

        def drop(text: str) -> bool:
            return self.scheduler.observe(slot_info, text)

        for event in external:
            _watch(event, self.on_external_event(stop), done)
        _watch(self.stop_all, stop, done)
        with self._lock:
            start = next(self._starts)
        try:
            if self.stop_all.is_set() or any(ev.is_set() for ev in external):
                raise LaunchError("the launcher was stopped before this rank started")
            with self._lock:
                self.slots[start] = slot_info
            shell_command = self.scheduler.shell_command(command, slot_info)
            log.debug("rank %d on %s: %s", rank, host, shell_command)
            # A scheduler may send the preemption warnings to every process of the job (a
            # one-worker Slurm job's step); nothing between the launcher and the rank may die
            # of one and take the rank down. The rank's shell ignores them (_keep_shell), and so
            # does what it starts until it installs its own handlers, as the ranks do
            # (clusterbench.core.preemption.install); the launcher's watchdog ignores them too.
            # The launcher's main thread still receives them (this thread has them blocked).
            signal.pthread_sigmask(signal.SIG_BLOCK, preemption.WARNING_SIGNALS)
            exit_code = process.run(
                _keep_shell(shell_command),
                env=self.scheduler.start_env,
                index=rank,
                stdout=_TailStream(sys.stdout, tail, self._out_lock, drop),
                stderr=_TailStream(sys.stderr, tail, self._out_lock, drop),
                stop=kill,
            )
        except Exception as exc:  # noqa: BLE001 - any failure to run the rank is its failure
            tail.append(f"launcher: could not run rank {rank}: {exc!r}")
            exit_code = 1
        finally:
            done.set()
        ended = time.time()
        stopped = self.stop_all.is_set() or kill.is_set()  # the launcher stopped it
        result = RankResult(rank, host, exit_code, ended, stopped, list(tail))
        with self._lock:
            self.results[start] = result
            self.ended(result, slot_info)
        return exit_code, ended

    def device_of(self, slot_info: Any) -> str | None:
        """The slot's ``CUDA_VISIBLE_DEVICES`` (None: leave it alone), chosen by the plan."""
        return self.devices.get(slot_info.rank)

    def on_external_event(self, stop_rank: Callable[[], None]) -> Callable[[], None]:
        """What an event handed to the slot (the launcher's shutdown) does: stop every rank."""
        return self.stop_all.set

    def ended(self, result: RankResult, slot_info: Any) -> None:
        """A rank ended (the runner's lock is held): after a preemption checkpoint the others
        are given :data:`PREEMPTED_WAIT_S` to follow; a failure stops every rank (fail fast)."""
        rank, host, exit_code = result.rank, result.host, result.exit_code
        if exit_code == preemption.EXIT_PREEMPTED and not self.stop_all.is_set():
            # every rank agreed to stop and the checkpoint is written: the others are on
            # their way out too; no rank failed, no host is to blame
            log.info("rank %d on %s stopped after the preemption checkpoint", rank, host)
            if self._preempted_timer is None:
                self._preempted_timer = threading.Timer(PREEMPTED_WAIT_S, self.stop_all.set)
                self._preempted_timer.daemon = True
                self._preempted_timer.start()
            return
        if exit_code != 0 and not self.stop_all.is_set():
            log.error(
                "rank %d on %s exited with code %d: stopping the other ranks",
                rank,
                host,
                exit_code,
            )
            self.scheduler.rank_failed(slot_info)
        if exit_code != 0:
            self.stop_all.set()

    def kill_all(self) -> None:
        """SIGKILL every rank at once, without the grace periods of a stop.

        Local ranks: :meth:`Reaper.sweep` (their whole process groups). Remote ranks: the
        scheduler's ``signal_rank`` (scancel / qrsh kill), one thread per rank since the
        scheduler's tools may be slow; their local srun/qrsh are left to end by themselves
        (killing a ``qrsh -inherit`` client ends the whole SGE job) until the launcher's
        final :meth:`Reaper.sweep`."""
        self.stop_all.set()
        if not self.scheduler.remote:
            self.reaper.sweep()
            return
        for slot in self.running():
            threading.Thread(
                target=self._signal,
                args=(slot, signal.SIGKILL),
                name=f"kill-rank-{slot.rank}",
                daemon=True,
            ).start()

    def forward(self, sig: int) -> None:
        """Pass ``sig`` on to every rank that runs, through the scheduler's ``signal_rank``
        (local: the rank's own process; Slurm: ``scancel --signal`` of its step; SGE: its pid,
        through ``qrsh -inherit ... kill`` on another host), one thread per rank. Nothing is
        stopped: a rank that does not handle the signal may die of it, which the runner then
        treats like any other failure. A rank not started yet does not get it."""
        for slot in self.running():
            threading.Thread(
                target=self._signal,
                args=(slot, signal.Signals(sig)),
                name=f"forward-rank-{slot.rank}",
                daemon=True,
            ).start()

    def running(self) -> list[Any]:
        """The slots whose rank was started and has not ended."""
        with self._lock:
            return [s for i, s in self.slots.items() if i not in self.results]

    def sweep(self) -> None:
        """Once killing: SIGKILL what is left of local ranks (started since, say)."""
        if not self.scheduler.remote:
            self.reaper.sweep()

    def _signal(self, slot_info: Any, sig: signal.Signals) -> None:
        try:
            sent = self.scheduler.signal_rank(slot_info, sig)
        except Exception as exc:  # noqa: BLE001 - a thread of its own: report, do not raise
            log.warning("rank %d: could not send %s: %r", slot_info.rank, sig.name, exc)
            return
        if sent:
            log.debug("rank %d: %s sent", slot_info.rank, sig.name)
        elif sig != signal.SIGKILL:
            log.warning(
                "rank %d: %s could not be passed on (rank not found)", slot_info.rank, sig.name
            )

    def preempted(self) -> bool:
        """Whether a rank stopped on a preemption warning (exit :data:`EXIT_PREEMPTED`): the
        checkpoint to continue from was written before any rank exited."""
        return any(r.exit_code == preemption.EXIT_PREEMPTED for r in self.results.values())

    def failure(self) -> RankResult | None:
        """The rank whose failure ended the run, None if every rank exited 0 or as preempted.

        The first to fail before the others were told to stop, preferring a rank whose output
        does not show Horovod reacting to a dead peer (a rank that dies takes its peers' Gloo
        connections down with it, and they may be seen failing at about the same time). After
        a preemption, a rank stopped because it outlived :data:`PREEMPTED_WAIT_S` is none."""
        failed = [
            r for r in self.results.values() if r.exit_code not in (0, preemption.EXIT_PREEMPTED)
        ]
        if not failed:
            return None
        if self.preempted() and all(r.after_stop for r in failed):
            return None
        unprompted = [r for r in failed if not r.after_stop] or failed
        primary = [r for r in unprompted if not _peer_failure(r.tail)] or unprompted
        return min(primary, key=lambda r: r.ended)


def _watch(event: threading.Event, action: Callable[[], None], done: threading.Event) -> None:
    """``action()`` on a thread of its own once ``event`` is set, unless ``done`` comes first."""
    threading.Thread(target=process.when_set, args=([event], action, done), daemon=True).start()


_PEER_FAILURE = (
    "Horovod has been shut down",
    "Connection closed by peer",
    "Connection reset by peer",
)


def _peer_failure(tail: Sequence[str]) -> bool:
    return any(marker in line for line in tail for marker in _PEER_FAILURE)


def failure_message(result: RankResult, size: int) -> str:
    lines = "\n".join(f"    {line}" for line in result.tail) or "    (no output)"
    return (
        f"rank {result.rank} of {size} on host {result.host} exited with code "
        f"{result.exit_code}; the other ranks were stopped. Its last {len(result.tail)} "
        f"log line(s):\n{lines}"
    )


def process_clock() -> float:
    """Now, on the clock of psutil's process start times: the boot time plus the time since
    boot (``/proc/uptime``). A wall clock that NTP moved since boot is off that clock by as much
    as it moved (seconds on a long-running VM), so a start time compared with ``time.time()``
    can put a child started after the reaper before it."""
    import psutil

    try:
        with open("/proc/uptime") as fh:
            return psutil.boot_time() + float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time()


class Reaper:
    """SIGKILL to everything this launcher started, at once: on a second stop signal, at the end
    of a stop's grace period, before a forced exit.

    Each rank's shell starts in a session of its own (:mod:`clusterbench.launch.process`): the
    shell, the rank and whatever the rank starts share one process group (the shell's pid),
    apart from the launcher's own. A sweep kills each such group (``killpg``; a group is
    remembered from the first sweep that sees its leader below this process until it is found
    empty), then every process still below this one (srun, qrsh, a process that left its
    group), except the launcher's watchdog and multiprocessing's resource tracker, which end by
    themselves with the launcher, and processes older than the reaper (when the launcher runs
    inside another program, that program's other children are left alone).
    """

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.since = process_clock() - 1.0  # process start times are coarser than that
        self._lock = threading.Lock()

    def sweep(self) -> None:
        from multiprocessing import resource_tracker

        import psutil

        tracker = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)
        spared = {tracker, process.WATCHDOG.pid}

        def ours(proc: psutil.Process) -> bool:
            try:
                return proc.pid not in spared and proc.create_time() >= self.since
            except psutil.Error:  # gone already
                return False

        with self._lock:
            try:
                procs = [p for p in psutil.Process().children(recursive=True) if ours(p)]
            except psutil.Error:
                procs = []
            for proc in procs:
                with contextlib.suppress(OSError):
                    if os.getsid(proc.pid) == proc.pid:
                        self.groups.add(proc.pid)
            for group in sorted(self.groups):
                try:
                    os.killpg(group, signal.SIGKILL)
                except OSError:  # ESRCH: the group is gone, its number may be reused
                    self.groups.discard(group)
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.kill()  # psutil checks the pid still names the same process
