"""The report's pages and tables for the experiment designs, on synthetic results: a 100-point
sweep over four keys (one with a null value), environments with a matrix, repeats and a
skipped environment, a skipped hand-written run, 12 distinct node counts on three sites and an
elastic run; the sweep heatmaps' tables (clusterbench.report.sweeps); the best run's stage
(clusterbench.best)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from clusterbench import best
from clusterbench.report import inputs, main, sweeps, tables
from clusterbench.report.book import Book
from clusterbench.report.pages import environments, sweep
from clusterbench.report.table_pages import TABLE_ROWS_PER_PAGE
from clusterbench.report.tables import (
    best_run,
    environment_table,
    point_table,
    skipped_table,
    sort_by_validation,
)
from clusterbench.report.theme import theme
from test_report import PARAMS, edit_run_json, make_fake_results, pdf_pages, pdf_text

LRS = [0.01, 0.02, 0.05, 0.1, 0.2]
MOMENTA = [0.0, 0.5, 0.8, 0.9, 0.99]
MINUTES = [None, 0.5]
DECAYS = [0, 0.0005]
SWEEP_KEYS = ("lr", "momentum", "minutes", "weight_decay")
#: environment -> (workers, nodes); each runs lr 0.05 and 0.1, three seeds each
ENVS = {"cpu": (1, 1), "cpu-parallel": (2, 1), "multi-node": (8, 4)}
ENV_LRS = [0.05, 0.1]
NODES = range(1, 13)
SITES = ("east", "west", "north")
#: The best run on validation, by construction (and its test accuracy is not the best).
BEST = "sweep--lr=0.2,momentum=0.9,minutes=null,weight_decay=0.0005"
GPU_REASON = "asks for 1 GPU(s) per node and this machine has none"
SKIPPED = [
    *(
        {"run": f"envs--env=gpu,lr={lr},seed={s}", "experiment": "envs", "environment": "gpu",
         "point": {"lr": lr}, "reason": GPU_REASON}
        for lr in ENV_LRS
        for s in (1, 2, 3)
    ),
    {"run": "too-big", "experiment": None, "environment": None, "point": None,
     "reason": "needs 64 cores and this machine has 2"},
]  # fmt: skip


def design_specs() -> tuple[list[dict], dict, dict]:
    """The runs (make_fake_results specs), their experiment blocks and their sites."""
    specs, origin, site = [], {}, {}
    for values in itertools.product(LRS, MOMENTA, MINUTES, DECAYS):
        point = dict(zip(SWEEP_KEYS, values, strict=True))
        lr, m, minutes, wd = values
        name = "sweep--" + ",".join(f"{k}={'null' if v is None else v}" for k, v in point.items())
        acc = 0.88 + 0.01 * LRS.index(lr) - 0.004 * abs(MOMENTA.index(m) - 3)
        acc += 0.003 * (wd > 0) + 0.002 * (minutes is None)
        specs.append({"name": name, "dataset": "digits", "workers": 2, "nodes": 1,
                      "ips": 2000 + 50 * LRS.index(lr), "acc": acc})  # fmt: skip
        origin[name] = {"name": "sweep", "environment": None, "point": point, "repeat": 0}
        site[name] = "east"
    for (env, (workers, nodes)), lr, rep in itertools.product(ENVS.items(), ENV_LRS, range(3)):
        name = f"envs--env={env},lr={lr},seed={rep + 1}"
        specs.append({"name": name, "dataset": "digits", "workers": workers, "nodes": nodes,
                      "ips": 900 * workers * (1 + 0.1 * rep), "acc": 0.85 + lr / 10})  # fmt: skip
        origin[name] = {"name": "envs", "environment": env, "point": {"lr": lr}, "repeat": rep}
        site[name] = "east"
    for i, nodes in enumerate(NODES):
        name = f"scale-{nodes:02d}n"
        specs.append({"name": name, "dataset": "digits", "workers": 2 * nodes, "nodes": nodes,
                      "ips": 1000 * nodes, "acc": 0.86})  # fmt: skip
        site[name] = SITES[i % 3]
    for i, s in enumerate(SITES):  # a 1-worker baseline per site, east's the fastest
        name = f"scale-1w-{s}"
        specs.append({"name": name, "dataset": "digits", "workers": 1, "nodes": 1,
                      "ips": 800 - 100 * i, "acc": 0.86})  # fmt: skip
        site[name] = s
    specs.append({"name": "elastic", "dataset": "digits", "workers": 3, "nodes": 1,
                  "ips": 1500, "acc": 0.87})  # fmt: skip
    site["elastic"] = "west"
    return specs, origin, site


def make_elastic(root: Path) -> None:
    """The elastic run: 3 ranks, then 2 after a rank failed in epoch 3."""
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


@pytest.fixture(scope="module")
def designs(tmp_path_factory) -> tuple[dict, Path]:
    root = tmp_path_factory.mktemp("designs")
    specs, origin, site = design_specs()
    fake = make_fake_results(root, runs=specs, epochs=4, benchmarks=False)
    for spec in specs:
        name = spec["name"]
        run = {"minutes": 0.25} if name.startswith("envs--") else {}
        edit_run_json(root, name, experiment=origin.get(name), site=site[name], run=run)
    make_elastic(root)
    # the best test accuracy, on a run far from the best on validation
    metrics = root / "results" / "eval" / "scale-1w-north" / "metrics.json"
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "accuracy": 0.999}))
    out = root / "report"
    argv = ["--params", json.dumps(PARAMS), "--config-hash", "abc", "--skipped",
            json.dumps(SKIPPED), "--run-dirs", *fake["run_dirs"], "--eval-dirs",
            *fake["eval_dirs"], "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    return fake, out


@pytest.fixture(scope="module")
def design_runs(designs) -> pd.DataFrame:
    """The report's runs table of the design runs (as the report made it, not read back)."""
    fake, _ = designs
    dirs = zip(fake["run_dirs"], fake["eval_dirs"], strict=True)
    runs = [inputs.load_run(Path(r), Path(e)) for r, e in dirs]
    return tables.runs_table(runs, PARAMS["timing_warmup_epochs"])


def page_texts(designs) -> list[str]:
    _, out = designs
    return [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")[:-1]]


@pytest.mark.slow  # the 134-run report (about 16 s)
def test_every_design_page_renders_with_its_parts(designs):
    _, out = designs
    pages = page_texts(designs)
    assert len(pages) == pdf_pages(out / "report.pdf")
    n_runs = len(design_specs()[0])
    results = [p for p in pages if p.startswith("Results, best first")]
    assert len(results) >= n_runs / TABLE_ROWS_PER_PAGE
    assert results[-1].startswith(f"Results, best first ({len(results)} of {len(results)})")
    assert f" {n_runs} scale-" in results[-1]  # the last rank, on the last results page
    assert "minutes=null" in results[0]  # a null swept value, as the run name has it
    # the skipped runs, every one with its reason, right after the results
    skipped = pages.index(next(p for p in pages if p.startswith("Skipped runs: 7")))
    assert pages[skipped - 1].startswith("Results, best first")
    assert "too-big" in pages[skipped] and "needs 64 cores and this machine has 2" in pages[skipped]
    assert pages[skipped].count("asks for 1 GPU(s) per node") == 6
    # environments: compared at the best run's point, sd over the repeats, the time box
    env = next(p for p in pages if p.startswith("Execution environments: envs"))
    assert "All at the best run's swept values (lr=0.1)" in env
    assert "sd over the repeats" in env and "in its time box" in env
    assert env.count("3 repeats") == 3
    assert "gpu (envs--env=gpu,lr=0.05,seed=1):" in env  # the skipped beside the chart
    # the sweep: one heatmap pair per pair of swept keys, the others held at the best run's
    sweeps_ = [p for p in pages if p.startswith("Sweep: sweep: ")]
    pairs = list(itertools.combinations(sorted(SWEEP_KEYS), 2))  # as the points name them
    assert len(sweeps_) == len(pairs) == 6
    best = {"lr": "0.2", "minutes": "null", "momentum": "0.9", "weight_decay": "0.0005"}
    for page, (a, b) in zip(sweeps_, pairs, strict=True):
        assert page.startswith(f"Sweep: sweep: {a} x {b}"), page[:80]
        held = ", ".join(f"{k}={v}" for k, v in best.items() if k not in (a, b))
        assert f"held at the best run's values: {held}." in page
    assert "0.5 null minutes" in sweeps_[0]  # lr x minutes: null is a column of its own
    assert any(p.startswith("Sweep: envs") for p in pages)  # one key (lr), bars
    assert any(p.startswith("Repeats: envs") for p in pages)
    for title in ("Elastic runs: world size over the epochs", "Scaling across workers and nodes"):
        assert any(p.startswith(title) for p in pages), title
    for png in ("environments-envs", "sweep-sweep-lr-x-momentum", "sweep-envs", "repeats-envs"):
        assert (out / "figures" / f"{png}.png").is_file(), png


@pytest.mark.slow  # the 134-run report (about 16 s)
def test_results_csv_is_sorted_on_validation_and_names_the_origin(designs):
    _, out = designs
    results = pd.read_csv(out / "results.csv", keep_default_na=False)
    specs, origin, site = design_specs()
    assert len(results) == len(specs)
    assert list(results["rank"]) == list(range(1, len(specs) + 1))
    assert pd.to_numeric(results["final_val_accuracy"]).is_monotonic_decreasing
    assert results["run"].iloc[0] == BEST
    assert results.loc[results["accuracy"].idxmax(), "run"] == "scale-1w-north"
    sweep = results[results["experiment"] == "sweep"]
    assert len(sweep) == 100
    points = {json.dumps(json.loads(p), sort_keys=True) for p in sweep["point"]}
    assert len(points) == 100
    assert {json.loads(p)["minutes"] for p in sweep["point"]} == {None, 0.5}
    assert set(results.loc[results["experiment"] == "envs", "environment"]) == set(ENVS)
    assert dict(zip(results["run"], results["site"], strict=True)) == site
    assert pd.to_numeric(results["nodes"]).nunique() == len(NODES)
    assert pd.read_csv(out / "skipped.csv")["run"].tolist() == [s["run"] for s in SKIPPED]


@pytest.mark.slow  # the 134-run report (about 16 s)
def test_design_tables_count_points_repeats_and_sites(design_runs):
    sweep = point_table(design_runs, "sweep")
    assert len(sweep) == 100 and (sweep["repeats"] == 1).all()
    envs = point_table(design_runs, "envs")
    assert len(envs) == len(ENVS) * len(ENV_LRS)
    assert (envs["repeats"] == 3).all()
    table = environment_table(design_runs)
    assert len(table) == len(ENVS) * len(ENV_LRS)
    assert set(table["sd_over"]) == {"repeats"} and table["time_boxed"].all()
    for r in table.itertuples():
        runs = design_runs[(design_runs["environment"] == r.environment)
                           & (design_runs["point"] == r.point)]  # fmt: skip
        assert r.epoch_seconds_sd == pytest.approx(runs["mean_epoch_seconds"].std())
        assert r.epoch_seconds == pytest.approx(runs["mean_epoch_seconds"].mean())
    # a scaling baseline is the fastest 1-worker run of the same site, never another site's
    site = dict(zip(design_runs["run"], design_runs["site"], strict=True))
    scale = design_runs[design_runs["run"].str.startswith("scale-")].set_index("run")
    for name, r in scale.iterrows():
        assert site[r["baseline_run"]] == r["site"], name
        if r["site"] != "east":  # east's 1-worker runs are faster: never borrowed
            assert r["baseline_run"] == f"scale-1w-{r['site']}", name


@pytest.mark.slow  # the 134-run report (about 16 s)
def test_environment_bars_beyond_the_cap_are_announced(design_runs, monkeypatch):
    monkeypatch.setattr(environments, "MAX_BARS", 2)
    texts = draw(lambda pages: environments.environment_pages(pages, design_runs, SKIPPED))
    assert "The first 2 of 3 environments." in texts


def draw(page_fn, runs_df: pd.DataFrame | None = None, warmup: int = 1) -> str:
    """Every text of the pages ``page_fn(pages)`` makes, joined (no PDF: the figures only)."""
    from matplotlib.text import Text

    matplotlib.use("Agg")
    params = inputs.ReportParams("t", "", "h", warmup)
    frame = runs_df if runs_df is not None else pd.DataFrame({"run": [], "dataset": [],
        "model": [], "workers": [], "nodes": []})  # fmt: skip
    with matplotlib.rc_context(theme()):
        pages = Book(params, frame)
        page_fn(pages)
        texts = [t.get_text() for page in pages.pages for t in page.figure.findobj(Text)]
    return " ".join(" ".join(texts).split())


def frame(rows: list[dict], experiment: str = "s") -> pd.DataFrame:
    """A runs table of the columns the design tables read: ``rows`` give ``run``, ``point``
    (a dict) and what differs from the defaults."""
    base = {"experiment": experiment, "environment": "", "site": "", "repeat": 0,
            "dataset": "digits", "model": "small_cnn",
            "final_val_accuracy": 0.9, "final_val_loss": 0.3, "accuracy": 0.9,
            "mean_epoch_seconds": 1.0, "std_epoch_seconds": 0.1, "images_per_second": 10.0,
            "epochs": 5, "workers": 1, "nodes": 1, "gpus_per_node": 0, "minutes": np.nan,
            "timed_epochs": 4}  # fmt: skip
    out = [{**base, **r, "point": json.dumps(r.get("point", {}), sort_keys=True)} for r in rows]
    return pd.DataFrame(out)


def test_points_average_their_repeats():
    df = frame(
        [
            {"run": "a1", "point": {"lr": 0.1}, "final_val_accuracy": 0.9,
             "mean_epoch_seconds": 1.0},
            {"run": "a2", "point": {"lr": 0.1}, "final_val_accuracy": 0.8,
             "mean_epoch_seconds": 3.0},
            {"run": "b1", "point": {"lr": 0.2}, "final_val_accuracy": 0.7},
        ]
    )  # fmt: skip
    table = point_table(df, "s")
    a = table[table["lr"] == 0.1].iloc[0]
    assert a["repeats"] == 2
    assert a["val_accuracy"] == pytest.approx(0.85)
    assert a["epoch_seconds"] == pytest.approx(2.0)
    assert a["val_accuracy_sd"] == pytest.approx(0.0707107, rel=1e-5)


def test_two_sites_are_never_one_points_repeats():
    df = frame(
        [
            {"run": "east/a", "site": "east", "point": {"lr": 0.1}, "mean_epoch_seconds": 1.0},
            {"run": "west/a", "site": "west", "point": {"lr": 0.1}, "mean_epoch_seconds": 3.0},
        ]
    )
    table = point_table(df, "s")
    assert list(table["repeats"]) == [1, 1]
    assert list(table["point_label"]) == ["site=east, lr=0.1", "site=west, lr=0.1"]
    envs = environment_table(df.assign(environment="cpu"))
    assert list(envs["site"]) == ["east", "west"]
    assert list(envs["epoch_seconds"]) == [1.0, 3.0]
    assert list(envs["sd_over"]) == ["epochs", "epochs"]


def test_environment_sd_is_over_repeats_or_labelled_as_over_epochs():
    df = frame(
        [
            {"run": "cpu-1", "environment": "cpu", "mean_epoch_seconds": 1.0, "repeat": 0},
            {"run": "cpu-2", "environment": "cpu", "mean_epoch_seconds": 2.0, "repeat": 1},
            {"run": "gpu-1", "environment": "gpu", "mean_epoch_seconds": 0.5,
             "std_epoch_seconds": 0.05},
        ]
    )  # fmt: skip
    table = environment_table(df).set_index("environment")
    assert table.loc["cpu", "sd_over"] == "repeats"
    assert table.loc["cpu", "epoch_seconds_sd"] == pytest.approx(np.std([1.0, 2.0], ddof=1))
    assert table.loc["cpu", "repeats"] == 2
    assert table.loc["gpu", "sd_over"] == "epochs"
    assert table.loc["gpu", "epoch_seconds_sd"] == pytest.approx(0.05)
    assert not table["time_boxed"].any()
    texts = draw(lambda pages: environments.environment_pages(pages, df, []), df)
    assert "time box" not in texts  # no run had minutes
    assert "1 run: sd over epochs" in texts and "2 repeats" in texts
    assert "(each bar's label says which)" in texts
    boxed = df.assign(minutes=0.5)
    texts = draw(lambda pages: environments.environment_pages(pages, boxed, []), boxed)
    assert "in its time box" in texts


def sweep_frame(times: dict | None = None) -> pd.DataFrame:
    """A 2 x 2 sweep of lr and minutes (one of them null), each point on cpu and gpu; the best
    run is lr=0.2, minutes=null on gpu. ``times``: (lr, minutes) -> time per epoch on gpu."""
    rows = []
    for lr, minutes, env in itertools.product([0.1, 0.2], [None, 0.5], ["cpu", "gpu"]):
        acc = 0.8 + lr / 2 + 0.01 * (minutes is None) + 0.005 * (env == "gpu")
        sec = (times or {}).get((lr, minutes), 1.0) if env == "gpu" else 5.0
        rows.append({"run": f"s--env={env},lr={lr},minutes={minutes}", "environment": env,
                     "point": {"lr": lr, "minutes": minutes}, "final_val_accuracy": acc,
                     "mean_epoch_seconds": sec})  # fmt: skip
    return frame(rows)


def test_a_sweep_grid_keeps_null_and_holds_the_environment_at_the_best_run():
    df = sweep_frame({(0.1, 0.5): np.nan, (0.2, None): 2.0})
    table = point_table(df, "s")
    assert len(table) == 8  # null kept: 2 x 2 points x 2 environments
    [pair] = sweeps.pairs(df, "s", table)
    assert (pair.rows, pair.cols, pair.held) == ("lr", "minutes", {"environment": "gpu"})
    assert sweeps.held_text(pair.held) == "env=gpu"
    acc = sweeps.grid(table, pair, "val_accuracy")
    sec = sweeps.grid(table, pair, "epoch_seconds")
    assert list(acc.columns) == list(sec.columns) == ["0.5", "null"]
    assert list(acc.index) == list(sec.index) == ["0.1", "0.2"]
    assert sweeps.best_cell(acc) == (1, 1)  # lr=0.2, minutes=null: where the best run is
    assert sec.loc["0.2", "null"] == 2.0  # gpu's time, not averaged with cpu's 5.0
    assert np.isnan(sec.loc["0.1", "0.5"]) and sec.notna().sum().sum() == 3


def test_pairs_of_more_swept_keys_than_the_cap_are_named():
    keys = ["a", "b", "c", "d", "e"]
    rows = [
        {"run": f"r{i}", "point": dict(zip(keys, values, strict=True)),
         "final_val_accuracy": 0.5 + i / 100}
        for i, values in enumerate(itertools.product([1, 2], repeat=5))
    ]  # fmt: skip
    df = frame(rows)
    table = point_table(df, "s")
    every = sweeps.pairs(df, "s", table)
    assert len(every) == 10 > sweeps.MAX_PAIRS
    assert every[0].held == {"c": 2, "d": 2, "e": 2}  # the best run: the last, all 2
    texts = draw(lambda pages: sweep.sweep_pages(pages, df), df)
    assert "Sweep: s: a x b (1 of 6)" in texts and "(6 of 6)" in texts
    assert "10 pairs of swept keys; drawn: the first 6; left out: b x e, c x d, c x e, d x e" in (
        texts
    )


def test_a_sweep_page_without_any_time_says_so():
    df = sweep_frame({k: np.nan for k in itertools.product([0.1, 0.2], [None, 0.5])})
    texts = draw(lambda pages: sweep.sweep_pages(pages, df), df)
    assert "No time per epoch: no run here has an epoch after the 1 warm-up epoch" in texts
    assert "validation accuracy (%)" in texts  # the accuracy heatmap is still drawn


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_a_sweep_without_timed_epochs_renders(tmp_path: Path):
    """epochs: 1 with timing_warmup_epochs: 1: no time per epoch anywhere; the report is made
    and its pages say so."""
    specs = [
        {"name": f"s--env=cpu,lr={lr},momentum={m}", "dataset": "digits", "workers": 1,
         "nodes": 1, "ips": 1000, "acc": 0.7 + lr / 2 + (m or 0) / 20}
        for lr in (0.1, 0.2) for m in (None, 0.9)
    ]  # fmt: skip
    fake = make_fake_results(tmp_path, runs=specs, epochs=1, benchmarks=False)
    for spec in specs:
        lr, m = spec["name"].split("lr=")[1].split(",momentum=")
        point = {"lr": float(lr), "momentum": None if m == "None" else float(m)}
        edit_run_json(tmp_path, spec["name"], experiment={"name": "s", "environment": "cpu",
                      "point": point, "repeat": 0})  # fmt: skip
    out = tmp_path / "report"
    argv = ["--params", json.dumps(PARAMS), "--config-hash", "abc", "--out-dir", str(out)]
    argv += ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    assert main(argv) == 0
    text = " ".join(pdf_text(out / "report.pdf").split())
    assert "Sweep: s: lr x momentum" in text
    assert "No time per epoch: no run here has an epoch" in text  # the heatmap's place
    assert "No time per epoch: no run of these environments has an epoch" in text


def test_skipped_table_names_every_skipped_run():
    table = skipped_table(SKIPPED)
    assert list(table["run"]) == [s["run"] for s in SKIPPED]
    assert table["point"].iloc[0] == "lr=0.05"
    assert table.iloc[-1][["experiment", "environment", "point"]].tolist() == ["", "", ""]


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


@pytest.mark.slow  # the 134-run report (about 16 s)
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


@pytest.mark.slow  # the 134-run report (about 16 s)
def test_an_elastic_runs_resets_and_their_time_are_on_its_page(designs, design_runs):
    row = design_runs.loc[design_runs["run"] == "elastic"].iloc[0]
    assert row["elastic"] and row["world_sizes"] == "3 2"
    assert row["resets"] == 1 and row["reset_seconds"] == 1.5
    (page,) = [p for p in page_texts(designs) if p.startswith("Elastic runs: world size")]
    assert "elastic (1 reset(s), 1.5 s in all)" in page
