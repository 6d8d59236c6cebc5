"""Where the time goes: each step split into waiting for data, forward + backward, exposed
communication and the optimizer, on every rank (clusterbench.training.step_times), in
metrics.jsonl, runs.csv and the report's page "Where the time goes" (issue 18)."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pandas as pd
import pytest
from clusterbench.report import step_times as report_times
from clusterbench.training import step_times
from test_report import make_fake_results, pdf_text, run_report
from test_train import make_dataset, read_metrics, run_config, train_cmd


def clock(monkeypatch, readings):
    """``time.perf_counter`` answering ``readings`` in turn."""
    values = iter(readings)
    monkeypatch.setattr(step_times.time, "perf_counter", lambda: next(values))


def one_step(times: step_times.StepTimes, ready=None) -> None:
    times.fetching()
    times.fetched()
    times.backward_done(ready)
    times.synchronized()
    times.stepped()


def test_the_phases_of_a_step_on_the_cpu(monkeypatch):
    times = step_times.StepTimes(device=None)
    clock(monkeypatch, [10.0, 10.5, 13.5, 15.5, 16.0])  # data 0.5, compute 3, comm 2, opt 0.5
    one_step(times)
    assert times.result() == {
        "steps": 1,
        "data": 0.5,
        "compute": 3.0,
        "comm": 2.0,
        "optimizer": 0.5,
    }


def test_overlapped_communication_counts_from_the_last_gradient_ready(monkeypatch):
    """DDP reduces buckets while backward computes: its exposed communication runs from the
    last bucket ready to backward's end, plus what synchronize() waits for."""
    times = step_times.StepTimes(device=None)
    clock(monkeypatch, [0.0, 1.0, 5.0, 5.5, 6.0])
    one_step(times, ready=4.0)  # the last bucket at 4: 1 s of backward was waiting
    result = times.result()
    assert (result["compute"], result["comm"]) == (3.0, 1.5)
    clock(monkeypatch, [0.0, 1.0, 5.0, 5.5, 6.0])
    one_step(times, ready=99.0)  # a clock from elsewhere is held inside the step
    assert times.result()["compute"] == 3.0 + 4.0


def test_timing_off_records_nothing(monkeypatch):
    times = step_times.StepTimes(device=None, on=False)
    monkeypatch.setattr(step_times.time, "perf_counter", lambda: pytest.fail("timed"))
    one_step(times)
    assert times.result()["steps"] == 0
    assert step_times.summarise([times.result()]) is None
    assert not step_times.enabled({"CLUSTERBENCH_STEP_TIMES": "off"})
    assert step_times.enabled({})
    with pytest.raises(ValueError, match="CLUSTERBENCH_STEP_TIMES must be on or off"):
        step_times.enabled({"CLUSTERBENCH_STEP_TIMES": "maybe"})


def test_the_record_has_the_mean_and_the_slowest_rank_per_phase():
    fast = {"steps": 10, "data": 1.0, "compute": 20.0, "comm": 2.0, "optimizer": 1.0}
    slow = {"steps": 10, "data": 3.0, "compute": 20.0, "comm": 6.0, "optimizer": 1.0}
    summary = step_times.summarise([fast, slow])
    assert summary["steps"] == 10 and summary["ranks"] == 2
    assert summary["data"] == {"mean": 0.2, "max": 0.3}
    assert summary["comm"] == {"mean": pytest.approx(0.4), "max": pytest.approx(0.6)}
    assert summary["work"] == [pytest.approx(2.1), pytest.approx(2.3)]  # each rank's own


def test_report_tables_flatten_the_records_and_sum_a_run():
    record = {"steps": 4, **{p: {"mean": 0.01 * (i + 1), "max": 0.02 * (i + 1)} for i, p in
                            enumerate(step_times.PHASES)}}  # fmt: skip
    epochs = pd.DataFrame(
        {"epoch": [1, 2], "epoch_seconds": [0.5, 0.5], "step_seconds": [record, None]}
    )
    flat = report_times.flatten(epochs)
    assert "step_seconds" not in flat and flat["step_comm_mean"].tolist()[0] == 0.03
    assert np.isnan(flat["step_comm_mean"].tolist()[1])  # an epoch without a breakdown
    summary = report_times.run_columns(flat)
    assert summary["step_seconds"] == 0.125  # 0.5 s over 4 steps
    assert summary["comm_share"] == pytest.approx(0.03 / 0.125)
    assert summary["data_share"] == pytest.approx(0.01 / 0.125)
    runs = pd.DataFrame([{"run": "a", **summary}])
    table = report_times.breakdown(runs, "mean")
    assert table.loc["a", "other"] == pytest.approx(0.125 - 0.10)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_two_ranks_record_where_their_steps_go(backend, tmp_path):
    """A real 2-rank training: every epoch records the four phases, mean <= max over the
    ranks, exposed communication > 0, and the phases fit in the step's time; off, none."""
    data = make_dataset(tmp_path / "data")
    run = run_config(backend=backend, epochs=2)
    for out, env in ((tmp_path / "on", {}), (tmp_path / "off", {"CLUSTERBENCH_STEP_TIMES": "off"})):
        proc = subprocess.run(
            train_cmd(data, run, out), capture_output=True, text=True, timeout=300,
            env={**os.environ, **env},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for m in read_metrics(tmp_path / "on"):
        times = m["step_seconds"]
        assert times["ranks"] == 2 and times["steps"] == 9  # 205 samples, batches of 25
        assert all(0 <= times[p]["mean"] <= times[p]["max"] for p in step_times.PHASES)
        assert times["comm"]["mean"] > 0 and times["compute"]["mean"] > 0
        phases = sum(times[p]["mean"] for p in step_times.PHASES)
        # rank 0's clock: a rank that starts an epoch before it (rank 0 writes the epoch's
        # outputs first) waits in its first collective, in its phases but before that clock
        # (3 % of a 0.15 s epoch on a loaded machine); a phase counted twice would be 2x
        assert phases <= m["epoch_seconds"] / times["steps"] * 1.25
    assert all("step_seconds" not in m for m in read_metrics(tmp_path / "off"))


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_the_report_shows_where_the_time_goes(tmp_path):
    """Runs whose epochs carry a breakdown get the page, and the scaling page's efficiencies
    below 100 % their communication and data shares."""
    fake = make_fake_results(tmp_path)
    for run_dir in fake["run_dirs"]:
        path = run_dir + "/metrics.jsonl"
        lines = [json.loads(line) for line in open(path)]
        workers = lines[0]["workers"]
        for line in lines:
            per_step = line["epoch_seconds"] / 10
            line["step_seconds"] = {
                "steps": 10,
                "ranks": workers,
                "data": {"mean": 0.02 * per_step, "max": 0.03 * per_step},
                "compute": {"mean": 0.6 * per_step, "max": 0.65 * per_step},
                "comm": {"mean": 0.05 * workers * per_step, "max": 0.1 * workers * per_step},
                "optimizer": {"mean": 0.05 * per_step, "max": 0.05 * per_step},
            }
        with open(path, "w") as fh:
            fh.writelines(json.dumps(line) + "\n" for line in lines)
    assert run_report(fake, tmp_path / "out") == 0
    text = " ".join(pdf_text(tmp_path / "out" / "report.pdf").split())
    assert "Where the time goes" in text and "communication (exposed)" in text
    assert "Slowest rank, per phase" in text
    assert "comm 20%, data 2%" in text  # a 4-worker run's efficiency annotated
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("run")
    assert runs["comm_share"].notna().all() and (runs["comm_share"] < 1).all()
    assert "step_comm_max" in pd.read_csv(tmp_path / "out" / "epochs.csv")
