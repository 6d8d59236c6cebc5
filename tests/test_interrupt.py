"""Interrupting the workflow: SIGINT to `snakemake` alone stops the training job and its ranks.

Snakemake answers SIGINT by terminating its running jobs; the training job's launcher must pass
that on to every rank at once (clusterbench.launch), or the ranks train on to the end while
Snakemake marks their outputs incomplete.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    REPO,
    default_config,
    default_sigint,
    snakemake_cmd,
    snakemake_env,
    write_config,
)

pytestmark = pytest.mark.slow

#: How long after SIGINT snakemake and every rank must be gone (a bound, not a figure).
BOUND_S = 60


def processes_in(workdir: Path, mentioning: str = "") -> list[int]:
    """Live (non-zombie) processes working in ``workdir`` whose command line has ``mentioning``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cwd.startswith(str(workdir)) and mentioning in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def what_is_left(took: float, left: list[int], output: Path, log: Path) -> str:
    """Why a stop failed: what still runs (with its state and threads' wait channels), and the
    last lines of Snakemake's output and of the training log."""
    lines = [f"still running {took:.0f} s after SIGINT:"]
    for pid in left:
        proc = Path(f"/proc/{pid}")
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            waits = sorted({(task / "wchan").read_text() for task in (proc / "task").iterdir()})
            lines.append(f"  {pid} {cmdline[:160]} (threads waiting in {waits})")
    for name, path in (("snakemake", output), ("training log", log)):
        text = path.read_text(errors="replace") if path.exists() else "(none)"
        lines += [f"--- {name}, last lines:", *text.splitlines()[-25:]]
    return "\n".join(lines)


def test_sigint_to_snakemake_stops_training_and_every_rank(tmp_path: Path):
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    run = {**cfg["runs"][1], "name": "long-run", "workers": 2, "epochs": 2000}
    assert run["workers"] == 2
    cfg["runs"] = [run]
    write_config(tmp_path, cfg)
    cmd = snakemake_cmd(tmp_path, "--profile", str(REPO / "profiles" / "local"))
    log = tmp_path / "results" / "logs" / "train" / "long-run.log"
    # Snakemake's output goes to a file: a pipe nobody reads could fill and block it.
    output = tmp_path / "snakemake.out"
    with output.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=snakemake_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=default_sigint,
        )
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while "epoch 1:" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.5)
        ranks = processes_in(tmp_path, "scripts/train.py")
        assert len(ranks) >= 2, ranks  # the ranks (and their shells) run

        os.kill(proc.pid, signal.SIGINT)  # snakemake alone, not its process group
        start = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=BOUND_S)
        while processes_in(tmp_path) and time.monotonic() - start < BOUND_S:
            time.sleep(0.2)
        left = processes_in(tmp_path)
        took = time.monotonic() - start
        print(f"SIGINT to snakemake: snakemake and every rank gone after {took:.1f} s")
        assert not left, what_is_left(took, left, output, log)
        assert proc.returncode != 0
        assert not (tmp_path / "results" / "runs" / "long-run" / "model.pt").exists()
    finally:
        for pid in [proc.pid, *ranks, *processes_in(tmp_path)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)


#: The preprocess stage on a folder read in place, its walk made to wait (a folder of a
#: million files takes a minute): it says "walking" when it is inside the indexing.
WAITING_INDEX = """
import json, sys, time
from clusterbench.data import scan
def walk(*args, **kwargs):
    print("walking", flush=True)
    time.sleep(120)
scan.walk = walk
from clusterbench.preprocess import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigint_during_the_indexing_of_a_folder_is_one_line(tmp_path: Path):
    """Snakemake's failed-log display showed the preprocess's 33-line KeyboardInterrupt
    traceback after a Ctrl-C during the indexing of a large folder."""
    folder = tmp_path / "photos" / "cat"
    folder.mkdir(parents=True)
    (folder / "0.png").write_bytes(b"a png")
    manifest = tmp_path / "MANIFEST.json"
    manifest.write_text(json.dumps({"dataset": "pics", "path": str(folder.parent), "files": {}}))
    params = {"format": "image-folder", "val_fraction": 0.2, "test_fraction": 0.2,
              "split_seed": 0, "min_split_size": 1, "storage": "files"}  # fmt: skip
    argv = ["--dataset", "pics", "--manifest", str(manifest), "--params", json.dumps(params)]
    argv += ["--out-dir", str(tmp_path / "data")]
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITING_INDEX, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
        env={**os.environ, "PYTHONPATH": str(REPO / "workflow")},
    )
    try:
        assert proc.stdout.readline() == "walking\n", proc.stderr.read()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1:] == ["preprocess: interrupted (SIGINT, Ctrl-C): stopped"], err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "data" / "meta.json").exists()
