"""Model FLOPs and MFU: the count against a network whose FLOPs are known in closed form, the
GPU peak table, the CPU's measured peak, run.json's ``flops`` read back (achieved TFLOP/s and
MFU), and where the report and the history show them. Pure or tiny: no training (the
trainings that write ``flops`` are test_train's and gpu-check's)."""

from __future__ import annotations

import json
import math
import sqlite3
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from clusterbench.history import store
from clusterbench.records import flops as records_flops
from clusterbench.report import recommend
from clusterbench.report.pages import runs_table
from clusterbench.training import flops, peaks

#: The widths of the closed-form network: an 8x2x2 image flattened, three Linear layers.
IN, H1, H2, CLASSES = 32, 24, 16, 10

STACK = textwrap.dedent(
    f"""
    from torch import nn

    def build(num_classes, input_shape):
        return nn.Sequential(
            nn.Flatten(), nn.Linear({IN}, {H1}), nn.ReLU(), nn.Linear({H1}, {H2}), nn.ReLU(),
            nn.Linear({H2}, num_classes),
        )
    """
)


def test_the_count_of_a_linear_stack_is_its_closed_form(tmp_path, monkeypatch):
    """A Linear layer of ``a`` inputs and ``b`` outputs: forward 2ab FLOPs per sample, backward
    2ab for its weight's gradient and 2ab for its input's, but the first layer, whose input
    (the data) needs none. Biases, ReLU and the loss are no matrix products: not counted."""
    (tmp_path / "linstack.py").write_text(STACK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    arch = {"model": "linstack:build", "num_classes": CLASSES, "input_shape": [8, 2, 2]}
    layers = [(IN, H1), (H1, H2), (H2, CLASSES)]
    forward = sum(2 * a * b for a, b in layers)
    backward = 2 * forward - 2 * IN * H1
    found = flops.count(arch, "classification")
    assert found == {"forward": forward, "backward": backward, "counted_on": "meta"}
    # on the CPU (where a network cannot be built on the meta device) the same count
    assert flops.step_flops(arch, "classification", "cpu") == (2 * forward, 2 * backward)


def test_a_language_models_count_holds_its_attention_and_is_per_token_in_run_json():
    arch = {"model": "gpt-tiny", "num_classes": 256, "input_shape": [64]}
    data = SimpleNamespace(task="language-model", units_per_sample=64)
    peak = {"flops": 1e11, "precision": "fp32", "source": "measured"}
    record = flops.run_record(arch, data, [{"peak": peak}])
    per_sample = record["per_sample"]
    # 4 layers of width 128: at least 6 x (12 x 128^2 x 4) x 64 FLOPs a sequence (6N per token)
    assert per_sample["forward"] + per_sample["backward"] > 6 * 12 * 128**2 * 4 * 64
    assert record["per_unit"] == pytest.approx(
        (per_sample["forward"] + per_sample["backward"]) / 64
    )
    assert record["peak"]["per_device"] == 1e11 and record["peak"]["devices"] == 1


def test_each_ranks_peak_is_the_better_of_its_two_measurements():
    arch = {"model": "small_cnn", "num_classes": 4, "input_shape": [1, 8, 8]}
    data = SimpleNamespace(task="classification", units_per_sample=1)

    def peak(flops):
        return {"flops": flops, "precision": "fp32", "source": "measured"}

    facts = [{"peak": peak(1e10)}, {"peak": peak(4e10)}]  # when the ranks started
    ends = [peak(3e10), peak(2e10)]  # when training had ended (rank 0's start was loaded)
    found = flops.run_record(arch, data, facts, ends)["peak"]
    assert (found["per_device"], found["lowest"], found["highest"]) == (3.5e10, 3e10, 4e10)
    assert flops.run_record(arch, data, facts)["peak"]["per_device"] == 2.5e10  # start only


def test_a_network_that_cannot_be_counted_says_why():
    found = flops.count({"model": "small_cnn", "num_classes": 4, "input_shape": [1, 2]}, "x")
    assert (
        found["forward"] is None and "on meta" in found["problem"] and "on cpu" in found["problem"]
    )


@pytest.mark.parametrize(
    "name, precision, tflops, kind, model",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4, "bf16", "H100 SXM"),
        ("NVIDIA H100 PCIe", "bf16", 756.5, "bf16", "H100 PCIe"),
        ("NVIDIA H200", "fp32", 494.7, "tf32", "H200 SXM"),
        ("NVIDIA H200 NVL", "bf16", 835.5, "bf16", "H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "fp32", 156.0, "tf32", "A100"),
        ("NVIDIA L4", "bf16", 121.0, "bf16", "L4"),
        ("NVIDIA L40S", "bf16", 362.05, "bf16", "L40S"),
        ("NVIDIA A10", "fp32", 62.5, "tf32", "A10"),
        ("Tesla V100-SXM2-32GB", "fp32", 15.7, "fp32", "V100 SXM2"),
        ("Tesla T4", "fp32", 8.1, "fp32", "T4"),
    ],
)
def test_the_gpu_peak_table_by_name_and_precision(name, precision, tflops, kind, model):
    peak = peaks.gpu_peak(name, precision)
    assert peak["flops"] == pytest.approx(tflops * 1e12)
    assert peak["precision"] == kind and model in peak["source"] and "datasheet" in peak["source"]


def test_a_gpu_the_table_does_not_know_has_no_peak_and_says_so():
    assert peaks.gpu_peak("NVIDIA A10G", "bf16")["flops"] is None  # an A10G is no A10
    found = peaks.gpu_peak("Some Future GPU", "fp32")
    assert found["flops"] is None and "not in the peak table" in found["source"]
    assert peaks.gpu_peak("Tesla T4", "bf16")["flops"] is None  # no bfloat16 there


def test_the_cpu_peak_is_a_measured_matrix_product():
    peak = peaks.cpu_peak("fp32", 1)
    assert 1e8 < peak["flops"] < 1e14
    assert peak["source"].startswith("measured: fp32 512x512 matrix product, 1 thread(s)")


def info_with(forward=1e9, backward=2e9, peak=1e12) -> dict:
    return {
        "flops": {
            "per_sample": {"forward": forward, "backward": backward},
            "peak": {"per_device": peak},
        }
    }


def test_achieved_tflops_and_mfu_are_per_epoch_then_averaged():
    epochs = [
        {"images_per_second": 100.0, "workers": 1},
        {"images_per_second": 300.0, "workers": 2},  # an elastic run's larger world
    ]
    found = records_flops.efficiency(info_with(), epochs)
    assert found["flops_per_sample"] == 3e9 and found["peak_tflops_per_device"] == 1.0
    assert found["tflops"] == pytest.approx((100 * 3e9 + 300 * 3e9) / 2 / 1e12)
    # per device: 100 x 3e9 / 1e12 = 0.3, and 150 x 3e9 / 1e12 = 0.45
    assert found["mfu"] == pytest.approx((0.3 + 0.45) / 2)
    unknown = records_flops.efficiency(info_with(peak=None), epochs)
    assert math.isnan(unknown["mfu"]) and unknown["tflops"] > 0
    assert all(math.isnan(v) for v in records_flops.efficiency({}, epochs).values())
    assert "written before" in records_flops.why_none({})
    assert "no peak" in records_flops.why_none(info_with(peak=None))


def test_a_time_boxed_runs_efficiency_leaves_its_partial_epoch_out(tmp_path):
    """The runs page and the history time a time-boxed run over its whole epochs (after the
    warm-up), not over none of them: its partial epoch, the last, is left out."""
    from clusterbench.history import entries
    from clusterbench.report import tables

    records = [
        {"epoch": 1, "images_per_second": 50.0, "workers": 1, "epoch_seconds": 2.0},
        {"epoch": 2, "images_per_second": 100.0, "workers": 1, "epoch_seconds": 1.0},
        {"epoch": 3, "images_per_second": 900.0, "workers": 1, "epoch_seconds": 0.1},
    ]
    records[-1]["partial"] = {"epoch": 3, "steps": 1, "of": 10}
    page = tables.efficiency_stats(info_with(), pd.DataFrame(records), warmup=1)
    assert page["tflops"] == pytest.approx(100 * 3e9 / 1e12)
    history = entries.efficiency(info_with(), records, warmup=1)
    assert history["tflops"] == pytest.approx(page["tflops"])
    assert history["mfu"] == pytest.approx(page["mfu"])


def test_a_malformed_flops_record_is_refused_naming_the_file():
    records_flops.check({}, Path("run.json"))  # none: an older run.json
    records_flops.check(info_with(peak=None), Path("run.json"))
    for bad in ({"flops": []}, info_with(forward="many"), info_with(peak=-1.0)):
        with pytest.raises(ValueError, match=r"^run\.json: malformed 'flops'"):
            records_flops.check(bad, Path("run.json"))


def test_the_runs_page_shows_tflops_mfu_and_compile_time_beside_the_throughput():
    row = SimpleNamespace(
        timed_epochs=3, tflops=0.1234, mfu=0.0456, compiled=True, compile_seconds=75.0
    )
    assert runs_table.efficiency_cell(row) == "\n0.123 TF/s\nMFU 4.56 %"
    assert runs_table.compile_cell(row) == "\n+1 min 15 s\ncompile"
    older = SimpleNamespace(timed_epochs=3, tflops=math.nan, mfu=math.nan, compiled=False)
    assert runs_table.efficiency_cell(older) == "" and runs_table.compile_cell(older) == ""


def test_the_recommendation_names_the_fastest_configurations_tflops_and_mfu():
    runs = pd.DataFrame(
        {
            "run": ["a", "b"],
            "dataset": "digits",
            "model": "small_cnn",
            "workers": [1, 2],
            "nodes": 1,
            "gpus_per_node": 0,
            "device": "cpu",
            "backend": "ddp",
            "bn": "aggregate",
            "precision": "fp32",
            "global_batch": 128,
            "memory_format": "channels_last",
            "images_per_second": [1000.0, 1500.0],
            "std_images_per_second": [10.0, 10.0],
            "timed_epochs": 5,
            "tflops": [0.01, 0.015],
            "mfu": [0.02, 0.03],
        }
    )
    recs = recommend.recommendations(recommend.configurations(runs))
    best = recs.iloc[0]
    assert best["mfu"] == pytest.approx(0.03) and best["tflops"] == pytest.approx(0.015)
    sentence = recommend.recommendation_sentence(best)
    assert ": 1,500 images/s (0.015 TFLOP/s, MFU 3.0 %), " in sentence, sentence


def test_a_version_1_history_store_gains_the_flops_columns(tmp_path):
    from test_history import entry

    path = tmp_path / "history.sqlite"
    store.append(path, [entry()], {})
    with sqlite3.connect(path) as conn:  # as version 1 made it
        conn.execute("ALTER TABLE runs DROP COLUMN tflops")
        conn.execute("ALTER TABLE runs DROP COLUMN mfu")
        conn.execute("UPDATE schema_version SET version = 1")
    store.append(path, [entry("/r/b", tflops=0.5, mfu=0.25)], {})
    rows = {r["run"]: r for r in store.read_runs(path)}
    assert rows["a"]["mfu"] is None and rows["b"]["mfu"] == 0.25 and rows["b"]["tflops"] == 0.5
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]


def test_the_history_legend_gives_the_newest_runs_tflops_and_mfu():
    from clusterbench.report.pages.history import mfu_label

    runs = pd.DataFrame(
        {"date": ["2026-01-01", "2026-01-02"], "tflops": [0.1, 0.2], "mfu": [0.01, 0.02]}
    )
    assert mfu_label(runs) == "\nnewest: 0.2 TFLOP/s, MFU 2 %"
    assert mfu_label(runs.drop(columns=["tflops", "mfu"])) == ""
    assert json.dumps(mfu_label(runs.assign(tflops=math.nan))) == '""'
    # as series.csv gives them back: empty cells where a run has none
    read = runs.astype(str).assign(tflops=["", "0.2"], mfu=["", ""])
    assert mfu_label(read) == "\nnewest: 0.2 TFLOP/s"


def test_a_compiled_series_is_named_so_in_the_history():
    from clusterbench.history.regression import config_label

    settings = {"backend": "ddp", "bn": "local", "global_batch": 64, "precision": "fp32"}
    assert config_label(json.dumps({**settings, "compile": True, "decode": "gpu"})) == (
        "ddp, local BN, batch 64, fp32, compiled, decode gpu"
    )
    assert (
        config_label(json.dumps({**settings, "compile": "auto"})) == "ddp, local BN, batch 64, fp32"
    )
