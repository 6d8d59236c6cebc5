"""The workflow's history step: append this workflow's runs to the history store, then write
the history of their series for the report.

```
python scripts/history.py --history results/history.sqlite --warmup-epochs 1 \
    --run-dirs results/runs/A ... --eval-dirs results/eval/A ... \
    --out results/history/series.csv [--config-hash HASH]
```

Each run becomes one entry (:func:`clusterbench.history.entries.entry`, timed as the report
times it); the entries go into the store in one transaction, those already there (the same
run directory and training end) left as they are, so running the step again adds nothing.
``--out`` gets every entry of the store in the series of these runs (their site,
environment, workload and configuration, from every checkout and user that appended to the
store), oldest first, with ``current`` marking this workflow's runs: what the report's history
page draws. The log names what was appended and each series whose newest point is a
regression (:mod:`clusterbench.history.regression`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

from clusterbench.core import provenance
from clusterbench.core.atomic import atomic_open
from clusterbench.core.interrupted import one_line
from clusterbench.history import entries as history_entries
from clusterbench.history import regression, store
from clusterbench.records.runs import pair_dirs

#: Columns of the store left out of ``--out`` (JSON kept in the store for later readers).
LEFT_OUT = ("settings", "provenance", "epoch_metrics")


def append_runs(
    path: Path, pairs: list[tuple[Path, Path]], warmup: int, config_hash: str
) -> tuple[store.Appended, list[dict]]:
    """Append the runs of ``pairs`` to the store at ``path``; returns what was appended and
    the entries."""
    made = [history_entries.entry(run_dir, eval_dir, warmup) for run_dir, eval_dir in pairs]
    git = provenance.git_info()
    batch = {"config_hash": config_hash, "commit_sha": provenance.describe_commit(git)}
    return store.append(path, made, batch), made


def series_history(path: Path, made: list[dict]) -> pd.DataFrame:
    """Every entry of the store in the series of ``made``, ``current`` marking ``made``."""
    rows = store.read_runs(path, made)
    current = {(e["run_dir"], e["end_time"]) for e in made}
    df = regression.entries_frame(rows, current)
    return df.drop(columns=[c for c in LEFT_OUT if c in df.columns])


def summary(path: Path, appended: store.Appended, history: pd.DataFrame) -> list[str]:
    """The log's lines: what was appended, the series, the newest points that regressed."""
    lines = [
        f"history: {appended.added} run(s) appended to {os.path.abspath(path)}"
        + (f" ({appended.present} already there)" if appended.present else "")
    ]
    pts = regression.points(history)
    n_series = len(pts.groupby(list(regression.SERIES_KEY), dropna=False)) if len(pts) else 0
    lines.append(f"history: {n_series} series, {len(history)} entries in all")
    for row in regression.newest_regressions(pts).itertuples(index=False):
        lines.append(
            f"history: REGRESSION {regression.series_name(row)}: "
            f"{row.mean:,.0f} {row.unit} on {row.date[:10]}, {-row.change:.1%} "
            f"below the history's {row.ref_mean:,.0f} (threshold {row.threshold:,.0f}); "
            f"changed: {row.changed}"
        )
    return lines


@one_line("history")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=Path, required=True, help="the store (history.path)")
    parser.add_argument("--warmup-epochs", type=int, required=True, help="left out of timing")
    parser.add_argument(
        "--config-hash",
        default=os.environ.get("CLUSTERBENCH_CONFIG_HASH", ""),
        help="the config's hash, recorded with the append (default: $CLUSTERBENCH_CONFIG_HASH, "
        "which the workflow sets)",
    )
    parser.add_argument("--run-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument("--eval-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument("--out", type=Path, required=True, help="results/history/series.csv")
    args = parser.parse_args(argv)
    if args.warmup_epochs < 0:
        parser.error(f"--warmup-epochs must be >= 0, got {args.warmup_epochs}")
    try:
        pairs = pair_dirs(args.run_dirs, args.eval_dirs)
        appended, made = append_runs(args.history, pairs, args.warmup_epochs, args.config_hash)
        history = series_history(args.history, made)
    except store.HistoryError as exc:
        print(f"history: error: {exc}", file=sys.stderr)
        return 1
    with atomic_open(args.out, newline="") as fh:
        history.to_csv(fh, index=False)
    for line in summary(args.history, appended, history):
        print(line)
    return 0
