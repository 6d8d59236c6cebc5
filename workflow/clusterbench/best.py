"""Stage 6: keep the best run: ``results/best/`` gets its model.pt, run.json and a summary.

```
python scripts/best.py --results results/report/results.csv \
    --run-dirs results/runs/A ... --eval-dirs results/eval/A ... --out-dir results/best
```

The best run is rank 1 of the report's results.csv, which is sorted by final validation
accuracy (then validation loss, then name: ``clusterbench.report.tables.sort_by_validation``):
chosen on validation, never on the test split. ``summary.json`` names the run, the criterion,
its validation accuracy and loss, its test (evaluation) accuracy, and where it came from
(experiment, environment, swept values). Every file is written atomically; model.pt last.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from clusterbench.core.atomic import atomic_path, write_json
from clusterbench.core.interrupted import one_line
from clusterbench.core.params import read_json_object

CRITERION = (
    "final validation accuracy, then final validation loss, then run name (language models "
    "after the classification runs, by final validation loss; runs on synthetic data last)"
)


class BestError(ValueError):
    """The best run cannot be kept; the message names the file."""


def best_row(results: Path) -> dict[str, str]:
    """Rank 1 of results.csv."""
    try:
        with results.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise BestError(f"{results}: cannot be read: {exc}") from None
    ranked = [r for r in rows if r.get("rank") == "1"]
    if not ranked or "run" not in ranked[0]:
        raise BestError(f"{results}: no row with rank 1 (and a run column): {len(rows)} row(s)")
    return ranked[0]


def summary(row: dict[str, str], evaluation: dict[str, Any]) -> dict[str, Any]:
    return {
        "run": row["run"],
        "chosen_by": CRITERION,
        "val_accuracy": float(row["final_val_accuracy"]),
        "val_loss": float(row["final_val_loss"]),
        "test_accuracy": float(evaluation["accuracy"]),
        "test_split": evaluation.get("split"),
        "test_n": evaluation.get("n"),
        "experiment": row.get("experiment") or None,
        "environment": row.get("environment") or None,
        "point": json.loads(row.get("point") or "{}"),
    }


def keep_best(results: Path, run_dirs: list[Path], eval_dirs: list[Path], out_dir: Path) -> str:
    row = best_row(results)
    name = row["run"]
    runs = {d.name: d for d in run_dirs}
    evals = {d.name: d for d in eval_dirs}
    if name not in runs or name not in evals:
        raise BestError(f"{results}: the best run {name!r} is not among the runs given")
    evaluation = read_json_object(evals[name] / "metrics.json", "evaluation metrics")
    write_json(out_dir / "summary.json", summary(row, evaluation))
    with atomic_path(out_dir / "run.json") as tmp:
        shutil.copyfile(runs[name] / "run.json", tmp)
    with atomic_path(out_dir / "model.pt") as tmp:
        shutil.copyfile(runs[name] / "model.pt", tmp)
    return name


@one_line("best")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True, help="results/report/results.csv")
    parser.add_argument("--run-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument("--eval-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument("--out-dir", type=Path, required=True, help="results/best")
    args = parser.parse_args(argv)
    try:
        name = keep_best(args.results, args.run_dirs, args.eval_dirs, args.out_dir)
    except (BestError, OSError, ValueError) as exc:
        print(f"best: error: {exc}", file=sys.stderr)
        return 1
    print(f"best: {name} ({CRITERION}) -> {args.out_dir}")
    return 0
