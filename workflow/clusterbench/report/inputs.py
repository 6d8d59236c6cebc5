"""Reading and checking the results the report is made of: run.json, metrics.jsonl, the
evaluation's files, Snakemake benchmark TSVs, the report's own settings and the skipped runs."""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from clusterbench.config import (
    ConfigError,
    stage_params,
)
from clusterbench.core.params import read_json_object
from clusterbench.records import comm as comm_records
from clusterbench.records import runs
from clusterbench.report import step_times

PER_CLASS_FIELDS = ("class", "precision", "recall", "f1", "support")


BENCH_COLUMNS = (
    "s",
    "h:m:s",
    "max_rss",
    "max_vms",
    "max_uss",
    "max_pss",
    "io_in",
    "io_out",
    "mean_load",
    "cpu_time",
)


@dataclass(frozen=True)
class ReportParams:
    title: str
    author: str
    config_hash: str
    timing_warmup_epochs: int
    target_accuracy: float | None = None  # time-to-accuracy's target (None: none)


@dataclass
class RunData:
    """Everything the train and evaluate stages wrote for one run."""

    name: str
    info: dict[str, Any]  # run.json
    epochs: pd.DataFrame  # metrics.jsonl
    metrics: dict[str, Any]  # eval metrics.json
    confusion: pd.DataFrame  # rows true, columns predicted, labelled by class name
    per_class: pd.DataFrame


def parse_params(text: str, config_hash: str) -> ReportParams:
    """``--params``, checked against the config schema's ``report`` settings, and the hash of
    the config the results come from (``--config-hash``)."""
    settings = stage_params("report", text)
    if not config_hash.strip():
        raise ConfigError("--config-hash is empty")
    return ReportParams(
        title=settings["title"].strip(),
        author=settings["author"].strip(),
        config_hash=config_hash,
        timing_warmup_epochs=settings["timing_warmup_epochs"],
        target_accuracy=settings["target_accuracy"],
    )


def _read_csv(path: Path, what: str, **kwargs: Any) -> pd.DataFrame:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing ({what})")
    try:
        return pd.read_csv(path, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV ({what}): {exc}") from None


def epochs_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """A run's epochs (:func:`clusterbench.records.runs.read_epochs`) as a DataFrame, one row per
    epoch, the step-time breakdown in columns of its own."""
    return step_times.flatten(pd.DataFrame(records)).reset_index(drop=True)


def read_epochs(path: Path) -> pd.DataFrame:
    """``metrics.jsonl`` (:func:`clusterbench.records.runs.read_epochs`) as a DataFrame."""
    return epochs_frame(runs.read_epochs(path))


def read_confusion(path: Path) -> pd.DataFrame:
    cm = _read_csv(path, "confusion matrix of the evaluate stage", index_col=0)
    cm.index = cm.index.astype(str)
    cm.columns = cm.columns.astype(str)
    if cm.empty or list(cm.index) != list(cm.columns):
        raise ValueError(
            f"{path}: expected a square confusion matrix with the same class labels on rows "
            f"(true) and columns (predicted), got rows {list(cm.index)}, columns {list(cm.columns)}"
        )
    if not all(pd.api.types.is_integer_dtype(t) for t in cm.dtypes) or (cm.to_numpy() < 0).any():
        raise ValueError(f"{path}: confusion matrix entries must be non-negative integers")
    return cm


def load_run(run_dir: Path, eval_dir: Path) -> RunData:
    """Read and check one run's train and evaluate outputs (:mod:`clusterbench.records.runs`)."""
    info, records = runs.read_run(run_dir)
    name = str(info["run"]["name"])
    metrics = runs.read_eval_metrics(eval_dir / "metrics.json", name)
    if metrics.get("task") == "language-model":  # no classes: the files hold their header
        confusion = pd.DataFrame()
    else:
        confusion = read_confusion(eval_dir / "confusion.csv")
    per_class = _read_csv(eval_dir / "per_class.csv", "per-class metrics", dtype={"class": str})
    missing = [c for c in PER_CLASS_FIELDS if c not in per_class.columns]
    if missing:
        raise ValueError(f"{eval_dir / 'per_class.csv'}: missing column(s) {missing}")
    return RunData(name, info, epochs_frame(records), metrics, confusion, per_class)


def expand_benchmark_args(args: list[str]) -> tuple[list[Path], list[str]]:
    """Benchmark files from file paths, directories (searched for ``*.tsv``) and glob patterns
    (for when the shell did not expand them). Returns (files, arguments that matched nothing)."""
    files: list[Path] = []
    missing: list[str] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found = sorted(path.rglob("*.tsv"))
        elif path.is_file():
            found = [path]
        elif any(c in arg for c in "*?["):
            found = sorted(Path(m) for m in glob.glob(arg, recursive=True) if Path(m).is_file())
        else:
            found = []
        files.extend(found)
        if not found:
            missing.append(arg)
    return list(dict.fromkeys(files)), missing


def load_benchmarks(files: list[Path]) -> pd.DataFrame:
    """Snakemake benchmark TSVs as one table: rule = parent directory, job = file stem."""
    frames = []
    for path in files:
        try:
            df = pd.read_csv(path, sep="\t", na_values=["NA", "-"])
        except pd.errors.EmptyDataError:
            continue  # an empty file holds no record
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not a Snakemake benchmark TSV: {exc}") from None
        if "s" not in df.columns:
            raise ValueError(
                f"{path}: not a Snakemake benchmark TSV: no 's' column, got {list(df.columns)}"
            )
        numeric = [c for c in BENCH_COLUMNS if c in df.columns and c != "h:m:s"]
        df[numeric] = df[numeric].apply(pd.to_numeric, errors="coerce")
        df.insert(0, "rule", path.parent.name)
        df.insert(1, "job", path.stem)
        df.insert(2, "repeat", range(len(df)))
        df["file"] = str(path)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["rule", "job", "repeat", *BENCH_COLUMNS, "file"])
    return pd.concat(frames, ignore_index=True)


#: The comm table's columns (:data:`clusterbench.records.comm.READ_COLUMNS`).
COMM_COLUMNS = comm_records.READ_COLUMNS


def read_comm(path: Path) -> pd.DataFrame:
    """One comm job's ``comm.json`` (:func:`clusterbench.records.comm.read_comm`) as a table."""
    return pd.DataFrame(comm_records.read_comm(path), columns=list(COMM_COLUMNS))


def load_datasets(paths: list[Path]) -> list[dict[str, Any]]:
    """Each preprocessed dataset's ``meta.json`` (results/data/NAME/meta.json), with
    ``meta_bytes``, its own size, and ``dir_bytes``, what its folder holds in all (what the
    preprocess step wrote on the shared file system)."""
    found = []
    for path in paths:
        meta = read_json_object(Path(path), "preprocessed dataset's record")
        folder = Path(path).parent
        written = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        found.append({**meta, "meta_bytes": Path(path).stat().st_size, "dir_bytes": written})
    return found


def load_watch(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """The watch stage's records (results/watch/RUN/watch.json: its evaluations while the
    training ran, :mod:`clusterbench.watch`), by run; a file that is not one is named."""
    found = {}
    for path in paths:
        record = read_json_object(Path(path), "evaluations while training (the watch stage's)")
        points = record.get("points")
        if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
            raise ValueError(f"{path}: 'points' must be a list of objects (the watch stage's)")
        found[str(record.get("run") or Path(path).parent.name)] = record
    return found


def load_comm(paths: list[Path]) -> pd.DataFrame:
    """Every comm job's rows (:func:`read_comm`) as one table; no path: an empty one."""
    frames = [read_comm(Path(p)) for p in paths]
    if not frames:
        return pd.DataFrame(columns=list(COMM_COLUMNS))
    return pd.concat(frames, ignore_index=True)


#: Package versions of the training shown per run (runs.csv columns of the same names).
PROVENANCE_VERSIONS = ("python", "torch", "horovod", "numpy")


#: runs.csv columns compared between runs -> their name in the report.
PROVENANCE_COMPARED = {
    "cpu_model": "CPU",
    "cpu_cores": "cores",
    "gpus": "GPUs",
    "gpu_driver": "GPU driver",
    "commit": "commit",
    "python": "Python",
    "torch": "torch",
    "horovod": "Horovod",
    "numpy": "NumPy",
}


#: Names of the local host that a scheduler node name may be (the same machine as its host).
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def load_history(path: Path | None) -> pd.DataFrame | None:
    """The history step's table (``results/history/series.csv``: the store's entries in the
    series of these runs, :mod:`clusterbench.history.stage`); None without one."""
    if path is None:
        return None
    text = ("site", "experiment", "environment", "workload", "speed_settings", "run")
    df = _read_csv(
        path,
        "the history of these runs' series (the history step)",
        dtype={c: str for c in text},
        keep_default_na=False,  # an empty site is '', not NaN
        na_values={c: [""] for c in HISTORY_NUMBERS},
    )
    missing = [c for c in HISTORY_FIELDS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing} (not the history step's table)")
    return df


#: Columns the history page needs of the history step's table.
HISTORY_FIELDS = (
    "site",
    "environment",
    "workload",
    "speed_settings",
    "append_id",
    "date",
    "run",
    "images_per_second_mean",
    "images_per_second_sd",
    "timed_epochs",
    "current",
)


#: Numeric columns of the history step's table (empty: NaN).
HISTORY_NUMBERS = (
    "images_per_second_mean",
    "images_per_second_sd",
    "epoch_seconds_mean",
    "epoch_seconds_sd",
    "tokens_per_second_mean",
    "tokens_per_second_sd",
    "timed_epochs",
    "accuracy",
    "final_val_accuracy",
)


#: skipped.csv's columns (one row per run skipped where the workflow ran).
SKIPPED_COLUMNS = ("run", "experiment", "environment", "reason")


def parse_skipped(text: str) -> list[dict[str, Any]]:
    """``--skipped``: a JSON list of objects, each with at least ``run`` and ``reason``."""
    try:
        skipped = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--skipped: not JSON: {exc}") from None
    if not isinstance(skipped, list) or not all(
        isinstance(entry, dict) and {"run", "reason"} <= entry.keys() for entry in skipped
    ):
        raise ConfigError(f"--skipped: expected a list of {{run, reason, ...}}, got {text[:80]!r}")
    return skipped
