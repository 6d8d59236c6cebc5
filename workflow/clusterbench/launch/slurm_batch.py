"""Slurm's batch shell, made able to pass a preemption warning on.

``sbatch --signal=B:USR1@N`` (Slurm's warning N seconds before a job's time limit) and
``scancel --batch --signal=USR1`` signal the batch script's shell alone. A shell cannot act on
a signal while its command runs (POSIX defers a trap until the foreground command ends), and
the command here is the job's own Snakemake, which runs the training to its end: the warning
would come too late, or kill the shell and with it the job.

So the Slurm profile's ``precommand`` replaces the batch shell, at the same pid, by this
program (``exec``, see :data:`PRECOMMAND`). It runs the batch script again (as Slurm stored it:
``scontrol write batch_script <job> -``) as its child, in a process group of its own, marked
with ``CLUSTERBENCH_BATCH_SHELL=1`` so that the script's second pass goes straight on to its
command, and passes every warning (SIGUSR1, SIGUSR2) it receives on to that process group:

- the shell, the job's Snakemake and the rule's shell ignore the warnings
  (:data:`clusterbench.core.preemption.IGNORE_IN_SHELL`,
  :func:`clusterbench.core.preemption.ignore`);
- the launcher passes each warning on to every rank (a Slurm rank is its own ``srun`` step);
- in a one-worker job the launcher runs inside the ``srun -n1`` step of Snakemake's job step,
  whose ``srun`` passes the warning on to that step.

A warning that comes before the launcher has installed its handlers would be lost, so once
warned, this program sends the warning again every :data:`REPEAT_S` seconds until its child
ends (the ranks take each copy as the same warning). It exits with its child's status, and
with :data:`clusterbench.core.preemption.EXIT_PREEMPTED` (75) when the child failed after a warning:
the job's exit code then says "preempted" (Snakemake's job fails with 1 whatever the rule's
exit code), which ``sacct`` shows and a site's ``RequeueExit=75`` can act on. SIGTERM and SIGINT
keep their default action here: Slurm sends them to every process of the job itself.

Standard library only: it starts before anything else of the job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

#: Marks the batch script's second pass, run by this program.
MARK = "CLUSTERBENCH_BATCH_SHELL"
#: The Slurm profile's ``precommand``: both passes first ignore the warnings (like every shell
#: between the scheduler and a rank); the first one then becomes this program, the second one
#: goes on. Ignored first, because Slurm may send its warning the moment the job starts (a run's
#: ``warning_seconds`` close to its time limit): with the default action it would kill the batch
#: shell before this program's handlers exist (the job then ends by signal 10, ``sacct``
#: ``0:10``, its training never started). A warning in that first fraction of a second is lost
#: instead. No ``$`` and no ``"``: the executor plugin puts the job's command in
#: ``sbatch --wrap="..."`` through a shell, which would expand a ``$`` on the submit host.
PRECOMMAND = (
    f"trap '' USR1 USR2; env | grep -q '^{MARK}=' || exec python -m clusterbench.launch.slurm_batch"
)
#: The warnings passed on (as clusterbench.core.preemption.WARNING_SIGNALS, without importing it).
WARNINGS = (signal.SIGUSR1, signal.SIGUSR2)
#: Seconds between the copies of a warning sent after the first.
REPEAT_S = 10.0
#: Exit status of a job that failed after a warning (clusterbench.core.preemption.EXIT_PREEMPTED).
EXIT_PREEMPTED = 75


class Relay:
    """Pass the warnings this process receives on to ``child``'s process group."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.warnings: list[signal.Signals] = []  # received, in order (the last is repeated)

    def on_warning(self, signum: int, frame: object) -> None:
        self.warnings.append(signal.Signals(signum))
        self.send()
        # the copies: every REPEAT_S seconds from now on (SIGALRM; a blocking wait is resumed)
        signal.setitimer(signal.ITIMER_REAL, REPEAT_S, REPEAT_S)

    def send(self, *_: object) -> None:
        """The last warning received, to the child's process group."""
        if self.warnings and self.child is not None and self.child.returncode is None:
            try:
                os.killpg(self.child.pid, self.warnings[-1])
            except ProcessLookupError:
                pass

    def run(self, argv: list[str], env: dict[str, str]) -> int:
        # Handlers first: a warning that comes before the child exists is kept and sent as soon
        # as it does. (Not blocked meanwhile: the child would inherit the blocked mask.)
        for sig in WARNINGS:
            signal.signal(sig, self.on_warning)
        signal.signal(signal.SIGALRM, self.send)
        # The child starts with the warnings ignored (inherited through exec), so that one sent
        # at once (received before it existed) cannot kill its shell before the shell's trap.
        self.child = subprocess.Popen(argv, env=env, process_group=0, preexec_fn=ignore_warnings)
        self.send()
        status = self.child.wait()
        signal.setitimer(signal.ITIMER_REAL, 0)
        if status < 0:
            status = 128 - status
        if self.warnings and status != 0:
            return EXIT_PREEMPTED
        return status


def ignore_warnings() -> None:
    """In the child, between fork and exec: ignore the warnings (what its shell's trap does)."""
    for sig in WARNINGS:
        signal.signal(sig, signal.SIG_IGN)


def batch_script(job: str) -> str:
    """The job's batch script as Slurm stored it."""
    proc = subprocess.run(
        ["scontrol", "write", "batch_script", job, "-"], capture_output=True, text=True
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(
            f"scontrol write batch_script {job} - failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()}"
        )
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    job = os.environ.get("SLURM_JOB_ID")
    if args or not job:
        print(
            "usage: python -m clusterbench.launch.slurm_batch (in a Slurm batch "
            "script, with SLURM_JOB_ID set: the Slurm profile's precommand)",
            file=sys.stderr,
        )
        return 2
    try:
        script = batch_script(job)
    except (OSError, RuntimeError) as exc:
        print(f"clusterbench slurm_batch: {exc}", file=sys.stderr)
        return 1
    return Relay().run(["/bin/sh", "-c", script, "slurm_script"], {**os.environ, MARK: "1"})


if __name__ == "__main__":
    sys.exit(main())
