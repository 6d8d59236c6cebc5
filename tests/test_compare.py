"""``clusterbench-compare``: results trees of several sites in one report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from clusterbench import compare
from clusterbench.compare import CompareError, SiteRun, differing_keys, match_key, match_runs
from clusterbench.report.tables import environment_table
from test_report import FAKE_RUNS, edit_run_json, make_fake_results, pdf_text


def site_run(site: str, name: str, **config) -> SiteRun:
    base = {"name": name, "dataset": "digits", "workers": 2, "lr": 0.05}
    return SiteRun(site, name, {**base, **config}, Path(site, name), Path(site, "eval", name))


def test_runs_are_matched_by_their_training_settings_not_their_names():
    runs = [
        site_run("east", "a"),
        site_run("west", "a"),
        site_run("west", "renamed", workers=4),
        site_run("east", "other-name", workers=4),
        site_run("east", "b", lr=0.1),
        site_run("west", "b", lr=0.2),
        site_run("west", "only-here", workers=8),
    ]
    groups, unmatched = match_runs(runs)
    assert sorted(sorted(r.label for r in g) for g in groups) == [
        ["east/a", "west/a"],
        ["east/other-name", "west/renamed"],
    ]
    why = {r.label: reason for r, reason in unmatched}
    assert why == {
        "east/b": "differs from west/b in lr",
        "west/b": "differs from east/b in lr",
        "west/only-here": "no run with these training settings on another site",
    }


def test_a_key_missing_from_an_older_run_json_counts_as_its_default():
    assert match_key({"name": "x", "lr": 1}) == match_key(
        {"name": "y", "lr": 1, "max_workers": None}
    )
    newer = {"name": "y", "lr": 1, "lr_schedule": "constant", "grad_compression": "none"}
    assert match_key({"name": "x", "lr": 1}) == match_key(newer)
    assert match_key({"name": "x", "lr": 1}) != match_key({**newer, "grad_compression": "fp16"})
    assert differing_keys({"lr": 1}, {**newer, "lr_schedule": "cosine"}) == ["lr_schedule"]


def test_the_same_site_and_run_twice_is_refused():
    with pytest.raises(CompareError, match=r"runs given twice .*\['east/a'\]"):
        match_runs([site_run("east", "a"), site_run("east", "a")])


def label_site(root: Path, site: str | None) -> None:
    for run_json in (root / "results" / "runs").glob("*/run.json"):
        info = json.loads(run_json.read_text())
        if site is None:
            info.pop("site", None)
        else:
            info["site"] = site
        run_json.write_text(json.dumps(info))


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_two_sites_in_one_comparative_pdf(tmp_path):
    east, west = tmp_path / "east-copy", tmp_path / "west-copy"
    make_fake_results(east)
    make_fake_results(west)
    label_site(east, "east")
    label_site(west, None)  # an older run.json: the directory names the site
    changed = FAKE_RUNS[0]["name"]
    path = west / "results" / "runs" / changed / "run.json"
    info = json.loads(path.read_text())
    info["run"]["lr"] = 0.5
    path.write_text(json.dumps(info))
    out = tmp_path / "cmp" / "compare.pdf"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clusterbench.compare",
            str(east),
            str(west / "results"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_csv(out.with_name("compare.csv"))
    assert set(table["site"]) == {"east", "west-copy"}
    assert changed not in set(table["benchmark"])
    assert len(table) == 2 * (len(FAKE_RUNS) - 1)
    west_rows = table[table["site"] == "west-copy"]
    assert (west_rows["images_per_second_vs_first_site"] > 0).all()
    text = pdf_text(out)
    assert "Sites compared" in text
    assert "Time per epoch and throughput by site" in text
    assert "Runs that could not be matched" in text
    assert f"differs from east/{changed} in lr" in " ".join(text.split())
    runs = pd.read_csv(out.with_name("compare-runs.csv"))
    assert len(runs) == 2 * len(FAKE_RUNS)


SITE_SPEED = {"east": 1.5, "west": 1.0, "north": 0.6}  # east is the fastest everywhere


def site_tree(root: Path, site: str) -> Path:
    """One site's results: the environments cpu (1 worker) and cpu-parallel (2 workers), two
    seeds each, and a hand-written 2-worker run with a smaller batch; ``site`` set in every
    run.json."""
    envs = [(env, w, seed) for env, w in (("cpu", 1), ("cpu-parallel", 2)) for seed in (1, 2)]
    specs = [
        {"name": f"envs--env={env},seed={seed}", "dataset": "digits", "workers": w, "nodes": 1,
         "ips": 900 * w * SITE_SPEED[site] * (1 + 0.1 * seed), "acc": 0.9 + 0.01 * seed}
        for env, w, seed in envs
    ] + [{"name": "two-2w", "dataset": "digits", "workers": 2, "nodes": 1, "batch_size": 64,
          "ips": 1500 * SITE_SPEED[site], "acc": 0.9}]  # fmt: skip
    tree = root / site
    make_fake_results(tree, runs=specs, epochs=4, benchmarks=False)
    for spec in specs:
        name = spec["name"]
        edit_run_json(tree, name, site=site)
        if name.startswith("envs--"):
            env, seed = name.removeprefix("envs--env=").split(",seed=")
            origin = {"name": "envs", "environment": env, "point": {}, "repeat": int(seed) - 1}
            edit_run_json(tree, name, experiment=origin, run={"seed": int(seed)})
    return tree


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_three_sites_are_a_dimension_of_every_page(tmp_path):
    trees = [site_tree(tmp_path, site) for site in SITE_SPEED]
    north = trees[2] / "results"
    (north / "eval" / "two-2w" / "metrics.json").unlink()  # trained, never evaluated
    (north / "report").mkdir()
    (north / "report" / "skipped.csv").write_text(
        "run,experiment,environment,reason\nenvs--env=gpu,envs,gpu,no GPU on north\n"
    )
    out = tmp_path / "cmp" / "compare.pdf"
    assert compare.main([*map(str, trees), "-o", str(out)]) == 0
    runs = pd.read_csv(out.with_name("compare-runs.csv"), keep_default_na=False)
    assert set(runs["site"]) == set(SITE_SPEED) and len(runs) == 14
    # a speed-up is against the same site's 1-worker run, never the fastest site's
    based = runs[runs["baseline_run"] != ""]
    assert len(based) == 12  # all but the batch-64 runs, which have no 1-worker run
    assert (based["baseline_run"].str.split("/").str[0] == based["site"]).all()
    # environments: one row per site, the two seeds its repeats (never six runs of 3 sites)
    runs["point"] = runs["point"].astype(str)
    for col in ("mean_epoch_seconds", "std_epoch_seconds", "images_per_second"):
        runs[col] = pd.to_numeric(runs[col])
    envs = environment_table(runs)
    assert len(envs) == 6 and (envs["repeats"] == 2).all()
    assert set(envs["sd_over"]) == {"repeats"}
    cpu = envs[envs["environment"] == "cpu"].set_index("site")["epoch_seconds"]
    assert cpu["north"] > cpu["west"] > cpu["east"]
    # the sites compared: the two matched runs of east and west (north's was not evaluated)
    table = pd.read_csv(out.with_name("compare.csv"))
    two = table[table["benchmark"] == "two-2w"]
    assert list(two["site"]) == ["east", "west"]
    pages = [" ".join(p.split()) for p in pdf_text(out).split("\f")]
    unmatched = next(p for p in pages if p.startswith("Runs that could not be matched"))
    assert "north/two-2w" in unmatched and "not evaluated, so not compared" in unmatched
    skipped = next(p for p in pages if p.startswith("Skipped runs: 1"))
    assert "north/envs--env=gpu" in skipped and "no GPU on north" in skipped
    env = next(p for p in pages if p.startswith("Execution environments: envs"))
    assert all(f"{site}: cpu" in env for site in SITE_SPEED)
    assert "on each site" in env and "gpu (north/envs--env=gpu):" in env
    repeats = next(p for p in pages if p.startswith("Repeats: envs"))
    assert "site=east, env=cpu" in repeats and "site=north, env=cpu-parallel" in repeats
    scaling = next(p for p in pages if p.startswith("Scaling across workers and nodes"))
    assert all(f"site {site}" in scaling for site in SITE_SPEED)


def test_fewer_than_two_trees_or_no_results_is_an_error(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clusterbench.compare",
            str(tmp_path),
            str(tmp_path / "x"),
            "-o",
            "o.pdf",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "no runs/ (nor results/runs/) here" in proc.stderr


def test_the_warmup_default_is_the_reports(tmp_path, monkeypatch):
    """--warmup-epochs defaults to the config's report.timing_warmup_epochs (one definition)."""
    from clusterbench.config import stage_params

    given = []  # compare.compare's (dirs, output, title, warmup)
    monkeypatch.setattr(compare, "compare", lambda *args: given.append(args) or 0)
    assert compare.main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", "x.pdf"]) == 0
    assert given[0][3] == stage_params("report", {"title": "t"})["timing_warmup_epochs"]
    assert compare.main([str(tmp_path), str(tmp_path), "-o", "x.pdf", "--warmup-epochs", "3"]) == 0
    assert given[1][3] == 3


def dated_run(site: str, name: str, date: str) -> SiteRun:
    return SiteRun(site, name, {"name": name}, Path(site, name), Path(site, "eval", name), date)


def test_a_site_of_several_trees_is_labelled_with_each_trees_date():
    trees = [
        ("before", [dated_run("east", "a", "2026-01-05T09:00:00+01:00")]),
        ("after", [dated_run("east", "a", "2026-02-10T16:30:00+01:00")]),
        ("west", [dated_run("west", "a", "2026-01-05T09:00:00+01:00")]),
    ]
    assert compare.dated_sites(trees) == {
        (0, "east"): "east@2026-01-05",
        (1, "east"): "east@2026-02-10",
        (2, "west"): "west",  # one tree: its site as it is
    }
    same_day = [("am", [dated_run("east", "a", "2026-01-05T09:00:00+01:00")]),
                ("pm", [dated_run("east", "a", "2026-01-05T16:30:00+01:00"),
                              dated_run("east", "b", "2026-01-05T15:00:00+01:00")])]  # fmt: skip
    assert list(compare.dated_sites(same_day).values()) == [
        "east@2026-01-05 09:00",
        "east@2026-01-05 16:30",  # the tree's newest training
    ]
    twice = [("x", same_day[0][1]), ("y", same_day[0][1])]
    assert list(compare.dated_sites(twice).values()) == ["east@x", "east@y"]


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_one_cluster_before_and_after_a_driver_upgrade(tmp_path):
    """The same site's results from two dates are compared as two sites, dated; the second
    tree is 10 % slower on a newer driver."""
    before, after = tmp_path / "before", tmp_path / "after"
    make_fake_results(before, benchmarks=False)
    slower = [{**spec, "ips": spec["ips"] * 0.9} for spec in FAKE_RUNS]
    make_fake_results(after, runs=slower, benchmarks=False)
    for tree, date, driver in ((before, "2026-01-05", "550.54"), (after, "2026-02-10", "560.35")):
        for spec in FAKE_RUNS:
            path = tree / "results" / "runs" / spec["name"] / "run.json"
            info = json.loads(path.read_text())
            info["site"] = "east"
            info["provenance"]["date"] = f"{date}T10:00:00+01:00"
            for host in info["provenance"]["hosts"]:
                host.update(gpus=["NVIDIA H100"], gpu_driver=driver)
            path.write_text(json.dumps(info))
    out = tmp_path / "cmp" / "compare.pdf"
    assert compare.main([str(before), str(after), "-o", str(out)]) == 0
    table = pd.read_csv(out.with_name("compare.csv"))
    assert set(table["site"]) == {"east@2026-01-05", "east@2026-02-10"}
    assert len(table) == 2 * len(FAKE_RUNS)  # every run matched with its twin
    later = table[table["site"] == "east@2026-02-10"]
    assert later["images_per_second_vs_first_site"].between(0.85, 0.95).all()
    runs = pd.read_csv(out.with_name("compare-runs.csv"))
    assert set(runs["gpu_driver"].astype(str)) == {"550.54", "560.35"}
    text = " ".join(pdf_text(out).split())
    assert "east@2026-01-05/digits-2w" in text and "runs given twice" not in text


def run_compare(*args, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "clusterbench.compare", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


def test_the_arguments_and_the_output_path_are_checked_before_any_work(tmp_path):
    """A negative --warmup-epochs (taken as 0 and written as -1 before), an output on a file
    system that cannot be written (an OSError traceback after all the work before) and a
    directory as the output are refused first: the trees given do not even exist."""
    trees = (tmp_path / "nowhere-a", tmp_path / "nowhere-b")
    cases = {
        ("-o", tmp_path / "c.pdf", "--warmup-epochs", "-1"): "--warmup-epochs must be 0 or more",
        ("-o", "/proc/clusterbench/compare.pdf"): "its folder cannot be created (/proc",
        # issue 42: "(/proc: No such file or directory)", of a folder that is there
        ("-o", "/proc/compare.pdf"): "cannot be written (/proc: its file system makes no files",
        ("-o", tmp_path): "a directory; give the PDF file to write",
        ("-o", "~nosuchuser_cb/c.pdf"): "-o: '~nosuchuser_cb/c.pdf' names the home of user",
    }
    for args, message in cases.items():
        proc = run_compare(*trees, *args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert "no runs/" not in proc.stderr  # refused before the trees were read
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing left behind


def test_a_warmup_that_leaves_no_timed_epoch_is_refused_naming_the_epochs(tmp_path):
    east, west = tmp_path / "east", tmp_path / "west"
    make_fake_results(east)
    make_fake_results(west)
    out = tmp_path / "cmp" / "compare.pdf"
    proc = run_compare(east, west, "-o", out, "--warmup-epochs", "100", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--warmup-epochs 100 leaves no timed epoch: the runs have" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
