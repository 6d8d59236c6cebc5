"""Pass a SIGINT Snakemake receives on to the training launchers it started.

Snakemake's local executor answers SIGINT by waiting for its running jobs to finish ("Terminating
processes on user request", but it terminates none): a training job trains on to its end while
the user waits, and Snakemake then marks its outputs incomplete. (A Ctrl-C in a terminal reaches
the whole foreground process group, the launcher included; a SIGINT sent to Snakemake alone, by
``kill -INT`` or a batch system, does not.) rules/common.smk calls :func:`install` in the
Snakemake process: on SIGINT it sends SIGTERM to every ``clusterbench.launch`` below this
process (the launcher stops its ranks at once: see clusterbench.launch), then lets Snakemake
handle the signal as usual. SIGTERM is left to Snakemake, whose scheduler takes it over as its
"graceful" stop: no new jobs, running ones finish.

A Python handler runs on the main thread only, and only once that thread runs Python again. The
kernel gives a signal sent to the process to any one of its threads that does not block it, not
always the main one; CPython's C handler in that thread marks the signal but cannot wake the
main thread, which in Snakemake sleeps in its scheduler's semaphore until a job ends (a training
job: its whole training). So :func:`install` also points CPython's wake-up fd
(``signal.set_wakeup_fd``), written by the C handler in whichever thread, at a pipe that a
thread of ours reads: on SIGINT it stops the launchers at once (the handler then does not: a
second SIGTERM would make a launcher kill its ranks); their job then ends, which wakes the main
thread, and the handler raises Snakemake's KeyboardInterrupt as before.

Only the standard library: the Snakefile imports this module.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: What identifies a training launcher's command line.
LAUNCHER = b"clusterbench.launch"


def parse_stat(text: str) -> tuple[int, int]:
    """``(pid, ppid)`` from the text of ``/proc/<pid>/stat`` (the command may hold spaces and
    parentheses: the fields after the last ``)`` are fixed)."""
    pid = int(text.split(" ", 1)[0])
    fields = text.rsplit(")", 1)[1].split()
    return pid, int(fields[1])


def descendants(root: int, parents: dict[int, int]) -> list[int]:
    """Every pid below ``root`` in the ``{pid: ppid}`` tree, parents before children."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _process_table(proc: Path = Path("/proc")) -> dict[int, int]:
    table = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                pid, ppid = parse_stat((entry / "stat").read_text(errors="replace"))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            table[pid] = ppid
    return table


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def launchers_below(root: int) -> list[int]:
    """The training launchers among the descendants of ``root``."""
    return [pid for pid in descendants(root, _process_table()) if LAUNCHER in _cmdline(pid)]


def stop(pids: Iterable[int], sig: int = signal.SIGTERM) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _forwarder(previous: Any, forward: bool) -> Callable[[int, Any], None]:
    """The main thread's SIGINT handler: forwards it itself only when no watcher does (each
    SIGINT must reach a launcher once: a second SIGTERM makes it kill its ranks at once)."""

    def handler(signum: int, frame: Any) -> None:
        if forward:
            stop(launchers_below(os.getpid()))
        if callable(previous):
            previous(signum, frame)  # Python's own: KeyboardInterrupt, which Snakemake handles
        else:
            raise KeyboardInterrupt

    handler._clusterbench = True  # type: ignore[attr-defined]
    return handler


def _watch(read_fd: int) -> None:
    """The wake-up fd's reader: a byte per signal with a Python handler, its number."""
    while True:
        try:
            received = os.read(read_fd, 64)
        except OSError:
            return
        if not received:
            return
        if signal.SIGINT in received:
            stop(launchers_below(os.getpid()))


def _start_watcher() -> bool:
    """Point the wake-up fd at a pipe read by :func:`_watch` (main thread only); whether it
    did. Where something else already uses the wake-up fd, it is left to it: the handler alone
    forwards, once the main thread runs."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if previous != -1:
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return False
    threading.Thread(
        target=_watch, args=(read_fd,), name="clusterbench-sigint", daemon=True
    ).start()
    return True


def install() -> None:
    """Forward SIGINT of this (Snakemake's) process to its training launchers, at once from a
    thread of ours (whichever thread the signal reached), else from the main thread's handler.

    Idempotent; a no-op outside the main thread (signal handlers live there) and where SIGINT is
    ignored (``SIG_IGN``: a job started in the background by a shell).
    """
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous == signal.SIG_IGN or getattr(previous, "_clusterbench", False):
            return
        watching = _start_watcher()
        signal.signal(signal.SIGINT, _forwarder(previous, forward=not watching))
    except ValueError:  # not the main thread
        pass
