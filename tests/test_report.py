"""Tests of stage 5 (clusterbench.report, clusterbench.core.provenance) on a realistic fake result
set
written to disk in the formats of the train and evaluate stages (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clusterbench.config import EXIT_BAD_SETTINGS
from clusterbench.core import provenance
from clusterbench.report import inputs, main, tables, theme
from clusterbench.report.book import footer_text
from clusterbench.report.charts import node_marker
from clusterbench.report.layout import PAGE_SIZE
from clusterbench.report.pages import scaling
from clusterbench.report.text import commit_text, shorten_text, text_width, wrap_text
from conftest import pdf_text

REPO = Path(__file__).resolve().parent.parent

#: The default fake result set: digits on 1 and 2 workers, on 4 workers over 2 nodes (horovod),
#: digits on 2 workers with ddp (no 1-worker ddp run: no baseline) and MNIST (no 1-worker run).
FAKE_RUNS = [
    {"name": "digits-1w", "dataset": "digits", "workers": 1, "nodes": 1, "ips": 2400, "acc": 0.962},
    {"name": "digits-2w", "dataset": "digits", "workers": 2, "nodes": 1, "ips": 4300, "acc": 0.971},
    {
        "name": "digits-4w-2n",
        "dataset": "digits",
        "workers": 4,
        "nodes": 2,
        "ips": 6900,
        "acc": 0.958,
    },
    {
        "name": "digits-2w-ddp",
        "dataset": "digits",
        "workers": 2,
        "nodes": 1,
        "ips": 4700,
        "acc": 0.969,
        "backend": "ddp",
    },
    {"name": "mnist-2w", "dataset": "mnist", "workers": 2, "nodes": 1, "ips": 1800, "acc": 0.987},
]
TRAIN_SIZE = {"digits": 1150, "mnist": 54000}
TEST_SIZE = {"digits": 360, "mnist": 10000}
CLASSES = {"digits": [str(i) for i in range(10)], "mnist": [str(i) for i in range(10)]}
#: The fake runs' training hardware and software (a spec may override cpu_model and torch).
FAKE_CPU = "Fake Xeon Gold 6330 @ 2.00GHz"
FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"
BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"


def _hms(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def write_bench(path: Path, seconds: float, rss: float | None, rng) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rss_cols = (
        ["NA"] * 4
        if rss is None
        else [f"{rss:.2f}", f"{rss * 3.1:.2f}", f"{rss * 0.9:.2f}", f"{rss * 0.95:.2f}"]
    )
    row = [f"{seconds:.4f}", _hms(seconds), *rss_cols]
    row += [
        f"{rng.uniform(0, 50):.2f}",
        f"{rng.uniform(0, 20):.2f}",
        "87.50",
        f"{seconds * 0.9:.2f}",
    ]
    path.write_text(BENCH_HEADER + "\n" + "\t".join(row) + "\n")


def make_confusion(n: int, acc: float, k: int, rng) -> np.ndarray:
    """A k-class confusion matrix with ``n`` samples and accuracy exactly round(n*acc)/n."""
    support = np.full(k, n // k)
    support[: n % k] += 1
    cm = np.zeros((k, k), dtype=np.int64)
    errors = n - round(n * acc)
    err_per_class = rng.multinomial(errors, support / n)
    for i in range(k):
        e = min(err_per_class[i], support[i])
        cm[i, i] = support[i] - e
        wrong = rng.multinomial(e, np.full(k - 1, 1 / (k - 1)))
        cm[i, [j for j in range(k) if j != i]] = wrong
    return cm


def make_fake_results(
    root: Path, runs: list[dict] | None = None, epochs: int = 15, benchmarks: bool = True
) -> dict:
    """Write run/eval/benchmark files for ``runs`` (default FAKE_RUNS) under ``root/results``.

    Returns the command-line lists (``run_dirs``, ``eval_dirs``, ``benchmarks``) and the
    expected per-run values (``expected``: name -> dict).
    """
    rng = np.random.default_rng(42)
    runs = FAKE_RUNS if runs is None else runs
    res = root / "results"
    out = {"run_dirs": [], "eval_dirs": [], "benchmarks": [], "expected": {}}
    t0 = 1_760_000_000.0
    for spec in runs:
        name, ds, workers = spec["name"], spec["dataset"], spec["workers"]
        scaling = spec.get("batch_scaling", "global")
        batch_size = spec.get("batch_size", 128 if scaling == "global" else 64)
        global_batch = batch_size * (workers if scaling == "per_worker" else 1)
        lr = 0.05
        effective_lr = lr * (workers if scaling == "per_worker" else 1)
        cfg = {
            "name": name,
            "dataset": ds,
            "model": spec.get("model", "small_cnn"),
            "workers": workers,
            "nodes": spec["nodes"],
            "gpus_per_node": 0,
            "epochs": epochs,
            "minutes": None,
            "batch_size": batch_size,
            "lr": lr,
            "momentum": 0.9,
            "weight_decay": 0.0005,
            "warmup_epochs": 1,
            "seed": 1,
            "backend": spec.get("backend", "horovod"),
            "bn": spec.get("bn", "aggregate"),
            "batch_scaling": scaling,
            "deterministic": spec.get("deterministic", False),
            "precision": "fp32",
            "channels_last": False,
        }
        run_dir, eval_dir = res / "runs" / name, res / "eval" / name
        run_dir.mkdir(parents=True)
        eval_dir.mkdir(parents=True)
        lines, seconds, ips_all = [], [], []
        rate, floor = 0.6 / workers**0.3, (1 - spec["acc"]) * 0.8  # bigger batches learn slower
        for e in range(1, epochs + 1):
            ips = spec["ips"] * rng.normal(1.0, 0.03) * (0.75 if e == 1 else 1.0)
            sec = TRAIN_SIZE[ds] / ips
            seconds.append(sec)
            ips_all.append(ips)
            t0 += sec
            lines.append(
                {
                    "epoch": e,
                    "train_loss": 2.3 * np.exp(-rate * e) + floor + rng.uniform(0, 0.01),
                    "val_loss": 2.0 * np.exp(-rate * e) + 2 * floor,
                    "val_accuracy": min(0.999, spec["acc"] - 0.6 * np.exp(-1.1 * rate * e)),
                    "epoch_seconds": sec,
                    "images_per_second": ips,
                    "workers": workers,
                    "lr": effective_lr * min(1.0, e / 1),
                    "time": datetime.fromtimestamp(t0, UTC).isoformat(timespec="milliseconds"),
                    "world_size": workers,
                    "global_batch": global_batch,
                }
            )
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        hosts = spec.get("hosts") or [f"node{i:02d}" for i in range(1, spec["nodes"] + 1)]
        run_json = {
            "run": cfg,
            "world": {
                "size": workers,
                "hosts": [hosts[i % len(hosts)] for i in range(workers)],
                "device": spec.get("device", "cpu"),
                "gpus": 0,
                # a run.json from before provenance names the scheduler "launcher" (old key)
                ("scheduler" if spec.get("provenance", True) else "launcher"): (
                    "slurm" if spec["nodes"] > 1 else "local"
                ),
                "backend": cfg["backend"],
            },
            "effective": {
                "global_batch": global_batch,
                "lr": effective_lr,
                "batch_scaling": scaling,
            },
            "epochs_completed": epochs,
            "train_seconds": sum(seconds) + 4.0,
            "versions": {"torch": "2.13.0", "horovod": "0.28.1", "python": "3.11.7"},
        }
        if spec.get("provenance", True):
            run_json["provenance"] = fake_provenance(spec, hosts, workers)
            run_json["versions"] = run_json["provenance"]["versions"]
        (run_dir / "run.json").write_text(json.dumps(run_json))
        (run_dir / "model.pt").write_bytes(b"not read by the report")

        names = spec.get("classes", CLASSES[ds])
        cm = make_confusion(TEST_SIZE[ds], spec["acc"], len(names), rng)
        tp = np.diag(cm)
        precision, recall = tp / cm.sum(0), tp / cm.sum(1)
        f1 = 2 * precision * recall / (precision + recall)
        pd.DataFrame(cm, index=pd.Index(names, name="true"), columns=names).to_csv(
            eval_dir / "confusion.csv"
        )
        pd.DataFrame(
            {
                "class": names,
                "precision": precision,
                "recall": recall,
                "f1": f1,
                "support": cm.sum(1),
            }
        ).to_csv(eval_dir / "per_class.csv", index=False)
        n = int(cm.sum())
        metrics = {
            "run": name,
            "dataset": ds,
            "split": "test",
            "n": n,
            "accuracy": float(np.trace(cm) / n),
            "loss": float(0.05 + (1 - spec["acc"]) * 3),
            "macro_precision": float(precision.mean()),
            "macro_recall": float(recall.mean()),
        }
        (eval_dir / "metrics.json").write_text(json.dumps(metrics))
        out["run_dirs"].append(str(run_dir))
        out["eval_dirs"].append(str(eval_dir))
        out["expected"][name] = {
            "accuracy": metrics["accuracy"],
            "workers": workers,
            "nodes": spec["nodes"],
            "seconds": seconds,
            "ips": ips_all,
            "global_batch": global_batch,
            "effective_lr": effective_lr,
            "train_seconds": run_json["train_seconds"],
        }
        if benchmarks:
            bench = res / "benchmarks"
            write_bench(bench / "train" / f"{name}.tsv", sum(seconds) + 9, 310 * workers, rng)
            write_bench(bench / "evaluate" / f"{name}.tsv", rng.uniform(3, 9), 420, rng)
    if benchmarks:
        bench = res / "benchmarks"
        for ds in dict.fromkeys(spec["dataset"] for spec in runs):
            size = TRAIN_SIZE[ds] / 1000
            write_bench(bench / "download" / f"{ds}.tsv", 0.4 + size * 0.2, None, rng)
            write_bench(bench / "preprocess" / f"{ds}.tsv", 1.2 + size * 0.3, 95 + size * 4, rng)
        out["benchmarks"] = [str(p) for p in sorted(bench.rglob("*.tsv"))]
    return out


def edit_run_json(root: Path, name: str, **changes) -> None:
    """Change a fake run's run.json: its top-level keys, and ``run=`` its training slice's."""
    path = root / "results" / "runs" / name / "run.json"
    info = json.loads(path.read_text())
    run = changes.pop("run", {})
    info.update(changes)
    info["run"].update(run)
    path.write_text(json.dumps(info))


def fake_provenance(spec: dict, hosts: list[str], workers: int) -> dict:
    """run.json's provenance of a fake run: ranks round-robin over ``hosts``."""
    return {
        "date": "2025-10-09T10:00:00+00:00",
        "git": {"commit": spec.get("commit", FAKE_COMMIT), "dirty": spec.get("dirty", False)},
        "versions": {
            "python": "3.11.7",
            "torch": spec.get("torch", "2.13.0"),
            "horovod": "0.28.1",
            "numpy": "2.4.6",
        },
        "hosts": [
            {
                "host": host,
                "node": host,
                "platform": "Linux-6.1-x86_64",
                "cpu_model": spec.get("cpu_model", FAKE_CPU),
                "cpu_cores": {"logical": 56, "physical": 28},
                "gpus": spec.get("gpus", []),
                "gpu_driver": spec.get("gpu_driver"),
                "ranks": list(range(i, workers, len(hosts))),
            }
            for i, host in enumerate(hosts)
        ],
    }


PARAMS = {
    "title": "Cluster benchmark: digits and MNIST",
    "author": "QA",
    "timing_warmup_epochs": 1,
}
CONFIG_HASH = "3fa9c01d2e7b"


def run_report(
    fake: dict, out_dir: Path, params: dict = PARAMS, benchmarks=None, config_hash=CONFIG_HASH
) -> int:
    bench = fake["benchmarks"] if benchmarks is None else benchmarks
    argv = ["--params", json.dumps(params), "--config-hash", config_hash]
    argv += ["--run-dirs", *fake["run_dirs"]]
    argv += ["--eval-dirs", *fake["eval_dirs"], "--benchmarks", *bench, "--out-dir", str(out_dir)]
    return main(argv)


def pdf_pages(path: Path) -> int:
    """Page count from the PDF's page objects (matplotlib writes them uncompressed)."""
    return len(re.findall(rb"/Type\s*/Page\b", path.read_bytes()))


@pytest.fixture
def fake(tmp_path: Path) -> dict:
    """A fresh fake result set for a test that modifies it."""
    return make_fake_results(tmp_path)


@pytest.fixture(scope="module")
def default_report(tmp_path_factory) -> tuple[dict, Path]:
    """The report of the default fake result set, rendered once for the read-only tests."""
    root = tmp_path_factory.mktemp("default")
    fake = make_fake_results(root)
    out = root / "report"
    assert run_report(fake, out) == 0
    return fake, out


EXPECTED_FIGURES = {
    "recommendation.png",
    "epoch_time.png",
    "throughput.png",
    "scaling.png",
    "backends.png",
    "training_curves.png",
    "confusion_best.png",
    "benchmarks.png",
}
#: Page numbers (0-based) of the sections in a report with one runs-table page.
PAGE = {
    "title": 0,
    "recommendation": 1,
    "results": 2,
    "runs": 3,
    "provenance": 4,
    "epoch_time": 5,
    "throughput": 6,
    "scaling": 7,
    "backends": 8,
    "curves": 9,
    "confusion": 10,
    "benchmarks": 11,
}
N_PAGES = len(PAGE)


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_report_writes_all_outputs(default_report):
    _, out = default_report
    assert {p.name for p in out.iterdir()} == {
        "report.pdf",
        "runs.csv",
        "epochs.csv",
        "benchmarks.csv",
        "skipped.csv",
        "results.csv",
        "scaling_model.csv",
        "captions.rst",
        "figures",
    }
    assert (out / "skipped.csv").read_text() == "run,experiment,environment,reason\n"
    assert {p.name for p in (out / "figures").iterdir()} == EXPECTED_FIGURES
    for png in (out / "figures").iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # title, recommendation, runs table, provenance table, 7 sections
    assert pdf_pages(out / "report.pdf") == N_PAGES
    if shutil.which("pdfinfo"):
        info = subprocess.run(["pdfinfo", str(out / "report.pdf")], capture_output=True, text=True)
        assert re.search(rf"Pages:\s+{N_PAGES}\b", info.stdout)
        assert "Cluster benchmark: digits and MNIST" in info.stdout
        assert re.search(r"Page size:\s+841\.\d+ x 595\.\d+ pts", info.stdout)  # A4 landscape


def test_runs_csv_sorted_by_accuracy_with_values(default_report):
    fake, out = default_report
    runs = pd.read_csv(out / "runs.csv")
    exp = fake["expected"]
    assert list(runs["run"]) == sorted(exp, key=lambda n: -exp[n]["accuracy"])
    assert list(runs["run"]) == [
        "mnist-2w",
        "digits-2w",
        "digits-2w-ddp",
        "digits-1w",
        "digits-4w-2n",
    ]
    runs = runs.set_index("run")
    for name, e in exp.items():
        row = runs.loc[name]
        assert row["accuracy"] == pytest.approx(e["accuracy"])
        assert row["workers"] == e["workers"] and row["nodes"] == e["nodes"]
        assert row["epochs"] == 15
        # timing: epoch 1 (the warm-up, 25 % slower in the fake data) is left out
        assert row["timing_warmup_epochs"] == 1 and row["timed_epochs"] == 14
        assert row["mean_epoch_seconds"] == pytest.approx(np.mean(e["seconds"][1:]))
        assert row["mean_epoch_seconds"] != pytest.approx(np.mean(e["seconds"]), rel=1e-3)
        assert row["std_epoch_seconds"] == pytest.approx(np.std(e["seconds"][1:], ddof=1))
        assert row["images_per_second"] == pytest.approx(np.mean(e["ips"][1:]))
        assert row["std_images_per_second"] == pytest.approx(np.std(e["ips"][1:], ddof=1))
        assert row["train_seconds"] == pytest.approx(e["train_seconds"])
    # speed-up against the 1-worker run of the same series; none for MNIST (no 1-worker run)
    base = runs.loc["digits-1w", "images_per_second"]
    assert runs.loc["digits-1w", "speedup"] == pytest.approx(1.0)
    assert runs.loc["digits-4w-2n", "speedup"] == pytest.approx(
        np.mean(exp["digits-4w-2n"]["ips"][1:]) / base
    )
    assert runs.loc["digits-4w-2n", "efficiency"] == pytest.approx(
        runs.loc["digits-4w-2n", "speedup"] / 4
    )
    assert runs.loc["digits-2w", "baseline_run"] == "digits-1w"
    for name in ("mnist-2w", "digits-2w-ddp"):  # the ddp run does not borrow horovod's baseline
        assert pd.isna(runs.loc[name, "speedup"]) and pd.isna(runs.loc[name, "efficiency"])
        assert pd.isna(runs.loc[name, "baseline_run"])
    assert runs.loc["digits-4w-2n", "hosts"] == "node01 node02"
    assert runs.loc["digits-4w-2n", "host_ranks"] == "node01 (ranks 0, 2); node02 (ranks 1, 3)"
    assert runs.loc["digits-2w", "host_ranks"] == "node01 (ranks 0-1)"
    assert (runs["cpu_model"] == FAKE_CPU).all() and (runs["cpu_cores"] == 56).all()
    assert (runs["gpus"] == "none").all() and (runs["gpu_driver"] == "none").all()
    assert (runs["commit"] == FAKE_COMMIT).all() and (runs["torch"] == "2.13.0").all()
    assert (runs["provenance"] == "recorded").all()
    assert runs["provenance_differs"].isna().all()  # written empty: no run differs


def test_runs_csv_training_conventions(default_report):
    fake, out = default_report
    runs = pd.read_csv(out / "runs.csv").set_index("run")
    for col in (
        "backend",
        "bn",
        "batch_scaling",
        "global_batch",
        "effective_lr",
        "deterministic",
        "precision",
        "timed_epochs",
        "timing_warmup_epochs",
        "std_epoch_seconds",
        "std_images_per_second",
        "baseline_run",
        "speedup",
        "efficiency",
    ):
        assert col in runs.columns, col
    assert runs.loc["digits-2w-ddp", "backend"] == "ddp"
    assert runs.loc["digits-2w", "backend"] == "horovod"
    assert (runs["bn"] == "aggregate").all() and (runs["batch_scaling"] == "global").all()
    assert (runs["global_batch"] == 128).all() and (runs["effective_lr"] == 0.05).all()
    assert not runs["deterministic"].any()


def test_runs_table_page_shows_conventions(default_report):
    _, out = default_report
    page = pdf_text(out / "report.pdf").split("\f")[PAGE["runs"]]
    words = " ".join(page.split())
    assert "per-worker base learning rate" not in page
    assert "Backend" in words and "Global batch" in words and "Eff." in words
    assert "Device /" in words and "memory" in words and "NCHW" in words
    assert "ddp" in page and "horovod" in page and "aggregate" in page
    assert re.search(r"\d\.\d\d s ± \d\.\d\d", page)  # mean ± sd
    assert "(14 ep.)" in page
    assert "excluding the first epoch of each run (warm-up)" in " ".join(page.split())


def test_epoch_time_and_scaling_pages_explain(default_report):
    _, out = default_report
    pages = [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")]
    assert "1 warm-up epoch excluded per run: the first epoch" in pages[PAGE["epoch_time"]]
    assert "warm-up (excluded)" in pages[PAGE["epoch_time"]]
    scaling = pages[PAGE["scaling"]]
    assert "workers (ranks" in scaling and "Horovod ranks" not in scaling
    assert re.search(r"No speed-up or efficiency for digits-2w-ddp and mnist-2w", scaling)
    backends = pages[PAGE["backends"]]
    assert "ddp / horovod = " in backends
    assert "Not compared (no counterpart on another backend)" in backends


def test_epochs_and_benchmarks_csv(default_report):
    _, out = default_report
    epochs = pd.read_csv(out / "epochs.csv")
    assert len(epochs) == 5 * 15
    assert list(epochs.columns[:6]) == ["run", "dataset", "model", "workers", "nodes", "epoch"]
    one = epochs[epochs["run"] == "digits-2w"]
    assert list(one["epoch"]) == list(range(1, 16))
    assert (one["workers"] == 2).all()
    assert list(one["timed"]) == [False] + [True] * 14
    assert (one["world_size"] == 2).all() and (one["global_batch"] == 128).all()

    bench = pd.read_csv(out / "benchmarks.csv")
    assert len(bench) == 5 * 2 + 2 * 2  # train+evaluate per run, download+preprocess per dataset
    assert set(bench["rule"]) == {"download", "preprocess", "train", "evaluate"}
    train = bench[(bench["rule"] == "train") & (bench["job"] == "digits-4w-2n")]
    assert train["max_rss"].item() == pytest.approx(1240.0)
    assert bench.loc[bench["rule"] == "download", "max_rss"].isna().all()  # "NA" in the TSV


def test_title_page_provenance(default_report):
    """The title page: training hardware and software from the runs' run.json, the report's
    own host only as where the report was generated."""
    _, out = default_report
    text = pdf_text(out / "report.pdf")
    first = " ".join(text.split("\f")[0].split())
    prov = provenance.collect()
    for expected in (
        "Cluster benchmark: digits and MNIST",
        "3fa9c01d2e7b",
        "Best run: mnist-2w",
        "98.70 %",
        "Training hosts",
        "node01 (5 runs), node02 (1 run)",
        f"Training CPUs {FAKE_CPU}",
        "Training GPUs (driver) none",
        f"Training commit {FAKE_COMMIT[:12]}",
        "Training Python / torch / Horovod 3.11.7 / 2.13.0 / 0.28.1",
        "Runs that differ none",
        f"Report generated on {prov['host']}",
        provenance.describe_commit(prov["git"]),
        prov["versions"]["snakemake"],
        prov["versions"]["matplotlib"],
        "left out as warm-up",
        "cpu; ddp, horovod;",
    ):
        assert expected in first, expected
    # the report host's hardware is no longer presented as the training's
    assert prov["cpu_model"] not in first or prov["cpu_model"] == FAKE_CPU
    # every page carries the footer: config hash, commit of the report's code, page number
    commit = commit_text(prov["git"]["commit"], prov["git"]["dirty"], 12)
    footer = rf"config 3fa9c01d2e7b · commit {re.escape(commit)} +page \d+ of {N_PAGES}"
    assert len(re.findall(footer, text)) == N_PAGES


def test_pdf_written_last_and_no_temp_files(default_report):
    _, out = default_report
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(".tmp")]
    pdf_mtime = (out / "report.pdf").stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= pdf_mtime for p in files)


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_single_run_single_epoch_without_benchmarks(tmp_path: Path):
    """One epoch, and that one is the warm-up: no timing at all, said in words, no crash."""
    spec = [{"name": "solo", "dataset": "digits", "workers": 2, "nodes": 1, "ips": 900, "acc": 0.5}]
    fake = make_fake_results(tmp_path, runs=spec, epochs=1, benchmarks=False)
    out = tmp_path / "report"
    unmatched = str(tmp_path / "results" / "benchmarks" / "**" / "*.tsv")  # an unexpanded glob
    assert run_report(fake, out, benchmarks=[unmatched]) == 0
    assert pdf_pages(out / "report.pdf") == N_PAGES
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["timed_epochs"] == 0 and row["timing_warmup_epochs"] == 1
    for col in ("mean_epoch_seconds", "std_epoch_seconds", "images_per_second", "speedup"):
        assert pd.isna(row[col]), col
    assert row["timing_note"] == "only 1 epoch, 1 warm-up epoch excluded"
    assert len(pd.read_csv(out / "epochs.csv")) == 1
    bench = pd.read_csv(out / "benchmarks.csv")
    assert bench.empty and {"rule", "job", "s", "max_rss"} <= set(bench.columns)
    pages = [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")]
    assert "No Snakemake benchmark records were found" in pages[PAGE["benchmarks"]]
    assert "n/a" in pages[PAGE["runs"]]
    assert "solo: only 1 epoch, 1 warm-up epoch excluded" in pages[PAGE["runs"]]
    assert "only 1 epoch, 1 warm-up epoch excluded" in pages[PAGE["epoch_time"]]
    assert "n/a (only 1 epoch, 1 warm-up epoch excluded)" in pages[PAGE["throughput"]]
    assert "No run has an epoch left after the warm-up" in pages[PAGE["scaling"]]
    assert "All runs use the horovod backend" in pages[PAGE["backends"]]
    assert "Highest throughput: n/a" in pages[PAGE["title"]]


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_warmup_zero_uses_every_epoch(tmp_path: Path):
    spec = [{"name": "solo", "dataset": "digits", "workers": 1, "nodes": 1, "ips": 900, "acc": 0.5}]
    fake = make_fake_results(tmp_path, runs=spec, epochs=1, benchmarks=False)
    out = tmp_path / "report"
    assert run_report(fake, out, params={**PARAMS, "timing_warmup_epochs": 0}) == 0
    row = pd.read_csv(out / "runs.csv").iloc[0]
    seconds = fake["expected"]["solo"]["seconds"]
    assert row["timed_epochs"] == 1 and row["timing_warmup_epochs"] == 0
    assert row["mean_epoch_seconds"] == pytest.approx(seconds[0])
    assert pd.isna(row["std_epoch_seconds"])  # one epoch: no sample sd
    assert row["speedup"] == pytest.approx(1.0)


@pytest.mark.parametrize("warmup", [0, 1, 3, 15, 20])
def test_warmup_exclusion_unit(tmp_path: Path, warmup: int):
    spec = [{"name": "r", "dataset": "digits", "workers": 1, "nodes": 1, "ips": 900, "acc": 0.5}]
    fake = make_fake_results(tmp_path, runs=spec, benchmarks=False)
    run = inputs.load_run(Path(fake["run_dirs"][0]), Path(fake["eval_dirs"][0]))
    row = tables.runs_table([run], warmup).iloc[0]
    seconds, ips = fake["expected"]["r"]["seconds"], fake["expected"]["r"]["ips"]
    assert row["timing_warmup_epochs"] == warmup
    assert row["timed_epochs"] == max(0, 15 - warmup)
    if warmup < 15:
        assert row["mean_epoch_seconds"] == pytest.approx(np.mean(seconds[warmup:]))
        assert row["images_per_second"] == pytest.approx(np.mean(ips[warmup:]))
        assert row["std_epoch_seconds"] == pytest.approx(np.std(seconds[warmup:], ddof=1))
        assert row["timing_note"] == ""
    else:
        assert np.isnan(row["mean_epoch_seconds"]) and np.isnan(row["images_per_second"])
        assert row["timing_note"] == f"only 15 epochs, {warmup} warm-up epochs excluded"
    timed = tables.epochs_table([run], warmup)["timed"]
    assert list(timed) == [e > warmup for e in range(1, 16)]


def _scaling_frame(**changes: dict) -> pd.DataFrame:
    """A 1-worker and a 2-worker run of one series; ``changes`` overrides the 2-worker run."""
    common = {"dataset": "digits", "model": "small_cnn", "global_batch": 128, "device": "cpu",
              "backend": "horovod", "bn": "aggregate", "precision": "fp32",
              "memory_format": "contiguous", "grad_compression": "none",
              "site": "east"}  # fmt: skip
    rows = [
        {**common, "run": "one", "workers": 1, "images_per_second": 1000.0},
        {**common, "run": "two", "workers": 2, "images_per_second": 1800.0, **changes},
    ]
    return pd.DataFrame(rows)


def test_baseline_same_series():
    df = tables.add_scaling(_scaling_frame()).set_index("run")
    assert df.loc["two", "baseline_run"] == "one"
    assert df.loc["two", "speedup"] == pytest.approx(1.8)
    assert df.loc["two", "efficiency"] == pytest.approx(0.9)
    assert df.loc["one", "speedup"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "changes",
    [
        {"backend": "ddp"},
        {"bn": "sync"},
        {"global_batch": 256},
        {"device": "cuda"},
        {"model": "resnet18"},
        {"dataset": "mnist"},
        {"precision": "bf16"},
        {"memory_format": "channels_last"},
        {"site": "west"},  # another site's 1-worker run is no baseline
    ],
)
def test_baseline_never_crosses_series(changes: dict):
    df = tables.add_scaling(_scaling_frame(**changes)).set_index("run")
    assert pd.isna(df.loc["two", "baseline_run"])
    assert np.isnan(df.loc["two", "speedup"]) and np.isnan(df.loc["two", "efficiency"])
    assert df.loc["one", "baseline_run"] == "one"
    notes = " ".join(scaling.scaling_notes(df.reset_index()))
    assert "No speed-up or efficiency for two:" in notes
    assert "one" not in notes.split(":")[0].replace("No speed-up or efficiency for", "")


def test_a_compressed_series_takes_the_1_worker_run_whatever_its_compression():
    """One worker exchanges no gradients: its run is the baseline of the fp16 series too, which
    stays a series of its own (its own line, its own backend pairs)."""
    df = _scaling_frame(grad_compression="fp16")
    plain = df.iloc[[1]].assign(run="two-plain", images_per_second=1600.0, grad_compression="none")
    out = tables.add_scaling(pd.concat([df, plain], ignore_index=True)).set_index("run")
    assert out.loc["two", "baseline_run"] == out.loc["two-plain", "baseline_run"] == "one"
    assert out.loc["two", "speedup"] == pytest.approx(1.8)
    assert out.loc["two-plain", "speedup"] == pytest.approx(1.6)
    series = out.reset_index().groupby(list(tables.BASELINE_KEY)).groups
    assert len(series) == 2  # none (1 and 2 workers), fp16 (2 workers)
    labels, common = scaling.series_labels(list(series))
    assert sorted(labels) == ["fp16 gradients", "fp32 gradients"]
    assert "gradients" not in scaling.series_labels([list(series)[1]])[0][0]  # none only


def test_uneven_shares_take_the_1_worker_baseline_and_a_series_names_what_it_sets():
    """A 1-worker run has no use for shares (nor for an interface): its run is the baseline of
    a shares series, and a label names the shares, your own loss, only where a series sets
    them."""
    df = _scaling_frame(shares="auto").assign(own_training="")
    df.loc[df["workers"] == 1, "shares"] = "None"
    out = tables.add_scaling(df).set_index("run")
    assert out.loc["two", "baseline_run"] == "one"
    own = df.iloc[[1]].assign(run="own", own_training=tables.own_training({"loss": "m:summed"}))
    series = tables.add_scaling(pd.concat([df, own])).groupby(list(tables.BASELINE_KEY)).groups
    labels, common = scaling.series_labels(list(series))
    assert "loss m:summed" in " ".join(labels) and "cross-entropy, SGD" in " ".join(labels)
    assert "shares auto" in " ".join(labels) + common


def test_baseline_fastest_of_several_and_untimed():
    df = _scaling_frame()
    extra = df.iloc[[0]].assign(run="one-fast", images_per_second=1200.0)
    untimed = df.iloc[[0]].assign(run="one-untimed", images_per_second=np.nan)
    out = tables.add_scaling(pd.concat([df, extra, untimed], ignore_index=True)).set_index("run")
    assert out.loc["two", "baseline_run"] == "one-fast"
    assert out.loc["two", "baseline_candidates"] == 2  # the untimed one does not qualify
    assert out.loc["two", "speedup"] == pytest.approx(1.5)
    assert np.isnan(out.loc["one-untimed", "speedup"])
    notes = scaling.scaling_notes(out.reset_index())
    assert any("2 1-worker runs qualify" in n and "one-fast, is used" in n for n in notes)
    assert any("No throughput for one-untimed" in n for n in notes)
    # only an untimed 1-worker run: no baseline at all
    alone = tables.add_scaling(pd.concat([df.iloc[[1]], untimed])).set_index("run")
    assert pd.isna(alone.loc["two", "baseline_run"]) and np.isnan(alone.loc["two", "speedup"])


def test_backend_comparison_pairs_only_identical_configs():
    df = _scaling_frame(backend="ddp", workers=1, images_per_second=1100.0)
    df = pd.concat([df, df.iloc[[0]].assign(run="hvd-2w", workers=2)], ignore_index=True)
    df["nodes"] = 1
    df["std_images_per_second"] = 10.0
    cmp = tables.backend_comparison(df)
    assert list(cmp["run"]) == ["one", "two"]  # the reference (horovod) first
    assert cmp["ratio"].tolist() == pytest.approx([1.0, 1.1])
    df.loc[df["run"] == "two", "bn"] = "sync"  # no longer identical except for the backend
    assert tables.backend_comparison(df).empty
    df.loc[df["run"] == "two", "bn"] = "aggregate"
    df.loc[df["run"] == "two", "grad_compression"] = "fp16"  # like with like: compression too
    assert tables.backend_comparison(df).empty
    df["grad_compression"] = "fp16"
    assert list(tables.backend_comparison(df)["grad_compression"]) == ["fp16", "fp16"]
    assert set(tables.backend_comparison(df)["unit"]) == {"images/s"}
    # language models are compared in tokens/s (the ratio is the same)
    lm = df.assign(task="language-model", model="gpt-tiny")
    lm["tokens_per_second"], lm["std_tokens_per_second"] = lm["images_per_second"] * 64, 640.0
    cmp = tables.backend_comparison(lm)
    assert set(cmp["unit"]) == {"tokens/s"} and cmp["throughput"].tolist()[1] == 1100.0 * 64
    assert cmp["ratio"].tolist() == pytest.approx([1.0, 1.1])


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_realistic_backends_and_baselines(tmp_path: Path):
    """Two backends on 1, 2 and 4 workers, a per-worker batch run without a baseline, and a run
    whose only epoch is the warm-up."""
    specs = [
        {"name": f"{b}-{w}w", "dataset": "digits", "workers": w, "nodes": 1 + (w == 4),
         "ips": base * w**0.85, "acc": 0.95 + w / 1000, "backend": b}
        for b, base in (("horovod", 2000), ("ddp", 2300))
        for w in (1, 2, 4)
    ] + [
        {"name": "hvd-4w-perworker", "dataset": "digits", "workers": 4, "nodes": 1,
         "ips": 6500, "acc": 0.94, "batch_scaling": "per_worker", "batch_size": 64},
    ]  # fmt: skip
    fake = make_fake_results(tmp_path, runs=specs, epochs=4, benchmarks=False)
    out = tmp_path / "report"
    assert run_report(fake, out, benchmarks=[]) == 0
    runs = pd.read_csv(out / "runs.csv").set_index("run")
    for b in ("horovod", "ddp"):
        for w in (1, 2, 4):
            assert runs.loc[f"{b}-{w}w", "baseline_run"] == f"{b}-1w"
    assert runs.loc["hvd-4w-perworker", "global_batch"] == 256
    assert runs.loc["hvd-4w-perworker", "effective_lr"] == pytest.approx(0.2)
    assert runs.loc["hvd-4w-perworker", "batch_scaling"] == "per_worker"
    assert pd.isna(runs.loc["hvd-4w-perworker", "baseline_run"])  # 1-worker runs: batch 128
    pages = [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")]
    assert "No speed-up or efficiency for hvd-4w-perworker" in pages[PAGE["scaling"]]
    assert pages[PAGE["backends"]].count("ddp / horovod = ") == 3
    assert "per worker" in pages[PAGE["runs"]]


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_more_than_eight_node_counts(tmp_path: Path):
    specs = [
        {"name": f"n{n:02d}", "dataset": "digits", "workers": n, "nodes": n, "ips": 900 * n,
         "acc": 0.9 + n / 1000}
        for n in range(1, 12)
    ]  # fmt: skip
    fake = make_fake_results(tmp_path, runs=specs, epochs=3, benchmarks=False)
    out = tmp_path / "report"
    assert run_report(fake, out, benchmarks=[]) == 0
    # 11 runs on up to 11 hosts (three lines each in the provenance table): two pages of it
    assert pdf_pages(out / "report.pdf") == N_PAGES + 1
    assert pd.read_csv(out / "runs.csv")["speedup"].notna().all()
    styles = [node_marker(i) for i in range(17)]
    assert styles[8] == {"marker": styles[0]["marker"], "hollow": True}
    assert len({(s["marker"], s["hollow"]) for s in styles[:16]}) == 16


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_many_runs_split_table_and_benchmarks(tmp_path: Path):
    specs = [
        {"name": f"digits-run-{i:02d}", "dataset": "digits", "workers": 1 + i % 4, "nodes": 1,
         "ips": 1000 + 100 * i, "acc": 0.9 + i / 1000}
        for i in range(20)
    ]  # fmt: skip
    fake = make_fake_results(tmp_path, runs=specs, epochs=3)
    out = tmp_path / "report"
    assert run_report(fake, out) == 0
    # 20 runs: the results, the runs and the provenance tables take two pages each; 42
    # benchmarked jobs take two pages as well
    assert pdf_pages(out / "report.pdf") == N_PAGES + 4
    assert (out / "figures" / "benchmarks-2.png").is_file()
    runs = pd.read_csv(out / "runs.csv")
    epochs = pd.read_csv(out / "epochs.csv")
    final_val = epochs.groupby("run")["val_accuracy"].last()
    assert runs["run"].iloc[0] == final_val.idxmax()  # the best on validation, not on test
    assert runs["final_val_accuracy"].is_monotonic_decreasing


@pytest.mark.parametrize(
    ("victim", "error", "message"),
    [
        ("runs/digits-2w/metrics.jsonl", FileNotFoundError, r"digits-2w/metrics\.jsonl: missing"),
        ("runs/digits-2w/run.json", FileNotFoundError, r"digits-2w/run\.json: missing"),
        ("eval/mnist-2w/metrics.json", FileNotFoundError, r"mnist-2w/metrics\.json: missing"),
        ("eval/mnist-2w/confusion.csv", FileNotFoundError, r"mnist-2w/confusion\.csv: missing"),
        ("eval/mnist-2w/per_class.csv", FileNotFoundError, r"mnist-2w/per_class\.csv: missing"),
    ],
)
def test_missing_required_file(fake: dict, tmp_path: Path, victim, error, message):
    (tmp_path / "results" / victim).unlink()
    out = tmp_path / "report"
    with pytest.raises(error, match=message):
        run_report(fake, out)
    assert not out.exists()


def test_malformed_inputs(fake: dict, tmp_path: Path):
    res, out = tmp_path / "results", tmp_path / "report"
    jsonl = res / "runs" / "digits-1w" / "metrics.jsonl"
    good = jsonl.read_text()
    jsonl.write_text(good + '{"epoch": 16, "train_loss": 0.1}\n')
    with pytest.raises(
        ValueError, match=r"metrics\.jsonl: missing field\(s\) \['val_loss'.* line 16"
    ):
        run_report(fake, out)
    jsonl.write_text(good + "{truncated\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl:16: not valid JSON"):
        run_report(fake, out)
    jsonl.write_text("")
    with pytest.raises(ValueError, match="no epochs recorded"):
        run_report(fake, out)
    jsonl.write_text(good)

    cm = res / "eval" / "digits-1w" / "confusion.csv"
    cm.write_text("true,a,b\na,1,2\n")
    with pytest.raises(ValueError, match="square confusion matrix"):
        run_report(fake, out)
    assert not out.exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda j: j["run"].pop("backend"),
            r"run\.json: missing field\(s\) \['backend'\] in 'run'",
        ),
        (lambda j: j["run"].pop("bn"), r"run\.json: missing field\(s\) \['bn'\] in 'run'"),
        (lambda j: j.pop("effective"), r"run\.json: missing field 'effective'"),
        (
            lambda j: j["effective"].pop("global_batch"),
            r"run\.json: missing field\(s\) \['global_batch'\] in 'effective'",
        ),
    ],
)
def test_run_json_needs_training_conventions(fake: dict, tmp_path: Path, edit, message):
    path = tmp_path / "results" / "runs" / "digits-2w" / "run.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))
    with pytest.raises(ValueError, match=message):
        run_report(fake, tmp_path / "report")


def test_eval_must_match_runs(fake: dict, tmp_path: Path):
    out = tmp_path / "report"
    fake["eval_dirs"] = fake["eval_dirs"][:-1]
    with pytest.raises(ValueError, match=r"no --eval-dirs entry for run\(s\) \['mnist-2w'\]"):
        run_report(fake, out)
    metrics = Path(fake["eval_dirs"][0]) / "metrics.json"
    m = json.loads(metrics.read_text())
    metrics.write_text(json.dumps({**m, "run": "other"}))
    fake["eval_dirs"].append(fake["run_dirs"][-1].replace("/runs/", "/eval/"))
    with pytest.raises(ValueError, match="evaluates run 'other'"):
        run_report(fake, out)


@pytest.mark.parametrize(
    "params, message",
    [
        ({**PARAMS, "author": 5}, r"--params\.author: 5 is not of type"),
        ({**PARAMS, "title": "  "}, r"--params\.title: '  ' is blank"),
        ({**PARAMS, "colour": "red"}, r"\('colour' was unexpected\)"),
        ({**PARAMS, "timing_warmup_epochs": -1}, r"--params\.timing_warmup_epochs: -1 is less"),
        ({**PARAMS, "timing_warmup_epochs": 1.5}, r"timing_warmup_epochs: 1\.5 is not of type"),
        ({**PARAMS, "timing_warmup_epochs": "1"}, r"timing_warmup_epochs: '1' is not of type"),
        ({**PARAMS, "timing_warmup_epochs": True}, r"timing_warmup_epochs: True is not of type"),
    ],
)
def test_bad_params(fake: dict, tmp_path: Path, params, message, capsys):
    assert run_report(fake, tmp_path / "report", params=params) == EXIT_BAD_SETTINGS
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "report").exists()


def test_report_settings_take_the_schema_defaults_and_need_a_config_hash(
    fake: dict, tmp_path: Path, capsys
):
    params = {"title": "t"}  # author and timing_warmup_epochs: the schema's defaults
    assert inputs.parse_params(json.dumps(params), "abc").timing_warmup_epochs == 1
    assert run_report(fake, tmp_path / "r", params=params, config_hash=" ") == EXIT_BAD_SETTINGS
    assert "--config-hash is empty" in capsys.readouterr().err


def test_corrupt_benchmark_file(fake: dict, tmp_path: Path):
    Path(fake["benchmarks"][0]).write_text("time\tmemory\n1\t2\n")
    with pytest.raises(ValueError, match="no 's' column"):
        run_report(fake, tmp_path / "report")


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_script_entry_point_with_benchmark_dir(fake: dict, tmp_path: Path):
    """The thin script; --benchmarks given a directory (searched) and a file that is missing."""
    out = tmp_path / "report"
    bench_dir = tmp_path / "results" / "benchmarks"
    cmd = [sys.executable, str(REPO / "scripts" / "report.py"), "--params", json.dumps(PARAMS)]
    cmd += ["--config-hash", CONFIG_HASH]
    cmd += ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    cmd += ["--benchmarks", str(bench_dir), str(tmp_path / "gone.tsv"), "--out-dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"{N_PAGES} pages" in proc.stdout
    assert len(pd.read_csv(out / "benchmarks.csv")) == 14
    assert "not found: " in pdf_text(out / "report.pdf").split("\f")[PAGE["benchmarks"]]


# ------------------------------------------------------------------------------------------------
# provenance


def test_provenance_fields():
    prov = provenance.collect()
    assert set(prov) >= {"date", "host", "cpu_model", "cpu_cores", "gpus", "git", "versions"}
    assert {"python", "torch", "horovod", "snakemake"} <= set(prov["versions"])
    assert prov["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert prov["cpu_cores"]["logical"] >= 1
    assert isinstance(prov["gpus"], list)
    json.dumps(prov)  # serialisable


def test_missing_package_and_no_git(tmp_path: Path):
    assert provenance.package_version("surely-not-a-real-distribution") == "not installed"
    assert provenance.git_info(tmp_path) == {"commit": "unknown", "dirty": None}


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_commit_and_dirty_flag(tmp_path: Path):
    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path, check=True, capture_output=True,
        )  # fmt: skip

    git("init", "-q")
    assert provenance.git_info(tmp_path)["commit"] == "unknown"  # no commit yet
    (tmp_path / "f.txt").write_text("a")
    git("add", "f.txt")
    git("commit", "-q", "-m", "init")
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.strip()
    assert provenance.git_info(tmp_path) == {"commit": sha, "dirty": False}
    (tmp_path / "untracked.txt").write_text("results do not make it dirty")
    assert provenance.git_info(tmp_path)["dirty"] is False
    (tmp_path / "f.txt").write_text("b")
    info = provenance.git_info(tmp_path)
    assert info == {"commit": sha, "dirty": True}
    assert provenance.describe_commit(info) == f"{sha} (dirty)"


def test_provenance_import_does_not_import_torch():
    code = "import sys, clusterbench.core.provenance; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ------------------------------------------------------------------------------------------------
# per-run provenance: table, differences, runs recorded before provenance, footer on every figure

H100 = ["NVIDIA H100 80GB HBM3"] * 2


def provenance_specs() -> list[dict]:
    """Three runs: two alike, one on another CPU, with GPUs, torch and a dirty commit."""
    base = {"dataset": "digits", "nodes": 1, "acc": 0.95}
    return [
        {**base, "name": "alike-1w", "workers": 1, "ips": 1000},
        {**base, "name": "alike-2w", "workers": 2, "ips": 1800},
        {
            **base,
            "name": "other-2w",
            "workers": 2,
            "ips": 2500,
            "cpu_model": "Other CPU 9000",
            "gpus": H100,
            "gpu_driver": "550.54.15",
            "torch": "2.1.0",
            "dirty": True,
        },
    ]


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_provenance_table_flags_the_run_that_differs(tmp_path: Path):
    fake = make_fake_results(tmp_path, runs=provenance_specs(), epochs=3, benchmarks=False)
    add_issue40(tmp_path, fake, uneven="alike-2w", boxed="alike-1w")
    for run_dir in fake["run_dirs"]:  # the network each run's ranks talked over (run.json)
        info = json.loads((Path(run_dir) / "run.json").read_text())
        info["network"] = {"iface": "lo", "iface_from": None, "log_level": None}
        if Path(run_dir).name == "other-2w":
            info["network"] = {"iface": "ib0", "iface_from": "config", "log_level": "info"}
            info["network"]["log_level_from"] = "$CLUSTERBENCH_LOG_LEVEL"
        (Path(run_dir) / "run.json").write_text(json.dumps(info))
    out = tmp_path / "report"
    argv = ["--params", json.dumps(PARAMS), "--config-hash", CONFIG_HASH, "--run-dirs"]
    argv += [*fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"], "--watch", *fake["watch"]]
    assert main([*argv, "--out-dir", str(out)]) == 0
    assert_issue40_pages(out)  # and, in the same report, issue 40's pages
    runs = pd.read_csv(out / "runs.csv", keep_default_na=False).set_index("run")
    assert runs.loc["other-2w", "provenance_differs"] == "CPU, GPUs, GPU driver, commit, torch"
    assert runs.loc["alike-1w", "provenance_differs"] == ""
    assert runs.loc["alike-2w", "provenance_differs"] == ""
    assert runs.loc["other-2w", "gpus"] == "2\u00d7 NVIDIA H100 80GB HBM3"
    assert runs.loc["other-2w", "gpu_driver"] == "550.54.15"
    assert runs.loc["other-2w", "torch"] == "2.1.0" and runs.loc["other-2w", "dirty"]

    text = pdf_text(out / "report.pdf").split("\f")
    page = " ".join(text[PAGE["provenance"]].split())
    assert "Provenance of the runs" in page
    for expected in (
        f"CPU differs: {FAKE_CPU} (alike-1w and alike-2w); Other CPU 9000 (other-2w)",
        "torch differs: 2.13.0 (alike-1w and alike-2w); 2.1.0 (other-2w)",
        f"commit differs: {FAKE_COMMIT} (alike-1w and alike-2w); {FAKE_COMMIT} (dirty)",
        "driver 550.54.15",
        "(56 cores)",
        "node01 (0-1)",
        FAKE_COMMIT[:10],
        "(dirty)",
        "3.11.7 / 2.1.0",
        "TensorBoard event files: results/runs/<run>/tensorboard/ (docs/running.md).",
        "Network: interface lo (chosen by the launcher) for alike-1w and alike-2w; interface "
        "ib0 (config), log level info ($CLUSTERBENCH_LOG_LEVEL) for other-2w.",
    ):
        assert expected in page, expected
    title = " ".join(text[PAGE["title"]].split())
    differs = "DIFFERS in CPU, GPUs, GPU driver, commit, torch (see the provenance page)"
    assert f"Runs that differ {differs}: 1 run, other-2w" in title
    assert f"Training CPUs {FAKE_CPU} (2 runs), Other CPU 9000 (1 run)" in title


def test_the_network_is_recorded_with_where_each_setting_came_from():
    """run.json's network: the launcher's flag is the config's key where the run sets it."""
    from clusterbench.training.record import network_record

    origins = json.dumps({"iface": "--iface", "log_level": "CLUSTERBENCH_LOG_LEVEL"})
    env = {"GLOO_SOCKET_IFNAME": "ib0", "CLUSTERBENCH_LOG_LEVEL": "info", "NCCL_DEBUG": "INFO"}
    env["CLUSTERBENCH_NETWORK_FROM"] = origins
    net = network_record({"iface": "ib0", "log_level": None}, env)
    assert (net["iface"], net["iface_from"]) == ("ib0", "config")
    assert (net["log_level"], net["log_level_from"]) == ("info", "$CLUSTERBENCH_LOG_LEVEL")
    assert net["variables"] == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "INFO"}
    by_hand = network_record({"iface": None, "log_level": None}, env)  # --iface, by hand
    assert by_hand["iface_from"] == "--iface"
    chosen = network_record({}, {"GLOO_SOCKET_IFNAME": "lo"})
    assert (chosen["iface"], chosen["iface_from"], chosen["log_level"]) == ("lo", None, None)


def test_provenance_differences_without_a_majority_flag_every_run(tmp_path: Path):
    """Two runs on two CPUs: neither is 'the others', so both are marked; unknown is never
    compared."""
    specs = provenance_specs()[:2]
    specs[1] = {**specs[1], "cpu_model": "Other CPU 9000"}
    specs.append({**specs[0], "name": "old-1w", "provenance": False})
    fake = make_fake_results(tmp_path, runs=specs, epochs=2, benchmarks=False)
    runs = [inputs.load_run(Path(r), Path(e)) for r, e in zip(*fake_dirs(fake), strict=True)]
    df = tables.runs_table(runs).set_index("run")
    assert df.loc["alike-1w", "provenance_differs"] == "CPU"
    assert df.loc["alike-2w", "provenance_differs"] == "CPU"
    assert df.loc["old-1w", "provenance_differs"] == ""


def fake_dirs(fake: dict) -> tuple[list[str], list[str]]:
    return fake["run_dirs"], fake["eval_dirs"]


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_run_json_without_provenance_is_reported_as_unknown(tmp_path: Path):
    """A run.json written before provenance was recorded: accepted, its hardware and commit
    unknown, its hosts and versions as rank 0 recorded them; it is never 'differing'."""
    specs = provenance_specs()[:2]
    specs[1] = {**specs[1], "provenance": False}
    fake = make_fake_results(tmp_path, runs=specs, epochs=2, benchmarks=False)
    out = tmp_path / "report"
    assert run_report(fake, out, benchmarks=[]) == 0
    runs = pd.read_csv(out / "runs.csv", keep_default_na=False).set_index("run")
    old = runs.loc["alike-2w"]
    assert old["provenance"] == "not recorded"
    assert (old["cpu_model"], old["gpus"], old["commit"]) == ("unknown",) * 3
    assert old["torch"] == "2.13.0" and old["host_ranks"] == "node01"
    assert old["provenance_differs"] == "" and runs.loc["alike-1w", "provenance_differs"] == ""
    # the scheduler under run.json's old key "launcher", and under "scheduler"
    assert runs["scheduler"].to_dict() == {"alike-1w": "local", "alike-2w": "local"}
    text = pdf_text(out / "report.pdf").split("\f")
    page = " ".join(text[PAGE["provenance"]].split())
    assert "not recorded" in page and "Not recorded for alike-2w" in page
    assert "not recorded for alike-2w" in " ".join(text[PAGE["title"]].split())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: "yes", r"'provenance' must be an object"),
        (lambda p: {**p, "hosts": []}, r"malformed 'provenance': 'hosts' must be a non-empty"),
        (lambda p: {**p, "hosts": [{"host": "a"}]}, r"'hosts' must be a non-empty list"),
        (lambda p: {**p, "git": "abc"}, r"'git' must be an object with 'commit'"),
        (lambda p: {k: v for k, v in p.items() if k != "versions"}, r"'versions' must be an"),
    ],
)
def test_malformed_provenance_is_an_error_naming_the_file(
    fake: dict, tmp_path: Path, edit, message
):
    path = tmp_path / "results" / "runs" / "digits-2w" / "run.json"
    info = json.loads(path.read_text())
    info["provenance"] = edit(info["provenance"])
    path.write_text(json.dumps(info))
    with pytest.raises(ValueError, match=rf"digits-2w/run\.json: .*{message}"):
        run_report(fake, tmp_path / "report")
    assert not (tmp_path / "report").exists()


def test_fmt_ranks_and_gpus():
    assert tables.fmt_ranks([5, 0, 1, 2, 3, 7, 8]) == "0-3, 5, 7-8"
    assert tables.fmt_ranks([0]) == "0"
    assert tables.fmt_gpus(["A", "B", "A"]) == "2\u00d7 A, 1\u00d7 B"
    assert tables.fmt_gpus([]) == "none"
    assert tables.host_label({"host": "vm", "node": "localhost"}) == "vm"
    assert tables.host_label({"host": "n1.cluster", "node": "n1"}) == "n1.cluster"
    assert tables.host_label({"host": "vm", "node": "node2"}) == "node2 on vm"


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_every_png_figure_carries_the_pdf_footer(tmp_path: Path, monkeypatch):
    """The text drawn on each figure when it is saved as PNG includes the footer (title, config
    hash, commit) and its page number, and the PNG's metadata holds the footer as well."""
    from matplotlib.figure import Figure
    from PIL import Image

    drawn: dict[str, list[str]] = {}
    save = Figure.savefig

    def spy(fig, fname, *args, **kwargs):
        if kwargs.get("format") == "png":
            drawn[Path(fname).name] = [t.get_text() for t in fig.texts]
        return save(fig, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    fake = make_fake_results(tmp_path, runs=provenance_specs()[:2], epochs=2)
    out = tmp_path / "report"
    assert run_report(fake, out) == 0
    prov = provenance.collect()
    params = inputs.ReportParams(
        title=PARAMS["title"], author="", config_hash="3fa9c01d2e7b", timing_warmup_epochs=1
    )
    footer = footer_text(params, prov)
    commit = commit_text(prov["git"]["commit"], prov["git"]["dirty"], 12)
    assert footer == f"{PARAMS['title']}  \u00b7  config 3fa9c01d2e7b  \u00b7  commit {commit}"
    pngs = sorted((out / "figures").glob("*.png"))
    assert len(drawn) == len(pngs) == len(EXPECTED_FIGURES)
    for texts in drawn.values():
        assert footer in texts
        assert any(re.fullmatch(rf"page \d+ of {N_PAGES}", t) for t in texts), texts
    for png in pngs:
        with Image.open(png) as image:
            assert image.text["Description"] == footer
            assert image.text["Title"] == PARAMS["title"]


# ------------------------------------------------------------------------------------------------
# user text: drawn literally ($ is no mathtext), characters no font here has are named in the log

DOLLARS = "cost $5 vs $10"
MATH = "$x^$"


def text_specs(names: tuple[str, str], classes: list[str] | None = None) -> list[dict]:
    """Two runs named ``names`` (the second the best); the best one's classes ``classes``."""
    base = {"dataset": "digits", "nodes": 1}
    return [
        {**base, "name": names[0], "workers": 2, "ips": 1800, "acc": 0.95},
        {**base, "name": names[1], "workers": 1, "ips": 1000, "acc": 0.97}
        | ({"classes": classes} if classes else {}),
    ]


#: Names of each kind that crashed matplotlib's PDF backend after the training (a BOM) or hid
#: what they hold: a zero-width space, a byte-order mark, a combining accent, as a class folder
#: or a hosts file could carry them; and how the report draws each.
HIDDEN = {"\u200bcat": "<U+200B>cat", "dog\ufeff": "dog<U+FEFF>", "cafe\u0301": "caf\u00e9"}
HIDDEN_HOSTS = {
    "\ufefflocal": "<U+FEFF>local",
    "gpu\u200b1": "gpu<U+200B>1",
    "noe\u0301ud": "no\u00e9ud",
}


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_dollar_signs_in_user_text_are_drawn_literally(tmp_path: Path, monkeypatch):
    """'$' in the title, author, run names and class names is a dollar sign, never mathtext:
    '$x^$' (invalid mathtext) renders, 'cost $5 vs $10' keeps its dollars and spaces, on every
    page, in every figure and in the PDF's and PNGs' metadata. Issue 42: class and host names
    with a zero-width space, a byte-order mark (the PDF backend died on it, after all the
    training: `IndexError: string index out of range`) or a combining accent reach a finished
    report, drawn in NFC with the invisible character written out."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text
    from PIL import Image

    drawn: list[Text] = []
    save = Figure.savefig

    def spy(fig, fname, *args, **kwargs):
        result = save(fig, fname, *args, **kwargs)
        drawn.extend(fig.findobj(Text))  # after drawing: tick labels are made when drawn
        return result

    monkeypatch.setattr(Figure, "savefig", spy)
    classes = [f"{MATH}{i}" for i in range(6)] + [*HIDDEN, DOLLARS]
    specs = text_specs((DOLLARS, MATH), classes)
    specs[0].update(nodes=2, hosts=list(HIDDEN_HOSTS)[:2])
    specs[1].update(hosts=list(HIDDEN_HOSTS)[2:])
    fake = make_fake_results(tmp_path, runs=specs, epochs=3, benchmarks=False)
    out = tmp_path / "report"
    title, author = f"Benchmark: {DOLLARS} and {MATH}", f"{MATH} {DOLLARS}"
    assert run_report(fake, out, params={**PARAMS, "title": title, "author": author}) == 0

    # every text object of every page and figure is literal text
    assert drawn and all(not t.get_parse_math() and not t.get_usetex() for t in drawn)
    assert {title, DOLLARS, MATH} <= {t.get_text() for t in drawn}
    pages = [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")]
    assert f"{title} {author} ·" in pages[PAGE["title"]]
    best = pd.read_csv(out / "runs.csv")["run"].iloc[0]
    assert f"Best run: {best} with" in pages[PAGE["title"]]
    assert DOLLARS in pages[PAGE["runs"]] and MATH in pages[PAGE["runs"]]
    assert f"Confusion matrix of the best run: {best}" in pages[PAGE["confusion"]]
    assert DOLLARS in pages[PAGE["confusion"]] and f"{MATH}0" in pages[PAGE["confusion"]]
    for shown in [*HIDDEN.values(), *HIDDEN_HOSTS.values()]:
        assert shown in pages[PAGE["confusion"]] + pages[PAGE["provenance"]], shown
    assert all(shown in pages[PAGE["provenance"]] for shown in HIDDEN_HOSTS.values())
    assert pd.read_csv(out / "runs.csv")["host_ranks"].str.contains("\ufefflocal").any()  # data
    for page in (PAGE["epoch_time"], PAGE["throughput"], PAGE["curves"]):
        assert DOLLARS in pages[page] and MATH in pages[page], page
    footer = rf"{re.escape(title)} · config {CONFIG_HASH} · commit .* page \d+ of {N_PAGES}"
    assert all(re.search(footer, page) for page in pages if page), "footer on every page"
    if shutil.which("pdfinfo"):
        info = subprocess.run(["pdfinfo", str(out / "report.pdf")], capture_output=True, text=True)
        assert re.search(rf"^Title:\s+{re.escape(title)}$", info.stdout, re.MULTILINE)
        assert re.search(rf"^Author:\s+{re.escape(author)}$", info.stdout, re.MULTILINE)
    with Image.open(out / "figures" / "epoch_time.png") as image:
        assert image.text["Title"] == title
        assert image.text["Description"].startswith(f"{title}  \u00b7  config")


@pytest.fixture
def fallbacks(monkeypatch):
    """Set the report's fallback fonts for one test: ``fallbacks(("STIXGeneral",))``."""

    def use(*families: str) -> None:
        monkeypatch.setattr(theme, "FALLBACK_FONTS", tuple((f,) for f in families))
        theme.fallback_fonts.cache_clear()

    yield use
    monkeypatch.undo()
    theme.fallback_fonts.cache_clear()


def test_missing_glyphs_and_their_warning():
    drawable = {ord(c) for c in "ab $"}
    assert theme.missing_glyphs("a $中b😀中\n\t", drawable) == ["中", "😀"]
    assert theme.missing_glyphs("ab $", drawable) == []
    assert theme.glyph_warning("the title", ["中", "😀"]) == (
        "report: warning: the title has characters no font here can draw, shown as boxes: "
        "'中' (U+4E2D), '😀' (U+1F600)"
    )
    many = [chr(0x4E00 + i) for i in range(15)]
    assert theme.glyph_warning("the author", many).endswith("'下' (U+4E0B) and 3 more")
    texts = [("the title", "ok"), ("the author", "a中"), ("the run name 'r😀'", "r😀")]
    assert theme.glyph_warnings(texts, drawable | {ord("o"), ord("k"), ord("r")}) == [
        theme.glyph_warning("the author", ["中"]),
        theme.glyph_warning("the run name 'r😀'", ["😀"]),
    ]


def test_fallback_fonts_draw_what_the_report_font_lacks(fallbacks, tmp_path: Path):
    """An installed fallback family follows the theme's font: matplotlib draws the characters
    the main font lacks with it, and the check counts them as drawable. Tested with
    matplotlib's own STIX font, which has glyphs DejaVu lacks (here: U+24B6, circled A)."""
    import matplotlib
    from matplotlib.figure import Figure

    circled_a = "\u24b6"
    fallbacks()  # none
    with matplotlib.rc_context(theme.theme()):
        assert matplotlib.rcParams["font.family"] == ["sans-serif"]
        assert ord(circled_a) not in theme.drawable_codepoints()
        assert ord("$") in theme.drawable_codepoints()
    fallbacks("No Such Font Family", "STIXGeneral")  # what is not installed is left out
    assert theme.fallback_fonts() == ("STIXGeneral",)
    with matplotlib.rc_context(theme.theme()):
        assert matplotlib.rcParams["font.family"] == ["sans-serif", "STIXGeneral"]
        drawable = theme.drawable_codepoints()
        assert ord(circled_a) in drawable and ord("$") in drawable
        assert theme.missing_glyphs(f"a{circled_a}中", drawable) == ["中"]
        fig = Figure()
        fig.text(0.1, 0.5, f"ab{circled_a}", fontsize=12)
        fig.savefig(tmp_path / "f.pdf")
    if shutil.which("pdffonts"):
        fonts = subprocess.run(
            ["pdffonts", str(tmp_path / "f.pdf")], capture_output=True, text=True
        )
        assert "DejaVuSans" in fonts.stdout and "STIXGeneral" in fonts.stdout


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_report_names_characters_no_font_can_draw(fallbacks, tmp_path: Path, capsys):
    """CJK and emoji with no font here that has them: the report is written, the text is in
    the PDF, and the log (stderr) names each text and its characters, once, instead of
    matplotlib's warning per glyph and save."""
    import warnings

    fallbacks()  # the report's own fonts only (DejaVu: no CJK, no emoji)
    fake = make_fake_results(
        tmp_path, runs=text_specs(("plain-1w", "训练-2w")), epochs=2, benchmarks=False
    )
    out = tmp_path / "report"
    title = "基准 benchmark 😀"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run_report(fake, out, params={**PARAMS, "title": title, "author": "山田"}) == 0
    assert not [w for w in caught if "missing from font" in str(w.message)]
    err = capsys.readouterr().err
    box = "has characters no font here can draw, shown as boxes:"
    expected = [
        f"report: warning: the title {box} '基' (U+57FA), '准' (U+51C6), '😀' (U+1F600)",
        f"report: warning: the author {box} '山' (U+5C71), '田' (U+7530)",
        f"report: warning: the run name '训练-2w' {box} '训' (U+8BAD), '练' (U+7EC3)",
    ]
    for line in expected:
        assert err.count(line + "\n") == 1, err
    assert "plain-1w" not in err and "fonts used: DejaVuSans" in err
    pages = [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")]
    assert pages[PAGE["title"]].startswith(f"{title} 山田 ·")
    assert "训练-2w" in pages[PAGE["runs"]]


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_long_wide_title_and_author_fit_the_page(tmp_path: Path):
    """A title and an author of CJK characters (twice as wide as Latin ones, no spaces) are
    cut to the page's width, never emptied or drawn past its edge."""
    cjk = "集群基准测试报告数字数据集上的分布式训练性能比较与分析" * 4
    assert shorten_text(cjk, 80, " ...").endswith(" ...")
    assert text_width(shorten_text(cjk, 80, " ...")) <= 80
    assert shorten_text("x" * 100, 20, " ...") == "x" * 16 + " ..."
    assert wrap_text("ab " * 5, 4) == ["ab", "ab", "ab", "ab", "ab"]  # textwrap's
    widths = [text_width(line) for line in wrap_text(cjk, 30)]
    assert widths[:-1] == [30] * (len(widths) - 1) and sum(widths) == text_width(cjk)
    fake = make_fake_results(tmp_path, runs=text_specs(("a", "b")), epochs=2, benchmarks=False)
    out = tmp_path / "report"
    assert run_report(fake, out, params={**PARAMS, "title": cjk, "author": cjk}) == 0
    lines = pdf_text(out / "report.pdf").split("\f")[PAGE["title"]].splitlines()
    assert lines[0].startswith(cjk[:20]) and lines[0].endswith("...")
    if shutil.which("pdftotext"):  # every glyph of the title page lies within the page
        bbox = subprocess.run(
            ["pdftotext", "-bbox", "-f", "1", "-l", "1", str(out / "report.pdf"), "-"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        right = [float(x) for x in re.findall(r'xMax="([\d.]+)"', bbox)]
        assert right and max(right) <= PAGE_SIZE_PT[0] * 0.985, max(right)


PAGE_SIZE_PT = (PAGE_SIZE[0] * 72, PAGE_SIZE[1] * 72)


# ------------------------------------------------------------------------------------------------
# metrics.jsonl against run.json: every epoch once, in order, as many as run.json completed


def _epoch_lines(fake: dict, run: str) -> tuple[Path, list[str]]:
    path = Path(next(d for d in fake["run_dirs"] if d.endswith(f"/{run}"))) / "metrics.jsonl"
    return path, path.read_text().splitlines(keepends=True)


def test_a_deleted_last_epoch_is_refused_naming_both_files(fake: dict, tmp_path: Path, monkeypatch):
    """metrics.jsonl lost its last line: 14 epochs recorded, run.json completed 15. Refused,
    naming both files, both counts and the command (relative to the workflow's directory,
    where the rule runs) that trains the run again."""
    path, lines = _epoch_lines(fake, "digits-2w")
    path.write_text("".join(lines[:-1]))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "report"
    with pytest.raises(ValueError) as err:
        run_report(fake, out)
    assert str(err.value) == (
        f"{path} records 14 whole epochs but {path.parent / 'run.json'} says "
        "epochs_completed = 15: "
        "the train stage writes both from the same epochs, so one of them was cut or edited. "
        "Train the run again with: snakemake --forcerun results/runs/digits-2w/run.json"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda ls: ls[:5] + ls[6:],
            r":6: epoch 7 where epoch 6 is due \(epoch 6 is missing\)",
        ),
        (
            lambda ls: ls[:3] + ls[5:],
            r":4: epoch 6 where epoch 4 is due \(epochs 4\.\.5 are missing\)",
        ),
        (
            lambda ls: ls[:8] + ls[7:],
            r":9: epoch 8 where epoch 9 is due \(epoch 8 again, first on line 8\)",
        ),
        (
            lambda ls: [ls[1], ls[0], *ls[2:]],
            r":1: epoch 2 where epoch 1 is due \(epoch 1 is missing\)",
        ),
        (
            lambda ls: [ls[0].replace('"epoch": 1', '"epoch": 0'), *ls[1:]],
            r":1: epoch 0 where epoch 1 is due: ",
        ),
        (
            lambda ls: [*ls, ls[-1]],
            r":16: epoch 15 where epoch 16 is due \(epoch 15 again, first on line 15\)",
        ),
    ],
    ids=["gap", "gap-of-two", "duplicate", "swapped", "zero", "last-twice"],
)
def test_epochs_must_be_one_to_n_without_gaps_or_duplicates(
    fake: dict, tmp_path: Path, edit, message
):
    path, lines = _epoch_lines(fake, "digits-1w")
    path.write_text("".join(edit(lines)))
    with pytest.raises(ValueError, match=rf"digits-1w/metrics\.jsonl{message}") as err:
        run_report(fake, tmp_path / "report")
    assert "the epochs must be 1, 2, ..., N in order, each once" in str(err.value)
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, r"missing field\(s\) \['epochs_completed'\]"),
        ("15", r"'epochs_completed' must be a whole number >= 1, got '15'"),
        (0, r"'epochs_completed' must be a whole number >= 1, got 0"),
        (16, r"records 15 whole epochs but .*digits-2w/run\.json says epochs_completed = 16"),
    ],
)
def test_run_json_epochs_completed_is_checked(fake: dict, tmp_path: Path, value, message):
    path = tmp_path / "results" / "runs" / "digits-2w" / "run.json"
    info = json.loads(path.read_text())
    if value is None:
        del info["epochs_completed"]
    else:
        info["epochs_completed"] = value
    path.write_text(json.dumps(info))
    with pytest.raises(ValueError, match=message) as err:
        run_report(fake, tmp_path / "report")
    assert "digits-2w/" in str(err.value)


# ------------------------------------------------------------------------------------------------
# --skipped: the runs skipped where the workflow ran (rules/common.smk) -> skipped.csv


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_skipped_runs_are_written_to_skipped_csv(fake, tmp_path: Path):
    import csv

    skipped = [
        {
            "run": "sweep--env=gpu,lr=0.1",
            "experiment": "sweep",
            "environment": "gpu",
            "point": {"lr": 0.1},
            "reason": "run 'sweep--env=gpu,lr=0.1' asks for 1 GPU(s), none usable, here",
        },
        {"run": "big", "experiment": None, "environment": None, "point": None, "reason": "x"},
    ]
    out = tmp_path / "out"
    argv = ["--params", json.dumps(PARAMS), "--config-hash", CONFIG_HASH]
    argv += ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    argv += ["--benchmarks", *fake["benchmarks"], "--out-dir", str(out)]
    assert main([*argv, "--skipped", json.dumps(skipped)]) == 0
    with open(out / "skipped.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows == [
        {
            "run": "sweep--env=gpu,lr=0.1",
            "experiment": "sweep",
            "environment": "gpu",
            "reason": skipped[0]["reason"],
        },
        {"run": "big", "experiment": "", "environment": "", "reason": "x"},
    ]


@pytest.mark.parametrize("bad", ["{", '{"run": "a"}', '[{"run": "a"}]'])
def test_bad_skipped_is_refused_before_any_output(fake, tmp_path: Path, bad, capsys):
    out = tmp_path / "out"
    argv = ["--params", json.dumps(PARAMS), "--config-hash", CONFIG_HASH]
    argv += ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    argv += ["--out-dir", str(out), "--skipped", bad]
    assert main(argv) == 2
    assert "--skipped" in capsys.readouterr().err
    assert not out.exists()


def add_issue40(root: Path, fake: dict, uneven: str, boxed: str) -> None:
    """What issue 40 added, on fake results under ``root``: run ``uneven`` trained on shares
    [3, 1] and was evaluated while it trained; run ``boxed`` was time-boxed and stopped within
    its last epoch (4 of its 9 steps)."""
    runs = root / "results" / "runs"
    edit_json(runs / uneven / "run.json", shares={"asked": [3, 1], "shares": [0.75, 0.25]})
    phases = {p: {"mean": 0.01, "max": 0.01} for p in ("data", "compute", "comm", "optimizer")}
    work = {"step_seconds": {"steps": 9, "ranks": 2, **phases, "work": [0.0102, 0.0098]}}
    edit_epochs(runs / uneven / "metrics.jsonl", lambda e, last: e.update(work))
    box = {"seconds": 3.0, "used_seconds": 3.1, "partial": {"epoch": 3, "steps": 4, "of": 9}}
    # its whole epochs, as the train stage counts them: not the partial one
    edit_json(runs / boxed / "run.json", time_box=box, epochs_completed=2)
    edit_epochs(
        runs / boxed / "metrics.jsonl", lambda e, last: last and e.update(partial=box["partial"])
    )
    watch_dir = root / "results" / "watch" / uneven
    watch_dir.mkdir(parents=True)
    points = [
        {"train_seconds": t, "epoch": e, "step": 0, "steps": 0, "accuracy": a, "loss": 2 - a,
         "n": 360, "task": "classification", "pause": True, "evaluation_seconds": 0.1}
        for t, e, a in ((0.0, 0, 0.1), (0.4, 1, 0.8), (0.8, 2, 0.93))
    ]  # fmt: skip
    record = {"run": uneven, "split": "test", "every_minutes": 0.005, "points": points}
    (watch_dir / "watch.json").write_text(json.dumps({**record, "ended": "trained", "note": ""}))
    fake["watch"] = [str(watch_dir / "watch.json")]


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def edit_epochs(path: Path, change) -> None:
    """``change(record, is_last)`` applied to each epoch record of a metrics.jsonl."""
    records = [json.loads(line) for line in path.open()]
    for i, record in enumerate(records):
        change(record, i == len(records) - 1)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def assert_issue40_pages(out: Path) -> None:
    """The report of :func:`add_issue40`'s tree: the time box and its partial epoch on the
    runs table, the shares page, the evaluations page."""
    runs = pd.read_csv(out / "runs.csv", keep_default_na=False).set_index("run")
    assert runs.loc["alike-1w", "partial_epoch"] == "4/9"
    assert float(runs.loc["alike-1w", "time_box_seconds"]) == 3.0
    assert (out / "figures" / "evaluations.png").is_file()
    pages = [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")]
    table = next(p for p in pages if p.startswith("Runs "))
    assert "+4/9 st." in table and "(box 3.00 s)" in table and "Time-boxed runs" in table
    shares = next(p for p in pages if p.startswith("Worker shares"))
    assert "[3, 1]" in shares and "75.0%" in shares and "25.0%" in shares  # samples 96 / 32
    assert "96" in shares and "32" in shares and "10.2 ms" in shares and "96%" in shares
    watched = next(p for p in pages if p.startswith("Evaluating while training"))
    assert "every 0.005 min while it trained" in watched
