"""Many Snakemake invocations, each its own process, paying for Snakemake's imports once.

    python tests/snakemake_forks.py JOBS.json PARALLEL

``JOBS.json`` is a list of ``{"argv": [...], "cwd": DIR, "out": FILE}``: each job is
``snakemake ARGV`` run in ``DIR``, its standard output and error written to ``FILE`` and its
exit status to ``FILE.rc``. At most ``PARALLEL`` run at once.

This process imports ``snakemake.cli`` (about 1 s of the 1.5 s a dry run takes on 2 cores),
then forks a child per job: each child is a new process of its own from there on (its own
working directory, output, arguments, module state) and runs Snakemake's ``main`` as
``python -m snakemake`` does. Nothing has started a thread before a fork. tests/test_bad_input.py
gives it its corpus of 200-odd configs, each a dry run that must fail naming its cause.
"""

from __future__ import annotations

import json
import os
import sys


def child(job: dict) -> int:
    """Run in a forked child: Snakemake on ``job``; its exit status."""
    os.chdir(job["cwd"])
    fd = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
