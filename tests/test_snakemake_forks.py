"""tests/snakemake_forks.py's server: each run is Snakemake as a process of its own would run it
(its arguments, working directory, environment, output and exit status), and a run past its
timeout is killed and raised as subprocess.run raises it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from snakemake_forks import Server

SNAKEFILE = """
import os, sys
print("env", os.environ.get("FORKS_PROBE"), "cwd", os.getcwd(), file=sys.stderr)
print("path", "{extra}" in sys.path, file=sys.stderr)

rule all:
    input: "done.txt"

rule make:
    output: "done.txt"
    shell: "sleep {sleep} && echo $FORKS_PROBE > {{output}}"
"""


@pytest.fixture
def server():
    forks = Server()
    yield forks
    if forks._proc is not None:
        forks._proc.stdin.close()
        forks._proc.wait(timeout=30)


def workflow(tmp_path: Path, sleep: int) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    extra = tmp_path / "extra"
    (work / "Snakefile").write_text(SNAKEFILE.format(extra=extra, sleep=sleep))
    return work


def env(tmp_path: Path, **more: str) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    python_path = os.pathsep.join([str(tmp_path / "extra"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": python_path, **more}


def test_runs_are_snakemake_in_their_own_directory_and_environment(server, tmp_path):
    work = workflow(tmp_path, 0)
    proc = server.run(["--cores", "1"], work, env(tmp_path, FORKS_PROBE="one"), 120)
    assert proc.returncode == 0, proc.stderr
    assert f"env one cwd {work}" in proc.stderr and "path True" in proc.stderr
    assert (work / "done.txt").read_text() == "one\n"
    assert "Finished jobid" in proc.stderr and proc.stdout == ""
    # a second run through the same server: its own environment, not the first one's
    (work / "done.txt").unlink()
    again = server.run(["--cores", "1"], work, env(tmp_path, FORKS_PROBE="two"), 120)
    assert again.returncode == 0 and (work / "done.txt").read_text() == "two\n"


def test_a_failing_run_has_snakemakes_exit_status_and_message(server, tmp_path):
    proc = server.run(["--snakefile", str(tmp_path / "none")], tmp_path, env(tmp_path), 120)
    assert proc.returncode == 1
    assert "none" in proc.stderr


def test_a_run_past_its_timeout_is_killed_and_raised(server, tmp_path):
    work = workflow(tmp_path, 20)
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(["--cores", "1"], work, env(tmp_path), 3)
    assert not (work / "done.txt").exists()  # raised at the timeout, not at the job's end
    # the server goes on serving
    proc = server.run(["--version"], tmp_path, env(tmp_path), 60)
    assert proc.returncode == 0 and proc.stdout.strip()[0].isdigit()
