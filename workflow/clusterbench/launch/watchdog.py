"""The launcher's watchdog (``python -I -S watchdog.py GRACE``; see :mod:`.process`).

Reads process-group ids, one a line, from its standard input, a pipe from the launcher
(``-ID``: that group is empty now, forget it: its number may be given to another). When
the pipe closes (the launcher ended, however it ended), every group that still has a process
gets SIGTERM, and SIGKILL once GRACE seconds have passed; then the watchdog exits. A launcher
that ended normally has no rank left, and the watchdog exits at once.

The standard library only, run without site-packages: it starts in milliseconds, beside every
launch. It ignores the signals a scheduler or a terminal sends to a job's processes.
"""

import os
import signal
import sys
import time


def alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_groups(groups: set[int], sig: int) -> set[int]:
    """Send ``sig`` to each group; the groups that still exist."""
    left = set()
    for group in groups:
        try:
            os.killpg(group, sig)
            left.add(group)
        except ProcessLookupError:
            pass
        except PermissionError:
            pass
    return left


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    groups: set[int] = set()
    for line in sys.stdin.buffer:
        try:
            group = int(line)
        except ValueError:
            continue
        if group < 0:
            groups.discard(-group)
        else:
            groups.add(group)
    groups = {g for g in groups if g > 1 and alive(g)}
    if not groups:
        return 0
    groups = signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while groups and time.monotonic() < deadline:
        time.sleep(0.05)
        groups = {g for g in groups if alive(g)}
    signal_groups(groups, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
