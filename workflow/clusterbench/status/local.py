"""Whether a run's launcher runs on this machine: the lock's holder (host, pid) asked of the
operating system, as a local workflow's only "queue". Standard library only."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any


def on_this_host(holder: Mapping[str, Any]) -> bool:
    """Whether the lock's ``holder`` was a launcher on this machine."""
    return bool(holder.get("host")) and holder.get("host") == socket.gethostname()


def launcher_alive(holder: Mapping[str, Any]) -> bool:
    """Whether the launcher of ``holder`` (on this machine) still runs: its pid exists and is a
    clusterbench launcher (a pid used again by another program is not)."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return True  # no /proc here: the pid exists
    return b"clusterbench.launch" in cmdline or b"clusterbench-launch" in cmdline
