"""Stage 5: tables and a multi-page PDF report of all runs.

```
python scripts/report.py --params '{"title": ..., "author": ..., "config_hash": ...}' \
    --run-dirs results/runs/A ... --eval-dirs results/eval/A ... \
    --benchmarks results/benchmarks/**/*.tsv --out-dir results/report
```

Reads, per run, ``run.json`` + ``metrics.jsonl`` (train stage) and ``metrics.json`` +
``confusion.csv`` + ``per_class.csv`` (evaluate stage), paired by directory name, plus the
Snakemake ``benchmark:`` TSV files (``results/benchmarks/{rule}/{job}.tsv``). Writes
``runs.csv`` (one row per run, sorted by accuracy), ``epochs.csv`` (one row per run and epoch),
``benchmarks.csv`` (one row per benchmark record), ``figures/*.png`` and, last, ``report.pdf``
(A4 landscape): title page with provenance, runs table, time per epoch, throughput, scaling,
training curves, confusion matrix of the best run, per-rule wall time and memory.

All inputs are read and checked before anything is written; a missing or malformed required
file is an error naming that file. Missing benchmark files are not: the section says so.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clusterbench import provenance
from clusterbench.atomic import atomic_open, atomic_path
from clusterbench.params import json_object, read_json_object

PAGE_SIZE = (11.69, 8.27)  # A4 landscape, inches
TABLE_ROWS_PER_PAGE = 14
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
RUN_FIELDS = ("name", "dataset", "model", "workers", "nodes", "batch_size", "lr")
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


# ------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class ReportParams:
    title: str
    author: str
    config_hash: str


@dataclass
class RunData:
    """Everything the train and evaluate stages wrote for one run."""

    name: str
    info: dict[str, Any]  # run.json
    epochs: pd.DataFrame  # metrics.jsonl
    metrics: dict[str, Any]  # eval metrics.json
    confusion: pd.DataFrame  # rows true, columns predicted, labelled by class name
    per_class: pd.DataFrame


def parse_params(text: str) -> ReportParams:
    """Validate ``--params``: ``{"title": str, "author": str (optional), "config_hash": str}``."""
    raw = json_object(text, allowed=("title", "author", "config_hash"))
    for key in ("title", "config_hash"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"--params.{key} must be a non-empty string, got {raw.get(key)!r}")
    author = raw.get("author", "")
    if not isinstance(author, str):
        raise ValueError(f"--params.author must be a string, got {author!r}")
    return ReportParams(
        title=raw["title"].strip(), author=author.strip(), config_hash=raw["config_hash"]
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
    """metrics.jsonl as a DataFrame, one row per epoch (an epoch logged twice: last wins)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (per-epoch metrics of the train stage)")
    rows = []
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
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no epochs recorded")
    df = pd.DataFrame(rows)
    for col in EPOCH_FIELDS:
        try:
            df[col] = pd.to_numeric(df[col])
        except (ValueError, TypeError):
            raise ValueError(f"{path}: field {col!r} has non-numeric values") from None
    return df.drop_duplicates("epoch", keep="last").sort_values("epoch").reset_index(drop=True)


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
    _require(info, ("run", "train_seconds"), run_dir / "run.json")
    if not isinstance(info["run"], dict):
        raise ValueError(f"{run_dir / 'run.json'}: 'run' must be an object")
    _require(info["run"], RUN_FIELDS, run_dir / "run.json", " in 'run'")
    name = str(info["run"]["name"])
    epochs = read_epochs(run_dir / "metrics.jsonl")

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
# tables


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Speed-up and efficiency of each run against the 1-worker run of its dataset and model.

    Throughput (mean images/s) is compared; with several 1-worker runs the fastest is the
    baseline. Runs of a dataset/model without any 1-worker run get no speed-up (NaN).
    """
    df = df.copy()
    df["baseline_run"] = pd.Series([None] * len(df), index=df.index, dtype=object)
    df["speedup"] = np.nan
    df["efficiency"] = np.nan
    for _, group in df.groupby(["dataset", "model"], sort=False):
        base = group[group["workers"] == 1]
        if base.empty:
            continue
        best = base.loc[base["images_per_second"].idxmax()]
        speedup = group["images_per_second"] / best["images_per_second"]
        df.loc[group.index, "baseline_run"] = best["run"]
        df.loc[group.index, "speedup"] = speedup
        df.loc[group.index, "efficiency"] = speedup / group["workers"]
    return df


def runs_table(runs: list[RunData]) -> pd.DataFrame:
    """One row per run (runs.csv), sorted by evaluation accuracy, best first."""
    rows = []
    for r in runs:
        cfg, world, ep = r.info["run"], r.info.get("world") or {}, r.epochs
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
                "launcher": world.get("launcher", "unknown"),
                "hosts": " ".join(dict.fromkeys(map(str, world.get("hosts", [])))),
                "epochs": int(r.info.get("epochs_completed", len(ep))),
                "batch_size": int(cfg["batch_size"]),
                "lr": float(cfg["lr"]),
                "eval_split": r.metrics["split"],
                "eval_n": int(r.metrics["n"]),
                "accuracy": float(r.metrics["accuracy"]),
                "loss": float(loss) if loss is not None else np.nan,
                "macro_precision": r.metrics.get("macro_precision", np.nan),
                "macro_recall": r.metrics.get("macro_recall", np.nan),
                "final_val_accuracy": float(ep["val_accuracy"].iloc[-1]),
                "best_val_accuracy": float(ep["val_accuracy"].max()),
                "mean_epoch_seconds": float(ep["epoch_seconds"].mean()),
                "std_epoch_seconds": float(ep["epoch_seconds"].std(ddof=0)),
                "images_per_second": float(ep["images_per_second"].mean()),
                "train_seconds": float(r.info["train_seconds"]),
            }
        )
    df = pd.DataFrame(rows)
    df["images_per_second_per_worker"] = df["images_per_second"] / df["workers"]
    df = add_scaling(df)
    df = df.sort_values(["accuracy", "run"], ascending=[False, True], kind="stable")
    return df.reset_index(drop=True)


def epochs_table(runs: list[RunData]) -> pd.DataFrame:
    """One row per run and epoch (epochs.csv)."""
    frames = []
    for r in runs:
        cfg = r.info["run"]
        ident = {"run": r.name, **{k: cfg[k] for k in RUN_ID_COLUMNS[1:]}}
        ep = r.epochs.drop(columns=[c for c in ident if c in r.epochs.columns])
        frames.append(pd.concat([pd.DataFrame(ident, index=ep.index), ep], axis=1))
    return pd.concat(frames, ignore_index=True)


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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def describe_run(row: pd.Series) -> str:
    return (
        f"{row['dataset']}, {row['model']}, {_plural(row['workers'], 'worker')} on "
        f"{_plural(row['nodes'], 'node')}"
    )


def run_order(runs_df: pd.DataFrame) -> list[str]:
    """Order runs are listed in on the per-run plots: by dataset, model, workers, nodes, name."""
    return list(runs_df.sort_values(["dataset", "model", "workers", "nodes", "run"])["run"])


def wrap_label(text: str, width: int = 22) -> str:
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=True)) or text


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
        title = textwrap.shorten(title, 80, placeholder=" ...")
        fig.text(0.03, 0.955, title, fontsize=19, weight="bold", va="center")
        top = 0.92
        if subtitle:
            lines = textwrap.wrap(subtitle, 135)
            fig.text(
                0.03, 0.915, "\n".join(lines), fontsize=11, color="0.3", va="top", linespacing=1.4
            )
            top = 0.905 - 0.03 * len(lines)
        if note:
            fig.text(0.03, 0.045, note, fontsize=9.5, color="0.35", va="center")
        if layout == "constrained":
            bottom = 0.065 if note else 0.035
            fig.get_layout_engine().set(rect=(0.02, bottom, 0.96, top - bottom))
        self.pages.append((png, fig))
        return fig

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
    fig = pages.new(
        params.title, " \u00b7 ".join(filter(None, [params.author, prov["date"]])), layout=None
    )
    best = runs_df.iloc[0]
    fastest = runs_df.loc[runs_df["images_per_second"].idxmax()]
    datasets = ", ".join(sorted(runs_df["dataset"].unique()))
    models = ", ".join(sorted(runs_df["model"].unique()))
    lines = [
        f"{_plural(len(runs_df), 'run')} on {datasets} ({models}); "
        f"{int(runs_df['epochs'].sum())} epochs, {fmt_duration(runs_df['train_seconds'].sum())} "
        "of training in total.",
        f"Best run: {best['run']} with {fmt_pct(best['accuracy'])} {best['eval_split']} "
        f"accuracy ({describe_run(best)}).",
        f"Highest throughput: {fastest['run']} with {fastest['images_per_second']:,.0f} images/s "
        f"({describe_run(fastest)}).",
    ]
    scaled = runs_df[runs_df["speedup"].notna() & (runs_df["workers"] > 1)]
    for (dataset, model), group in scaled.groupby(["dataset", "model"], sort=True):
        top_run = group.sort_values(["workers", "speedup"]).iloc[-1]
        lines.append(
            f"Scaling of {dataset}/{model}: {top_run['speedup']:.2f}x speed-up on "
            f"{_plural(top_run['workers'], 'worker')} ({fmt_pct(top_run['efficiency'], 0)} "
            f"efficiency) against {top_run['baseline_run']}."
        )
    if bench.empty:
        lines.append("Snakemake benchmarks: none found (see the last page).")
    else:
        jobs = bench.groupby(["rule", "job"])["s"].mean()
        lines.append(
            f"Snakemake benchmarks: {_plural(len(jobs), 'job')}, "
            f"{fmt_duration(float(jobs.sum()))} of job wall time in total."
        )
    lines = lines[:8]
    ax = fig.add_axes((0.03, 0.60, 0.94, 0.27))
    ax.set_axis_off()
    ax.text(0, 1, "Summary", fontsize=14, weight="bold", va="top", transform=ax.transAxes)
    wrapped = ["\u2022  " + "\n    ".join(textwrap.wrap(line, 130)) for line in lines]
    ax.text(
        0.01,
        0.82,
        "\n".join(wrapped),
        va="top",
        fontsize=11.5,
        linespacing=1.65,
        transform=ax.transAxes,
    )

    versions = prov["versions"]
    cores = prov["cpu_cores"]
    core_text = _plural(cores["logical"] or 0, "logical core")
    if cores.get("physical"):
        core_text += f" ({cores['physical']} physical)"
    train_hosts = sorted({h for h in " ".join(runs_df["hosts"]).split() if h})
    rows = [
        ("Config hash", params.config_hash),
        ("Workflow commit", provenance.describe_commit(prov["git"])),
        ("Report generated", f"{prov['date']} on {prov['host']}"),
        ("Platform", prov["platform"]),
        ("CPU", f"{prov['cpu_model']}, {core_text}"),
        ("GPUs", ", ".join(prov["gpus"]) or "none"),
        ("Python / torch", f"{versions['python']} / {versions['torch']}"),
        ("Horovod / Snakemake", f"{versions['horovod']} / {versions['snakemake']}"),
        (
            "pandas / matplotlib / seaborn",
            f"{versions['pandas']} / {versions['matplotlib']} / {versions['seaborn']}",
        ),
        ("Training hosts", ", ".join(train_hosts) or "unknown"),
        (
            "Training devices; launchers",
            f"{', '.join(sorted(runs_df['device'].unique()))}; "
            f"{', '.join(sorted(runs_df['launcher'].unique()))}",
        ),
    ]
    ax = fig.add_axes((0.03, 0.08, 0.94, 0.48))
    ax.set_axis_off()
    ax.text(0, 1, "Provenance", fontsize=14, weight="bold", va="top", transform=ax.transAxes)
    table = ax.table(
        cellText=[[k, textwrap.shorten(str(v), 100)] for k, v in rows],
        colWidths=[0.25, 0.75],
        cellLoc="left",
        bbox=(0.01, 0, 0.99, 0.9),
        edges="horizontal",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(10.5)
    for (_, col), cell in table.get_celld().items():
        cell.set_edgecolor("0.85")
        cell.get_text().set_weight("bold" if col == 0 else "normal")
        if col == 1:
            cell.get_text().set_family("monospace")


def runs_table_pages(pages: Pages, runs_df: pd.DataFrame) -> None:
    from matplotlib.table import Table

    splits = runs_df["eval_split"].unique()
    acc_header = f"{splits[0].capitalize()}\naccuracy" if len(splits) == 1 else "Accuracy\n(split)"
    columns = [  # header, relative width, right-aligned
        ("#", 0.03, True),
        ("Run", 0.165, False),
        ("Dataset", 0.065, False),
        ("Model", 0.09, False),
        ("Workers", 0.065, True),
        ("Nodes", 0.055, True),
        ("Epochs", 0.06, True),
        ("Global\nbatch", 0.06, True),
        ("LR", 0.045, True),
        (acc_header, 0.085, True),
        ("Mean time\nper epoch", 0.09, True),
        ("Throughput\n(images/s)", 0.095, True),
        ("Total train\ntime", 0.095, True),
    ]
    header = [c[0] for c in columns]
    rows = []
    for rank, r in enumerate(runs_df.itertuples(index=False), start=1):
        acc = fmt_pct(r.accuracy)
        rows.append(
            [
                str(rank),
                wrap_label(r.run, 21),
                r.dataset,
                r.model,
                str(r.workers),
                str(r.nodes),
                str(r.epochs),
                str(r.batch_size),
                f"{r.lr:g}",
                acc if len(splits) == 1 else f"{acc}\n({r.eval_split})",
                fmt_duration(r.mean_epoch_seconds),
                f"{r.images_per_second:,.0f}",
                fmt_duration(r.train_seconds),
            ]
        )
    chunks = [rows[i : i + TABLE_ROWS_PER_PAGE] for i in range(0, len(rows), TABLE_ROWS_PER_PAGE)]
    for page_no, chunk in enumerate(chunks, start=1):
        suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
        fig = pages.new(
            "Runs" + suffix,
            "Sorted by evaluation accuracy, best first (highlighted). Global batch = images per "
            "step over all workers; LR = per-worker base learning rate; time per epoch and "
            "throughput (all workers) are means over the epochs.",
            layout=None,
        )
        ax = fig.add_axes((0.03, 0.06, 0.94, 0.78))
        ax.set_axis_off()
        n_lines = [2] + [max(c.count("\n") + 1 for c in row) for row in chunk]
        units = [1 + 0.9 * n for n in n_lines]  # row height in text lines, with padding
        line_h = min(0.038, 1 / sum(units))  # axes fraction per unit: fill at most the page
        heights = [line_h * u for u in units]
        table = Table(ax, bbox=(0, 1 - sum(heights), 1, sum(heights)))
        for row, (cells, height) in enumerate(zip([header, *chunk], heights, strict=True)):
            for col, (text, (_, width, right)) in enumerate(zip(cells, columns, strict=True)):
                cell = table.add_cell(
                    row, col, width, height, text=text, loc="right" if right else "left"
                )
                cell.PAD = 0.06
                cell.set_edgecolor("white")
                cell.get_text().set_fontsize(11)
                if row == 0:
                    cell.set_facecolor("#2f4b7c")
                    cell.get_text().set(color="white", weight="bold", fontsize=10)
                elif page_no == 1 and row == 1:  # the best run
                    cell.set_facecolor("#d4ecd0")
                    cell.get_text().set_weight("bold")
                else:
                    cell.set_facecolor("#eef1f6" if row % 2 else "white")
        table.auto_set_font_size(False)
        ax.add_table(table)


def epoch_time_page(pages: Pages, epochs_df: pd.DataFrame) -> None:
    fig = pages.new(
        "Time per epoch",
        "Left: mean time per epoch of each run (bars, value printed) and every single epoch "
        "(dots). Right: the time of each epoch in order; the first one includes start-up costs.",
        png="epoch_time",
    )
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1])
    order = pages.order
    values = [epochs_df.loc[epochs_df["run"] == n, "epoch_seconds"].to_numpy() for n in order]
    rng = np.random.default_rng(0)
    for i, (name, vals) in enumerate(zip(order, values, strict=True)):
        color = pages.colors[name]
        left.barh(i, vals.mean(), height=0.6, color=color, alpha=0.45)
        jitter = rng.uniform(-0.2, 0.2, len(vals)) if len(vals) > 1 else np.zeros(1)
        left.scatter(
            vals, i + jitter, s=16, color=color, edgecolor="white", linewidth=0.4, zorder=3
        )
        left.text(vals.max() * 1.12, i, fmt_duration(vals.mean()), va="center", fontsize=10)
    all_values = np.concatenate(values)
    positive = all_values[all_values > 0]
    lo, hi = (positive.min(), positive.max()) if len(positive) else (0.1, 1.0)
    left.set_xscale("log")
    left.set_xlim(lo / 3, hi * 4)
    _log_ticks(left.xaxis, lo / 3, hi * 4)
    pages.run_axis(left, order)
    left.set_xlabel("Time per epoch (s, log scale)")
    for name in order:
        ep = epochs_df[epochs_df["run"] == name]
        right.plot(
            ep["epoch"],
            ep["epoch_seconds"],
            marker="o",
            markersize=3.5,
            color=pages.colors[name],
            label=name,
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


def throughput_page(pages: Pages, runs_df: pd.DataFrame, epochs_df: pd.DataFrame) -> None:
    fig = pages.new(
        "Throughput",
        "Training images per second: mean over the epochs (bars) and one standard deviation "
        "over the epochs (error lines); left for all workers together, right per worker.",
        png="throughput",
    )
    total_ax, worker_ax = fig.subplots(1, 2, sharey=True)
    order = pages.order
    stats = epochs_df.groupby("run")["images_per_second"].agg(["mean", "std"]).reindex(order)
    workers = runs_df.set_index("run")["workers"].reindex(order)
    colors = [pages.colors[n] for n in order]
    height = min(0.6, 0.25 + 0.1 * len(order))
    for ax, scale, xlabel in (
        (total_ax, 1, "Images per second, all workers"),
        (worker_ax, workers, "Images per second per worker"),
    ):
        mean = stats["mean"] / scale
        std = stats["std"].fillna(0) / scale
        ax.barh(
            range(len(order)),
            mean,
            xerr=std,
            color=colors,
            height=height,
            error_kw={"ecolor": "0.25", "capsize": 3, "lw": 1},
        )
        for y, (m, s) in enumerate(zip(mean, std, strict=True)):
            ax.text(m + s, y, f"  {m:,.0f}", va="center", fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_xlim(0, float((mean + std).max()) * 1.22)
    pages.run_axis(total_ax, order)
    worker_ax.tick_params(axis="y", left=False, labelleft=False)
    worker_ax.grid(axis="y", visible=False)


def scaling_page(pages: Pages, runs_df: pd.DataFrame) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator, PercentFormatter

    groups = list(runs_df.groupby(["dataset", "model"], sort=True))
    no_baseline = [f"{d}/{m}" for (d, m), g in groups if g["speedup"].isna().all()]
    has_any_base = len(no_baseline) < len(groups)
    note = None
    if no_baseline and has_any_base:
        note = f"No 1-worker run, so no speed-up or efficiency, for: {', '.join(no_baseline)}."
    fig = pages.new(
        "Scaling across workers and nodes",
        "Mean throughput of each run against its number of workers (Horovod ranks; one per GPU "
        "on GPU runs). Speed-up and efficiency are relative to the 1-worker run of the same "
        "dataset and model (the fastest one if there are several).",
        png="scaling",
        note=note,
    )
    grid = fig.add_gridspec(2, 3, height_ratios=[18, 1])
    axes = [fig.add_subplot(grid[0, i]) for i in range(3)]
    legend_ax = fig.add_subplot(grid[1, :])
    legend_ax.set_axis_off()
    palette = pages.sns.color_palette("dark", len(groups))
    group_colors = {key: palette[i] for i, (key, _) in enumerate(groups)}
    node_markers = dict(zip(sorted(runs_df["nodes"].unique()), "osD^vP*X", strict=False))
    specs = (
        (axes[0], "images_per_second", "Images per second, all workers"),
        (axes[1], "speedup", "Speed-up vs 1 worker"),
        (axes[2], "efficiency", "Parallel efficiency (speed-up / workers)"),
    )
    for key, group in groups:
        group = group.sort_values(["workers", "nodes"])
        color = group_colors[key]
        for ax, col, _ in specs:
            if group[col].isna().all():
                continue
            ax.plot(group["workers"], group[col], color=color, lw=1.5, alpha=0.7)
            for nodes, sub in group.groupby("nodes"):
                ax.scatter(
                    sub["workers"],
                    sub[col],
                    color=color,
                    marker=node_markers[nodes],
                    s=60,
                    zorder=3,
                    edgecolor="white",
                    linewidth=0.8,
                )
            label = {"speedup": "{:.2f}x", "efficiency": "{:.0%}"}.get(col)
            if label and len(group) <= MAX_ANNOTATED_POINTS:  # more would overlap
                for w, v in zip(group["workers"], group[col], strict=True):
                    ax.annotate(
                        label.format(v),
                        (w, v),
                        textcoords="offset points",
                        xytext=(7, -3),
                        fontsize=9,
                        color=color,
                    )
    workers_all = sorted(runs_df["workers"].unique())
    max_w = max(workers_all)
    for ax, col, ylabel in specs:
        if col != "images_per_second" and not has_any_base:
            Pages.note(
                ax,
                f"{ylabel.split(' (')[0]}: not available.\nNo dataset/model has a "
                "1-worker run\nto compare with.",
            )
            continue
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(workers_all))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(w) for w in workers_all])
        ax.set_xlim(min(workers_all) / 1.4, max_w * 1.5)
        ax.set_xlabel("Workers")
        ax.set_ylabel(ylabel)
        if col == "speedup":
            ax.plot([1, max_w], [1, max_w], ls="--", color="0.5", lw=1)
            ax.set_ylim(0, max(max_w, float(runs_df["speedup"].max())) * 1.1)
        elif col == "efficiency":
            ax.axhline(1.0, ls="--", color="0.5", lw=1)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(0, max(1.1, float(runs_df["efficiency"].max()) * 1.1))
        else:
            ax.set_ylim(0, float(runs_df["images_per_second"].max()) * 1.15)

    handles = [
        Line2D([], [], color=c, lw=2, label=f"{d} / {m}") for (d, m), c in group_colors.items()
    ]
    handles += [
        Line2D([], [], color="0.3", marker=mk, ls="", markersize=8, label=_plural(int(n), "node"))
        for n, mk in node_markers.items()
    ]
    if has_any_base:
        handles.append(Line2D([], [], color="0.5", ls="--", lw=1, label="ideal (linear)"))
    legend_ax.legend(
        handles=handles,
        loc="center",
        ncol=min(len(handles), 7),
        frameon=False,
        fontsize=10,
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
            text += "\n\nNot found: " + ", ".join(textwrap.shorten(m, 60) for m in missing[:6])
        Pages.note(fig.add_subplot(), text)
        return
    notes = []
    if bench["max_rss"].isna().any():
        notes.append("n/a: the job ended before Snakemake's first memory sample")
    if missing:
        notes.append(f"not found: {', '.join(textwrap.shorten(m, 50) for m in missing[:4])}")
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
    epoch_time_page(pages, epochs_df)
    throughput_page(pages, runs_df, epochs_df)
    scaling_page(pages, runs_df)
    curves_page(pages, epochs_df)
    confusion_page(pages, runs_df, runs)
    benchmarks_pages(pages, bench, bench_missing)
    return pages


def theme() -> dict[str, Any]:
    """rcParams of the report style: seaborn's whitegrid theme at a size readable on A4."""
    import seaborn as sns

    rc = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.95)}
    rc.update(
        {
            "axes.titleweight": "bold",
            "axes.spines.right": False,
            "axes.spines.top": False,
            "pdf.fonttype": 42,
            "savefig.dpi": 150,
        }
    )
    return rc


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

    runs_df = runs_table(runs)
    epochs_df = epochs_table(runs)
    for name, df in (("runs", runs_df), ("epochs", epochs_df), ("benchmarks", bench)):
        with atomic_open(out_dir / f"{name}.csv", newline="") as fh:
            df.to_csv(fh, index=False)

    with matplotlib.rc_context(theme()):
        pages = build_pages(params, prov, runs, runs_df, epochs_df, bench, bench_missing)
        for png, fig in pages.pages:
            if png:
                with atomic_path(out_dir / "figures" / f"{png}.png") as tmp:
                    fig.savefig(tmp, format="png")
        total = len(pages.pages)
        footer = f"{textwrap.shorten(params.title, 100)}  \u00b7  config {params.config_hash}"
        with atomic_path(out_dir / "report.pdf") as tmp:
            with PdfPages(tmp, metadata=pdf_metadata(params, prov)) as pdf:
                for i, (_, fig) in enumerate(pages.pages, start=1):
                    fig.text(0.03, 0.015, footer, fontsize=8.5, color="0.5")
                    fig.text(
                        0.97, 0.015, f"page {i} of {total}", fontsize=8.5, color="0.5", ha="right"
                    )
                    pdf.savefig(fig)
    return total


def pdf_metadata(params: ReportParams, prov: dict[str, Any]) -> dict[str, str]:
    return {
        "Title": params.title,
        "Author": params.author or "clusterbench",
        "Subject": f"clusterbench report; config {params.config_hash}; "
        f"commit {provenance.describe_commit(prov['git'])}",
        "Creator": "clusterbench.report",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", required=True, help='{"title", "author", "config_hash"}')
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
    args = parser.parse_args(argv)

    params = parse_params(args.params)
    runs = [
        load_run(run_dir, eval_dir)
        for run_dir, eval_dir in pair_dirs(args.run_dirs, args.eval_dirs)
    ]
    bench_files, bench_missing = expand_benchmark_args(args.benchmarks)
    bench = load_benchmarks(bench_files)
    prov = provenance.collect()
    n_pages = write_outputs(args.out_dir, params, prov, runs, bench, bench_missing)
    print(
        f"report: {_plural(len(runs), 'run')}, {_plural(len(bench), 'benchmark record')}, "
        f"{n_pages} pages -> {args.out_dir / 'report.pdf'}"
    )
    return 0
