"""Stage 5: tables and a multi-page PDF report of all runs.

```
python scripts/report.py \
    --params '{"title": ..., "author": ..., "timing_warmup_epochs": 1}' --config-hash HASH \
    --run-dirs results/runs/A ... --eval-dirs results/eval/A ... \
    --benchmarks results/benchmarks/**/*.tsv --out-dir results/report
```

Reads, per run, ``run.json`` + ``metrics.jsonl`` (train stage) and ``metrics.json`` +
``confusion.csv`` + ``per_class.csv`` (evaluate stage), paired by directory name, plus the
Snakemake ``benchmark:`` TSV files (``results/benchmarks/{rule}/{job}.tsv``). Writes
``runs.csv`` (one row per run, sorted by accuracy), ``epochs.csv`` (one row per run and epoch),
``benchmarks.csv`` (one row per benchmark record), ``figures/*.png`` and, last, ``report.pdf``
(A4 landscape): title page with a summary and provenance, runs table, provenance of each run,
time per epoch, throughput, scaling, backend comparison, training curves, confusion matrix of
the best run, per-rule wall time and memory. Every page and every PNG figure carries the same
footer (:func:`footer_text`: title, config hash, commit of the report's code).

Provenance is the training's, not the report's: each run's ``run.json`` holds what its ranks saw
where they ran (``provenance``: hosts and their ranks, CPU, GPUs and NVIDIA driver, git commit,
package versions). The provenance page has one row per run and marks the values in which a run
differs from the others (also ``provenance_differs`` in runs.csv). A ``run.json`` written before
provenance was recorded is accepted: its hardware and commit are reported as unknown (its
``versions`` and ``world.hosts`` were recorded by rank 0 and are used). The report's own host
appears only as where the report was generated.

Timing is honest: the first ``timing_warmup_epochs`` epochs of every run (start-up, caches,
compilation) are left out of its epoch time and throughput, which are mean and sample standard
deviation over the remaining ("timed") epochs; a run with no timed epoch gets NaN ("n/a") and
the report says why. A run's speed-up is measured against the fastest 1-worker run with the same
dataset, model, global batch, device, backend and BN mode, never against any other run.

All inputs are read and checked before anything is written; a missing or malformed required
file is an error naming that file. Missing benchmark files are not: the section says so. A
run's ``metrics.jsonl`` must hold epochs 1, 2, ..., N, each once and in order, and N must be
``run.json``'s ``epochs_completed`` (a cut or edited file is refused, with the command that
trains the run again).

Text from the config and the data files (title, author, run, dataset and class names, hosts)
is drawn literally: a ``$`` is a dollar sign, never mathtext (:func:`theme`). Installed fonts
of wide coverage back up the report's own (:data:`FALLBACK_FONTS`); characters that no font
here can draw are named on stderr (the rule's log), per text, and drawn as boxes.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import sys
import textwrap
import unicodedata
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clusterbench import provenance
from clusterbench.atomic import atomic_open, atomic_path
from clusterbench.config import (
    LATER_TRAIN_KEYS,
    TRAIN_KEYS,
    ConfigError,
    bad_settings,
    stage_params,
)
from clusterbench.integrity import forcerun_command
from clusterbench.params import read_json_object

PAGE_SIZE = (11.69, 8.27)  # A4 landscape, inches
TABLE_ROWS_PER_PAGE = 12
BENCH_JOBS_PER_PAGE = 26
MAX_ANNOTATED_POINTS = 8
PIPELINE_ORDER = ("download", "preprocess", "train", "evaluate", "report")
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
RUN_ID_COLUMNS = ("run", "dataset", "model", "workers", "nodes")
#: Runs that share these are one scaling series: the 1-worker run among them is the baseline.
BASELINE_KEY = (
    "dataset",
    "model",
    "global_batch",
    "device",
    "backend",
    "bn",
    "precision",
    "channels_last",
)
#: Runs that share these differ only in their backend: compared on the backend page.
BACKEND_MATCH_KEY = (
    "dataset",
    "model",
    "workers",
    "nodes",
    "device",
    "bn",
    "global_batch",
    "precision",
    "channels_last",
)
BASELINE_WORDS = (
    "the same dataset, model, global batch, device, backend, BN mode and precision/memory format"
)
REFERENCE_BACKEND = "horovod"  # the denominator of the backend ratios, when present
NODE_MARKERS = "osD^vP*X"
DIFFERS_COLOR = "#fbd3ad"  # table cells whose provenance differs from the other runs'
#: Smallest height of a table text line unit (points): tables with more lines take more pages.
TABLE_UNIT_PT = 12.5
#: Width of a page's text, between the margins of 3 % of the page width (points).
TEXT_WIDTH_PT = 0.94 * PAGE_SIZE[0] * 72
#: Resolution text widths are measured at (that of the PNG figures; hinting at a lower one
#: widens the text).
MEASURE_DPI = 150
#: Font sizes (points) of a page's title, subtitle and note.
TITLE_PT, SUBTITLE_PT, NOTE_PT = 19, 11, 9.5
#: Fonts of wide coverage (CJK, symbols, emoji) that draw, where installed, the characters the
#: report's own fonts lack (matplotlib's font fallback: a list of families); the first found
#: of each group is enough, the others are the same glyphs under another name.
FALLBACK_FONTS = (
    ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR"),
    ("Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback"),
    ("Noto Sans",),
    ("Noto Sans Symbols",),
    ("Noto Sans Symbols2", "Noto Sans Symbols 2"),
    ("Noto Emoji", "Symbola"),
)
#: The faces the report draws text in (generic family, weight): a character is drawable when
#: each of them, or one of its fallbacks, has it.
REPORT_FACES = (("sans-serif", "normal"), ("sans-serif", "bold"), ("monospace", "normal"))
#: Most characters named per text in a missing-glyph warning.
MISSING_GLYPHS_LISTED = 12


# ------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class ReportParams:
    title: str
    author: str
    config_hash: str
    timing_warmup_epochs: int


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
    return df.reset_index(drop=True)


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
            f"{metrics} records {_plural(recorded, 'epoch')} but {info} says "
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


# ------------------------------------------------------------------------------------------------
# provenance of the runs (run.json's "provenance", recorded where each run trained)

UNKNOWN = provenance.UNKNOWN
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


def fmt_ranks(ranks: list[int]) -> str:
    """Rank numbers as ranges: [0, 1, 2, 3, 5] -> '0-3, 5'."""
    spans: list[list[int]] = []
    for r in sorted(set(map(int, ranks))):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def fmt_gpus(names: list[str]) -> str:
    """['A', 'A', 'B'] -> '2\u00d7 A, 1\u00d7 B'; 'none' without GPUs."""
    counts: dict[str, int] = {}
    for name in names:
        counts[str(name)] = counts.get(str(name), 0) + 1
    return ", ".join(f"{n}\u00d7 {name}" for name, n in counts.items()) or "none"


def host_label(entry: dict[str, Any]) -> str:
    """A host entry's name: the machine's, with the scheduler's node name where that differs
    ('node2 on vm': several scheduler nodes on one machine)."""
    host, node = str(entry.get("host") or UNKNOWN), entry.get("node")
    if not node or node == host or node in LOCAL_NAMES or host.startswith(f"{node}."):
        return host
    return f"{node} on {host}"


def _join(values: Any) -> str:
    """Distinct values joined by ' + ' (hosts of one run that differ); 'unknown' if none."""
    return " + ".join(dict.fromkeys(str(v) for v in values)) or UNKNOWN


def provenance_columns(info: dict[str, Any]) -> dict[str, Any]:
    """The runs.csv provenance columns of one run from its (checked) ``run.json``."""
    prov = info.get("provenance")
    if prov is None:  # older run.json: rank 0 recorded its versions and the node names only
        world = info.get("world") or {}
        versions = info.get("versions") if isinstance(info.get("versions"), dict) else {}
        return {
            "provenance": "not recorded",
            "host_ranks": "; ".join(dict.fromkeys(map(str, world.get("hosts") or []))) or UNKNOWN,
            "host_count": len(set(world.get("hosts") or [])),
            **dict.fromkeys(("cpu_model", "cpu_cores", "gpus", "gpu_driver", "commit"), UNKNOWN),
            "dirty": None,
            **{k: str(versions.get(k, UNKNOWN)) for k in PROVENANCE_VERSIONS},
            "rank_differences": "",
        }
    hosts = prov["hosts"]
    git, versions = prov["git"], prov["versions"]
    has_gpus = any(h.get("gpus") for h in hosts)

    def cores(h: dict[str, Any]) -> Any:
        c = h.get("cpu_cores")
        return (c.get("logical") if isinstance(c, dict) else c) or UNKNOWN

    rank_diffs = []
    for h in hosts:
        differs = h.get("differs_from_rank0") or {}
        if differs:
            what = [
                "commit " + provenance.describe_commit(v) if k == "git" else f"{k} {v}"
                for k, v in differs.items()
            ]
            rank_diffs.append(f"{host_label(h)}: {', '.join(what)}")
    return {
        "provenance": "recorded",
        "host_ranks": "; ".join(f"{host_label(h)} (ranks {fmt_ranks(h['ranks'])})" for h in hosts),
        "host_count": len(hosts),
        "cpu_model": _join(h.get("cpu_model") or UNKNOWN for h in hosts),
        "cpu_cores": _join(cores(h) for h in hosts),
        "gpus": _join(fmt_gpus(h.get("gpus") or []) for h in hosts),
        "gpu_driver": _join(h.get("gpu_driver") or UNKNOWN for h in hosts if h.get("gpus"))
        if has_gpus
        else "none",
        "commit": str(git.get("commit") or UNKNOWN),
        "dirty": git.get("dirty"),
        **{k: str(versions.get(k, UNKNOWN)) for k in PROVENANCE_VERSIONS},
        "rank_differences": "; ".join(rank_diffs),
    }


def commit_text(commit: str, dirty: Any, digits: int | None = None) -> str:
    """'<sha>', '<sha> (dirty)' or 'unknown'; the sha cut to ``digits`` characters if given."""
    if commit == UNKNOWN or not isinstance(commit, str):
        return UNKNOWN
    dirty = isinstance(dirty, bool | np.bool_) and bool(dirty)  # None: unknown, not dirty
    return (commit[:digits] if digits else commit) + (" (dirty)" if dirty else "")


def _compared_values(runs_df: pd.DataFrame, col: str) -> pd.Series:
    if col == "commit":
        return pd.Series(
            [commit_text(c, d) for c, d in zip(runs_df["commit"], runs_df["dirty"], strict=True)],
            index=runs_df.index,
        )
    return runs_df[col].astype(str)


def provenance_differences(runs_df: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Which provenance fields (``PROVENANCE_COMPARED``) of each run differ from the other
    runs', and one note per differing field listing its values and their runs.

    A run differs in a field when its value is not the one most runs share; when no value is
    shared by more runs than any other, every run differs in it. Unknown values are never
    compared. A run whose ranks ran other software than its rank 0 differs 'within the run'.
    """
    flags: dict[Any, list[str]] = {i: [] for i in runs_df.index}
    notes = []
    for col, label in PROVENANCE_COMPARED.items():
        values = _compared_values(runs_df, col)
        known = values[values != UNKNOWN]
        counts = known.value_counts(sort=True)
        if len(counts) < 2:
            continue
        top = counts[counts == counts.max()]
        odd = known.index if len(top) > 1 else known.index[known != top.index[0]]
        for i in odd:
            flags[i].append(label)
        notes.append(
            f"{label} differs: "
            + "; ".join(
                f"{value} ({list_runs(sorted(runs_df.loc[known.index[known == value], 'run']), 3)})"
                for value in counts.index
            )
        )
    for i, text in runs_df["rank_differences"].items():
        if text:
            flags[i].append("within the run")
            notes.append(f"{runs_df.loc[i, 'run']}: ranks differ from rank 0: {text}")
    return pd.Series({i: ", ".join(f) for i, f in flags.items()}, dtype=object), notes


# ------------------------------------------------------------------------------------------------
# tables


def timed_mask(epochs: pd.DataFrame, warmup: int) -> np.ndarray:
    """True for the epochs a run's timing uses: all but the first ``warmup`` recorded ones."""
    return np.arange(len(epochs)) >= warmup


def warmup_reason(n_epochs: int, warmup: int) -> str:
    """Why a run has no timed epoch, e.g. 'only 1 epoch, 1 warm-up epoch excluded'."""
    return f"only {_plural(n_epochs, 'epoch')}, {_plural(warmup, 'warm-up epoch')} excluded"


def timing_stats(epochs: pd.DataFrame, warmup: int) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof=1) of epoch time and throughput over the timed
    epochs; NaN where there is no timed epoch (and sd NaN with only one)."""
    timed = epochs[timed_mask(epochs, warmup)]
    sec, ips = timed["epoch_seconds"], timed["images_per_second"]
    return {
        "timing_warmup_epochs": warmup,
        "timed_epochs": len(timed),
        "mean_epoch_seconds": float(sec.mean()) if len(timed) else np.nan,
        "std_epoch_seconds": float(sec.std(ddof=1)) if len(timed) > 1 else np.nan,
        "images_per_second": float(ips.mean()) if len(timed) else np.nan,
        "std_images_per_second": float(ips.std(ddof=1)) if len(timed) > 1 else np.nan,
        "timing_note": "" if len(timed) else warmup_reason(len(epochs), warmup),
    }


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Speed-up and efficiency of each run against its baseline: the 1-worker run with the same
    dataset, model, global batch, device, backend and BN mode (``BASELINE_KEY``).

    Throughput (mean images/s over the timed epochs) is compared; with several 1-worker runs the
    fastest is the baseline (``baseline_candidates`` says how many qualified). A run without such
    a run, or without a timed epoch, gets no speed-up (NaN): no other run is borrowed.
    """
    df = df.copy()
    df["baseline_run"] = pd.Series([None] * len(df), index=df.index, dtype=object)
    df["baseline_candidates"] = 0
    df["speedup"] = np.nan
    df["efficiency"] = np.nan
    for _, group in df.groupby(list(BASELINE_KEY), sort=False, dropna=False):
        base = group[(group["workers"] == 1) & np.isfinite(group["images_per_second"])]
        if base.empty:
            continue
        best = base.loc[base["images_per_second"].idxmax()]
        speedup = group["images_per_second"] / best["images_per_second"]
        timed = group.index[np.isfinite(speedup)]
        df.loc[timed, "baseline_run"] = best["run"]
        df.loc[timed, "baseline_candidates"] = len(base)
        df.loc[timed, "speedup"] = speedup[timed]
        df.loc[timed, "efficiency"] = speedup[timed] / group.loc[timed, "workers"]
    return df


def runs_table(runs: list[RunData], warmup: int = 1) -> pd.DataFrame:
    """One row per run (runs.csv), sorted by evaluation accuracy, best first. Timing columns
    leave out the first ``warmup`` epochs of each run (see ``timing_stats``)."""
    rows = []
    for r in runs:
        cfg, world, ep = r.info["run"], r.info.get("world") or {}, r.epochs
        eff = r.info["effective"]
        loss = r.metrics.get("loss")
        rows.append(
            {
                "run": r.name,
                "dataset": cfg["dataset"],
                "model": cfg["model"],
                "workers": int(cfg["workers"]),
                "nodes": int(cfg["nodes"]),
                "gpus_per_node": int(cfg.get("gpus_per_node") or 0),
                "device": world.get("device", "unknown"),
                "backend": str(world.get("backend") or cfg["backend"]),
                "bn": str(cfg["bn"]),
                # run.json files written before the rename name the scheduler "launcher"
                "scheduler": world.get("scheduler", world.get("launcher", "unknown")),
                "hosts": " ".join(dict.fromkeys(map(str, world.get("hosts", [])))),
                "epochs": int(r.info.get("epochs_completed", len(ep))),
                "batch_size": int(cfg["batch_size"]),
                "batch_scaling": str(eff["batch_scaling"]),
                "global_batch": int(eff["global_batch"]),
                "lr": float(cfg["lr"]),
                "effective_lr": float(eff["lr"]),
                "deterministic": bool(cfg["deterministic"]),
                "precision": str(cfg["precision"]),
                "channels_last": bool(cfg["channels_last"]),
                "eval_split": r.metrics["split"],
                "eval_n": int(r.metrics["n"]),
                "accuracy": float(r.metrics["accuracy"]),
                "loss": float(loss) if loss is not None else np.nan,
                "macro_precision": r.metrics.get("macro_precision", np.nan),
                "macro_recall": r.metrics.get("macro_recall", np.nan),
                "final_val_accuracy": float(ep["val_accuracy"].iloc[-1]),
                "best_val_accuracy": float(ep["val_accuracy"].max()),
                **timing_stats(ep, warmup),
                "train_seconds": float(r.info["train_seconds"]),
                **provenance_columns(r.info),
            }
        )
    df = pd.DataFrame(rows)
    df["images_per_second_per_worker"] = df["images_per_second"] / df["workers"]
    df["provenance_differs"] = provenance_differences(df)[0]
    df = add_scaling(df)
    df = df.sort_values(["accuracy", "run"], ascending=[False, True], kind="stable")
    return df.reset_index(drop=True)


def epochs_table(runs: list[RunData], warmup: int = 1) -> pd.DataFrame:
    """One row per run and epoch (epochs.csv); ``timed`` is False for the warm-up epochs that
    the timing leaves out."""
    frames = []
    for r in runs:
        cfg = r.info["run"]
        ident = {"run": r.name, **{k: cfg[k] for k in RUN_ID_COLUMNS[1:]}}
        ep = r.epochs.drop(columns=[c for c in ident if c in r.epochs.columns])
        ep = ep.assign(timed=timed_mask(ep, warmup))
        frames.append(pd.concat([pd.DataFrame(ident, index=ep.index), ep], axis=1))
    return pd.concat(frames, ignore_index=True)


def backend_comparison(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Runs that differ only in their backend (same ``BACKEND_MATCH_KEY``), one row per
    configuration and backend: the fastest timed run of that backend, its throughput, and the
    ratio to the reference backend (horovod if present, else the first by name)."""
    timed = runs_df[np.isfinite(runs_df["images_per_second"])]
    rows = []
    for key, group in timed.groupby(list(BACKEND_MATCH_KEY), sort=True):
        backends = sorted(group["backend"].unique())
        if len(backends) < 2:
            continue
        ref = REFERENCE_BACKEND if REFERENCE_BACKEND in backends else backends[0]
        best = {
            b: group.loc[group.loc[group["backend"] == b, "images_per_second"].idxmax()]
            for b in backends
        }
        config = dict(zip(BACKEND_MATCH_KEY, key, strict=True))
        for b in [ref, *(b for b in backends if b != ref)]:
            row = best[b]
            rows.append(
                {
                    **config,
                    "backend": b,
                    "reference_backend": ref,
                    "run": row["run"],
                    "runs": int((group["backend"] == b).sum()),
                    "images_per_second": row["images_per_second"],
                    "std_images_per_second": row["std_images_per_second"],
                    "ratio": row["images_per_second"] / best[ref]["images_per_second"],
                }
            )
    columns = [*BACKEND_MATCH_KEY, "backend", "reference_backend", "run", "runs"]
    columns += ["images_per_second", "std_images_per_second", "ratio"]
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------------------------------------
# formatting helpers


def fmt_duration(seconds: float) -> str:
    """12.3 s, 4 min 05 s, 1 h 02 min."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s:02d} s"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min"


def fmt_pct(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f} %"


def fmt_seconds_sd(mean: float, sd: float, n: int | None = None) -> str:
    """Mean epoch time ± sample sd in the mean's unit, with the number of epochs used:
    '0.42 s ± 0.03 (14 ep.)'; 'n/a' without a mean, no ± with a single epoch."""
    if mean is None or not math.isfinite(mean):
        return "n/a"
    if sd is None or not math.isfinite(sd):
        text = fmt_duration(mean)
    elif mean < 60:
        digits = 2 if mean < 10 else 1
        if 0 < sd < 10**-digits:  # show at least one significant digit of the sd
            digits = min(3, -math.floor(math.log10(sd)))
        text = f"{mean:.{digits}f} s \u00b1 {sd:.{digits}f}"
    else:
        text = f"{fmt_duration(mean)} \u00b1 {fmt_duration(sd)}"
    return text if n is None else f"{text} ({n} ep.)"


def fmt_number_sd(mean: float, sd: float) -> str:
    """Throughput as '6,900 ± 210'; 'n/a' without a mean."""
    if mean is None or not math.isfinite(mean):
        return "n/a"
    return f"{mean:,.0f}" + (f" \u00b1 {sd:,.0f}" if sd is not None and math.isfinite(sd) else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def describe_run(row: pd.Series) -> str:
    return (
        f"{row['dataset']}, {row['model']}, {_plural(row['workers'], 'worker')} on "
        f"{_plural(row['nodes'], 'node')}, {row['backend']}"
    )


def describe_series(key: dict[str, Any] | pd.Series) -> str:
    """A scaling series (``BASELINE_KEY``) in words: 'digits / small_cnn, batch 256, cpu,
    horovod, aggregate BN'."""
    extra = "" if key["precision"] == "fp32" else f", {key['precision']}"
    extra += ", channels_last" if key["channels_last"] else ""
    return (
        f"{key['dataset']} / {key['model']}, batch {key['global_batch']}, {key['device']}, "
        f"{key['backend']}, {key['bn']} BN{extra}"
    )


def first_epochs(warmup: int) -> str:
    """'the first epoch', 'the first 3 epochs'."""
    return "the first epoch" if warmup == 1 else f"the first {warmup} epochs"


def timing_sentence(warmup: int) -> str:
    """How the report times runs, in words."""
    if warmup == 0:
        return "Timing: epoch time and throughput are means over all epochs of each run."
    first = "epoch, which is" if warmup == 1 else f"{warmup} epochs, which are"
    return (
        "Timing: epoch time and throughput are mean \u00b1 sd over each run's epochs after "
        f"the first {first} left out as warm-up."
    )


def list_runs(names: list[str], limit: int = 6) -> str:
    """'a, b and c'; a long list is cut after ``limit`` names ('a, ..., f and 4 more')."""
    names = list(names)
    if len(names) < 2:
        return "".join(names)
    if len(names) > limit:
        return f"{', '.join(names[:limit])} and {len(names) - limit} more"
    return f"{', '.join(names[:-1])} and {names[-1]}"


def node_marker(i: int) -> dict[str, Any]:
    """Marker style of the i-th node count: the filled markers, then the same ones hollow, and
    so on (cycled: any number of node counts gets a marker)."""
    marker = NODE_MARKERS[i % len(NODE_MARKERS)]
    return {"marker": marker, "hollow": (i // len(NODE_MARKERS)) % 2 == 1}


def run_order(runs_df: pd.DataFrame) -> list[str]:
    """Order runs are listed in on the per-run plots: by dataset, model, workers, nodes, name."""
    return list(runs_df.sort_values(["dataset", "model", "workers", "nodes", "run"])["run"])


def char_width(c: str) -> int:
    """Columns a character takes: 2 for East Asian wide and full-width ones (CJK, emoji)."""
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def text_width(text: str) -> int:
    """Columns ``text`` takes on one line (:func:`char_width`)."""
    return sum(map(char_width, text))


def wrap_text(text: str, width: int, **kwargs: Any) -> list[str]:
    """:func:`textwrap.wrap` counting wide characters (CJK, emoji) as two columns. Text with
    such characters is wrapped at spaces and between wide characters (CJK has no spaces), a
    word longer than a line broken inside."""
    if text_width(text) == len(text):
        return textwrap.wrap(text, width, **kwargs)
    units = re.findall(r"\s+|[^\s]", " ".join(text.split()))  # one character per unit
    lines, line, used = [], "", 0
    for unit in units:
        if unit.isspace():
            if line:
                line, used = line + " ", used + 1
            continue
        w = char_width(unit)
        if used + w > width and line.strip():
            # a narrow word is moved whole to the next line when it fits there
            start = len(line)
            while (
                w == 1
                and start
                and not line[start - 1].isspace()
                and char_width(line[start - 1]) == 1
            ):
                start -= 1
            keep = line if text_width(line[start:]) >= width else line[:start]
            lines.append(keep.rstrip())
            line = line[len(keep) :].lstrip()
            used = text_width(line)
        line, used = line + unit, used + w
    if line.strip():
        lines.append(line.rstrip())
    return lines


def shorten_text(text: str, width: int, placeholder: str = " [...]") -> str:
    """:func:`textwrap.shorten` counting wide characters as two columns, and cutting a word
    where no space is near (textwrap would leave only the placeholder of a text without
    spaces, such as a CJK title)."""
    text = " ".join(text.split())
    if text_width(text) <= width:
        return text
    short = textwrap.shorten(text, width, placeholder=placeholder)
    if text_width(text) == len(text) and len(short) > len(placeholder.strip()) + width // 2:
        return short
    budget, cut = width - text_width(placeholder), ""
    for c in text:
        if text_width(cut) + char_width(c) > budget:
            break
        cut += c
    head = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return (head if len(head) > len(cut) // 2 else cut).rstrip() + placeholder


@lru_cache(maxsize=1)
def _measuring_renderer() -> Any:
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, MEASURE_DPI)


def drawn_width(text: str, size: float, weight: str = "normal") -> float:
    """Width in points of ``text`` on one line, drawn in the current theme's font (with its
    fallbacks, and boxes for what no font has) at ``size`` points."""
    import matplotlib
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(family=matplotlib.rcParams["font.family"], size=size, weight=weight)
    width = _measuring_renderer().get_text_width_height_descent(text, prop, ismath=False)[0]
    return width * 72 / MEASURE_DPI


def fit_line(text: str, size: float, weight: str = "normal", max_pt: float = TEXT_WIDTH_PT) -> str:
    """``text`` cut (ending in ' ...') so that it is at most ``max_pt`` points wide as drawn:
    character counts cannot tell how wide CJK, emoji or missing-glyph boxes are."""
    if drawn_width(text, size, weight) <= max_pt:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if drawn_width(text[:mid].rstrip() + " ...", size, weight) <= max_pt:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + " ..."


def fit_wrap(
    text: str,
    columns: int,
    size: float,
    max_pt: float = TEXT_WIDTH_PT,
    max_lines: int | None = None,
) -> list[str]:
    """``text`` wrapped at ``columns`` (:func:`wrap_text`), then narrower where a line drawn
    at ``size`` points is wider than ``max_pt``; at most ``max_lines`` lines (the last one
    cut, :func:`fit_line`)."""
    lines = wrap_text(text, columns)
    for _ in range(4):
        widest = max((drawn_width(line, size) for line in lines), default=0.0)
        if widest <= max_pt or columns <= 10:
            break
        columns = max(10, int(columns * max_pt / widest) - 1)
        lines = wrap_text(text, columns)
    if max_lines and len(lines) > max_lines:
        last = fit_line(" ".join(lines[max_lines - 1 :]), size, max_pt=max_pt)
        lines = [*lines[: max_lines - 1], last]
    return lines


def wrap_label(text: str, width: int = 22) -> str:
    return "\n".join(wrap_text(text, width, break_on_hyphens=True)) or text


def set_category_ticks(ax, labels: list[str], colors: list | None = None, width: int = 24) -> None:
    """Categories 0..n-1 top to bottom on the y axis, labels wrapped and sized to fit; a short
    list gets extra room so that its bars do not fill the whole height."""
    wrapped = [wrap_label(label, width) for label in labels]
    lines = sum(w.count("\n") + 1 for w in wrapped)
    ax.set_yticks(range(len(labels)), wrapped, fontsize=max(6.0, min(10.5, 300 / lines)))
    for tick, color in zip(ax.get_yticklabels(), colors or [], strict=False):
        tick.set_color(color)
    pad = max(0.0, (3 - len(labels)) / 2)
    ax.set_ylim(len(labels) - 0.5 + pad, -0.5 - pad)
    ax.grid(axis="y", visible=False)


# ------------------------------------------------------------------------------------------------
# pages


class Pages:
    """Builds the report's figures with one consistent style; each page is an A4 figure."""

    def __init__(self, params: ReportParams, runs_df: pd.DataFrame) -> None:
        import seaborn as sns

        self.sns = sns
        self.params = params
        self.order = run_order(runs_df)
        colors = sns.color_palette("tab10" if len(self.order) <= 10 else "husl", len(self.order))
        self.colors = dict(zip(self.order, colors, strict=True))
        self.pages: list[tuple[str | None, Any]] = []  # (png name or None, Figure)

    def new(
        self,
        title: str,
        subtitle: str | None = None,
        png: str | None = None,
        note: str | None = None,
        layout: str | None = "constrained",
    ):
        """A new page: bold title, grey subtitle (wrapped), optional note above the footer."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=PAGE_SIZE, layout=layout)
        title = fit_line(shorten_text(title, 80, placeholder=" ..."), TITLE_PT, "bold")
        fig.text(0.03, 0.955, title, fontsize=TITLE_PT, weight="bold", va="center")
        top = 0.92
        if subtitle:
            lines = self.subtitle_lines(subtitle)
            fig.text(
                0.03,
                0.915,
                "\n".join(lines),
                fontsize=SUBTITLE_PT,
                color="0.3",
                va="top",
                linespacing=1.4,
            )
            top = 0.905 - 0.03 * len(lines)
        note_lines = self.note_lines(note)
        if note_lines:
            fig.text(
                0.03,
                0.033,
                "\n".join(note_lines),
                fontsize=NOTE_PT,
                color="0.35",
                va="bottom",
                linespacing=1.35,
            )
        if layout == "constrained":
            bottom = 0.045 + 0.021 * len(note_lines) if note_lines else 0.035
            fig.get_layout_engine().set(rect=(0.02, bottom, 0.96, top - bottom))
        self.pages.append((png, fig))
        return fig

    @staticmethod
    def subtitle_lines(subtitle: str) -> list[str]:
        """The lines of a page's subtitle: at most 4, each within the page's width."""
        return fit_wrap(subtitle, 135, SUBTITLE_PT, max_lines=4)

    @staticmethod
    def note_lines(note: str | None) -> list[str]:
        """The lines of a page's note (its own lines wrapped within the page's width)."""
        return [w for line in (note or "").split("\n") for w in fit_wrap(line, 150, NOTE_PT)]

    def run_axis(self, ax, names: list[str]) -> None:
        """Horizontal per-run axis: wrapped run names as tick labels, coloured like their run."""
        set_category_ticks(ax, names, [self.colors[n] for n in names])

    @staticmethod
    def note(ax, text: str) -> None:
        ax.set_axis_off()
        ax.text(
            0.5,
            0.5,
            text,
            ha="center",
            va="center",
            fontsize=12,
            color="0.35",
            wrap=True,
            transform=ax.transAxes,
        )


def title_page(pages: Pages, prov: dict[str, Any], runs_df: pd.DataFrame, bench: pd.DataFrame):
    params = pages.params
    subtitle = " \u00b7 ".join(filter(None, [params.author, prov["date"]]))
    fig = pages.new(params.title, subtitle, layout=None)
    # the summary starts below the subtitle (a long author takes up to 4 lines)
    below_subtitle = 0.028 * (len(Pages.subtitle_lines(subtitle)) - 1)
    best = runs_df.iloc[0]
    warmup = params.timing_warmup_epochs
    datasets = ", ".join(sorted(runs_df["dataset"].unique()))
    models = ", ".join(sorted(runs_df["model"].unique()))
    backends = ", ".join(sorted(runs_df["backend"].unique()))
    lines = [
        f"{_plural(len(runs_df), 'run')} on {datasets} ({models}; backends: {backends}); "
        f"{_plural(int(runs_df['epochs'].sum()), 'epoch')}, "
        f"{fmt_duration(runs_df['train_seconds'].sum())} of training in total.",
        f"Best run: {best['run']} with {fmt_pct(best['accuracy'])} {best['eval_split']} "
        f"accuracy ({describe_run(best)}).",
        timing_sentence(warmup),
    ]
    if runs_df["images_per_second"].notna().any():
        fastest = runs_df.loc[runs_df["images_per_second"].idxmax()]
        lines.append(
            f"Highest throughput: {fastest['run']} with {fastest['images_per_second']:,.0f} "
            f"images/s ({describe_run(fastest)})."
        )
    else:
        lines.append(
            "Highest throughput: n/a: no run has an epoch left after the "
            f"{_plural(warmup, 'warm-up epoch')}."
        )
    scaled = runs_df[runs_df["speedup"].notna() & (runs_df["workers"] > 1)]
    series = list(scaled.groupby(list(BASELINE_KEY), sort=True))
    for _, group in series[:2]:
        top_run = group.sort_values(["workers", "speedup"]).iloc[-1]
        lines.append(
            f"Scaling of {describe_series(top_run)}: {top_run['speedup']:.2f}x speed-up on "
            f"{_plural(top_run['workers'], 'worker')} ({fmt_pct(top_run['efficiency'], 0)} "
            f"efficiency) against {top_run['baseline_run']}."
        )
    if len(series) > 2:
        lines.append(f"... and {len(series) - 2} more scaling series (see the scaling page).")
    if bench.empty:
        lines.append("Snakemake benchmarks: none found (see the last page).")
    else:
        jobs = bench.groupby(["rule", "job"])["s"].mean()
        lines.append(
            f"Snakemake benchmarks: {_plural(len(jobs), 'job')}, "
            f"{fmt_duration(float(jobs.sum()))} of job wall time in total."
        )
    ax = fig.add_axes((0.03, 0.52, 0.94, 0.34 - below_subtitle))
    ax.set_axis_off()
    ax.text(0, 1, "Summary", fontsize=14, weight="bold", va="top", transform=ax.transAxes)
    indent_pt = drawn_width("\u2022  ", SUBTITLE_PT)
    wrapped = [
        "\u2022  " + "\n    ".join(fit_wrap(line, 135, SUBTITLE_PT, TEXT_WIDTH_PT - 2 * indent_pt))
        for line in lines
    ]
    ax.text(
        0.01,
        0.87,
        "\n".join(wrapped),
        va="top",
        fontsize=11,
        linespacing=1.5,
        transform=ax.transAxes,
    )

    versions = prov["versions"]
    differs = runs_df[runs_df["provenance_differs"] != ""]
    unrecorded = runs_df[runs_df["provenance"] != "recorded"]
    if differs.empty:
        diff_text = "none: every run's hardware and software match the others'"
    else:
        flagged = {f for text in differs["provenance_differs"] for f in text.split(", ")}
        fields = [f for f in [*PROVENANCE_COMPARED.values(), "within the run"] if f in flagged]
        diff_text = (
            f"DIFFERS in {', '.join(fields)} (see the provenance page): "
            f"{_plural(len(differs), 'run')}, {list_runs(sorted(differs['run']), 3)}"
        )
    if not unrecorded.empty:
        diff_text += f"; not recorded for {list_runs(sorted(unrecorded['run']), 3)}"
    commits = [
        commit_text(c, d, 12) for c, d in zip(runs_df["commit"], runs_df["dirty"], strict=True)
    ]
    rows = [
        ("Config hash", params.config_hash),
        ("Training hosts", summarise_values(host_names(runs_df))),
        ("Training CPUs", summarise_values(runs_df["cpu_model"])),
        (
            "Training GPUs (driver)",
            summarise_values(
                [
                    g if g in ("none", UNKNOWN) else f"{g} (driver {d})"
                    for g, d in zip(runs_df["gpus"], runs_df["gpu_driver"], strict=True)
                ]
            ),
        ),
        ("Training commit", summarise_values(commits)),
        (
            "Training Python / torch / Horovod",
            " / ".join(summarise_values(runs_df[k]) for k in ("python", "torch", "horovod")),
        ),
        (
            "Training devices; backends; schedulers",
            f"{', '.join(sorted(runs_df['device'].unique()))}; "
            f"{', '.join(sorted(runs_df['backend'].unique()))}; "
            f"{', '.join(sorted(runs_df['scheduler'].unique()))}",
        ),
        ("Runs that differ", diff_text),
        (
            "Report generated on",
            f"{prov['host']}, {prov['date']}, commit {provenance.describe_commit(prov['git'])}",
        ),
        (
            "Report software",
            f"Python {versions['python']}, pandas {versions['pandas']}, matplotlib "
            f"{versions['matplotlib']}, seaborn {versions['seaborn']}, Snakemake "
            f"{versions['snakemake']}",
        ),
    ]
    ax = fig.add_axes((0.03, 0.06, 0.94, 0.44))
    ax.set_axis_off()
    ax.text(0, 1, "Provenance", fontsize=14, weight="bold", va="top", transform=ax.transAxes)
    table = ax.table(
        cellText=[[k, shorten_text(str(v), 92, placeholder=" ...")] for k, v in rows],
        colWidths=[0.25, 0.75],
        cellLoc="left",
        bbox=(0.01, 0, 0.99, 0.88),
        edges="horizontal",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    for (row, col), cell in table.get_celld().items():
        cell.set_edgecolor("0.85")
        cell.get_text().set_weight("bold" if col == 0 else "normal")
        if col == 1:
            cell.get_text().set_family(font_families("monospace"))
        if rows[row][0] == "Runs that differ" and not differs.empty:
            cell.set_facecolor(DIFFERS_COLOR)


def summarise_values(values: Any) -> str:
    """The distinct values of the runs, with their number of runs where they are several:
    'a' or 'a (3 runs), b (1 run)'; 'unknown' when no run knows it."""
    counts = pd.Series(list(values), dtype=object).astype(str).value_counts(sort=True)
    known = counts[counts.index != UNKNOWN]
    if known.empty:
        return UNKNOWN
    if len(counts) == 1:
        return str(counts.index[0])
    return ", ".join(f"{v} ({_plural(int(n), 'run')})" for v, n in counts.items())


def host_names(runs_df: pd.DataFrame) -> list[str]:
    """Every training host of every run (one entry per run and host), from ``host_ranks``."""
    return [
        part.split(" (ranks ")[0].strip()
        for text in runs_df["host_ranks"]
        for part in str(text).split(";")
        if part.strip()
    ]


def runs_table_pages(pages: Pages, runs_df: pd.DataFrame) -> None:
    warmup = pages.params.timing_warmup_epochs
    splits = runs_df["eval_split"].unique()
    acc_header = f"{splits[0].capitalize()}\naccuracy" if len(splits) == 1 else "Accuracy\n(split)"
    columns = [  # header, relative width, right-aligned
        ("#", 0.025, True),
        ("Run", 0.157, False),
        ("Dataset /\nmodel", 0.085, False),
        ("Workers\n(nodes)", 0.066, True),
        ("Device", 0.055, False),
        ("Backend /\nBN", 0.086, False),
        ("Global\nbatch", 0.073, True),
        ("Eff.\nLR", 0.045, True),
        ("Deter-\nministic", 0.062, False),
        ("Epochs", 0.055, True),
        (acc_header, 0.07, True),
        ("Time per epoch\n(mean \u00b1 sd)", 0.125, True),
        ("Throughput\n(images/s)", 0.088, True),
        ("Total\ntrain time", 0.092, True),
    ]
    header = [c[0] for c in columns]
    rows = []
    for rank, r in enumerate(runs_df.itertuples(index=False), start=1):
        acc = fmt_pct(r.accuracy)
        convention = "per worker" if r.batch_scaling == "per_worker" else r.batch_scaling
        rows.append(
            [
                str(rank),
                wrap_label(r.run, 17),
                f"{r.dataset}\n{r.model}",
                f"{r.workers} ({r.nodes})",
                r.device,
                f"{r.backend}\n{r.bn}",
                f"{r.global_batch}\n{convention}",
                f"{r.effective_lr:g}",
                "yes" if r.deterministic else "no",
                str(r.epochs),
                acc if len(splits) == 1 else f"{acc}\n({r.eval_split})",
                (
                    f"{fmt_seconds_sd(r.mean_epoch_seconds, r.std_epoch_seconds)}\n"
                    f"({r.timed_epochs} ep.)"
                    if r.timed_epochs
                    else "n/a\n(0 ep.*)"
                ),
                fmt_number_sd(r.images_per_second, r.std_images_per_second).replace(
                    " \u00b1", "\n\u00b1"
                ),
                fmt_duration(r.train_seconds),
            ]
        )
    note = untimed_note(runs_df, "* ")
    chunks = [rows[i : i + TABLE_ROWS_PER_PAGE] for i in range(0, len(rows), TABLE_ROWS_PER_PAGE)]
    for page_no, chunk in enumerate(chunks, start=1):
        suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
        fig = pages.new(
            "Runs" + suffix,
            "Sorted by evaluation accuracy, best first (highlighted). Workers = processes (ranks). "
            "Global batch = images per optimiser step over all workers; convention: global = the "
            "configured batch size is the global batch, per worker = it is per worker (times "
            "the workers). Eff. LR = learning rate after warm-up. Time per epoch and throughput "
            "(all workers): mean \u00b1 sample sd over the timed epochs (ep.), "
            + (
                f"excluding {first_epochs(warmup)} of each run (warm-up)."
                if warmup
                else "all epochs of each run."
            ),
            layout=None,
            note=note,
        )

        def style(row: int, col: int, page_no: int = page_no) -> tuple[str, bool]:
            if page_no == 1 and row == 0:  # the best run
                return "#d4ecd0", True
            return ("#eef1f6" if row % 2 == 0 else "white"), False

        draw_table(fig, columns, header, chunk, style, bottom=0.08 if note else 0.06)


def draw_table(fig, columns, header, rows, style, bottom: float = 0.06, top: float = 0.8) -> None:
    """A table of ``rows`` (lists of cell texts) under a header, in the page's width from the
    top of the page's content (``top``) down; ``columns``: (header, relative width,
    right-aligned); ``style(row, col) -> (face colour, bold)`` for the body cells (row 0 =
    first row). Row heights follow their number of text lines; the table fills at most the
    space above ``bottom``."""
    from matplotlib.table import Table

    ax = fig.add_axes((0.03, bottom, 0.94, top - bottom))
    ax.set_axis_off()
    n_lines = [max(c.count("\n") + 1 for c in row) for row in [header, *rows]]
    units = [1 + 0.9 * n for n in n_lines]  # row height in text lines, with padding
    line_h = min(0.038, 1 / sum(units))  # axes fraction per unit: fill at most the page
    heights = [line_h * u for u in units]
    table = Table(ax, bbox=(0, 1 - sum(heights), 1, sum(heights)))
    for row, (cells, height) in enumerate(zip([header, *rows], heights, strict=True)):
        for col, (text, (_, width, right)) in enumerate(zip(cells, columns, strict=True)):
            cell = table.add_cell(
                row, col, width, height, text=text, loc="right" if right else "left"
            )
            cell.PAD = 0.06
            cell.set_edgecolor("white")
            cell.get_text().set_fontsize(9.5)
            if row == 0:
                cell.set_facecolor("#2f4b7c")
                cell.get_text().set(color="white", weight="bold", fontsize=9)
            else:
                face, bold = style(row - 1, col)
                cell.set_facecolor(face)
                if bold:
                    cell.get_text().set_weight("bold")
    table.auto_set_font_size(False)
    ax.add_table(table)


def table_units(row: list[str]) -> float:
    """Height of a table row in line units (see :func:`draw_table`)."""
    return 1 + 0.9 * max(c.count("\n") + 1 for c in row)


def chunk_rows(rows: list[list[str]], max_units: float, max_rows: int) -> list[list[list[str]]]:
    """``rows`` split into pages of at most ``max_rows`` rows and ``max_units`` line units."""
    chunks: list[list[list[str]]] = [[]]
    used = 0.0
    for row in rows:
        u = table_units(row)
        if chunks[-1] and (used + u > max_units or len(chunks[-1]) >= max_rows):
            chunks.append([])
            used = 0.0
        chunks[-1].append(row)
        used += u
    return chunks


def _cut_lines(text: str, width: int, max_lines: int) -> list[str]:
    """``text`` wrapped at ``width``, at most ``max_lines`` lines (the last one shortened)."""
    lines = wrap_text(text, width, break_on_hyphens=True) or [text]
    if len(lines) > max_lines:
        rest = " ".join(lines[max_lines - 1 :])
        lines = [*lines[: max_lines - 1], shorten_text(rest, width, placeholder=" ...")]
    return lines


#: Columns of the provenance table: runs.csv fields shown -> (header, width, right-aligned).
PROVENANCE_TABLE = (
    ("#", 0.025, True),
    ("Run", 0.13, False),
    ("Training hosts\n(ranks)", 0.135, False),
    ("CPU\n(logical cores per host)", 0.18, False),
    ("GPUs\n(NVIDIA driver)", 0.16, False),
    ("Commit", 0.09, False),
    ("Python / torch /\nHorovod / NumPy", 0.145, False),
    ("Differs from\nthe other runs", 0.135, False),
)
#: The provenance table's column of each field of ``PROVENANCE_COMPARED`` (and 'within the run').
PROVENANCE_FIELD_COLUMN = {
    "CPU": 3,
    "cores": 3,
    "GPUs": 4,
    "GPU driver": 4,
    "commit": 5,
    "Python": 6,
    "torch": 6,
    "Horovod": 6,
    "NumPy": 6,
    "within the run": 2,
}


def provenance_cells(rank: int, r: Any) -> list[str]:
    """One run's row of the provenance table (``r``: a runs.csv row as a named tuple)."""
    hosts = [h.strip() for h in str(r.host_ranks).split(";") if h.strip()]
    host_lines = [
        shorten_text(h.replace(" (ranks ", " ("), 24, placeholder="...") for h in hosts[:3]
    ]
    if len(hosts) > 3:
        host_lines[-1] = f"+ {len(hosts) - 2} more hosts"
    cpu = [UNKNOWN]
    if r.cpu_model != UNKNOWN or r.cpu_cores != UNKNOWN:
        cpu = _cut_lines(f"{r.cpu_model} ({r.cpu_cores} cores)", 27, 3)
    gpus = [str(r.gpus)]
    if r.gpus not in ("none", UNKNOWN):
        gpus = _cut_lines(f"{r.gpus}, driver {r.gpu_driver}", 24, 3)
    commit = commit_text(r.commit, r.dirty, 10).replace(" (dirty)", "\n(dirty)")
    versions = f"{r.python} / {r.torch}\n{r.horovod} / {r.numpy}"
    if r.provenance != "recorded":
        differs = "not recorded"
    else:
        differs = (
            "\n".join(_cut_lines(r.provenance_differs, 15, 3)) if r.provenance_differs else "none"
        )
    return [
        str(rank),
        wrap_label(r.run, 17),
        "\n".join(host_lines),
        "\n".join(cpu),
        "\n".join(gpus),
        commit,
        versions,
        differs,
    ]


def provenance_pages(pages: Pages, runs_df: pd.DataFrame) -> None:
    """One row per run: where it trained and with what (run.json's provenance), the values in
    which it differs from the other runs highlighted and named."""
    _, notes = provenance_differences(runs_df)
    unrecorded = runs_df[runs_df["provenance"] != "recorded"]
    if not unrecorded.empty:
        notes.append(
            f"Not recorded for {list_runs(sorted(unrecorded['run']), 4)}: its run.json is older "
            "than provenance recording, so its CPU, GPUs and commit are unknown (hosts and "
            "versions as its rank 0 recorded them)."
        )
    notes = [shorten_text(n, 290, placeholder=" ...") for n in notes[:6]]
    note = "\n".join(notes) if notes else None
    note_lines = len(Pages.note_lines(note))
    bottom = 0.045 + 0.021 * note_lines + 0.015 if notes else 0.06
    top = 0.8
    header = [c[0] for c in PROVENANCE_TABLE]
    rows = [provenance_cells(i, r) for i, r in enumerate(runs_df.itertuples(index=False), 1)]
    height_pt = (top - bottom) * PAGE_SIZE[1] * 72
    budget = height_pt / TABLE_UNIT_PT - table_units(header)
    chunks = chunk_rows(rows, budget, TABLE_ROWS_PER_PAGE)
    flags = list(runs_df["provenance_differs"])
    unknown = list(runs_df["provenance"] != "recorded")
    start = 0
    for page_no, chunk in enumerate(chunks, start=1):
        suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
        fig = pages.new(
            "Provenance of the runs" + suffix,
            "Where and with what each run trained, as its ranks saw it on the training hosts "
            "and its rank 0 recorded it in run.json: hosts (ranks on each), CPU and cores, GPUs "
            "and NVIDIA driver, git commit of the code (dirty: with uncommitted changes) and "
            "package versions. Same order as the runs table. Highlighted: a value that differs "
            "from the one most runs share (from every run's where no value is the most common).",
            layout=None,
            note=note,
        )

        def style(row: int, col: int, first: int = start) -> tuple[str, bool]:
            i = first + row
            fields = flags[i].split(", ") if flags[i] else []
            marked = {PROVENANCE_FIELD_COLUMN[f] for f in fields} | ({7} if fields else set())
            if col in marked:
                return DIFFERS_COLOR, col == 7
            if unknown[i] and col == 7:
                return "#e6e6e6", False
            return ("#eef1f6" if row % 2 == 0 else "white"), False

        draw_table(fig, PROVENANCE_TABLE, header, chunk, style, bottom=bottom, top=top)
        start += len(chunk)


def untimed_note(runs_df: pd.DataFrame, mark: str = "") -> str | None:
    """The page note naming the runs without a timed epoch and why; None when every run has one."""
    untimed = runs_df[runs_df["timed_epochs"] == 0]
    if untimed.empty:
        return None
    note = f"{mark}n/a: no epoch left to time: " + "; ".join(
        f"{r.run}: {r.timing_note}" for r in untimed.itertuples(index=False)
    )
    return shorten_text(note, 300, placeholder=" ...") + "."


def epoch_time_page(pages: Pages, runs_df: pd.DataFrame, epochs_df: pd.DataFrame) -> None:
    warmup = pages.params.timing_warmup_epochs
    excluded = (
        f"{_plural(warmup, 'warm-up epoch')} excluded per run: {first_epochs(warmup)} "
        f"(start-up costs; hollow dots, shaded) {'is' if warmup == 1 else 'are'} not in the "
        "mean."
        if warmup
        else "No warm-up epoch is excluded: the mean is over all epochs."
    )
    note = untimed_note(runs_df)
    fig = pages.new(
        "Time per epoch",
        "Left: mean \u00b1 sample sd of the time per epoch of each run over its timed epochs "
        "(bars, value and number of epochs printed) and every single epoch (dots). Right: the "
        f"time of each epoch in order. {excluded}",
        png="epoch_time",
        note=note,
    )
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1])
    order = pages.order
    stats = runs_df.set_index("run").reindex(order)
    rng = np.random.default_rng(0)
    for i, name in enumerate(order):
        color = pages.colors[name]
        ep = epochs_df[epochs_df["run"] == name]
        timed = ep["timed"].to_numpy(bool)
        vals = ep["epoch_seconds"].to_numpy(float)
        mean, sd, n = stats.loc[name, ["mean_epoch_seconds", "std_epoch_seconds", "timed_epochs"]]
        if math.isfinite(mean):
            left.barh(i, mean, height=0.6, color=color, alpha=0.45)
            if math.isfinite(sd) and sd > 0:
                left.errorbar(
                    mean, i, xerr=[[min(sd, mean * 0.999)], [sd]], color="0.25", capsize=3, lw=1
                )
        jitter = rng.uniform(-0.2, 0.2, len(vals)) if len(vals) > 1 else np.zeros(len(vals))
        left.scatter(
            vals[timed], i + jitter[timed], s=16, color=color, edgecolor="white", lw=0.4, zorder=3
        )
        left.scatter(
            vals[~timed],
            i + jitter[~timed],
            s=18,
            facecolor="none",
            edgecolor=color,
            lw=1,
            zorder=3,
        )
        label = fmt_seconds_sd(mean, sd, int(n)) if math.isfinite(mean) else "n/a (0 ep.)"
        left.text(vals.max() * 1.15, i, label, va="center", fontsize=9.5)
    all_values = epochs_df["epoch_seconds"].to_numpy(float)
    positive = all_values[all_values > 0]
    lo, hi = (positive.min(), positive.max()) if len(positive) else (0.1, 1.0)
    # the bars and dots take the left 55 % of the axis, the printed values the rest
    x_hi = 10 ** (math.log10(lo / 3) + math.log10(hi * 1.15 / (lo / 3)) / 0.55)
    left.set_xscale("log")
    left.set_xlim(lo / 3, x_hi)
    _log_ticks(left.xaxis, lo / 3, x_hi)
    pages.run_axis(left, order)
    left.set_xlabel("Time per epoch (s, log scale)")
    warm = epochs_df[~epochs_df["timed"]]
    if not warm.empty:
        right.axvspan(
            warm["epoch"].min() - 0.5, warm["epoch"].max() + 0.5, color="0.9", zorder=0, lw=0
        )
        right.text(
            (warm["epoch"].min() + warm["epoch"].max()) / 2,
            1.0,
            "warm-up\n(excluded)",
            transform=right.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
            color="0.4",
        )
    for name in order:
        ep = epochs_df[epochs_df["run"] == name]
        color = pages.colors[name]
        right.plot(ep["epoch"], ep["epoch_seconds"], color=color, label=name)
        for timed, face in ((True, color), (False, "white")):
            sub = ep[ep["timed"] == timed]
            right.scatter(
                sub["epoch"],
                sub["epoch_seconds"],
                s=14,
                facecolor=face,
                edgecolor=color,
                lw=1,
                zorder=3,
            )
    right.set_yscale("log")
    _log_ticks(right.yaxis, lo, hi)
    right.set_ylabel("Time per epoch (s, log scale)")
    _epoch_axis(right, epochs_df["epoch"])
    right.legend(
        title="Run",
        fontsize=9.5,
        title_fontsize=10,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
        frameon=False,
    )


def _epoch_axis(ax, epochs: pd.Series) -> None:
    """Integer epoch ticks; a run of one or two epochs gets a half-epoch margin each side."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("Epoch")
    lo, hi = int(epochs.min()), int(epochs.max())
    if hi - lo < 3:
        ax.set_xticks(range(lo, hi + 1))
        ax.set_xlim(lo - 0.5, hi + 0.5)


def _log_ticks(axis, lo: float, hi: float) -> None:
    """Log-axis ticks labelled as plain numbers (0.2, 1, 50): at 1, 2, 5 x 10^k over a short
    range ``lo..hi``, at powers of ten over a long one."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))
    axis.set_minor_formatter(NullFormatter())


def throughput_page(pages: Pages, runs_df: pd.DataFrame) -> None:
    warmup = pages.params.timing_warmup_epochs
    fig = pages.new(
        "Throughput",
        "Training images per second: mean over the timed epochs (bars) and one sample standard "
        "deviation (error lines); left for all workers together, right per worker. "
        + (
            f"{first_epochs(warmup).capitalize()} of each run (warm-up) "
            f"{'is' if warmup == 1 else 'are'} excluded."
            if warmup
            else "All epochs are used (no warm-up excluded)."
        ),
        png="throughput",
    )
    total_ax, worker_ax = fig.subplots(1, 2, sharey=True)
    order = pages.order
    stats = runs_df.set_index("run").reindex(order)
    colors = [pages.colors[n] for n in order]
    height = min(0.6, 0.25 + 0.1 * len(order))
    for ax, scale, xlabel in (
        (total_ax, 1, "Images per second, all workers"),
        (worker_ax, stats["workers"], "Images per second per worker"),
    ):
        mean = stats["images_per_second"] / scale
        std = stats["std_images_per_second"].fillna(0) / scale
        ax.barh(
            range(len(order)),
            mean.fillna(0),
            xerr=std.where(mean.notna(), 0),
            color=colors,
            height=height,
            error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
        )
        for y, (m, s, note) in enumerate(zip(mean, std, stats["timing_note"], strict=True)):
            text = f"  {m:,.0f}" if math.isfinite(m) else f"  n/a ({note})"
            ax.text(m + s if math.isfinite(m) else 0, y, text, va="center", fontsize=10)
        ax.set_xlabel(xlabel)
        top = float(np.nanmax((mean + std).to_numpy())) if mean.notna().any() else 0.0
        ax.set_xlim(0, top * 1.22 if top > 0 else 1.0)
    pages.run_axis(total_ax, order)
    worker_ax.tick_params(axis="y", left=False, labelleft=False)
    worker_ax.grid(axis="y", visible=False)


def series_labels(keys: list[tuple]) -> tuple[list[str], str]:
    """Legend labels of scaling series (``BASELINE_KEY`` tuples) naming only what differs
    between them, and a line with what they all share."""
    parts = [
        ("dataset", lambda k: f"{k['dataset']} / {k['model']}"),
        ("global_batch", lambda k: f"batch {k['global_batch']}"),
        ("device", lambda k: str(k["device"])),
        ("backend", lambda k: str(k["backend"])),
        ("bn", lambda k: f"{k['bn']} BN"),
    ]
    dicts = [dict(zip(BASELINE_KEY, key, strict=True)) for key in keys]
    varies = {name: len({fmt(d) for d in dicts}) > 1 or len(dicts) == 1 for name, fmt in parts}
    labels = [", ".join(fmt(d) for name, fmt in parts if varies[name]) for d in dicts]
    common = ", ".join(fmt(dicts[0]) for name, fmt in parts if not varies[name])
    return labels, common


def worker_tick_labels(workers: list[int], lo: float, hi: float) -> list[str]:
    """Labels of worker-count ticks on a log axis from ``lo`` to ``hi``: a tick too close to
    the previous labelled one (under 6 % of the axis) stays unlabelled, so labels never
    overprint."""
    span = math.log2(hi / lo)
    labels, last = [], None
    for w in workers:
        if last is None or math.log2(w / last) >= 0.06 * span:
            labels.append(str(w))
            last = w
        else:
            labels.append("")
    return labels


def scaling_notes(runs_df: pd.DataFrame) -> list[str]:
    """Why runs have no speed-up, and which baselines were picked among several."""
    notes = []
    missing = runs_df[runs_df["speedup"].isna()]
    untimed = missing[missing["images_per_second"].isna()]
    no_base = missing[missing["images_per_second"].notna()]
    if not no_base.empty:
        notes.append(
            f"No speed-up or efficiency for {list_runs(sorted(no_base['run']))}: no timed "
            f"1-worker run with {BASELINE_WORDS} (no other run is used instead)."
        )
    if not untimed.empty:
        notes.append(
            f"No throughput for {list_runs(sorted(untimed['run']))}: no epoch left after the "
            "warm-up."
        )
    several = runs_df[runs_df["baseline_candidates"] > 1]
    for base, group in several.groupby("baseline_run", sort=True):
        notes.append(
            f"{int(group['baseline_candidates'].iloc[0])} 1-worker runs qualify as the baseline "
            f"of {describe_series(group.iloc[0])}: the fastest, {base}, is used."
        )
    return notes


def scaling_page(pages: Pages, runs_df: pd.DataFrame) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator, PercentFormatter

    notes = scaling_notes(runs_df)
    fig = pages.new(
        "Scaling across workers and nodes",
        "Mean throughput (timed epochs) of each run against its number of workers (ranks; one "
        "per GPU on GPU runs). A line joins the runs of one series (their mean where a series has "
        "several runs with one worker count): "
        f"{BASELINE_WORDS}. Speed-up and efficiency are relative to the series' 1-worker run "
        "(the fastest if there are several); a run without one is compared with no other run.",
        png="scaling",
        note="\n".join(notes) if notes else None,
    )
    grid = fig.add_gridspec(2, 2)
    axes = [fig.add_subplot(grid[i // 2, i % 2]) for i in range(3)]
    legend_ax = fig.add_subplot(grid[1, 1])
    legend_ax.set_axis_off()
    timed = runs_df[runs_df["images_per_second"].notna()]
    has_any_base = runs_df["speedup"].notna().any()
    series = list(timed.groupby(list(BASELINE_KEY), sort=True))
    labels, common = series_labels([key for key, _ in series]) if series else ([], "")
    palette = pages.sns.color_palette("tab10" if len(series) <= 10 else "husl", len(series))
    backends = sorted(runs_df["backend"].unique())
    styles = ["-", "--", "-.", (0, (5, 1, 1, 1, 1, 1))]  # ":" is the ideal line
    backend_ls = {b: styles[i % len(styles)] for i, b in enumerate(backends)}
    markers = {n: node_marker(i) for i, n in enumerate(sorted(runs_df["nodes"].unique()))}
    specs = (
        (axes[0], "images_per_second", "Images per second, all workers"),
        (axes[1], "speedup", "Speed-up vs 1 worker"),
        (axes[2], "efficiency", "Parallel efficiency (speed-up / workers)"),
    )
    # speed-up/efficiency values printed next to the points: of at most 3 series (labels of
    # series j shifted so that close points do not overprint) and MAX_ANNOTATED_POINTS points
    based = [key for key, group in series if group["speedup"].notna().any()]
    annotate = len(based) <= 3 and runs_df["speedup"].notna().sum() <= MAX_ANNOTATED_POINTS
    for (key, group), color in zip(series, palette, strict=True):
        offset = (7, (4, -13, 14)[based.index(key)] if key in based else 0)
        group = group.sort_values(["workers", "nodes"])
        ls = backend_ls[dict(zip(BASELINE_KEY, key, strict=True))["backend"]]
        for ax, col, _ in specs:
            if group[col].isna().all():
                continue
            line = group.groupby("workers")[col].mean()  # several runs per count: their mean
            ax.plot(line.index, line.to_numpy(), color=color, lw=1.5, alpha=0.75, ls=ls)
            for nodes, sub in group.groupby("nodes"):
                style = markers[nodes]
                ax.scatter(
                    sub["workers"],
                    sub[col],
                    marker=style["marker"],
                    s=60,
                    zorder=3,
                    facecolor="white" if style["hollow"] else color,
                    edgecolor=color if style["hollow"] else "white",
                    linewidth=1.2 if style["hollow"] else 0.8,
                )
            label = {"speedup": "{:.2f}x", "efficiency": "{:.0%}"}.get(col)
            if label and annotate:
                for w, v in zip(group["workers"], group[col], strict=True):
                    if math.isfinite(v):
                        ax.annotate(
                            label.format(v),
                            (w, v),
                            textcoords="offset points",
                            xytext=offset,
                            fontsize=9,
                            color=color,
                        )
    workers_all = sorted(runs_df["workers"].unique())
    max_w = max(workers_all)
    for ax, col, ylabel in specs:
        if col == "images_per_second" and timed.empty:
            Pages.note(
                ax, "Throughput: not available.\nNo run has an epoch left after the warm-up."
            )
            continue
        if col != "images_per_second" and not has_any_base:
            Pages.note(
                ax,
                f"{ylabel.split(' (')[0]}: not available.\nNo run has a timed 1-worker run "
                "with the same\ndataset, model, global batch, device,\nbackend and BN mode "
                "to compare with.",
            )
            continue
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(workers_all))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels(worker_tick_labels(workers_all, min(workers_all) / 1.4, max_w * 1.5))
        ax.set_xlim(min(workers_all) / 1.4, max_w * 1.5)
        ax.set_xlabel("Workers (ranks)")
        ax.set_ylabel(ylabel)
        if col == "speedup":
            ax.plot([1, max_w], [1, max_w], ls=":", color="0.4", lw=1.2)
            ax.set_ylim(0, max(max_w, float(runs_df["speedup"].max())) * 1.1)
        elif col == "efficiency":
            ax.axhline(1.0, ls=":", color="0.4", lw=1.2)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(0, max(1.1, float(runs_df["efficiency"].max()) * 1.1))
        else:
            ax.set_ylim(0, float(runs_df["images_per_second"].max()) * 1.15)

    if not series:
        return
    fontsize = 9.5 if len(series) <= 8 else 8
    series_handles = [
        Line2D([], [], color=c, lw=2, ls=backend_ls[g["backend"].iloc[0]], label=lab)
        for (_, g), c, lab in zip(series, palette, labels, strict=True)
    ]
    first = legend_ax.legend(
        handles=series_handles,
        loc="upper left",
        ncol=1 if len(series) <= 10 else 2,
        frameon=False,
        fontsize=fontsize,
        title="Series" + (f" (all: {common})" if common else ""),
        title_fontsize=fontsize + 0.5,
        alignment="left",
    )
    legend_ax.add_artist(first)
    other = [
        Line2D(
            [],
            [],
            color="0.3",
            marker=st["marker"],
            ls="",
            markersize=8,
            markerfacecolor="white" if st["hollow"] else "0.3",
            label=_plural(int(n), "node"),
        )
        for n, st in markers.items()
    ]
    other += [Line2D([], [], color="0.3", lw=1.5, ls=backend_ls[b], label=b) for b in backends]
    if has_any_base:
        other.append(Line2D([], [], color="0.4", ls=":", lw=1.2, label="ideal (linear)"))
    legend_ax.legend(
        handles=other,
        loc="lower left",
        ncol=min(len(other), 4),
        frameon=False,
        fontsize=fontsize,
        title="Markers: nodes; lines: backend",
        title_fontsize=fontsize + 0.5,
        alignment="left",
    )


def backend_pages(pages: Pages, runs_df: pd.DataFrame) -> None:
    """Throughput of runs that differ only in their backend, side by side, with the ratio."""
    from matplotlib.patches import Patch

    title = "Backend comparison"
    subtitle = (
        "Mean throughput (timed epochs, \u00b1 sample sd) of runs that differ only in their "
        "backend: same dataset, model, workers, nodes, device, BN mode, global batch and "
        "precision/memory format. The "
        f"ratio is each backend's throughput over {REFERENCE_BACKEND}'s (> 1: faster)."
    )
    cmp = backend_comparison(runs_df)
    backends = sorted(runs_df["backend"].unique())
    if cmp.empty:
        fig = pages.new(title, subtitle, png="backends")
        counts = runs_df["backend"].value_counts()
        if len(backends) == 1:
            text = (
                f"All runs use the {backends[0]} backend, so there is no backend to compare.\n"
                "Runs that differ only in their backend would be compared here."
            )
        else:
            text = (
                "No two timed runs differ only in their backend, so there is nothing to compare."
                "\nBackends run: "
                + ", ".join(f"{b} ({_plural(int(counts[b]), 'run')})" for b in backends)
                + "."
            )
        Pages.note(fig.add_subplot(), text)
        return
    palette = pages.sns.color_palette("colorblind", len(backends))
    colors = dict(zip(backends, palette, strict=True))
    configs = list(cmp.groupby(list(BACKEND_MATCH_KEY), sort=True))
    legend_order = list(dict.fromkeys(cmp["backend"]))  # the reference (top bar) first
    notes = []
    untimed = sorted(runs_df.loc[runs_df["images_per_second"].isna(), "run"])
    unmatched = sorted(set(runs_df["run"]) - set(cmp["run"]) - set(untimed))
    several = cmp[cmp["runs"] > 1]
    if not several.empty:
        notes.append(
            "Several runs of one backend in a configuration: the fastest is shown ("
            + list_runs(list(several["run"]))
            + ")."
        )
    if unmatched:
        notes.append(f"Not compared (no counterpart on another backend): {list_runs(unmatched)}.")
    if untimed:
        notes.append(f"Not compared (no timed epoch): {list_runs(untimed)}.")
    per_page = 10
    chunks = [configs[i : i + per_page] for i in range(0, len(configs), per_page)]
    top = float(np.nanmax(cmp["images_per_second"] + cmp["std_images_per_second"].fillna(0)))
    for page_no, chunk in enumerate(chunks, start=1):
        fig = pages.new(
            title + (f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""),
            subtitle,
            png="backends" + (f"-{page_no}" if page_no > 1 else ""),
            note="\n".join(notes) if notes else None,
        )
        ax = fig.add_subplot()
        labels = []
        for i, (key, group) in enumerate(chunk):
            cfg = dict(zip(BACKEND_MATCH_KEY, key, strict=True))
            labels.append(
                f"{cfg['dataset']} / {cfg['model']}, {_plural(cfg['workers'], 'worker')} on "
                f"{_plural(cfg['nodes'], 'node')}, {cfg['device']}, batch "
                f"{cfg['global_batch']}, {cfg['bn']} BN"
            )
            n = len(group)
            height = 0.7 / n
            ratios = []
            for j, row in enumerate(group.itertuples(index=False)):
                y = i - 0.35 + height * (j + 0.5)
                sd = row.std_images_per_second if math.isfinite(row.std_images_per_second) else 0
                ax.barh(
                    y,
                    row.images_per_second,
                    xerr=sd,
                    height=height * 0.9,
                    color=colors[row.backend],
                    error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
                )
                ax.text(
                    row.images_per_second + sd,
                    y,
                    f"  {row.images_per_second:,.0f} ({row.run})",
                    va="center",
                    fontsize=9 if n > 2 else 9.5,
                )
                if row.backend != row.reference_backend:
                    ratios.append(f"{row.backend} / {row.reference_backend} = {row.ratio:.2f}x")
            ax.text(
                1.01,
                i,
                "\n".join(ratios),
                transform=ax.get_yaxis_transform(),
                va="center",
                fontsize=10.5,
                weight="bold",
            )
        set_category_ticks(ax, labels, width=30)
        ax.set_xlim(0, top * 1.45)
        ax.set_xlabel("Images per second, all workers")
        ax.legend(
            handles=[Patch(color=colors[b], label=b) for b in legend_order],
            loc="lower left",
            bbox_to_anchor=(0, 1.0),
            ncol=len(legend_order),
            frameon=False,
            fontsize=10.5,
        )


def curves_page(pages: Pages, epochs_df: pd.DataFrame) -> None:
    from matplotlib.ticker import PercentFormatter

    fig = pages.new(
        "Training curves",
        "Training loss (mean over the epoch's batches) and validation accuracy after each epoch.",
        png="training_curves",
    )
    loss_ax, acc_ax = fig.subplots(1, 2)
    for name in pages.order:
        ep = epochs_df[epochs_df["run"] == name]
        style = {"color": pages.colors[name], "marker": "o", "markersize": 3.5, "label": name}
        loss_ax.plot(ep["epoch"], ep["train_loss"], **style)
        acc_ax.plot(ep["epoch"], ep["val_accuracy"], **style)
    if (epochs_df["train_loss"] > 0).all():
        loss_ax.set_yscale("log")
        _log_ticks(loss_ax.yaxis, epochs_df["train_loss"].min(), epochs_df["train_loss"].max())
        loss_ax.set_ylabel("Training loss (cross-entropy, log scale)")
    else:
        loss_ax.set_ylabel("Training loss (cross-entropy)")
    acc_ax.set_ylabel("Validation accuracy")
    acc_ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    acc_lo, acc_hi = epochs_df["val_accuracy"].min(), epochs_df["val_accuracy"].max()
    if acc_hi - acc_lo < 0.05:  # a flat or single-point curve: show at least 10 points of range
        mid = min(max((acc_lo + acc_hi) / 2, 0.05), 0.95)
        acc_ax.set_ylim(mid - 0.05, mid + 0.05)
    for ax in (loss_ax, acc_ax):
        _epoch_axis(ax, epochs_df["epoch"])
    handles, labels = loss_ax.get_legend_handles_labels()
    acc_ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
        frameon=False,
        fontsize=10,
        title="Run",
        title_fontsize=10.5,
    )


def confusion_page(pages: Pages, runs_df: pd.DataFrame, runs: list[RunData]) -> None:
    from matplotlib.ticker import PercentFormatter

    best = runs_df.iloc[0]
    data = next(r for r in runs if r.name == best["run"])
    cm = data.confusion
    n = int(cm.to_numpy().sum())
    fig = pages.new(
        f"Confusion matrix of the best run: {best['run']}",
        f"{describe_run(best)}; {best['eval_split']} split, n = {n:,}, accuracy "
        f"{fmt_pct(best['accuracy'])}. Left: colour = share of the true class, numbers = counts. "
        "Right: precision, recall and F1 of each class.",
        png="confusion_best",
    )
    fig.get_layout_engine().set(wspace=0.08)
    heat_ax, dot_ax = fig.subplots(1, 2, width_ratios=[1.45, 1])
    share = cm.div(cm.sum(axis=1).replace(0, 1), axis=0) * 100
    k = len(cm)
    pages.sns.heatmap(
        share,
        ax=heat_ax,
        cmap="Blues",
        vmin=0,
        vmax=100,
        annot=cm.to_numpy() if k <= 20 else False,
        fmt="d",
        annot_kws={"fontsize": max(6, 11 - k // 4)},
        square=True,
        linewidths=0.5,
        linecolor="white",
        cbar_kws={"label": "Share of the true class (%)", "shrink": 0.75, "pad": 0.03},
    )
    heat_ax.set_xlabel("Predicted class")
    heat_ax.set_ylabel("True class")
    long_names = max(map(len, cm.columns)) > 3
    heat_ax.tick_params(axis="x", rotation=45 if long_names else 0)
    if long_names:
        for t in heat_ax.get_xticklabels():
            t.set_horizontalalignment("right")
    heat_ax.tick_params(axis="y", rotation=0)

    pc = data.per_class.set_index("class")[["precision", "recall", "f1"]].reindex(cm.index)
    y = np.arange(k)
    for offset, (col, label, marker, color) in zip(
        (-0.22, 0, 0.22),
        (
            ("precision", "Precision", "o", "#1b9e77"),
            ("recall", "Recall", "s", "#d95f02"),
            ("f1", "F1", "D", "#7570b3"),
        ),
        strict=True,
    ):
        dot_ax.scatter(pc[col], y + offset, marker=marker, color=color, s=28, label=label, zorder=3)
    dot_ax.set_yticks(y, list(cm.index))
    dot_ax.set_ylim(k - 0.5, -0.5)
    lo = float(np.nanmin(pc.to_numpy())) if pc.notna().any().any() else 0.0
    dot_ax.set_xlim(max(0.0, math.floor((lo - 0.02) * 20) / 20), 1.005)
    dot_ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    dot_ax.set_xlabel("Score per class (axis does not start at 0)" if lo > 0.05 else "Score")
    dot_ax.set_ylabel("True class")
    dot_ax.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False, fontsize=10
    )


def benchmarks_pages(pages: Pages, bench: pd.DataFrame, missing: list[str]) -> None:
    """Wall time and max RSS per Snakemake job, in pipeline order, BENCH_JOBS_PER_PAGE a page."""
    from matplotlib.patches import Patch

    title = "Snakemake jobs: wall time and memory"
    subtitle = (
        "From the rules' benchmark files (results/benchmarks/{rule}/{job}.tsv), mean over "
        "repeats. Max RSS = peak resident memory of the job's processes."
    )
    if bench.empty:
        fig = pages.new(title, subtitle, png="benchmarks")
        text = (
            "No Snakemake benchmark records were found, so there is nothing to show here.\n"
            "Rules with a benchmark: directive write them once their jobs have run."
        )
        if missing:
            text += "\n\nNot found: " + ", ".join(shorten_text(m, 60) for m in missing[:6])
        Pages.note(fig.add_subplot(), text)
        return
    notes = []
    if bench["max_rss"].isna().any():
        notes.append("n/a: the job ended before Snakemake's first memory sample")
    if missing:
        notes.append(f"not found: {', '.join(shorten_text(m, 50) for m in missing[:4])}")
    means = bench.groupby(["rule", "job"], sort=False)[["s", "max_rss"]].mean().reset_index()
    rank = {r: i for i, r in enumerate(PIPELINE_ORDER)}
    means["order"] = means["rule"].map(lambda r: rank.get(r, len(rank)))
    means = means.sort_values(["order", "rule", "job"]).reset_index(drop=True)
    rules = list(dict.fromkeys(means["rule"]))
    palette = dict(zip(rules, pages.sns.color_palette("Set2", len(rules)), strict=True))
    positive = means["s"][means["s"] > 0]
    time_lim = (positive.min() / 2, positive.max() * 8) if not positive.empty else None
    rss_max = max(float(means["max_rss"].max(skipna=True) or 0), 1.0)

    chunks = [
        means.iloc[i : i + BENCH_JOBS_PER_PAGE] for i in range(0, len(means), BENCH_JOBS_PER_PAGE)
    ]
    for page_no, chunk in enumerate(chunks, start=1):
        fig = pages.new(
            title + (f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""),
            subtitle,
            png="benchmarks" + (f"-{page_no}" if page_no > 1 else ""),
            note="; ".join(notes) + "." if notes else None,
        )
        time_ax, mem_ax = fig.subplots(1, 2, sharey=True)
        y = np.arange(len(chunk))
        colors = [palette[r] for r in chunk["rule"]]
        for ax, col, xlabel, fmt in (
            (time_ax, "s", "Wall time (s, log scale)", fmt_duration),
            (mem_ax, "max_rss", "Max RSS (MB)", lambda v: f"{v:,.0f} MB"),
        ):
            values = chunk[col]
            ax.barh(y, values.fillna(0), color=colors, height=0.65)
            for yi, v in zip(y, values, strict=True):
                text = "n/a" if pd.isna(v) else fmt(v)
                ax.text(0 if pd.isna(v) else v, yi, f"  {text}", va="center", fontsize=9.5)
            ax.set_xlabel(xlabel)
        if time_lim:
            time_ax.set_xscale("log")
            time_ax.set_xlim(*time_lim)
            _log_ticks(time_ax.xaxis, *time_lim)
        mem_ax.set_xlim(0, rss_max * 1.25)
        labels = [f"{r}: {j}" for r, j in zip(chunk["rule"], chunk["job"], strict=True)]
        set_category_ticks(time_ax, labels, width=34)
        mem_ax.tick_params(axis="y", left=False, labelleft=False)
        mem_ax.grid(axis="y", visible=False)
        mem_ax.legend(
            handles=[Patch(color=palette[r], label=r) for r in rules],
            title="Rule",
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0,
            frameon=False,
            fontsize=10,
            title_fontsize=10.5,
        )


def build_pages(
    params: ReportParams,
    prov: dict[str, Any],
    runs: list[RunData],
    runs_df: pd.DataFrame,
    epochs_df: pd.DataFrame,
    bench: pd.DataFrame,
    bench_missing: list[str],
) -> Pages:
    pages = Pages(params, runs_df)
    title_page(pages, prov, runs_df, bench)
    runs_table_pages(pages, runs_df)
    provenance_pages(pages, runs_df)
    epoch_time_page(pages, runs_df, epochs_df)
    throughput_page(pages, runs_df)
    scaling_page(pages, runs_df)
    backend_pages(pages, runs_df)
    curves_page(pages, epochs_df)
    confusion_page(pages, runs_df, runs)
    benchmarks_pages(pages, bench, bench_missing)
    return pages


def theme() -> dict[str, Any]:
    """rcParams of the report style: seaborn's whitegrid theme at a size readable on A4.

    Every text of the report is drawn literally, in one place for all of them (titles, table
    cells, tick labels, legends, notes, footers): no mathtext (``text.parse_math``; a ``$`` in
    a title or run name is a dollar sign) and no TeX (``text.usetex``). Each text object takes
    these when it is created, so the pages are built inside ``rc_context(theme())``. Fonts of
    wide coverage that are installed (:data:`FALLBACK_FONTS`) follow the report's own fonts
    for the characters those lack."""
    import seaborn as sns

    rc = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.95)}
    rc.update(
        {
            "axes.titleweight": "bold",
            "axes.spines.right": False,
            "axes.spines.top": False,
            "pdf.fonttype": 42,
            "savefig.dpi": 150,
            "text.parse_math": False,
            "text.usetex": False,
            "font.family": font_families("sans-serif"),
        }
    )
    return rc


# ------------------------------------------------------------------------------------------------
# fonts: fallbacks, and the characters no font here can draw


@lru_cache(maxsize=1)
def fallback_fonts() -> tuple[str, ...]:
    """The installed families of :data:`FALLBACK_FONTS`, the first found of each group."""
    from matplotlib import font_manager

    installed = set(font_manager.get_font_names())
    found = (next((f for f in group if f in installed), None) for group in FALLBACK_FONTS)
    return tuple(f for f in found if f)


def font_families(generic: str) -> list[str]:
    """A family list for matplotlib's font fallback: the ``generic`` family ('sans-serif',
    'monospace': the theme's font of that kind), then :func:`fallback_fonts`."""
    return [generic, *fallback_fonts()]


def font_files(generic: str, weight: str = "normal") -> list[Any]:
    """The font files that draw text of the ``generic`` family in this weight, in fallback
    order, as matplotlib picks them under the current rcParams (call inside the theme)."""
    from matplotlib import font_manager
    from matplotlib.font_manager import FontProperties

    files: list[Any] = []
    for i, family in enumerate(font_families(generic)):
        try:
            path = font_manager.findfont(
                FontProperties(family=family, weight=weight), fallback_to_default=i == 0
            )
        except ValueError:
            continue
        if path not in files:
            files.append(path)
    return files


@lru_cache(maxsize=64)
def font_charmap(path: Any) -> frozenset[int]:
    """The code points a font file has glyphs for (its cmap)."""
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(path).get_charmap())


def drawable_codepoints(faces: tuple[tuple[str, str], ...] = REPORT_FACES) -> frozenset[int]:
    """The characters that every face the report draws in (:data:`REPORT_FACES`) has a glyph
    for, in its own font or a fallback; under the current rcParams (call inside the theme)."""
    covered = [
        frozenset().union(*(font_charmap(path) for path in font_files(generic, weight)))
        for generic, weight in faces
    ]
    return frozenset.intersection(*covered)


def missing_glyphs(text: str, drawable: Collection[int]) -> list[str]:
    """The distinct characters of ``text``, in order, whose code point is not in ``drawable``.
    Control characters (line breaks, tabs) are laid out, never drawn, so never missing."""
    return list(
        dict.fromkeys(c for c in text if ord(c) not in drawable and unicodedata.category(c) != "Cc")
    )


def glyph_warning(what: str, chars: list[str], limit: int = MISSING_GLYPHS_LISTED) -> str:
    """The log line naming the characters of ``what`` (a text, in words) that no font here
    can draw, at most ``limit`` of them: "report: warning: the title has characters no font
    here can draw, shown as boxes: '中' (U+4E2D), '😀' (U+1F600)"."""
    named = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in chars[:limit])
    more = f" and {len(chars) - limit} more" if len(chars) > limit else ""
    return (
        f"report: warning: {what} has characters no font here can draw, shown as boxes: "
        f"{named}{more}"
    )


def user_texts(
    params: ReportParams,
    runs_df: pd.DataFrame,
    runs: list[RunData],
    bench: pd.DataFrame,
    bench_missing: list[str],
) -> list[tuple[str, str]]:
    """Every text the report draws that comes from the config or the data files, as (what it
    is, in words; the text), each distinct text once: title, author, run names, what the runs
    trained on and where, the class names of the best run (its confusion page), benchmark job
    names."""
    texts = {params.title: "the title", params.author: "the author"}

    def add(what: str, values: Any) -> None:
        for value in map(str, values):
            texts.setdefault(value, f"{what} {value!r}")

    add("the run name", runs_df["run"])
    for what, cols in (
        ("the dataset name", ("dataset",)),
        ("the model name", ("model",)),
        ("the backend name", ("backend", "bn", "scheduler")),
        ("the training host", ("host_ranks",)),
        ("the training CPU", ("cpu_model",)),
        ("the training GPUs", ("gpus",)),
        ("the GPU driver", ("gpu_driver",)),
        ("the software version", (*PROVENANCE_VERSIONS, "commit")),
        ("the rank differences", ("rank_differences",)),
    ):
        add(what, (v for col in cols for v in runs_df[col]))
    best = next(r for r in runs if r.name == runs_df["run"].iloc[0])
    add(f"the class name (of run {best.name})", best.confusion.index)
    add("the benchmark rule", bench["rule"])
    add("the benchmark job", bench["job"])
    add("the benchmark argument", bench_missing)
    return [(what, text) for text, what in texts.items()]


def glyph_warnings(texts: list[tuple[str, str]], drawable: Collection[int]) -> list[str]:
    """One :func:`glyph_warning` per text with characters outside ``drawable``."""
    return [
        glyph_warning(what, chars)
        for what, text in texts
        if (chars := missing_glyphs(text, drawable))
    ]


def write_outputs(
    out_dir: Path,
    params: ReportParams,
    prov: dict[str, Any],
    runs: list[RunData],
    bench: pd.DataFrame,
    bench_missing: list[str],
) -> int:
    """Write the CSVs, the figure PNGs and, last, report.pdf; returns the PDF's page count."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_pdf import PdfPages

    runs_df = runs_table(runs, params.timing_warmup_epochs)
    epochs_df = epochs_table(runs, params.timing_warmup_epochs)
    for name, df in (("runs", runs_df), ("epochs", epochs_df), ("benchmarks", bench)):
        with atomic_open(out_dir / f"{name}.csv", newline="") as fh:
            df.to_csv(fh, index=False)

    with matplotlib.rc_context(theme()), warnings.catch_warnings():
        # matplotlib warns of each missing glyph at each save: said once per text below instead
        warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)
        texts = user_texts(params, runs_df, runs, bench, bench_missing)
        missing = glyph_warnings(texts, drawable_codepoints())
        for line in missing:
            print(line, file=sys.stderr)
        if missing:
            fonts = [Path(f).name for g, w in REPORT_FACES for f in font_files(g, w)]
            print(
                f"report: fonts used: {', '.join(dict.fromkeys(fonts))}. The report also uses "
                f"these where installed: {', '.join(f for g in FALLBACK_FONTS for f in g)} "
                "(e.g. the Debian packages fonts-noto-cjk, fonts-noto-core, fonts-symbola)",
                file=sys.stderr,
            )
        pages = build_pages(params, prov, runs, runs_df, epochs_df, bench, bench_missing)
        total = len(pages.pages)
        footer = footer_text(params, prov)
        for i, (_, fig) in enumerate(pages.pages, start=1):
            stamp_footer(fig, footer, i, total)
        png_metadata = {"Title": params.title, "Description": footer}
        for png, fig in pages.pages:
            if png:
                with atomic_path(out_dir / "figures" / f"{png}.png") as tmp:
                    fig.savefig(tmp, format="png", metadata=png_metadata)
        with atomic_path(out_dir / "report.pdf") as tmp:
            with PdfPages(tmp, metadata=pdf_metadata(params, prov)) as pdf:
                for _, fig in pages.pages:
                    pdf.savefig(fig)
    return total


def footer_text(params: ReportParams, prov: dict[str, Any]) -> str:
    """The footer of every PDF page and PNG figure: title, config hash and the commit of the
    report's code (12 characters, '(dirty)' with uncommitted changes)."""
    git = prov["git"]
    commit = commit_text(git["commit"], git.get("dirty"), 12)
    title = shorten_text(params.title, 80, placeholder=" ...")
    return f"{title}  \u00b7  config {params.config_hash}  \u00b7  commit {commit}"


def stamp_footer(fig, footer: str, page: int, total: int) -> None:
    """Draw ``footer`` and 'page N of M' at the bottom of the page ``fig``."""
    fig.text(0.03, 0.015, footer, fontsize=8.5, color="0.5")
    fig.text(0.97, 0.015, f"page {page} of {total}", fontsize=8.5, color="0.5", ha="right")


def pdf_metadata(params: ReportParams, prov: dict[str, Any]) -> dict[str, str]:
    return {
        "Title": params.title,
        "Author": params.author or "clusterbench",
        "Subject": f"clusterbench report; config {params.config_hash}; "
        f"commit {provenance.describe_commit(prov['git'])}",
        "Creator": "clusterbench.report",
    }


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


def write_skipped(path: Path, skipped: list[dict[str, Any]]) -> None:
    """skipped.csv (:data:`SKIPPED_COLUMNS`; a header alone when nothing was skipped)."""
    import csv

    with atomic_open(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(SKIPPED_COLUMNS)
        for entry in skipped:
            writer.writerow(["" if entry.get(k) is None else entry[k] for k in SKIPPED_COLUMNS])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--params", required=True, help='the report settings: {"title", "author", ...}'
    )
    parser.add_argument("--config-hash", required=True, help="hash of the config (provenance)")
    parser.add_argument("--run-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument("--eval-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument(
        "--benchmarks",
        nargs="*",
        default=[],
        metavar="TSV",
        help="benchmark files, directories or glob patterns",
    )
    parser.add_argument("--out-dir", type=Path, required=True, help="results/report")
    parser.add_argument(
        "--skipped",
        default="[]",
        help="the runs skipped where the workflow ran: a JSON list of "
        '{"run", "experiment", "environment", "point", "reason"} (-> skipped.csv)',
    )
    args = parser.parse_args(argv)

    try:
        params = parse_params(args.params, args.config_hash)
        skipped = parse_skipped(args.skipped)
    except ConfigError as exc:
        return bad_settings("report", exc)
    runs = [
        load_run(run_dir, eval_dir)
        for run_dir, eval_dir in pair_dirs(args.run_dirs, args.eval_dirs)
    ]
    bench_files, bench_missing = expand_benchmark_args(args.benchmarks)
    bench = load_benchmarks(bench_files)
    prov = provenance.collect()
    write_skipped(args.out_dir / "skipped.csv", skipped)  # the PDF comes last
    n_pages = write_outputs(args.out_dir, params, prov, runs, bench, bench_missing)
    print(
        f"report: {_plural(len(runs), 'run')}, {_plural(len(bench), 'benchmark record')}, "
        f"{n_pages} pages -> {args.out_dir / 'report.pdf'}"
    )
    return 0
