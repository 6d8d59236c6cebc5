"""Streamed training (loading: stream) through the real train stage: it ends with the weights
resident training ends with, on the real digits, for one and two workers (one and two loader
processes); a streamed run warned of preemption checkpoints, exits 75 and leaves no process
behind, and continuing it ends as an uninterrupted resident run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from clusterbench.config.datasets import get_dataset
from clusterbench.core import preemption
from clusterbench.download import file_digests
from clusterbench.training.checkpoints import CHECKPOINTS_ENV
from test_resume import TIMING, assert_same_training, rank_pids, signal_when
from test_train import make_dataset, read_metrics, run_config, train_cmd


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """The real digits (scikit-learn's bundled file), preprocessed as the workflow does."""
    from clusterbench import preprocess

    spec = get_dataset("digits")
    raw = tmp_path_factory.mktemp("raw")
    source = Path(spec.files[0].url.removeprefix("file://"))
    (raw / source.name).write_bytes(source.read_bytes())
    manifest = raw / "MANIFEST.json"
    digest = file_digests(raw / source.name)["sha256"]
    manifest.write_text(
        json.dumps({"dataset": "digits", "files": {source.name: {"sha256": digest}}})
    )
    out = tmp_path_factory.mktemp("digits")
    params = {"val_fraction": 0.1, "test_fraction": 0.2, "split_seed": 0, "min_split_size": 50}
    preprocess.preprocess("digits", manifest, json.dumps(params), out)
    return out


def train(data: Path, run: dict, out: Path, loading: str, loader_workers: int | None = None):
    settings = {"loading": loading, "loader_workers": loader_workers}
    cmd = train_cmd(data, run, out, "--data-settings", json.dumps(settings))
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:  # say where it hung (seen once in make test)
        said = [part.decode(errors="replace") if isinstance(part, bytes) else part or ""
                for part in (exc.stdout, exc.stderr)]  # fmt: skip
        raise AssertionError(
            f"{loading} training hung for 300 s:\n{said[0][-4000:]}\n{said[1][-4000:]}"
        ) from None


def weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "model.pt", weights_only=True)["state_dict"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers, loader_workers, augment", [(1, 1, "none"), (2, 2, "standard")], ids=["1w", "2w"]
)
def test_resident_and_streamed_training_end_with_identical_weights_on_digits(
    digits, tmp_path, workers, loader_workers, augment
):
    run = run_config(dataset="digits", workers=workers, epochs=2, batch_size=64, augment=augment)
    runs = {}
    for loading in ("resident", "stream"):
        out = tmp_path / loading
        done = train(digits, run, out, loading, loader_workers)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        runs[loading] = out
        data = json.loads((out / "run.json").read_text())["data"]
        assert data["loading"]["decision"] == loading and data["augment"] == augment
        assert data.get("loader_workers") == (loader_workers if loading == "stream" else None)
    mine, ref = weights(runs["stream"]), weights(runs["resident"])
    assert all(torch.equal(mine[k], ref[k]) for k in ref), "streamed weights differ"
    strip = [{k: v for k, v in m.items() if k not in TIMING} for m in read_metrics(runs["stream"])]
    assert strip == [
        {k: v for k, v in m.items() if k not in TIMING} for m in read_metrics(runs["resident"])
    ]


@pytest.mark.slow
def test_a_preempted_streamed_run_exits_75_leaves_no_process_and_continues_exactly(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(CHECKPOINTS_ENV, json.dumps({"keep": 2, "preemption_check_steps": 2}))
    data = make_dataset(tmp_path / "data", n_train=2000)
    run = run_config(workers=1, epochs=3, batch_size=4, augment="standard")
    ref = train(data, run, tmp_path / "full", "resident")
    assert ref.returncode == 0, ref.stderr[-3000:]

    out = tmp_path / "out"
    settings = json.dumps({"loading": "stream", "loader_workers": 2})
    cmd = train_cmd(data, run, out, "--data-settings", settings)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    alive = []

    def warn() -> None:
        alive.append(len(rank_pids(out)))
        os.kill(proc.pid, preemption.WARNING_SIGNAL)

    watcher = signal_when(out / "metrics.jsonl", 1, warn)
    log, _ = proc.communicate(timeout=300)
    watcher.join()
    assert alive == [3], "the rank and its 2 loader processes, when it was warned"
    assert proc.returncode == preemption.EXIT_PREEMPTED, log[-3000:]
    assert "rank 0 preempted: checkpoint written epoch 2, after step" in log, log[-3000:]
    deadline = time.monotonic() + 10
    while rank_pids(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rank_pids(out) == [], "loader processes outlived their rank"

    again = train(data, run, out, "stream", 2)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "continuing from the checkpoint epoch 2, after step" in again.stdout
    assert_same_training(out, tmp_path / "full")
    assert rank_pids(out) == []


@pytest.mark.slow
def test_a_streamed_rank_killed_takes_its_loader_processes_with_it(tmp_path):
    """SIGKILL leaves the rank no way out of its own: its loader processes notice and end."""
    data = make_dataset(tmp_path / "data", n_train=2000)
    run = run_config(workers=1, epochs=50, batch_size=4)
    out = tmp_path / "out"
    cmd = train_cmd(data, run, out, "--data-settings", json.dumps({"loading": "stream"}))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watcher = signal_when(out / "metrics.jsonl", 1, lambda: os.kill(proc.pid, signal.SIGKILL))
    proc.wait(timeout=300)
    watcher.join()
    deadline = time.monotonic() + 30  # the DataLoader's watchdog looks every 5 s
    while rank_pids(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rank_pids(out) == []
