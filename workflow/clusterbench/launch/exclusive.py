"""One job at a time per run: the launcher's ``--lock PATH``.

Two jobs of one run can be alive at once on a cluster: Slurm requeues a job (``--requeue``, a
preemption, a node failure) while Snakemake, whose executor plugin took the killed attempt for a
failure, submits its retry. Both would train into the same run directory, and a time-boxed or
non-deterministic run would end with the files of one attempt mixed with the other's.

So the train rule's launcher holds an exclusive lock (``flock``) on ``results/runs/<run>/
train.lock`` while its ranks run. A second launch of the run waits for the first to end
(its log says who holds it), then:

- if the first ended with success while it waited, the run is trained: it exits 0 at once and
  starts no rank (the outputs are the first one's);
- otherwise (it failed, was preempted or killed) it starts its ranks, which continue from the
  newest checkpoint as always.

The lock file records its holder (host, pid, scheduler job), when it started, and how it ended;
the kernel releases the lock of a killed holder. Where the file system refuses ``flock`` (a
Lustre mounted without ``-o flock``), the launcher says so and goes on without the lock.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("clusterbench.launch")


def holder() -> dict[str, Any]:
    """Who this launcher is, for the lock file."""
    job = os.environ.get("SLURM_JOB_ID") or os.environ.get("JOB_ID")
    return {"host": socket.gethostname(), "pid": os.getpid(), "job": job}


def describe(record: dict[str, Any] | None) -> str:
    if not record:
        return "another launcher (no record)"
    who = record.get("holder") or {}
    job = f" (job {who['job']})" if who.get("job") else ""
    return f"the launcher of pid {who.get('pid')} on {who.get('host')}{job}"


class RunLock:
    """The exclusive lock on ``path``, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd: int | None = None
        self.waited = False
        self.before: dict[str, Any] | None = None  # the previous holder's record
        self.record: dict[str, Any] | None = None  # this launch's, once it holds the lock

    def _read(self) -> dict[str, Any] | None:
        assert self.fd is not None
        os.lseek(self.fd, 0, os.SEEK_SET)
        text = os.read(self.fd, 65536).decode("utf-8", "replace")
        try:
            record = json.loads(text)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def _write(self, record: dict[str, Any]) -> None:
        assert self.fd is not None
        data = (json.dumps(record, sort_keys=True) + "\n").encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        os.fsync(self.fd)

    def acquire(self) -> bool:
        """Take the lock, waiting for another holder to end; whether there is work left: False
        when the holder this waited for finished the run with success meanwhile. Raises
        OSError where the file system has no locks."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.waited = True
            since = time.monotonic()
            log.warning(
                "%s is already running this training (lock %s): waiting for it to end",
                describe(self._read()),
                self.path,
            )
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            log.info("the other launcher ended after %.1f s of waiting", time.monotonic() - since)
        except OSError:
            os.close(self.fd)
            self.fd = None
            raise
        self.before = self._read()
        if self.waited and self.before and self.before.get("exit") == 0:
            return False  # its record stays: the run's last launch that trained
        self.record = {"holder": holder(), "started": time.time(), "ended": None, "exit": None}
        self._write(self.record)
        return True

    def release(self, exit_code: int | None = None) -> None:
        """Record how this launch ended (``exit_code``, if it trained) and let the next one
        in."""
        if self.fd is None:
            return
        if exit_code is not None and self.record is not None:
            self._write({**self.record, "ended": time.time(), "exit": exit_code})
        os.close(self.fd)  # releases the lock
        self.fd = None
