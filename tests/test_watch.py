"""Evaluating while training (``evaluate.every_minutes``), in one process: how the watch job
knows its training (the lock's record, the outputs, Snakemake's other jobs) and the exchange of
the weights with the training (clusterbench.training.lending), the training waiting while the
watcher on its host evaluates. The real workflow run: tests/test_workloads.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from clusterbench import watch
from clusterbench.core import integrity
from clusterbench.training import lending


def marker(path: str) -> str:
    return base64.b64encode(path.encode()).decode()


def test_snakemake_is_busy_while_it_runs_a_job_other_than_a_watcher(tmp_path: Path):
    incomplete = tmp_path / "incomplete"
    assert watch.busy(incomplete)  # no folder: not known, so taken to be
    incomplete.mkdir()
    assert not watch.busy(incomplete)
    (incomplete / marker("results/watch/a/watch.json")).touch()
    assert not watch.busy(incomplete)  # another watcher alone
    (incomplete / marker("results/runs/b/run.json")).touch()
    assert watch.busy(incomplete)


def lock(run_dir: Path, **record) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "train.lock").write_text(json.dumps({"holder": {}, **record}))


def test_the_watch_knows_its_training_from_its_lock_and_its_outputs(tmp_path: Path):
    run_dir, stamp = tmp_path / "runs" / "a", tmp_path / "train.sha256"
    run = {"name": "a", "lr": 0.1}
    stamp.write_text("code\n")
    training = watch.Training(run_dir, run, [stamp])
    assert not training.running() and training.failed() is None and not training.trained()
    lock(run_dir, started=time.time(), ended=None, exit=None)
    assert training.running()
    lock(run_dir, started=time.time(), ended=time.time(), exit=1)
    assert not training.running() and training.failed() == 1
    old = time.time() - 2 * watch.SKEW_SECONDS  # an earlier attempt's failure: not this one's
    lock(run_dir, started=old, ended=old + 1, exit=1)
    assert training.failed() is None
    (run_dir / "run.json").write_text(json.dumps({"run": run}))
    for name in ("metrics.jsonl", "model.pt"):
        (run_dir / name).write_text("x")
    integrity.write_checksums(run_dir, integrity.RUN_FILES)
    assert training.trained()
    (run_dir / "run.json").write_text(json.dumps({"run": {**run, "lr": 0.2}}))
    integrity.write_checksums(run_dir, integrity.RUN_FILES)
    assert not training.trained()  # another slice's outputs: a training is to come
    (run_dir / "run.json").write_text(json.dumps({"run": run}))
    integrity.write_checksums(run_dir, integrity.RUN_FILES)
    later = (run_dir / "run.json").stat().st_mtime + 10
    os.utime(stamp, (later, later))  # code newer than the outputs: they are stale
    assert not training.trained()


class OneRank:
    """A world of one rank: what the lender's collectives need."""

    rank, size = 0, 1

    def broadcast_object(self, obj, root=0, name=""):
        return obj


def test_the_training_lends_its_weights_and_waits_while_a_watcher_on_its_host_evaluates(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(lending, "POLL_SECONDS", 0.01)
    args = SimpleNamespace(run_dir=tmp_path, out=tmp_path / "watch.json", data_dir=tmp_path)
    watcher = watch.Watcher(args, {"split": "test", "every_minutes": 1, "batch_size": 8}, {})
    watcher.run = {"name": "a"}
    host = socket.gethostname()
    lender = lending.Lender(tmp_path, {host}, host)
    assert not lender.asked()  # nothing asked yet
    watcher.ask()
    assert lender.asked()
    evaluated = []

    def evaluate_when_answered() -> None:
        while (answer := watcher.answered()) is None:
            time.sleep(0.01)
        time.sleep(0.2)  # evaluating: the training waits
        evaluated.append(answer)
        lending.write_json(watcher.dir / lending.DONE, {"id": watcher.asked})

    thread = threading.Thread(target=evaluate_when_answered)
    thread.start()
    model_file = {"arch": {"model": "small_cnn"}, "state_dict": {}}
    took = lender.lend(OneRank(), model_file, {"train_seconds": 12.5, "epoch": 1, "step": 3})
    thread.join()
    assert took >= 0.2  # it waited for the evaluation
    (answer,) = evaluated
    assert answer["pause"] is True and answer["train_seconds"] == 12.5
    data = (watcher.dir / lending.WEIGHTS).read_bytes()
    assert hashlib.sha256(data).hexdigest() == answer["sha256"]
    assert not lender.asked()  # answered: not again
    other = lending.Lender(tmp_path, {"elsewhere"}, "elsewhere")  # a watcher on another host
    watcher.ask()
    assert other.asked() and other.lend(OneRank(), model_file, {}) < 5  # answered, no wait
    assert watcher.answered()["pause"] is False


def test_a_training_waits_for_no_watcher_that_has_gone(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(lending, "POLL_SECONDS", 0.01)
    host = socket.gethostname()
    lender = lending.Lender(tmp_path, {host}, host)
    (tmp_path / lending.WATCH_DIR).mkdir()
    gone = {"id": "x", "host": host, "pid": 2**22 + 12345}  # no such process
    lending.write_json(tmp_path / lending.WATCH_DIR / lending.REQUEST, gone)
    assert lender.asked()
    assert lender.lend(OneRank(), {"state_dict": {}}, {}) < 5


@pytest.mark.parametrize(
    "point, line",
    [
        (
            {"train_seconds": 12.0, "epoch": 1, "step": 3, "steps": 9, "accuracy": 0.5},
            "12.0 s of training (epoch 2, step 3): accuracy 0.5000, loss 0.7000 (0.1 s, the "
            "training waiting)",
        ),
        (
            {"train_seconds": 30.0, "epoch": 2, "step": 0, "steps": 0, "accuracy": 0.75},
            "30.0 s of training (after epoch 2): accuracy 0.7500, loss 0.7000 (0.1 s, the "
            "training waiting)",
        ),
    ],
)
def test_each_point_is_one_log_line(point, line):
    point = {**point, "loss": 0.7, "evaluation_seconds": 0.1, "pause": True}
    assert watch.point_line(point) == line
