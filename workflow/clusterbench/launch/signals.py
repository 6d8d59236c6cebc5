"""The launcher's own signals, handled outside any signal handler.

:class:`StopSignals`: SIGINT and SIGTERM stop every rank (a second one kills them at once, and
the launcher exits with ``128 + signal`` within a bounded time whatever the ranks do); SIGUSR1
and SIGUSR2, the preemption warnings, are passed on to every rank (the rank runner's
``forward``) and change nothing else. No lock is taken in a signal handler, and Horovod's own
handlers, which take one, are never installed
(:func:`clusterbench.launch.horovod_runner.shutdown_event_without_handlers`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from clusterbench.core import preemption

log = logging.getLogger("clusterbench.launch")

# After a stop signal (SIGINT/SIGTERM) every rank gets SIGTERM at once (the rank runner
# follows with SIGKILL after its own 5 s: clusterbench.launch.process.GRACE_S); what is left of
# the ranks is killed (SIGKILL) after KILL_AFTER_S, and the launcher exits by EXIT_AFTER_S
# whatever still runs. A second signal kills every rank at once and the launcher exits within
# EXIT_AFTER_SECOND_S of it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
KILL_AFTER_S = 8.0
EXIT_AFTER_S = 12.0
EXIT_AFTER_SECOND_S = 3.0
SWEEP_EVERY_S = 0.5  # once killing, SIGKILL whatever appeared since, this often
# Passed on to every rank, nothing else: the preemption warnings (Slurm's `--signal=B:USR1@T`
# under `--full`/`B:`, SGE's `-notify`, a site's own tooling), which the ranks handle themselves.
FORWARDED_SIGNALS = preemption.WARNING_SIGNALS


def _on_signal(signum: int, frame: Any) -> None:
    """The Python-level SIGINT/SIGTERM/SIGUSR1 handler while the ranks run: nothing at all.

    CPython's C-level handler has already written the signal number to the wake-up fd
    (:func:`signal.set_wakeup_fd`), which :class:`StopSignals`' thread reads. No lock, no
    logging, no ``Event.set``: a second signal interrupting this handler finds nothing held."""


class StopSignals:
    """Stop signals (and forwarded ones) while the ranks run, handled outside any signal handler.

    ``install`` (main thread) sets :func:`_on_signal` for ``signals`` (and ``forwarded``, when
    there is a ``forward``) and a non-blocking pipe as the wake-up fd, and starts a watcher
    thread reading that pipe. A forwarded signal (SIGUSR1) is ``forward(signum)``: passed on to
    every rank, nothing else (no stop, no escalation; ignored once the ranks are being stopped).
    For stop signals it does, in order:

    - first signal: ``shutdown.set()`` (the event every rank's ``exec_command`` is handed:
      every rank gets SIGTERM, then SIGKILL after a grace period);
    - a second signal, or ``kill_after`` seconds after the first: ``kill()`` (SIGKILL to every
      rank at once), then ``sweep()`` every :data:`SWEEP_EVERY_S`;
    - ``exit_after`` seconds after the first signal, or ``exit_after_second`` after the second,
      if the launcher is still there: ``final()`` and ``exit(128 + first signal)``.

    What it has to say goes through a queue to a second thread that logs it, so that a blocked
    stderr cannot hold the watcher up. ``first`` is the first signal's number (None: none came).
    """

    def __init__(
        self,
        shutdown: threading.Event,
        kill: Callable[[], None],
        sweep: Callable[[], None],
        final: Callable[[], None],
        signals: Sequence[signal.Signals] = STOP_SIGNALS,
        kill_after: float = KILL_AFTER_S,
        exit_after: float = EXIT_AFTER_S,
        exit_after_second: float = EXIT_AFTER_SECOND_S,
        exit: Callable[[int], Any] = os._exit,
        forward: Callable[[int], None] | None = None,
        forwarded: Sequence[signal.Signals] = FORWARDED_SIGNALS,
    ):
        self.shutdown, self.kill, self.sweep, self.final = shutdown, kill, sweep, final
        self.signals = tuple(signals)
        self.forward = forward
        self.forwarded = tuple(forwarded) if forward is not None else ()
        self.kill_after, self.exit_after = kill_after, exit_after
        self.exit_after_second, self.exit = exit_after_second, exit
        self.first: int | None = None
        self.first_at: float | None = None
        self.second_at: float | None = None
        self.killed_at: float | None = None
        self.received: list[int] = []  # every stop signal number read, in order
        self.passed_on: list[int] = []  # every forwarded signal number read, in order
        self._swept_at = 0.0
        self._exiting = False
        self._old: dict[int, Any] = {}
        self._old_fd: int | None = None
        self._pipe: tuple[int, int] | None = None
        self._messages: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.install()
        else:  # signal.signal() works in the main thread only: leave the signals alone
            log.debug("not in the main thread: stop signals are not handled")
        return self

    def __exit__(self, *exc: object) -> None:
        """Uninstall, unless a signal came. Then the ranks are gone and the launcher is on its
        way out with 128 + the first signal: further stop signals are ignored (SIG_IGN, which,
        unlike a Python handler, the interpreter's shutdown leaves in place), so that one
        coming now cannot kill it by its default action instead, and the watcher stays to
        enforce the deadlines until the process ends."""
        if self.first is None:
            self.uninstall()
        elif self._pipe is not None:
            for sig in (*self.signals, *self.forwarded):
                signal.signal(sig, signal.SIG_IGN)

    def install(self) -> None:
        read_fd, write_fd = self._pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for sig in (*self.signals, *self.forwarded):
            self._old[sig] = signal.signal(sig, _on_signal)
        self._threads = [
            threading.Thread(target=self._watch, args=(read_fd,), name="stop-signals"),
            threading.Thread(target=self._report, name="stop-signals-log"),
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    def uninstall(self) -> None:
        """The previous handlers and wake-up fd again; the threads end (what they have read is
        handled first)."""
        if self._pipe is None:
            return
        for sig, handler in self._old.items():
            if handler is not None:
                signal.signal(sig, handler)
        signal.set_wakeup_fd(-1 if self._old_fd is None else self._old_fd)
        with contextlib.suppress(OSError):
            os.write(self._pipe[1], b"\0")  # no signal is 0: the watcher's cue to end
        self._messages.put(None)
        for thread in self._threads:
            thread.join(timeout=2.0)
        if not any(t.is_alive() for t in self._threads):
            for fd in self._pipe:
                os.close(fd)
        self._pipe = None

    # the watcher thread

    def _watch(self, read_fd: int) -> None:
        while True:
            deadline = self._next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([read_fd], [], [], timeout)
            data = b""
            if readable:
                with contextlib.suppress(BlockingIOError):
                    data = os.read(read_fd, 256)
            # The wake-up fd carries every signal that has a Python handler in this process,
            # not only ours: torch's DataLoader, for one, installs a SIGCHLD handler, and a
            # child's exit must not read as a stop signal (it would stop the ranks and exit 145).
            for signum in data:
                if signum in self.forwarded:
                    self._pass_on(signum)
                elif signum in self.signals:
                    self._received(signum)
            self._on_time()
            if 0 in data:
                return

    def _received(self, signum: int) -> None:
        now = time.monotonic()
        name = _signal_name(signum)
        self.received.append(signum)
        if self.first is None:
            self.first, self.first_at = signum, now
            self.shutdown.set()
            self._say(
                f"received {name}: stopping every rank (SIGTERM, SIGKILL after a grace "
                f"period); send it again to kill them at once"
            )
        elif self.second_at is None:
            self.second_at = now
            self._kill_all(f"received {self.describe()}: killing every rank (SIGKILL)")

    def _pass_on(self, signum: int) -> None:
        self.passed_on.append(signum)
        name = _signal_name(signum)
        if self.first is not None:
            self._say(f"received {name} while stopping the ranks: not passed on")
            return
        self._say(f"received {name}: passing it on to every rank")
        forward = self.forward
        if forward is not None:
            self._call(lambda: forward(signum))

    def describe(self) -> str:
        """The first two signals read: "SIGTERM", "SIGTERM twice", "SIGTERM then SIGINT"."""
        names = [_signal_name(s) for s in self.received[:2]]
        if len(names) < 2:
            return names[0] if names else "no signal"
        return f"{names[0]} twice" if names[0] == names[1] else " then ".join(names)

    def _kill_all(self, why: str) -> None:
        self.killed_at = self._swept_at = time.monotonic()
        self._call(self.kill)
        self._say(why)

    def _call(self, action: Callable[[], None]) -> None:
        """``action()``; an error is reported, never the end of the watcher (and its deadlines)."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001
            self._say(f"stopping the ranks: {exc!r}")

    def _next_deadline(self) -> float | None:
        if self.first_at is None or self._exiting:
            return None
        deadlines = [self.first_at + self.exit_after]
        if self.second_at is not None:
            deadlines.append(self.second_at + self.exit_after_second)
        if self.killed_at is None:
            deadlines.append(self.first_at + self.kill_after)
        else:
            deadlines.append(self._swept_at + SWEEP_EVERY_S)
        return min(deadlines)

    def _on_time(self) -> None:
        if self.first_at is None or self._exiting:
            return
        now = time.monotonic()
        if self.killed_at is None and now >= self.first_at + self.kill_after:
            self._kill_all(
                f"{self.kill_after:g} s after {_signal_name(self.first)}: killing what is left "
                "of the ranks (SIGKILL)"
            )
        elif self.killed_at is not None and now >= self._swept_at + SWEEP_EVERY_S:
            self._swept_at = now
            self._call(self.sweep)
        exit_at = self.first_at + self.exit_after
        if self.second_at is not None:
            exit_at = min(exit_at, self.second_at + self.exit_after_second)
        if now >= exit_at:
            self._exiting = True
            self._call(self.final)
            code = 128 + (self.first or 0)
            _write_stderr(
                f"[launch] still running {now - self.first_at:.1f} s after "
                f"{_signal_name(self.first)}: everything this launcher started was killed "
                f"(SIGKILL); exiting with {code}\n"
            )
            self.exit(code)

    def _say(self, message: str) -> None:
        self._messages.put(message)

    def _report(self) -> None:
        while (message := self._messages.get()) is not None:
            log.warning(message)


def _signal_name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name  # type: ignore[arg-type]
    except ValueError:
        return f"signal {signum}"


def _write_stderr(text: str, wait_s: float = 0.5) -> None:
    """Write to fd 2 from a thread of its own, waiting at most ``wait_s`` for it (a stderr that
    nobody reads must not keep the launcher from exiting)."""

    def write() -> None:
        with contextlib.suppress(OSError):
            os.write(2, text.encode())

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(wait_s)
