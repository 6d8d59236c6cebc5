"""The launcher's ``--lock``: one launch at a time trains a run (clusterbench.launch.exclusive),
with real launcher processes on the local scheduler: a requeued job and its retry, both alive."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

# The "training": says it started, works for SECONDS, records that it finished, exits CODE.
TRAIN = (
    "import sys, time, pathlib; d = pathlib.Path(sys.argv[1]); tag = sys.argv[2]; "
    "(d / f'{tag}.started').touch(); time.sleep(float(sys.argv[3])); "
    "(d / f'{tag}.finished').touch(); sys.exit(int(sys.argv[4]))"
)


def launch(tmp_path: Path, tag: str, seconds: float, code: int = 0) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "clusterbench.launch",
        "--np",
        "1",
        "--scheduler",
        "local",
        "--lock",
        str(tmp_path / "run" / "train.lock"),
        "--",
        sys.executable,
        "-c",
        TRAIN,
        str(tmp_path),
        tag,
        str(seconds),
        str(code),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PE_", "JOB_ID"))}
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


def record(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "run" / "train.lock").read_text())


@pytest.fixture
def first(tmp_path):
    """A launch that holds the lock while its rank works for 3 s."""
    proc = launch(tmp_path, "first", 3)
    wait_for(tmp_path / "first.started")
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


def test_a_second_launch_waits_and_starts_no_rank_when_the_first_succeeded(tmp_path, first):
    second = launch(tmp_path, "second", 0)
    assert finish(first)[0] == 0
    code, out = finish(second)
    assert code == 0, out
    assert "is already running this training" in out and "waiting for it to end" in out, out
    assert "nothing left to do, no rank started" in out, out
    assert not (tmp_path / "second.started").exists()
    # while the second waited, the first trained alone; its record stays
    assert (tmp_path / "first.finished").exists()
    assert record(tmp_path)["exit"] == 0 and record(tmp_path)["holder"]["pid"] == first.pid


def test_after_a_failed_first_launch_the_second_trains(tmp_path):
    first = launch(tmp_path, "first", 2, code=3)
    wait_for(tmp_path / "first.started")
    second = launch(tmp_path, "second", 0)
    assert finish(first)[0] == 3
    code, out = finish(second)
    assert code == 0, out
    assert "waiting for it to end" in out, out
    assert (tmp_path / "second.finished").exists()
    assert record(tmp_path)["holder"]["pid"] == second.pid and record(tmp_path)["exit"] == 0
    # each started only after the other's rank had ended
    assert (tmp_path / "second.started").stat().st_mtime >= (
        tmp_path / "first.finished"
    ).stat().st_mtime


def test_a_killed_holder_lets_the_next_one_train(tmp_path, first):
    second = launch(tmp_path, "second", 0)
    time.sleep(1)
    assert second.poll() is None and not (tmp_path / "second.started").exists()
    os.killpg(first.pid, signal.SIGKILL)  # the kernel releases a killed holder's lock
    code, out = finish(second)
    assert code == 0, out
    assert (tmp_path / "second.finished").exists()
    assert not (tmp_path / "first.finished").exists()


def test_without_a_holder_the_launch_trains_and_records_how_it_ended(tmp_path):
    code, out = finish(launch(tmp_path, "only", 0, code=5))
    assert code == 5, out
    assert "waiting" not in out
    rec = record(tmp_path)
    assert rec["exit"] == 5 and rec["ended"] >= rec["started"]
