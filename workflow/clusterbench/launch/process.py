"""One rank's command as a process of this machine: started, streamed, stopped, never orphaned.

:func:`run` starts the command with ``sh -c`` in a session of its own (the shell, the rank and
whatever the rank starts share one process group, apart from the launcher's: a terminal's or a
scheduler's signal to the launcher's group does not reach the ranks behind its back), streams
its standard output and error line by line to the launcher's, each line prefixed
``[rank]<stdout>:`` or ``[rank]<stderr>:`` (a progress bar's ``\\r`` ends a line too; UTF-8
split across reads is kept whole), and returns its exit status (``128 + N`` for a signal N).

When the ``stop`` event is set, :func:`terminate` stops it the way ``mpirun`` and
``horovodrun`` stop a rank: SIGTERM to what the shell started (the rank, or the ``srun``,
``qrsh`` or ``ssh`` that carries a remote one), up to :data:`GRACE_S` for them to end, then the
shell is frozen (it can start nothing more), what is left of its children and theirs is killed,
and the shell itself. The shell stays the rank's parent (the launcher's commands end in
``; exit $?``), so the rank gets its SIGTERM first and can checkpoint.

A launcher that is killed (SIGKILL, the OOM killer) cannot stop its ranks: the
:class:`Watchdog`, one small process per launcher holding a pipe from it, sees the pipe close
and does it instead (SIGTERM to each rank's process group, SIGKILL after :data:`GRACE_S`). It
runs ``watchdog.py`` beside this file with ``python -I -S``: the standard library only, started
in a few milliseconds, in a session of its own, ignoring the signals a job's processes get.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

GRACE_S = 5.0

_LINE_END = re.compile(r"([\r\n])")


def run(
    command: str,
    *,
    env: dict[str, str] | None,
    index: int,
    stdout: IO[str],
    stderr: IO[str],
    stop: threading.Event,
) -> int:
    """Run ``command`` (a shell command line) to its end; its exit status, ``128 + N`` when a
    signal N ended it. ``stop`` set: :func:`terminate` it."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    WATCHDOG.watch(proc.pid)
    forwarders = [
        _thread(_forward, proc.stdout, stdout, f"[{index}]<stdout>:"),
        _thread(_forward, proc.stderr, stderr, f"[{index}]<stderr>:"),
    ]
    ended = threading.Event()
    _thread(when_set, [stop], lambda: terminate(proc.pid), ended)
    try:
        code = proc.wait()
    finally:
        ended.set()
    for thread in forwarders:
        thread.join()
    WATCHDOG.forget(proc.pid)
    return 128 - code if code < 0 else code


def when_set(
    events: Iterable[threading.Event], action: Callable[[], None], done: threading.Event
) -> None:
    """Call ``action`` once, as soon as one of ``events`` is set, unless ``done`` is set
    first (checked every half second; an event, the only one watched, is seen at once)."""
    events = list(events)
    while not done.is_set():
        for event in events:
            if event.wait(0.5 / max(len(events), 1)):
                if not done.is_set():
                    action()
                return


def _thread(target: Callable[..., None], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _forward(source: IO[bytes], target: IO[str], prefix: str) -> None:
    """Copy ``source`` to ``target`` a line at a time, each line prefixed."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    fd = source.fileno()
    while True:
        chunk = os.read(fd, 4096)
        text = decoder.decode(chunk, final=not chunk)
        for piece in _LINE_END.split(text):
            pending += piece
            if piece in ("\r", "\n"):
                target.write(prefix + pending)
                pending = ""
        if not chunk:
            break
    if pending:
        target.write(prefix + pending)
    source.close()


def terminate(pid: int, grace: float = GRACE_S) -> None:
    """Stop the shell ``pid`` and what it started (see the module's text)."""
    import psutil

    try:
        shell = psutil.Process(pid)
        children = shell.children()
    except psutil.Error:
        return
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace)
    with contextlib.suppress(psutil.Error):
        shell.send_signal(signal.SIGSTOP)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            for grandchild in child.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    grandchild.kill()
            child.kill()
    with contextlib.suppress(psutil.Error):
        shell.kill()  # frozen: SIGTERM would wait for SIGCONT


class Watchdog:
    """The launcher's watchdog process (see the module's text): :meth:`watch` hands it a rank's
    process group; :attr:`pid` is its process (None before the first rank), which the
    launcher's own sweeps leave alone."""

    SCRIPT = Path(__file__).with_name("watchdog.py")

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def watch(self, group: int) -> None:
        self._send(group)

    def forget(self, group: int) -> None:
        """Stop watching ``group`` if no process is left in it (its number may be reused)."""
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            self._send(-group)
        except PermissionError:
            pass

    def _send(self, group: int) -> None:
        with self._lock:
            for _ in range(2):  # a watchdog that died (killed with the job's processes): anew
                if self._proc is None or self._proc.poll() is not None:
                    if group < 0:
                        return  # nothing to forget in a new watchdog
                    self._proc = self._start()
                try:
                    self._proc.stdin.write(f"{group}\n".encode())
                    self._proc.stdin.flush()
                    return
                except OSError:
                    self._proc = None

    @staticmethod
    def _start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", str(Watchdog.SCRIPT), str(GRACE_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )


#: This launcher's watchdog.
WATCHDOG = Watchdog()
