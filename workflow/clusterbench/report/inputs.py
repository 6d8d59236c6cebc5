"""Reading and checking the results the report is made of: run.json, metrics.jsonl, the
evaluation's files, Snakemake benchmark TSVs, the report's own settings and the skipped runs."""

from __future__ import annotations

import glob
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from clusterbench import comm
from clusterbench.config import (
    LATER_TRAIN_KEYS,
    TRAIN_KEYS,
    ConfigError,
    stage_params,
)
from clusterbench.core.integrity import forcerun_command
from clusterbench.core.params import read_json_object
from clusterbench.report import step_times
from clusterbench.report.text import plural

EPOCH_FIELDS = (
    "epoch",
    "train_loss",
    "val_loss",
    "val_accuracy",
    "epoch_seconds",
    "images_per_second",
)


EFFECTIVE_FIELDS = ("global_batch", "lr", "batch_scaling")


EVAL_FIELDS = ("split", "accuracy", "loss", "n")


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


def _require(obj: dict[str, Any], keys: tuple[str, ...], path: Path, where: str = "") -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}{where}")


def _read_csv(path: Path, what: str, **kwargs: Any) -> pd.DataFrame:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing ({what})")
    try:
        return pd.read_csv(path, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV ({what}): {exc}") from None


def read_epochs(path: Path) -> pd.DataFrame:
    """metrics.jsonl as a DataFrame, one row per epoch. The train stage logs epochs 1, 2, ...,
    N in order, one line each: a gap, a repeated epoch or another order is an error naming the
    line (the file was cut, edited or mixed with another run's)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (per-epoch metrics of the train stage)")
    numbered = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not valid JSON: {exc}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object per line")
        _require(row, EPOCH_FIELDS, path, f" on line {lineno}")
        numbered.append((lineno, row))
    if not numbered:
        raise ValueError(f"{path}: no epochs recorded")
    df = pd.DataFrame([row for _, row in numbered])
    for col in EPOCH_FIELDS:
        try:
            df[col] = pd.to_numeric(df[col])
        except (ValueError, TypeError):
            raise ValueError(f"{path}: field {col!r} has non-numeric values") from None
    check_epoch_sequence(df["epoch"].tolist(), [n for n, _ in numbered], path)
    return step_times.flatten(df).reset_index(drop=True)


def check_epoch_sequence(epochs: list[Any], linenos: list[int], path: Path) -> None:
    """``epochs`` (from lines ``linenos`` of ``path``) must be 1, 2, ..., N: the first record
    that is not the next epoch is an error naming its line and what it should be."""
    seen: dict[Any, int] = {}
    for i, (epoch, lineno) in enumerate(zip(epochs, linenos, strict=True), start=1):
        if isinstance(epoch, bool) or epoch != i:
            whole = isinstance(epoch, int | float) and math.isfinite(epoch) and epoch % 1 == 0
            shown = int(epoch) if whole else repr(epoch)
            why = ""
            if epoch in seen:
                why = f" (epoch {shown} again, first on line {seen[epoch]})"
            elif whole and epoch == i + 1:
                why = f" (epoch {i} is missing)"
            elif whole and epoch > i:
                why = f" (epochs {i}..{int(epoch) - 1} are missing)"
            raise ValueError(
                f"{path}:{lineno}: epoch {shown} where epoch {i} is due{why}: the epochs must be "
                "1, 2, ..., N in order, each once (was the file cut, edited or mixed with another "
                "run's?)"
            )
        seen[epoch] = lineno


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
    """Read and check one run's train and evaluate outputs."""
    info = read_json_object(run_dir / "run.json", "run summary of the train stage")
    _require(info, ("run", "train_seconds", "epochs_completed"), run_dir / "run.json")
    if not isinstance(info["run"], dict):
        raise ValueError(f"{run_dir / 'run.json'}: 'run' must be an object")
    required = tuple(k for k in TRAIN_KEYS if k not in LATER_TRAIN_KEYS)
    _require(info["run"], required, run_dir / "run.json", " in 'run'")
    if not isinstance(info.get("effective"), dict):
        raise ValueError(
            f"{run_dir / 'run.json'}: missing field 'effective' (an object with "
            f"{list(EFFECTIVE_FIELDS)})"
        )
    _require(info["effective"], EFFECTIVE_FIELDS, run_dir / "run.json", " in 'effective'")
    check_provenance(info, run_dir / "run.json")
    name = str(info["run"]["name"])
    epochs = read_epochs(run_dir / "metrics.jsonl")
    check_epochs_completed(info["epochs_completed"], len(epochs), run_dir)

    metrics = read_json_object(eval_dir / "metrics.json", "metrics of the evaluate stage")
    _require(metrics, EVAL_FIELDS, eval_dir / "metrics.json")
    if metrics.get("run", name) != name:
        raise ValueError(
            f"{eval_dir / 'metrics.json'}: evaluates run {metrics['run']!r}, but is paired with "
            f"{run_dir} (run {name!r})"
        )
    if metrics.get("task") == "language-model":  # no classes: the files hold their header
        confusion = pd.DataFrame()
    else:
        confusion = read_confusion(eval_dir / "confusion.csv")
    per_class = _read_csv(eval_dir / "per_class.csv", "per-class metrics", dtype={"class": str})
    missing = [c for c in PER_CLASS_FIELDS if c not in per_class.columns]
    if missing:
        raise ValueError(f"{eval_dir / 'per_class.csv'}: missing column(s) {missing}")
    return RunData(name, info, epochs, metrics, confusion, per_class)


def check_epochs_completed(completed: Any, recorded: int, run_dir: Path) -> None:
    """``run.json``'s ``epochs_completed`` must be the number of epochs in ``metrics.jsonl``
    (the train stage writes both from the same records): otherwise one of the two was cut or
    edited, and the run's epochs and its summary would disagree in the report."""
    info, metrics = run_dir / "run.json", run_dir / "metrics.jsonl"
    if isinstance(completed, bool) or not isinstance(completed, int) or completed < 1:
        raise ValueError(
            f"{info}: 'epochs_completed' must be a whole number >= 1, got {completed!r}"
        )
    if completed != recorded:
        raise ValueError(
            f"{metrics} records {plural(recorded, 'epoch')} but {info} says "
            f"epochs_completed = {completed}: the train stage writes both from the same epochs, "
            f"so one of them was cut or edited. Train the run again with: "
            f"{forcerun_command(info)}"
        )


def pair_dirs(run_dirs: list[Path], eval_dirs: list[Path]) -> list[tuple[Path, Path]]:
    """Match ``results/runs/RUN`` with ``results/eval/RUN`` by directory name."""
    for kind, dirs in (("--run-dirs", run_dirs), ("--eval-dirs", eval_dirs)):
        names = [d.name for d in dirs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"{kind}: run name(s) given twice: {dupes}")
    evals = {d.name: d for d in eval_dirs}
    runs = {d.name for d in run_dirs}
    problems = []
    if no_eval := [d.name for d in run_dirs if d.name not in evals]:
        problems.append(f"no --eval-dirs entry for run(s) {no_eval}")
    if no_run := sorted(set(evals) - runs):
        problems.append(f"no --run-dirs entry for evaluation(s) {no_run}")
    if problems:
        raise ValueError("; ".join(problems))
    return [(d, evals[d.name]) for d in run_dirs]


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


#: The fields of a comm.json row the report reads (clusterbench.comm.row), all numbers.
COMM_ROW_FIELDS = (
    "size",
    "bytes",
    "iterations",
    "time_s",
    "time_min_s",
    "time_max_s",
    "algbw_gbps",
    "busbw_gbps",
    "busbw_min_gbps",
    "busbw_max_gbps",
)


#: The comm table's columns: the job (and where it ran), then each row's operation and fields.
COMM_COLUMNS = ("name", "site", *comm.JOB_COLUMNS[1:], "op", *COMM_ROW_FIELDS)


def read_comm(path: Path) -> pd.DataFrame:
    """One comm job's ``comm.json`` (:mod:`clusterbench.comm`) as rows of :data:`COMM_COLUMNS`;
    an error naming the file and the field when it is not one."""
    from clusterbench.comm import FORMAT, OPS

    info = read_json_object(path, "results of the comm stage")
    if info.get("format") != FORMAT:
        raise ValueError(f"{path}: comm.json format {info.get('format')!r}, expected {FORMAT}")
    _require(info, ("name", "backend", "environment", "site", "rows"), path)
    env = info["environment"]
    if not isinstance(env, dict) or not isinstance(info["rows"], list):
        raise ValueError(f"{path}: 'environment' must be an object and 'rows' a list")
    _require(env, ("workers", "nodes", "gpus_per_node", "device"), path, " in 'environment'")
    job = {
        "name": str(info["name"]),
        "site": str(info["site"]),
        "backend": str(info["backend"]),
        "library": str(info.get("library") or ""),
        **{key: env[key] for key in ("workers", "nodes", "gpus_per_node", "device")},
    }
    rows = []
    for i, entry in enumerate(info["rows"]):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: rows[{i}] must be an object")
        _require(entry, ("op", *COMM_ROW_FIELDS), path, f" in rows[{i}]")
        bad = [k for k in COMM_ROW_FIELDS if not isinstance(entry[k], int | float)]
        if entry["op"] not in OPS or bad:
            raise ValueError(f"{path}: rows[{i}]: unknown op {entry['op']!r} or no number in {bad}")
        rows.append({**job, "op": entry["op"], **{k: entry[k] for k in COMM_ROW_FIELDS}})
    return pd.DataFrame(rows, columns=list(COMM_COLUMNS))


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


def check_provenance(info: dict[str, Any], path: Path) -> None:
    """Check ``run.json``'s ``provenance`` when it has one (see the module docstring)."""
    prov = info.get("provenance")
    if prov is None:
        return  # written before provenance was recorded: reported as unknown
    if not isinstance(prov, dict):
        raise ValueError(f"{path}: 'provenance' must be an object, got {type(prov).__name__}")
    problems = []
    hosts = prov.get("hosts")

    def host_ok(h: Any) -> bool:
        ranks = h.get("ranks") if isinstance(h, dict) else None
        return isinstance(h.get("host"), str) and isinstance(ranks, list) and bool(ranks)

    if not isinstance(hosts, list) or not hosts or not all(map(host_ok, hosts)):
        problems.append("'hosts' must be a non-empty list of objects with 'host' and 'ranks'")
    if not isinstance(prov.get("git"), dict) or "commit" not in prov["git"]:
        problems.append("'git' must be an object with 'commit'")
    if not isinstance(prov.get("versions"), dict):
        problems.append("'versions' must be an object")
    if problems:
        raise ValueError(f"{path}: malformed 'provenance': {'; '.join(problems)}")


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
