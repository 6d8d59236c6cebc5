"""``clusterbench-compare``: results trees of several sites in one report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from clusterbench.compare import CompareError, SiteRun, match_key, match_runs
from test_report import FAKE_RUNS, make_fake_results


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


def test_a_key_missing_from_an_older_run_json_counts_as_null():
    assert match_key({"name": "x", "lr": 1}) == match_key(
        {"name": "y", "lr": 1, "max_workers": None}
    )


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
    text = subprocess.run(
        ["pdftotext", "-layout", str(out), "-"], capture_output=True, text=True
    ).stdout
    assert "Sites compared" in text
    assert "Time per epoch and throughput by site" in text
    assert "Runs that could not be matched" in text
    assert f"differs from east/{changed} in lr" in " ".join(text.split())
    runs = pd.read_csv(out.with_name("compare-runs.csv"))
    assert len(runs) == 2 * len(FAKE_RUNS)


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
