"""The report's pages and tables for the experiment designs, on synthetic results: a 100-run set
with a swept matrix and repeats, environments (one skipped), 10 distinct node counts and an
elastic run; the best run's stage (clusterbench.best)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from clusterbench import best
from clusterbench.report import main
from clusterbench.report.tables import best_run, point_table, sort_by_validation
from test_report import PARAMS, make_fake_results, pdf_pages, pdf_text

LRS = [0.01, 0.02, 0.05, 0.1, 0.2]
MOMENTA = [0.0, 0.5, 0.8, 0.9, 0.99]
ENVS = {"cpu": (1, 1), "cpu-parallel": (2, 1), "multi-node": (8, 4)}


def design_specs() -> list[dict]:
    """100 runs: a 5 x 5 sweep x 2 repeats (50), 3 environments (3), 46 runs on 1..10 nodes,
    one elastic run."""
    specs, origin = [], {}
    for i, lr in enumerate(LRS):
        for j, m in enumerate(MOMENTA):
            for rep in range(2):
                name = f"sweep--lr={lr},momentum={m},seed={1 + rep}"
                acc = 0.9 + 0.01 * i - 0.005 * abs(j - 3) + 0.002 * rep
                specs.append({"name": name, "dataset": "digits", "workers": 2, "nodes": 1,
                              "ips": 2000 + 50 * i, "acc": acc})  # fmt: skip
                origin[name] = {"name": "sweep", "environment": None,
                                "point": {"lr": lr, "momentum": m}, "repeat": rep}  # fmt: skip
    for env, (workers, nodes) in ENVS.items():
        name = f"envs--env={env}"
        specs.append({"name": name, "dataset": "digits", "workers": workers, "nodes": nodes,
                      "ips": 900 * workers, "acc": 0.95})  # fmt: skip
        origin[name] = {"name": "envs", "environment": env, "point": {}, "repeat": 0}
    for k in range(46):
        nodes = 1 + k % 10
        specs.append({"name": f"scale-{k:02d}", "dataset": "digits", "workers": 2 * nodes,
                      "nodes": nodes, "ips": 1000 * nodes, "acc": 0.93})  # fmt: skip
    specs.append({"name": "elastic", "dataset": "digits", "workers": 3, "nodes": 1,
                  "ips": 1500, "acc": 0.94})  # fmt: skip
    return specs, origin


@pytest.fixture(scope="module")
def designs(tmp_path_factory) -> tuple[dict, Path]:
    root = tmp_path_factory.mktemp("designs")
    specs, origin = design_specs()
    fake = make_fake_results(root, runs=specs, epochs=4, benchmarks=False)
    for name, block in origin.items():
        path = root / "results" / "runs" / name / "run.json"
        info = json.loads(path.read_text())
        info["experiment"] = block
        path.write_text(json.dumps(info))
    # the elastic run: 3 ranks, then 2 after a rank failed in epoch 3
    run = root / "results" / "runs" / "elastic"
    info = json.loads((run / "run.json").read_text())
    resets = [{"epoch": 3, "step": 6, "from": 3, "to": 2, "why": "a rank failed", "seconds": 1.5}]
    info["world"]["elastic"] = {"min_workers": 2, "max_workers": 3, "sizes": [3, 3, 2, 2],
                                "resets": resets}  # fmt: skip
    (run / "run.json").write_text(json.dumps(info))
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for line, size in zip(lines, [3, 3, 2, 2], strict=True):
        line["world_size"] = size
        line["world_sizes"] = [3, 2] if line["epoch"] == 3 else [size]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    reason = "asks for 1 GPU(s) per node and this machine has none"
    skipped = [{"run": "envs--env=gpu", "experiment": "envs", "environment": "gpu",
                "point": {}, "reason": reason}]  # fmt: skip
    out = root / "report"
    argv = ["--params", json.dumps(PARAMS), "--config-hash", "abc", "--skipped",
            json.dumps(skipped), "--run-dirs", *fake["run_dirs"], "--eval-dirs",
            *fake["eval_dirs"], "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    return fake, out


def test_a_hundred_runs_render_every_design_page(designs):
    _, out = designs
    text = " ".join(pdf_text(out / "report.pdf").split())
    for title in (
        "Results, best first (1 of",
        "Execution environments: envs",
        "Sweep: sweep",
        "Repeats: sweep",
        "Elastic runs: world size over the epochs",
        "Scaling across workers and nodes",
    ):
        assert title in text, title
    assert "gpu (envs--env=gpu):" in text  # the skipped environment beside its chart
    assert pdf_pages(out / "report.pdf") > 20
    for png in ("environments-envs", "sweep-sweep", "repeats-sweep", "elastic"):
        assert (out / "figures" / f"{png}.png").is_file(), png


def test_results_csv_is_sorted_on_validation_and_names_the_origin(designs):
    _, out = designs
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 100
    assert list(results["rank"]) == list(range(1, 101))
    assert results["final_val_accuracy"].is_monotonic_decreasing
    sweep = results[results["experiment"] == "sweep"]
    assert {json.loads(p)["lr"] for p in sweep["point"]} == set(LRS)
    envs = results[results["experiment"] == "envs"]
    assert set(envs["environment"]) == set(ENVS)
    assert pd.read_csv(out / "skipped.csv")["run"].tolist() == ["envs--env=gpu"]


def test_points_average_their_repeats():
    df = pd.DataFrame(
        {
            "run": ["a1", "a2", "b1"],
            "experiment": ["s", "s", "s"],
            "environment": ["", "", ""],
            "point": [json.dumps({"lr": 0.1}), json.dumps({"lr": 0.1}), json.dumps({"lr": 0.2})],
            "final_val_accuracy": [0.9, 0.8, 0.7],
            "accuracy": [0.91, 0.81, 0.71],
            "mean_epoch_seconds": [1.0, 3.0, 2.0],
            "images_per_second": [10.0, 30.0, 20.0],
            "epochs": [5, 5, 5],
        }
    )
    table = point_table(df, "s")
    a = table[table["lr"] == 0.1].iloc[0]
    assert a["repeats"] == 2
    assert a["val_accuracy"] == pytest.approx(0.85)
    assert a["epoch_seconds"] == pytest.approx(2.0)
    assert a["val_accuracy_sd"] == pytest.approx(0.0707107, rel=1e-5)


def test_the_best_run_is_chosen_on_validation_never_on_test():
    df = pd.DataFrame(
        {
            "run": ["test-best", "val-best", "tie-b", "tie-a"],
            "final_val_accuracy": [0.90, 0.95, 0.93, 0.93],
            "final_val_loss": [0.3, 0.2, 0.25, 0.25],
            "accuracy": [0.99, 0.90, 0.9, 0.9],
        }
    )
    assert best_run(df)["run"] == "val-best"
    assert list(sort_by_validation(df)["run"]) == ["val-best", "tie-a", "tie-b", "test-best"]


def test_the_best_stage_keeps_rank_one(designs, tmp_path):
    fake, out = designs
    kept = tmp_path / "best"
    dirs = [Path(d) for d in fake["run_dirs"]]
    for d in dirs:
        (d / "model.pt").write_bytes(d.name.encode())  # the fake runs have no model
    code = best.main(
        [
            "--results",
            str(out / "results.csv"),
            "--run-dirs",
            *map(str, dirs),
            "--eval-dirs",
            *fake["eval_dirs"],
            "--out-dir",
            str(kept),
        ]  # fmt: skip
    )
    assert code == 0
    first = pd.read_csv(out / "results.csv").iloc[0]
    summary = json.loads((kept / "summary.json").read_text())
    assert summary["run"] == first["run"]
    assert summary["val_accuracy"] == pytest.approx(first["final_val_accuracy"])
    assert summary["test_accuracy"] == pytest.approx(first["accuracy"])
    assert (kept / "model.pt").read_bytes() == first["run"].encode()
    assert json.loads((kept / "run.json").read_text())["run"]["name"] == first["run"]


def test_the_best_stage_names_a_results_file_without_rank_one(tmp_path, capsys):
    results = tmp_path / "results.csv"
    results.write_text("rank,run\n")
    code = best.main(
        [
            "--results",
            str(results),
            "--run-dirs",
            str(tmp_path),
            "--eval-dirs",
            str(tmp_path),
            "--out-dir",
            str(tmp_path / "best"),
        ]  # fmt: skip
    )
    assert code == 1
    assert f"{results}: no row with rank 1" in capsys.readouterr().err
    assert not (tmp_path / "best").exists()
