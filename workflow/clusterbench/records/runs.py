"""A run's records, read back and checked: ``run.json`` and ``metrics.jsonl`` (the train stage)
and the evaluation's ``metrics.json`` (the evaluate stage).

One reader for the report, the history and ``clusterbench-compare``: a record that one of them
takes, all take, and a damaged one is refused with the same message (naming the file, the line
or field, and the command that trains the run again where the train stage's own files
disagree).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from clusterbench.config import LATER_TRAIN_KEYS, TRAIN_KEYS
from clusterbench.core.integrity import forcerun_command
from clusterbench.core.params import read_json_object
from clusterbench.records import flops

#: The fields every line of ``metrics.jsonl`` has, all numbers.
EPOCH_FIELDS = (
    "epoch",
    "train_loss",
    "val_loss",
    "val_accuracy",
    "epoch_seconds",
    "images_per_second",
)
#: ``run.json``'s ``effective`` settings every reader needs.
EFFECTIVE_FIELDS = ("global_batch", "lr", "batch_scaling")
#: The evaluation's ``metrics.json`` fields every reader needs.
EVAL_FIELDS = ("split", "accuracy", "loss", "n")


def require(obj: Mapping[str, Any], keys: Iterable[str], path: Path, where: str = "") -> None:
    """A ``ValueError`` naming ``path`` (and ``where`` in it) and the ``keys`` ``obj`` lacks."""
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}{where}")


def read_epochs(path: Path) -> list[dict[str, Any]]:
    """``metrics.jsonl``'s records, one per epoch. The train stage logs epochs 1, 2, ..., N in
    order, one line each, every :data:`EPOCH_FIELDS` a number: a gap, a repeated epoch or
    another order is an error naming the line (the file was cut, edited or mixed with another
    run's), as is a line that is no JSON object or lacks a field."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (per-epoch metrics of the train stage)")
    records, linenos = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not valid JSON: {exc}") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object per line")
        require(record, EPOCH_FIELDS, path, f" on line {lineno}")
        for field in EPOCH_FIELDS:
            value = record[field]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{path}: field {field!r} has non-numeric values")
        records.append(record)
        linenos.append(lineno)
    if not records:
        raise ValueError(f"{path}: no epochs recorded")
    check_epoch_sequence([r["epoch"] for r in records], linenos, path)
    return records


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


def read_run_info(path: Path) -> dict[str, Any]:
    """``run.json``, checked: its ``run`` (every training key but those added later),
    ``effective`` settings, ``train_seconds``, ``epochs_completed`` and, where it has one, its
    ``provenance``."""
    info = read_json_object(path, "run summary of the train stage")
    require(info, ("run", "train_seconds", "epochs_completed"), path)
    if not isinstance(info["run"], dict):
        raise ValueError(f"{path}: 'run' must be an object")
    require(info["run"], (k for k in TRAIN_KEYS if k not in LATER_TRAIN_KEYS), path, " in 'run'")
    if not isinstance(info.get("effective"), dict):
        raise ValueError(
            f"{path}: missing field 'effective' (an object with {list(EFFECTIVE_FIELDS)})"
        )
    require(info["effective"], EFFECTIVE_FIELDS, path, " in 'effective'")
    check_provenance(info, path)
    flops.check(info, path)
    return info


def check_provenance(info: Mapping[str, Any], path: Path) -> None:
    """``run.json``'s ``provenance``, where it has one (one written before provenance was
    recorded has none: reported as unknown): the hosts with their ranks, the commit and the
    package versions."""
    prov = info.get("provenance")
    if prov is None:
        return
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


def check_epochs_completed(completed: Any, recorded: int, run_dir: Path) -> None:
    """``run.json``'s ``epochs_completed`` must be the number of whole epochs in
    ``metrics.jsonl`` (the train stage writes both from the same records; a time box's partial
    epoch, its last record, is not a whole one): otherwise one of the two was cut or edited,
    and the run's epochs and its summary would disagree."""
    info, metrics = run_dir / "run.json", run_dir / "metrics.jsonl"
    if isinstance(completed, bool) or not isinstance(completed, int) or completed < 1:
        raise ValueError(
            f"{info}: 'epochs_completed' must be a whole number >= 1, got {completed!r}"
        )
    if completed != recorded:
        raise ValueError(
            f"{metrics} records {recorded} whole epoch{'s' * (recorded != 1)} but {info} says "
            f"epochs_completed = {completed}: the train stage writes both from the same epochs, "
            f"so one of them was cut or edited. Train the run again with: "
            f"{forcerun_command(info)}"
        )


def read_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A trained run's ``run.json`` and its epochs (``metrics.jsonl``), checked against each
    other."""
    info = read_run_info(run_dir / "run.json")
    epochs = read_epochs(run_dir / "metrics.jsonl")
    whole = sum(1 for e in epochs if not e.get("partial"))  # a time box's partial: not one
    check_epochs_completed(info["epochs_completed"], whole, run_dir)
    return info, epochs


def read_eval_metrics(path: Path, run: str) -> dict[str, Any]:
    """The evaluation's ``metrics.json`` of run ``run``: its :data:`EVAL_FIELDS`, and the run it
    evaluates (an error when it is another's)."""
    metrics = read_json_object(path, "metrics of the evaluate stage")
    require(metrics, EVAL_FIELDS, path)
    if metrics.get("run", run) != run:
        raise ValueError(
            f"{path}: evaluates run {metrics['run']!r}, but is paired with {path.parent} "
            f"(run {run!r})"
        )
    return metrics


def memory_format(info: Mapping[str, Any]) -> str:
    """The memory format a run trained in: run.json's ``effective.memory_format``; a run.json
    written before it existed trained in what its ``channels_last`` said."""
    chosen = (info.get("effective") or {}).get("memory_format")
    if chosen is not None:
        return str(chosen)
    return "channels_last" if info["run"].get("channels_last") is True else "contiguous"


#: runs.csv's columns of Horovod's summary lines (run.json's ``throughput``,
#: :func:`clusterbench.training.record.throughput_summary`) -> its key.
THROUGHPUT_COLUMNS = {
    "rate_unit": "unit",
    "rate_device": "device",
    "rate_per_worker": "per_device",
    "rate_per_worker_ci95": "per_device_ci95",
    "rate_total": "total",
    "rate_total_ci95": "total_ci95",
}


def throughput_columns(info: Mapping[str, Any]) -> dict[str, Any]:
    """A run's Horovod summary (run.json's ``throughput``) as runs.csv's columns, and the
    lines it printed (``summary_lines``, joined by "; "); NaN and "" in a run.json written
    before it existed."""
    found = info.get("throughput") or {}
    out: dict[str, Any] = {
        column: found.get(key, "" if key in ("unit", "device") else math.nan)
        for column, key in THROUGHPUT_COLUMNS.items()
    }
    out["summary_lines"] = "; ".join(found.get("lines") or [])
    return out


def pair_dirs(run_dirs: list[Path], eval_dirs: list[Path]) -> list[tuple[Path, Path]]:
    """``results/runs/RUN`` with ``results/eval/RUN``, by directory name; an error naming every
    run without an evaluation, evaluation without a run, and name given twice."""
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
