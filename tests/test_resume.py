"""Resume, always, and preemption: a training stopped anywhere ends exactly as if it never was.

Train-level tests run ``clusterbench.train`` itself (in this process for one worker, real
Horovod ranks under ``horovodrun --gloo`` for two); the workflow-level ones kill a real
``snakemake`` run and run it again with no flags.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from clusterbench.config import EXIT_BAD_SETTINGS
from clusterbench.core import preemption
from clusterbench.train import main, validate_run
from clusterbench.training import checkpoints
from clusterbench.training.checkpoints import CHECKPOINTS_ENV
from conftest import (
    REPO,
    default_config,
    default_sigint,
    snakemake,
    snakemake_cmd,
    snakemake_env,
    write_config,
)
from test_interrupt import processes_in
from test_train import make_dataset, read_metrics, run_config, train_cmd

#: metrics.jsonl fields that are clock readings: they may differ between two equal trainings.
TIMING = {"epoch_seconds", "images_per_second", "step_seconds", "tokens_per_second", "time"}


def weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "model.pt", weights_only=True)["state_dict"]


def assert_same_training(out: Path, reference: Path) -> None:
    """``out`` ended exactly as ``reference``: weights bit for bit, every epoch once, the
    same losses and accuracies, the same epoch count in run.json."""
    mine, ref = weights(out), weights(reference)
    assert mine.keys() == ref.keys()
    assert all(torch.equal(mine[k], ref[k]) for k in ref), "weights differ"
    strip = [{k: v for k, v in m.items() if k not in TIMING} for m in read_metrics(out)]
    assert strip == [
        {k: v for k, v in m.items() if k not in TIMING} for m in read_metrics(reference)
    ]
    info, ref_info = (json.loads((d / "run.json").read_text()) for d in (out, reference))
    assert info["epochs_completed"] == ref_info["epochs_completed"] == len(strip)
    assert not (out / "checkpoints").exists(), "checkpoints are deleted once model.pt is written"


def slice_checkpoints(out: Path, run: dict) -> list[checkpoints.Position]:
    """The checkpoints of ``run``'s slice as the trainer names it (with the schema's defaults of
    the keys the test leaves out)."""
    slice_dir = checkpoints.slice_dir(out, validate_run(run))
    return [p for p, _ in checkpoints.checkpoint_paths(slice_dir)]


def signal_when(path: Path, lines: int, send, delay: float = 0.3) -> threading.Thread:
    """A thread that calls ``send()`` ``delay`` seconds after ``path`` has ``lines`` lines (an
    epoch of these tests takes about a second: by then the next one is under way; see
    :func:`long_epochs`)."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if path.exists() and len(path.read_text().splitlines()) >= lines:
                time.sleep(delay)
                send()
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def frequent_checks(monkeypatch) -> None:
    """A preemption check every 2 steps (and 2 checkpoints kept)."""
    monkeypatch.setenv(CHECKPOINTS_ENV, json.dumps({"keep": 2, "preemption_check_steps": 2}))


@pytest.fixture
def long_epochs(tmp_path, frequent_checks):
    """A data set with 1000 steps per epoch at batch 4 (about a second an epoch for one worker:
    a warning sent 0.3 s after an epoch's end lands well within the next), and a preemption
    check every 2 steps."""
    return make_dataset(tmp_path / "data", n_train=4000)


def checkpoint_after_warning(log: str, *, before_training_ok: bool = False) -> str:
    """Where rank 0 said it checkpointed after a preemption warning, in the training ``log``
    (a step boundary: mid-epoch, or an epoch's end when the warning came in its last steps;
    with ``before_training_ok``, also before the first step), every rank having stopped there."""
    where = r"epoch \d+, after step \d+|after epoch \d+"
    if before_training_ok:
        where += "|" + re.escape(checkpoints.Position(0).describe())
    written = re.search(rf"rank 0 preempted: checkpoint written ({where})", log)
    assert written, log[-3000:]
    assert "[launch] preempted: every rank stopped at the checkpoint" in log, log[-3000:]
    return written[1]


def train_here(data: Path, run: dict, out: Path) -> int:
    """One worker, in this process (Horovod of size 1)."""
    return main(["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out)])


#: LR schedules that change the LR at every step (clusterbench.config.lr), beside a constant
#: LR: a run continued mid-epoch steps with the LRs of the uninterrupted one.
SCHEDULES = {
    "constant": {},
    "cosine": {"lr_schedule": "cosine", "lr_min": 0.001},
    "inverse_time": {"lr_schedule": "inverse_time", "lr_decay": 0.001},
}


@pytest.mark.slow
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_a_preempted_run_checkpoints_mid_epoch_and_continues_exactly(
    schedule, long_epochs, tmp_path
):
    run = run_config(workers=1, epochs=3, batch_size=4, **SCHEDULES[schedule])
    assert train_here(long_epochs, run, tmp_path / "full") == 0

    out = tmp_path / "out"
    watcher = signal_when(
        out / "metrics.jsonl", 1, lambda: os.kill(os.getpid(), preemption.WARNING_SIGNAL)
    )
    assert train_here(long_epochs, run, out) == preemption.EXIT_PREEMPTED
    watcher.join()
    assert not (out / "model.pt").exists()
    stopped_at = slice_checkpoints(out, run)[-1]
    assert stopped_at.epoch >= 1 and 0 < stopped_at.step < 1000, stopped_at  # mid-epoch
    assert stopped_at.step % 2 == 0  # at a check
    assert len(read_metrics(out)) == stopped_at.epoch

    assert train_here(long_epochs, run, out) == 0
    assert_same_training(out, tmp_path / "full")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard")).Reload()
    assert [e.step for e in events.Scalars("loss/train")] == [1, 2, 3]
    lrs = [m["lr"] for m in read_metrics(out)]  # each epoch's last step's
    assert len(set(lrs)) == (1 if schedule == "constant" else 3), lrs


@pytest.mark.slow
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(long_epochs, tmp_path, capfd):
    run = run_config(workers=1, epochs=2, batch_size=4)
    assert train_here(long_epochs, run, tmp_path / "full") == 0
    out = tmp_path / "out"
    signal_when(out / "metrics.jsonl", 1, lambda: os.kill(os.getpid(), preemption.WARNING_SIGNAL))
    assert train_here(long_epochs, run, out) == preemption.EXIT_PREEMPTED
    found = checkpoints.checkpoint_paths(checkpoints.slice_dir(out, validate_run(run)))
    assert [p.step > 0 for p, _ in found] == [False, True]  # after epoch 1; within epoch 2
    newest = found[-1][1]
    newest.write_bytes(newest.read_bytes()[:-100])  # truncated
    capfd.readouterr()

    assert train_here(long_epochs, run, out) == 0
    log = capfd.readouterr().out
    assert f"skipping checkpoint {newest}" in log and "content changed" in log
    assert "continuing from the checkpoint after epoch 1" in log
    assert_same_training(out, tmp_path / "full")


@pytest.mark.slow
def test_checkpoints_of_other_settings_are_ignored_not_resumed(long_epochs, tmp_path, capfd):
    run = run_config(workers=1, epochs=2, batch_size=4)
    out = tmp_path / "out"
    signal_when(out / "metrics.jsonl", 1, lambda: os.kill(os.getpid(), preemption.WARNING_SIGNAL))
    assert train_here(long_epochs, run, out) == preemption.EXIT_PREEMPTED
    capfd.readouterr()

    changed = {**run, "lr": 0.01}
    assert train_here(long_epochs, changed, out) == 0
    log = capfd.readouterr().out
    assert "made for another training slice (differs in lr)" in log
    assert "continuing from" not in log
    assert [m["epoch"] for m in read_metrics(out)] == [1, 2]
    assert train_here(long_epochs, changed, tmp_path / "fresh") == 0
    assert_same_training(out, tmp_path / "fresh")


@pytest.mark.slow
def test_a_checkpoint_of_other_data_is_passed_over_saying_why(tmp_path, capfd, monkeypatch):
    """Issue 42: a folder read in place changed mid-run and was indexed again; the retrain
    then "continued from the checkpoint after epoch 1", trained on the old files (the
    checkpoints are kept by the run's settings, not its data). Here the checkpoints of a run
    are kept at its end, and the data dir is made again with other samples in it: each
    checkpoint is passed over, as one of another network, and the run trains afresh."""
    data = make_dataset(tmp_path / "data")
    run = run_config(workers=1, epochs=2)
    out = tmp_path / "out"
    monkeypatch.setattr(checkpoints, "remove_all", lambda out_dir: None)  # kept at the end
    assert train_here(data, run, out) == 0
    assert [p.epoch for p in slice_checkpoints(out, run)] == [1, 2]
    capfd.readouterr()

    make_dataset(data, seed=7)  # the same folder, other data
    assert train_here(data, run, out) == 0
    log = capfd.readouterr().out
    for epoch in (2, 1):
        assert re.search(
            rf"train: skipping checkpoint \S+ \(after epoch {epoch}\): trained on other data "
            r"\(the dataset was preprocessed or indexed again since: data [0-9a-f]{16} there, "
            r"[0-9a-f]{16} now\)",
            log,
        ), log
    assert "continuing from" not in log
    assert [m["epoch"] for m in read_metrics(out)] == [1, 2]


def test_a_checkpoint_records_the_data_it_was_trained_on():
    from clusterbench.data.source import identity

    arrays = {"files": {"train_x.npy": {"size": 10, "sha256": "a" * 64}}, "dataset": "d"}
    same = {**arrays, "source": {"where": "/elsewhere"}}  # where it came from: the same data
    other = {"files": {"train_x.npy": {"size": 10, "sha256": "b" * 64}}, "dataset": "d"}
    synthetic = {"files": {}, "synthetic": True, "shape": [3, 8, 8]}
    assert identity(arrays) == identity(same) != identity(other)
    assert identity(synthetic) != identity({**synthetic, "shape": [3, 16, 16]})
    data = identity(arrays)
    assert checkpoints.data_problem({"data": data}, data) is None
    assert checkpoints.data_problem({"data": data}, None) is None  # not known: not judged
    assert "trained on other data" in checkpoints.data_problem({"data": data}, identity(other))
    assert "records no data it was trained on" in checkpoints.data_problem({}, data)


@pytest.mark.slow
def test_only_the_newest_checkpoints_are_kept_while_training(long_epochs, tmp_path, monkeypatch):
    monkeypatch.setenv(CHECKPOINTS_ENV, json.dumps({"keep": 1, "preemption_check_steps": 2}))
    run = run_config(workers=1, epochs=4, batch_size=4)
    out = tmp_path / "out"
    signal_when(out / "metrics.jsonl", 3, lambda: os.kill(os.getpid(), preemption.WARNING_SIGNAL))
    assert train_here(long_epochs, run, out) == preemption.EXIT_PREEMPTED
    assert len(slice_checkpoints(out, run)) == 1  # the one it stopped at; the epochs' are gone


def test_a_bad_checkpoints_setting_stops_before_training(tmp_path, monkeypatch, capsys):
    data = make_dataset(tmp_path / "data")
    monkeypatch.setenv(CHECKPOINTS_ENV, '{"keep": 0}')
    assert train_here(data, run_config(workers=1), tmp_path / "zero") == EXIT_BAD_SETTINGS
    assert f"{CHECKPOINTS_ENV}.keep: 0 is less than the minimum of 1" in capsys.readouterr().err
    assert not (tmp_path / "zero").exists()


def rank_pids(out: Path) -> list[int]:
    """The training ranks writing to ``out`` (their command line names it)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(part.endswith(b"train.py") for part in cmd) and str(out).encode() in cmd:
                pids.append(int(proc.name))
    return pids


@pytest.mark.slow
def test_two_horovod_ranks_agree_on_a_warning_one_of_them_got(frequent_checks, tmp_path):
    """Only rank 1 is warned: both stop at the same step (one collective), rank 0 writes the
    checkpoint, and the next attempt ends as an uninterrupted run does."""
    # two ranks take about a second for an epoch of a quarter of long_epochs' data (a real
    # collective every 2 steps)
    data = make_dataset(tmp_path / "data", n_train=1000)
    run = run_config(workers=2, epochs=2, batch_size=4)
    ref = subprocess.run(
        train_cmd(data, run, tmp_path / "full"), capture_output=True, text=True, timeout=300
    )
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]

    out = tmp_path / "out"

    def warn_rank_1() -> None:
        for pid in rank_pids(out):
            env = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
            if b"HOROVOD_RANK=1" in env:
                os.kill(pid, preemption.WARNING_SIGNAL)

    watcher = signal_when(out / "metrics.jsonl", 1, warn_rank_1)
    proc = subprocess.run(train_cmd(data, run, out), capture_output=True, text=True)
    watcher.join()
    assert proc.returncode != 0
    logs = proc.stdout + proc.stderr
    assert "rank 0 preempted: checkpoint written epoch 2, after step" in logs, logs[-3000:]
    assert "rank 1 preempted" in logs
    assert slice_checkpoints(out, run)[-1].step > 0

    again = subprocess.run(train_cmd(data, run, out), capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "continuing from the checkpoint epoch 2, after step" in again.stdout + again.stderr
    assert_same_training(out, tmp_path / "full")


# --------------------------------------------------------------------------------------------
# The workflow: killed, then `snakemake` again with no flags


def long_run_config(tmp_path: Path) -> dict:
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path.parent / "cache")
    # 12 epochs of ~0.4 s: the kill after epoch 2 leaves seconds of training, so a Snakemake slow
    # to pass SIGINT on (CI) cannot see the training end first (with 5 it did)
    run = {**cfg["runs"][1], "name": "resumed", "workers": 2, "epochs": 12, "batch_size": 16}
    cfg["runs"] = [run]
    return cfg


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    write_config(workdir, long_run_config(workdir))
    snakemake(
        workdir, "--profile", str(REPO / "profiles" / "local"), "results/runs/resumed/model.pt"
    )
    return workdir / "results" / "runs" / "resumed"


@pytest.mark.slow
@pytest.mark.parametrize(
    "how", ["sigkill-training-job", "sigint-to-snakemake", "sigkill-all", "usr1-to-the-launcher"]
)
def test_a_killed_workflow_reruns_from_the_last_checkpoint(uninterrupted, tmp_path, how):
    """The training job killed mid-epoch by SIGKILL (launcher and ranks at once, as the OOM
    killer or a dying node does), or SIGINT to snakemake alone (Ctrl-C): `snakemake` again, with
    no flags, continues the training from its last checkpoint and ends exactly as the
    uninterrupted run did. SIGKILL to snakemake too leaves Snakemake's lock, which Snakemake
    wants lifted with `--unlock` first; the training then continues the same way. A preemption
    warning (SIGUSR1) to the job's launcher stops it at a checkpoint mid-epoch, with exit 75;
    the next run continues from that very step."""
    write_config(tmp_path, long_run_config(tmp_path))
    target = "results/runs/resumed/model.pt"
    profile = ("--profile", str(REPO / "profiles" / "local"))
    out = tmp_path / "results" / "runs" / "resumed"
    proc = subprocess.Popen(
        snakemake_cmd(tmp_path, *profile, target),
        cwd=REPO,
        env=snakemake_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + 600
        metrics = out / "metrics.jsonl"
        while len(metrics.read_text().splitlines()) < 2 if metrics.exists() else True:
            assert proc.poll() is None, "snakemake ended before epoch 2"
            assert time.monotonic() < deadline, "training did not reach epoch 2"
            time.sleep(0.05)
        time.sleep(0.1)  # into epoch 3 (an epoch takes ~0.4 s here)
        if how == "sigkill-training-job":
            job = processes_in(tmp_path, "clusterbench.launch") + processes_in(tmp_path, "train.py")
            for pid in job:
                # one killed may take others with it (the launcher's middlemen kill their ranks)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        elif how == "sigint-to-snakemake":
            os.kill(proc.pid, signal.SIGINT)
        elif how == "usr1-to-the-launcher":
            (launcher,) = [  # the launcher itself, not the rule's shell that started it
                pid
                for pid in processes_in(tmp_path, "clusterbench.launch")
                if b"\0-m\0clusterbench.launch\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
            ]
            os.kill(launcher, preemption.WARNING_SIGNAL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=120)
        assert proc.returncode != 0
        start = time.monotonic()
        while processes_in(tmp_path) and time.monotonic() - start < 60:
            time.sleep(0.2)
        assert not processes_in(tmp_path), "a process outlived the kill"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Snakemake removes a failed job's outputs; the checkpoints are no output of its
    assert not (out / "model.pt").exists()
    assert list((out / "checkpoints").glob("*/epoch-*.pt"))

    log = tmp_path / "results" / "logs" / "train" / "resumed.log"
    resumed_at = "after epoch"
    if how == "usr1-to-the-launcher":
        first = log.read_text()
        # (the mid-epoch case is pinned down by test_a_preempted_run_checkpoints_mid_epoch...)
        resumed_at = checkpoint_after_warning(first)
        assert "exited with code" not in first, first[-3000:]
    if how == "sigkill-all":
        snakemake(tmp_path, *profile, "--unlock", target)
    snakemake(tmp_path, *profile, target)
    text = log.read_text()
    assert f"train: continuing from the checkpoint {resumed_at}" in text, text[-3000:]
    assert_same_training(out, uninterrupted)
