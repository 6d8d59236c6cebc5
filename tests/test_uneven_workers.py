"""Uneven workers, a time box that stops within a step, your own loss and optimiser, and the
network knobs, on 2 real ranks (issue 40): one launch per backend runs every training loop of
this module in its ranks, one after the other (the loop itself, :func:`clusterbench.training.
loop.fit`, as the train stage calls it), so the ranks start once.

- **Same update, uneven shares**: a model without BatchNorm, your own loss (cross-entropy
  summed) and optimiser (Adam), 8 steps on an even split and on shares ``[3, 1]``: the same
  weights within float tolerance, under DDP and under Horovod.
- **auto**: a model that sleeps in its forward, per sample, four times longer on rank 1: the
  timed first steps give rank 0 about three quarters, and the ranks' own work per step evens
  out.
- **The time box**: 30-second epochs (60 steps of a 0.5 s sleep), a 10-second box: the run
  stops within the first epoch near 10 s (at most a step and the checkpoint after it), its
  partial epoch validated and recorded as partial.
- **The optimiser's state in checkpoints**: Adam, preempted after its third step and
  continued from the checkpoint, ends with the weights of the run that was not interrupted.
- **Knobs**: the launch's ``--iface lo --log-level info`` recorded in run.json's ``network``.

Run as a script (by ``clusterbench.launch``), this file is the ranks' program.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: The user's code the runs name: written into the launch's working directory.
OWN_CODE = '''
import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn


def mlp(num_classes, shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes))


class Sleepy(nn.Module):
    """A linear layer whose training forward sleeps: per sample (``CBTEST_PER_SAMPLE``, by
    rank) or per step (``CBTEST_PER_STEP``); and warns of preemption at its
    ``CBTEST_WARN_AT``-th training step on rank 0."""

    def __init__(self, num_classes):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
        self.calls = 0

    def forward(self, x):
        if self.training and bool(x.any()):  # not the start's check (batches of zeros)
            self.calls += 1
            rank = int(os.environ.get("RANK", "0"))
            per_sample = os.environ.get("CBTEST_PER_SAMPLE")
            if per_sample:
                time.sleep(float(per_sample.split(",")[rank]) * x.shape[0])
            time.sleep(float(os.environ.get("CBTEST_PER_STEP", "0")))
            if rank == 0 and self.calls == int(os.environ.get("CBTEST_WARN_AT", "0")):
                os.kill(os.getpid(), signal.SIGUSR1)
        return self.fc(x.flatten(1))


def sleepy(num_classes, shape):
    return Sleepy(num_classes)


def summed(outputs, targets):
    return F.cross_entropy(outputs, targets, reduction="sum")


def adam(parameters, lr):
    return torch.optim.Adam(parameters, lr=lr)
'''


def test_shares_split_a_batch_one_sample_each_then_in_proportion():
    from clusterbench.data.order import shard_sizes

    assert shard_sizes(8, 2, [3, 1]) == [6, 2] and shard_sizes(10, 3, [0.7, 0.2, 0.1]) == [6, 2, 2]
    assert shard_sizes(3, 3, [100, 1, 1]) == [1, 1, 1]  # every rank a sample at least
    for batch in range(2, 30):  # equal shares: the even split, remainder to the first ranks
        for workers in range(1, min(batch, 5) + 1):
            assert shard_sizes(batch, workers, [2.0] * workers) == shard_sizes(batch, workers)
    with pytest.raises(ValueError, match="need 2 shares above 0"):
        shard_sizes(8, 2, [1.0])


def test_auto_gives_each_rank_the_share_of_its_pace_after_the_first_steps():
    from clusterbench.training.shares import balanced, window

    assert balanced([8, 8], [0.016, 0.048]) == pytest.approx([0.75, 0.25])
    assert balanced([8, 8], [0.016, 0.0]) == pytest.approx([0.5, 0.5])  # no time: the average
    assert window(0, 100) == (2, 10) and window(40, 100) == (42, 50)
    assert window(0, 3) == (2, 3) and window(5, 6) == (5, 6)  # a step timed where one is left


def test_the_time_box_checks_come_as_often_as_the_box_needs():
    from clusterbench.training.agreement import first_check, next_check

    assert first_check(0, 20, boxed=False) == 20 and first_check(25, 20, boxed=False) == 40
    assert first_check(7, 20, boxed=True) == 8  # a box: after the stretch's first step
    assert next_check(20, 20, None, None) == 40  # no box: every 20 steps, as before
    assert next_check(5, 20, 2.5, 1.0) == 7  # 2.5 s left at 1 s a step: check after 2 more
    assert next_check(5, 20, 0.1, 1.0) == 6 and next_check(5, 20, 500.0, 1.0) == 25


def test_a_list_of_shares_must_fit_the_workers_and_an_elastic_run_takes_auto():
    from clusterbench import config as cb

    def problem(**run):
        with pytest.raises(cb.ConfigError) as err:
            cb.validate({"runs": [{"name": "a", "dataset": "digits", **run}]})
        return str(err.value)

    assert "runs[0].shares: 3 shares for workers=2: give one weight" in problem(shares=[1, 2, 3])
    elastic = {"workers": 2, "min_workers": 1, "max_workers": 4, "shares": [1, 1]}
    assert "runs[0].shares: a list of 2 shares for an elastic run" in problem(**elastic)
    ok = {"name": "a", "dataset": "digits", "workers": 2, "min_workers": 1, "max_workers": 4}
    assert cb.validate({"runs": [{**ok, "shares": "auto"}]})["runs"][0]["shares"] == "auto"


def launch(cwd: Path, backend: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--backend", backend]
    cmd += ["--iface", "lo", "--log-level", "info", "--", sys.executable, __file__, *args]
    env = {**os.environ, "CLUSTERBENCH_CHECKPOINTS": json.dumps({"preemption_check_steps": 1})}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory) -> Path:
    """Every scenario of the module, trained by 2 DDP ranks in one launch; their outputs."""
    from test_train import make_dataset

    root = tmp_path_factory.mktemp("uneven")
    (root / "cbtest_own.py").write_text(OWN_CODE)
    launch(root, "ddp", str(make_dataset(root / "data")), str(root / "out"), "ddp", "all")
    return root / "out"


def load_weights(out: Path, name: str, rank: int = 0) -> dict:
    import torch

    return torch.load(out / "dump" / name / f"rank-{rank}.pt", weights_only=True)


def assert_same_update(out: Path) -> None:
    import torch

    even, uneven = load_weights(out, "even"), load_weights(out, "uneven")
    assert all(torch.equal(uneven[k], load_weights(out, "uneven", 1)[k]) for k in uneven)
    for key, value in even.items():
        torch.testing.assert_close(uneven[key], value, rtol=1e-4, atol=1e-5, msg=key)
    first = load_weights(out, "first")  # after one step: the steps did change the weights
    assert not torch.equal(first["1.weight"], even["1.weight"])
    info = json.loads((out / "uneven" / "run.json").read_text())
    assert (
        info["shares"]["shares"] == [0.75, 0.25] and info["run"]["optimizer"] == "cbtest_own:adam"
    )


def test_uneven_shares_compute_the_same_update_as_an_even_split(ddp_runs):
    assert_same_update(ddp_runs)


@pytest.mark.horovod
def test_uneven_shares_compute_the_same_update_under_horovod(tmp_path):
    from test_train import make_dataset

    (tmp_path / "cbtest_own.py").write_text(OWN_CODE)
    out = tmp_path / "out"
    launch(tmp_path, "horovod", str(make_dataset(tmp_path / "data")), str(out), "horovod", "same")
    assert_same_update(out)


def test_auto_shares_follow_each_ranks_pace(ddp_runs):
    info = json.loads((ddp_runs / "auto" / "run.json").read_text())
    record = info["shares"]
    slow, fast = record["measured_seconds_per_sample"][1], record["measured_seconds_per_sample"][0]
    assert slow / fast > 1.8  # rank 1 sleeps 4x as long per sample (beside the step's own)
    assert record["shares"][0] > 0.6 and record["asked"] == "auto"
    epochs = [json.loads(line) for line in (ddp_runs / "auto" / "metrics.jsonl").open()]
    work = epochs[-1]["step_seconds"]["work"]  # the epoch after the shares were set
    assert max(work) / min(work) < 1.6, work


def test_the_time_box_stops_a_30_second_epoch_near_10_seconds(ddp_runs):
    info = json.loads((ddp_runs / "boxed" / "run.json").read_text())
    box = info["time_box"]
    (record,) = [json.loads(line) for line in (ddp_runs / "boxed" / "metrics.jsonl").open()]
    part = record["partial"]
    assert box["seconds"] == pytest.approx(10) and box["partial"] == {"epoch": 1, **part}
    assert part["of"] == 60 and 15 <= part["steps"] < 60  # 0.5 s a step: about 20 in 10 s
    step = record["epoch_seconds"] / part["steps"]
    assert 10 <= box["used_seconds"] <= 10 + 2 * step + 1.0, (box, step)  # a step and the ckpt
    assert info["epochs_completed"] == 0 and 0 <= record["val_accuracy"] <= 1


def test_a_continued_run_keeps_its_optimisers_state(ddp_runs):
    import torch

    straight = load_weights(ddp_runs, "straight")
    continued = load_weights(ddp_runs / "cut", "straight")
    assert all(torch.equal(straight[k], continued[k]) for k in straight)
    said = (ddp_runs / "resumed.log").read_text()
    assert "preempted" in said and "continuing from the checkpoint epoch 1, after step" in said


def test_the_launchers_network_knobs_are_recorded(ddp_runs):
    net = json.loads((ddp_runs / "even" / "run.json").read_text())["network"]
    assert (net["iface"], net["iface_from"]) == ("lo", "--iface")
    assert (net["log_level"], net["log_level_from"]) == ("info", "--log-level")
    assert net["variables"]["TORCH_DISTRIBUTED_DEBUG"] == "INFO"


# -------------------------------------------------------------------------- the ranks' program


def fit_run(rt, data_dir: Path, out: Path, **keys) -> None:
    """One training of the ranks ``rt`` in ``out/<name>`` (every rank's final weights in
    ``out/dump``), as the train stage runs it."""
    from clusterbench.data.source import Reading, open_source
    from clusterbench.train import stage_params, validate_run
    from clusterbench.training.loop import fit
    from test_train import run_config

    steps = keys.pop("steps", None)
    run = validate_run(run_config(**keys))
    reading = Reading(stage_params("data_settings", {}, what="-"), rt.local_size, 1)
    sources = []

    def make_data(device):
        sources.append(open_source(data_dir, run, reading, device))
        return sources[-1]

    try:
        fit(rt, run, make_data, out / run["name"], "cpu", out / "dump", steps)
    finally:
        for source in sources:
            source.close()


def same_update(rt, data: Path, out: Path, backend: str) -> None:
    own = {"model": "cbtest_own:mlp", "loss": "cbtest_own:summed", "optimizer": "cbtest_own:adam"}
    base = {**own, "backend": backend, "bn": "local", "epochs": 2, "lr": 0.01, "steps": 4}
    fit_run(rt, data, out, name="first", **{**base, "epochs": 1, "steps": 1})
    fit_run(rt, data, out, name="even", **base)
    fit_run(rt, data, out, name="uneven", shares=[3, 1], **base)


def scenarios(rt, data: Path, out: Path) -> None:
    """auto shares, the time box, a preempted run continued (DDP)."""
    from clusterbench.core import preemption

    os.environ["CBTEST_PER_SAMPLE"] = "0.002,0.008"
    sleepy = {"model": "cbtest_own:sleepy", "backend": "ddp", "bn": "local"}
    fit_run(rt, data, out, name="auto", shares="auto", batch_size=16, steps=12, **sleepy)
    del os.environ["CBTEST_PER_SAMPLE"]
    os.environ["CBTEST_PER_STEP"] = "0.5"  # 60 steps: 30-second epochs, and a 10-second box
    fit_run(rt, data, out, name="boxed", minutes=1 / 6, epochs=3, batch_size=3, steps=60, **sleepy)
    del os.environ["CBTEST_PER_STEP"]
    adam = {**sleepy, "optimizer": "cbtest_own:adam", "lr": 0.01, "epochs": 2, "steps": 5}
    fit_run(rt, data, out, name="straight", **adam)
    os.environ["CBTEST_WARN_AT"] = "3"
    try:
        fit_run(rt, data, out / "cut", name="straight", **adam)
    except preemption.Preempted:
        pass
    del os.environ["CBTEST_WARN_AT"]
    preemption.install()  # the warning handled: a new start
    fit_run(rt, data, out / "cut", name="straight", **adam)


def main(data: str, out: str, backend: str, which: str) -> None:
    import contextlib
    import io

    import torch
    from clusterbench import backends
    from clusterbench.core import preemption

    torch.set_num_threads(1)
    preemption.install()
    rt = backends.init(backend, "cpu")
    data_dir, out_dir = Path(data), Path(out)
    same_update(rt, data_dir, out_dir, backend)
    if which == "all":
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            scenarios(rt, data_dir, out_dir)
        if rt.rank == 0:
            (out_dir / "resumed.log").write_text(log.getvalue())
    rt.finish()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(*sys.argv[1:])
