"""`make demo`'s pipeline: config/config.yaml as it ships, on the local profile, end to end.

The demo is the two experiment designs clusterbench comes from: execution environments
(cpu, cpu-parallel, gpu; time-boxed), each with both backends (Horovod and DDP), and an lr x
momentum sweep on 2 workers; its report leads with the recommendation and compares backends,
and every run is appended to the history store.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest
from clusterbench import config as cbconfig
from clusterbench.pipeline import comm_jobs
from clusterbench.pipeline.preflight import local_gpus
from conftest import copy_checkout, demo_config, pdf_text, snakemake


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """A copy of the checkout, its own config/config.yaml run as `make demo` runs it."""
    checkout = copy_checkout(tmp_path_factory.mktemp("demo") / "clusterbench")
    shutil.copy(checkout / "config" / "config.yaml", checkout / "config.yaml")  # as shipped
    start = time.monotonic()
    snakemake(checkout, "--profile", str(checkout / "profiles" / "local"), repo=checkout)
    seconds = time.monotonic() - start
    snakemake(
        checkout,
        "--profile",
        str(checkout / "profiles" / "local"),
        "--report",
        str(checkout / "results" / "report" / "report.html"),
        repo=checkout,
    )
    print(f"\nFIGURE make demo's pipeline (after set-up): {seconds:.0f} s")
    return checkout


def expanded() -> dict[str, dict]:
    return {r["name"]: r for r in cbconfig.validate(demo_config())["runs"]}


@pytest.mark.slow
def test_the_demo_trains_every_environment_and_sweep_point(demo: Path):
    runs = expanded()
    res = demo / "results"
    envs = {n for n, r in runs.items() if r["experiment"] == "envs"}
    sweep = {n for n, r in runs.items() if r["experiment"] == "sweep"}
    assert {runs[n]["environment"] for n in envs} == {"cpu", "cpu-parallel", "gpu"}
    assert {runs[n]["backend"] for n in envs} == {"horovod", "ddp"}  # each environment twice
    assert len(envs) == 6
    assert len(sweep) == 4  # 2 lr x 2 momentum
    gpu = {n for n in envs if runs[n]["gpus_per_node"]}
    usable = local_gpus() > 0
    trained = {p.parent.name for p in (res / "runs").glob("*/model.pt")}
    assert trained == (envs | sweep if usable else (envs - gpu) | sweep)
    for name in envs & trained:  # time-boxed: as many epochs as fit in the same 15 s
        info = json.loads((res / "runs" / name / "run.json").read_text())
        assert info["experiment"]["environment"] == runs[name]["environment"]
        assert info["epochs_completed"] >= 1
        assert info["train_seconds"] >= 60 * runs[name]["minutes"]
    for name in sweep:
        info = json.loads((res / "runs" / name / "run.json").read_text())
        assert info["world"]["size"] == 2
        assert set(info["experiment"]["point"]) == {"lr", "momentum"}
    skipped = pd.read_csv(res / "report" / "skipped.csv")
    if usable:
        assert skipped.empty
    else:
        assert sorted(skipped["run"]) == sorted(gpu)
        assert "GPU" in skipped["reason"].iloc[0]


@pytest.mark.slow
def test_the_demo_report_reaches_the_accuracy_and_shows_the_designs(demo: Path):
    res = demo / "results"
    acc = {
        p.parent.name: json.loads(p.read_text())["accuracy"]
        for p in (res / "eval").glob("*/metrics.json")
    }
    assert max(acc.values()) >= 0.95, acc
    pdf = res / "report" / "report.pdf"
    text = pdf_text(pdf)
    flat = " ".join(text.split())
    for page in (
        "Results, best first",
        "Execution environments: envs",
        "Sweep: sweep",
        "Recommendation: the fastest configuration of each workload",
        "History: throughput over time",
    ):
        assert page in flat, page
    # the multi-worker environments' interconnect, per backend, measured by the comm stage
    # (small in the demo): the sweep's 2 workers, and cpu-parallel's with both backends
    assert "The interconnect: bus bandwidth and latency" in flat
    jobs = comm_jobs.config_jobs(cbconfig.validate(demo_config()))
    assert "2w-1n-cpu-horovod" in jobs
    assert {p.parent.name for p in (res / "comm").glob("*/comm.json")} == set(jobs)
    if not local_gpus():
        assert "gpu (envs--env=gpu,backend=" in flat  # the skipped environment, beside its chart
    # the title page leads with the recommendation; the backend page compares the backends
    title = " ".join(text.split("\f")[0].split())
    assert title.index("Recommendation") < title.index("Summary")
    assert "digits / small_cnn: fastest " in title and " ahead of the runner-up (" in title
    assert "First to 95.0 % validation accuracy on digits / small_cnn: " in title
    assert "All runs use the horovod backend" not in flat
    assert re.search(r"ddp / horovod = \d\.\d\dx", flat)
    # every run trained is in the history store, once
    from clusterbench.history import store

    rows = store.read_runs(res / "history.sqlite")
    trained = {p.parent.name for p in (res / "runs").glob("*/model.pt")}
    assert sorted(r["run"] for r in rows) == sorted(trained)
    assert (res / "report" / "report.html").is_file()
    # the best run, chosen on validation, kept with its test accuracy
    summary = json.loads((res / "best" / "summary.json").read_text())
    results = pd.read_csv(res / "report" / "results.csv")
    assert summary["run"] == results["run"].iloc[0]
    assert summary["test_accuracy"] >= 0.95
    assert (res / "best" / "model.pt").stat().st_size > 0
