"""The Slurm batch shell's stand-in (clusterbench.launch.slurm_batch), with real
processes: a batch script made as the Slurm executor plugin makes it (the profile's precommand,
then the command), run the way slurmstepd runs it, signalled the way ``--signal=B:USR1@N`` and
``scancel --batch --signal=USR1`` signal it: the batch script's process alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from clusterbench.core import preemption
from clusterbench.launch import slurm_batch
from conftest import REPO

# The job's command: like the launcher, it ignores nothing once started, records each warning,
# and exits 75 on the first one (after a moment, as ranks do at their next check).
COMMAND = textwrap.dedent(
    """\
    import os, signal, sys, time
    out = sys.argv[1]
    delay = float(sys.argv[2])          # seconds before the handler is installed
    exit_code = int(sys.argv[3])        # without a warning
    wait = float(sys.argv[4])           # seconds to wait for a warning
    time.sleep(delay)                   # meanwhile the warnings are ignored (the shell's trap)
    got = []
    def on(signum, frame):
        got.append(signum)
    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, on)
    open(out + ".ready", "w").close()
    deadline = time.time() + wait
    while not got and time.time() < deadline:
        time.sleep(0.02)
    with open(out, "w") as f:
        f.write(" ".join(str(s) for s in got) + "|" + str(os.getpgrp()))
    sys.exit(75 if got else exit_code)
    """
)


# `scontrol write batch_script <job> -` as Slurm answers it: the stored script
FAKE_SCONTROL = """#!/bin/sh
[ "$1 $2 $3 $4" = "write batch_script 4242 -" ] || exit 1
cat "$STORED_SCRIPT"
"""


def batch_script(
    tmp_path: Path, *, delay: float = 0.0, exit_code: int = 0, wait: float = 30.0
) -> Path:
    """A batch script as the plugin writes it with ``sbatch --wrap="..."`` (the command has
    been through a shell's double quotes, which ``slurm_batch.PRECOMMAND`` survives): ``#!/bin/sh``,
    then ``<precommand> && <job>``."""
    prog = tmp_path / "job.py"
    prog.write_text(COMMAND)
    out = tmp_path / "got"
    job = f"{sys.executable} {prog} {out} {delay} {exit_code} {wait}"
    wrapped = subprocess.run(
        ["/bin/sh", "-c", f'printf %s "{slurm_batch.PRECOMMAND} && {job}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert wrapped == f"{slurm_batch.PRECOMMAND} && {job}"
    script = tmp_path / "slurm_script"
    script.write_text(f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{wrapped}\n")
    script.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    return script


def start(script: Path) -> subprocess.Popen:
    path = f"{script.parent / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
    env = {
        **os.environ,
        "PATH": path + os.environ["PATH"],
        "SLURM_JOB_ID": "4242",
        "STORED_SCRIPT": str(script),
    }
    env.pop(slurm_batch.MARK, None)
    # slurmstepd execs the script itself: its process is the one `B:` signals
    return subprocess.Popen([str(script)], env=env, cwd=REPO, start_new_session=True)


def wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_the_slurm_profile_runs_the_batch_shell_stand_in():
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["precommand"] == slurm_batch.PRECOMMAND
    # both passes ignore the warnings first, like every other shell before a rank
    assert slurm_batch.PRECOMMAND.startswith(preemption.IGNORE_IN_SHELL + ";")
    assert slurm_batch.EXIT_PREEMPTED == preemption.EXIT_PREEMPTED
    assert slurm_batch.WARNINGS == preemption.WARNING_SIGNALS


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2])
def test_a_warning_to_the_batch_shell_alone_reaches_the_job_which_exits_75(tmp_path, sig):
    script = batch_script(tmp_path)
    proc = start(script)
    try:
        wait_for(tmp_path / "got.ready")
        # the batch script's process is now the stand-in, at the same pid
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"clusterbench.launch.slurm_batch" in cmdline, cmdline
        os.kill(proc.pid, sig)  # what `scancel --batch --signal=USR1` does
        assert proc.wait(timeout=30) == preemption.EXIT_PREEMPTED
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    got, pgrp = (tmp_path / "got").read_text().split("|")
    assert got.split()[0] == str(int(sig))
    assert int(pgrp) != proc.pid  # the job runs in a process group of its own


@pytest.mark.slow  # waits for the repeat (10 s)
def test_a_warning_before_the_job_listens_is_sent_again(tmp_path, monkeypatch):
    """A warning that comes while nothing handles it yet (the ranks are still starting) is not
    lost: the stand-in repeats it until the job ends."""
    script = batch_script(tmp_path, delay=1.5)
    proc = start(script)
    try:
        time.sleep(0.5)  # the job ignores the warnings for another second
        os.kill(proc.pid, signal.SIGUSR1)
        started = time.time()
        rc = proc.wait(timeout=slurm_batch.REPEAT_S + 30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == preemption.EXIT_PREEMPTED
    assert (tmp_path / "got").read_text().split("|")[0].split()[0] == str(int(signal.SIGUSR1))
    # the first copy was ignored: the one that reached the job came REPEAT_S later
    assert time.time() - started >= slurm_batch.REPEAT_S - 1


def test_a_warning_before_the_stand_in_exists_does_not_kill_the_job(tmp_path):
    """Slurm may warn the moment the batch script starts (a ``warning_seconds`` close to the time
    limit), while its shell still runs the precommand: that warning must not kill the shell (by
    default SIGUSR1 would: the job would end by signal 10 with nothing done). Here the shell's
    ``env`` takes a second, and the warning comes during it."""
    script = batch_script(tmp_path, wait=0.2)
    slow_env = tmp_path / "bin" / "env"
    slow_env.write_text('#!/bin/sh\nsleep 1\nexec /usr/bin/env "$@"\n')
    slow_env.chmod(0o755)
    proc = start(script)
    try:
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGUSR1)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # lost (nothing could hold it yet), not fatal: the job ran and ended as without a warning
    assert rc == 0
    assert (tmp_path / "got").read_text().split("|")[0] == ""


def test_a_warning_passed_on_at_once_does_not_kill_the_childs_shell():
    """A warning received before the child existed is sent as soon as it does, before its shell
    can have run its trap: the child starts with the warnings ignored."""
    code = textwrap.dedent(
        """\
        import os, signal, sys
        from clusterbench.launch import slurm_batch
        relay = slurm_batch.Relay()
        relay.warnings.append(signal.SIGUSR1)  # as if received before the child was started
        sys.exit(relay.run(["/bin/sh", "-c", "sleep 0.5"], dict(os.environ)))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    # the child lived on and succeeded; killed by the warning it would have failed (75)
    assert proc.returncode == 0


@pytest.mark.parametrize("exit_code", [0, 3])
def test_without_a_warning_the_jobs_exit_status_is_kept(tmp_path, exit_code):
    script = batch_script(tmp_path, exit_code=exit_code, wait=0.2)
    proc = start(script)
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == exit_code


def test_a_job_killed_by_a_signal_gives_128_plus_it(tmp_path):
    script = batch_script(tmp_path)
    proc = start(script)
    try:
        wait_for(tmp_path / "got.ready")
        children = subprocess.run(
            ["pgrep", "-f", f"{tmp_path}/job.py"], capture_output=True, text=True
        ).stdout.split()
        assert children
        for pid in children:
            os.kill(int(pid), signal.SIGKILL)
        assert proc.wait(timeout=30) == 128 + signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
