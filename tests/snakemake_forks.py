"""Many Snakemake invocations, each its own process, paying for Snakemake's imports once.

    python tests/snakemake_forks.py JOBS.json PARALLEL
    python tests/snakemake_forks.py --serve

``JOBS.json`` is a list of ``{"argv": [...], "cwd": DIR, "out": FILE}``: each job is
``snakemake ARGV`` run in ``DIR``, its standard output and error written to ``FILE`` and its
exit status to ``FILE.rc``. At most ``PARALLEL`` run at once.

``--serve`` runs the jobs it reads from its standard input, one JSON object a line, one at a
time, with the test clusters' steady status polls (tests/clusters/steady_polls.py): a job may
also give ``"err"`` (standard error to a file of its own) and ``"env"`` (its whole
environment). For each it writes a line ``{"pid": PID}`` when the job's process has started
and ``{"rc": STATUS}`` when it has ended (negative: the signal that ended it). A test's
worker keeps one such server (:class:`Server`, used by ``conftest.run_snakemake``), so that
each of its Snakemake runs pays for Snakemake's imports once, not once a run: about 1 s of
CPU of each of the suite's two hundred-odd runs, on 2 cores whose every second is taken.

This process imports ``snakemake.cli`` (about 1 s of the 1.5 s a dry run takes on 2 cores),
then forks a child per job: each child is a new process of its own from there on (its own
working directory, output, arguments, module state) and runs Snakemake's ``main`` as
``python -m snakemake`` does. Nothing has started a thread before a fork. tests/test_bad_input.py
gives it its corpus of 200-odd configs, each a dry run that must fail naming its cause.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time


def child(job: dict) -> int:
    """Run in a forked child: Snakemake on ``job``; its exit status."""
    os.chdir(job["cwd"])
    if "env" in job:  # as a new process started with it would have it
        os.environ.clear()
        os.environ.update(job["env"])
        extra = [p for p in job["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = [p for p in extra if p not in sys.path]
        tempfile.tempdir = None  # found again from this environment's TMPDIR
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    fd = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    if "err" in job:
        fd = os.open(job["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    sys.argv = ["snakemake", *job["argv"]]
    from snakemake.cli import main

    try:
        main()
        code = 0
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException as error:  # what `python -m snakemake` would print, then exit 1
        import traceback

        traceback.print_exception(error)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main(argv: list[str]) -> int:
    jobs_file, parallel = argv[0], int(argv[1])
    jobs = json.loads(open(jobs_file, encoding="utf-8").read())
    import snakemake.cli  # noqa: F401  (imported once, before any fork)

    running: dict[int, dict] = {}

    def reap() -> None:
        pid, status = os.wait()
        job = running.pop(pid)
        with open(job["out"] + ".rc", "w", encoding="utf-8") as rc:
            rc.write(str(os.waitstatus_to_exitcode(status)))

    for job in jobs:
        while len(running) >= parallel:
            reap()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(child(job))
        running[pid] = job
    while running:
        reap()
    return 0


def serve() -> int:
    """``--serve``: the jobs of standard input, one at a time (see the module's doc)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "clusters"))
    from steady_polls import keep_polls_steady

    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # what else would print goes to standard error, never into the replies
    keep_polls_steady()
    import snakemake.cli  # noqa: F401  (imported once, before any fork)

    for line in sys.stdin:
        job = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            replies.close()
            os._exit(child(job))
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()
    return 0


class Server:
    """A ``--serve`` process of this test worker's, started at its first job; :meth:`run` is
    ``subprocess.run(["snakemake", *argv], capture_output=True, text=True, ...)``, one job at a
    time, with a timeout that kills the job's process as ``subprocess.run``'s does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._buf = b""  # what the server wrote past the last line read

    def _server(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            self._buf = b""
        return self._proc

    def _reply(self, deadline: float | None) -> dict | None:
        """The server's next line; None when ``deadline`` (time.monotonic) passes first."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("tests/snakemake_forks.py --serve ended")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def run(self, argv: list[str], cwd: str, env: dict[str, str], timeout: float | None):
        with self._lock, tempfile.TemporaryDirectory(prefix="snakemake-fork-") as tmp:
            out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
            server = self._server()
            job = {"argv": argv, "cwd": str(cwd), "env": env, "out": out, "err": err}
            assert server.stdin is not None
            server.stdin.write((json.dumps(job) + "\n").encode())
            server.stdin.flush()
            pid = self._reply(None)["pid"]
            deadline = None if timeout is None else time.monotonic() + timeout
            ended = self._reply(deadline)
            if ended is None:
                os.kill(pid, signal.SIGKILL)
                self._reply(None)
                raise subprocess.TimeoutExpired(["snakemake", *argv], timeout)
            with open(out, encoding="utf-8", errors="replace") as o:
                stdout = o.read()
            with open(err, encoding="utf-8", errors="replace") as e:
                stderr = e.read()
            return subprocess.CompletedProcess(["snakemake", *argv], ended["rc"], stdout, stderr)


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:]))
