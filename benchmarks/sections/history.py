"""history: what the history store costs. No training: ``--history-runs`` finished runs are
written once, under the work directory, as the train and evaluate stages write them (run.json
with provenance, 20 epochs of metrics.jsonl, the evaluation's metrics.json; 4 sites x 5
environments x 50 configurations), and each round measures, in this process
(``time.perf_counter`` around each call; the store on the work directory's file system, WAL on
a local disk):

* H1, the append: :func:`clusterbench.history.store.append` of those runs' entries to a new
  store, one transaction, as runs per second (goal >= 1000/s: 1,000 runs within 1 s on the
  2-core reference machine); beside it, reading the runs' files into entries
  (:func:`clusterbench.history.entries.entry`, what the history step does first) and appending
  the same runs again (all present: what a rerun of the step costs);
* H2, the report page's query, in seconds (reported, no goal): on a store holding
  ``--history-appends`` workflow runs of the same runs, the entries of the current runs' series
  and their points under the regression rule (:func:`clusterbench.history.stage.series_history`
  and :func:`clusterbench.history.regression.points`: what the history step writes for the
  page, and the page draws).

The sections import ``clusterbench`` as installed; run from a checkout with
``PYTHONPATH=workflow`` to measure that checkout's.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

from benchlib.figures import Figure
from benchlib.rows import Case, Runner

ORDER = 95
TITLE = "the history store: appending 1,000 runs, and the report page's query (H1, H2)"
OPTIONS = {
    "history_runs": (int, 1000, 100, "runs appended at once by the history rows"),
    "history_appends": (int, 10, 2, "workflow runs in the history the query reads"),
}
NEEDS: tuple[str, ...] = ()
GPU = False

#: H1's goal: runs appended per second (1,000 runs within 1 s).
GOAL_RUNS_PER_SECOND = 1000.0
ENVIRONMENTS = ("cpu", "gpu", "multi-gpu", "multi-node", "cpu-parallel")


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # no training rows: the runs' files are made in run()


def fake_run(root: Path, i: int) -> tuple[Path, Path]:
    """Run ``i``'s run and eval directories under ``root``, as the stages write them."""
    site, env, config = f"site{i % 4}", ENVIRONMENTS[(i // 4) % 5], i % 50
    run_dir, eval_dir = root / "runs" / f"run-{i:05d}", root / "eval" / f"run-{i:05d}"
    run_dir.mkdir(parents=True, exist_ok=True)
    eval_dir.mkdir(parents=True, exist_ok=True)
    run = {
        "name": run_dir.name, "dataset": "cifar10", "model": "resnet",
        "workers": 1 + config % 8, "nodes": 1 + config % 2, "gpus_per_node": config % 4,
        "epochs": 20, "batch_size": 64 * (1 + config % 4), "lr": 0.1, "seed": i,
        "backend": "horovod" if config % 2 else "ddp", "bn": "aggregate",
        "precision": "fp32", "channels_last": "auto",
    }  # fmt: skip
    hosts = [
        {
            "host": f"node{h:03d}",
            "node": f"node{h:03d}",
            "cpu_model": "Xeon Gold 6330",
            "cpu_cores": {"logical": 56, "physical": 28},
            "gpus": ["NVIDIA A100-SXM4-80GB"] * 4,
            "gpu_driver": "550.54.15",
            "ranks": [h],
        }  # fmt: skip
        for h in range(run["nodes"])
    ]
    date = f"2026-01-01T10:{i % 60:02d}:00+00:00"
    versions = {"python": "3.11.7", "torch": "2.13.0", "horovod": "0.28.1", "nccl": "2.29.7"}
    info = {
        "run": run,
        "site": site,
        "experiment": {"name": "envs", "environment": env, "point": {}, "repeat": 0},
        "world": {"size": run["workers"], "hosts": [h["host"] for h in hosts], "device": "cuda"},
        "effective": {"global_batch": run["batch_size"], "memory_format": "channels_last"},
        "epochs_completed": 20,
        "train_seconds": 600.0,
        "provenance": {
            "date": date,
            "git": {"commit": "0123456789abcdef" * 2 + "01234567", "dirty": False},
            "versions": versions,
            "hosts": hosts,
        },
    }
    (run_dir / "run.json").write_text(json.dumps(info))
    ips = 1000.0 + 10 * config
    epochs = [
        {
            "epoch": e,
            "epoch_seconds": 50000 / ips,
            "images_per_second": ips * (1 + 0.01 * ((e * 7 + i) % 5 - 2)),
            "val_accuracy": 0.5 + 0.02 * e,
            "time": date,
        }
        for e in range(1, 21)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in epochs))
    (eval_dir / "metrics.json").write_text(json.dumps({"accuracy": 0.9, "split": "test"}))
    return run_dir, eval_dir


@functools.cache
def runs(work: Path, n: int) -> tuple[tuple[Path, Path], ...]:
    """The ``n`` runs' directories under ``work``, written once for every round."""
    return tuple(fake_run(work / "history-results", i) for i in range(n))


def timed(call: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value


def history_of(path: Path, made: list[dict], appends: int) -> None:
    """``appends`` workflow runs of the runs of ``made``, one a day, in a new store."""
    from clusterbench.history import store

    for day in range(1, appends + 1):
        stamp = f"2026-01-{day:02d}T10:00:00+00:00"
        store.append(path, [{**e, "end_time": stamp, "date": stamp[:10]} for e in made], {})


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    from clusterbench.history import entries, regression, stage, store

    pairs = runs(runner.work, args.history_runs)
    where = runner.work / "history" / f"round-{runner.round}"
    where.mkdir(parents=True, exist_ok=True)
    read_s, made = timed(lambda: [entries.entry(r, e, 1) for r, e in pairs])
    append_s, _ = timed(lambda: store.append(where / "new.sqlite", made, {"config_hash": "b"}))
    again_s, _ = timed(lambda: store.append(where / "new.sqlite", made, {"config_hash": "b"}))
    n = len(made)
    h1 = Figure(
        "H1 history append",
        f"history: {n} runs appended to a new store in one transaction, runs/s "
        f"(goal: 1,000 runs within 1 s)",
        GOAL_RUNS_PER_SECOND,
        value=n / append_s,
        detail=f"{append_s:.3f} s for {n} runs; again (all present) {again_s:.3f} s; "
        f"their entries from the runs' files {read_s:.3f} s",
    )
    history_of(where / "history.sqlite", made, args.history_appends)
    query_s, pts = timed(
        lambda: regression.points(stage.series_history(where / "history.sqlite", made))
    )
    h2 = Figure(
        "H2 history query",
        f"history: the report page's query, s: the series of {n} runs in a store of "
        f"{args.history_appends} appends of them, and their points under the regression rule",
        None,
        value=query_s,
        detail=f"{query_s:.3f} s: {n * args.history_appends} entries, {len(pts)} points",
    )
    return [h1, h2]
