"""Throughput over time, and the regression rule (pure pandas on the history's entries).

A **series** is one site, environment, workload and configuration (the entries'
``speed_settings``: :mod:`clusterbench.history.entries`). A **point** of a series is what one
append added to it (one workflow run: its runs of that configuration, repeats of each other),
dated by its newest training; points are taken in date order.

**The rule.** Each point is compared with its **reference**: every earlier point of the series
that was not itself flagged. With the point's and the reference's mean throughput (images/s; a
language model's series: tokens/s, :func:`unit_of`) and standard
errors from :func:`clusterbench.core.stats.estimate` (each entry's mean and sd over its timed
epochs; the run-to-run spread ``sigma`` the larger of the sd of the reference's entry means and
that of the point's), a point is a **regression** when

    mean(point) < mean(reference) - 3 x sqrt(SE(point)^2 + SE(reference)^2)

i.e. it fell below the history by more than 3 standard errors of the difference
(:func:`clusterbench.core.stats.difference`); ``faster`` the other way round; ``ok`` within the
noise; ``unjudged`` when the noise is unknown (entries of a single timed epoch), ``first`` with
no reference. A regression names what changed in provenance (hosts, CPU and GPU models,
driver, NCCL, torch, Horovod, Python, commit) between the **last good entry** (the newest entry
of the newest earlier point not flagged) and the point's entries.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.core import stats

#: What makes entries one series.
SERIES_KEY = ("site", "environment", "workload", "speed_settings")

#: The rule in one sentence (the report's history page, the CLI).
RULE = (
    "A point (one workflow run's runs of a series) is a regression when its mean images/s (a "
    "language model's: tokens/s) is "
    "below that of every earlier point not flagged by more than 3 standard errors of the "
    "difference, sqrt(SE_new\u00b2 + SE_ref\u00b2); each SE is the larger of the epochs' share "
    "(sqrt(\u03a3 sd\u00b2/epochs) / runs) and the run-to-run spread's (the sd of the entries' "
    "means / sqrt(runs))."
)

#: Provenance columns compared between the last good entry and a regressed point, and their
#: names in words.
PROVENANCE_FIELDS = {
    "hosts": "hosts",
    "cpu_model": "CPU",
    "gpu_model": "GPU",
    "gpu_driver": "driver",
    "nccl": "NCCL",
    "torch": "torch",
    "horovod": "Horovod",
    "python": "Python",
    "commit_sha": "commit",
}

#: The entries' columns the rule reads.
ENTRY_COLUMNS = frozenset(
    (*SERIES_KEY, "append_id", "date", "run", "current", "dirty", *PROVENANCE_FIELDS)
    + ("images_per_second_mean", "images_per_second_sd", "timed_epochs")
    + ("tokens_per_second_mean", "tokens_per_second_sd")
)

#: A series' throughput: its entries' mean and sd columns and the unit, by what it trained
#: (:func:`unit_of`).
UNITS = {
    "images/s": ("images_per_second_mean", "images_per_second_sd"),
    "tokens/s": ("tokens_per_second_mean", "tokens_per_second_sd"),
}

#: The columns of :func:`points`.
POINT_COLUMNS = (
    *SERIES_KEY,
    "config",
    "append_id",
    "date",
    "runs",
    "n_runs",
    "epochs",
    "mean",
    "se",
    "ref_mean",
    "ref_se",
    "ref_runs",
    "threshold",
    "change",
    "status",
    "changed",
    "current",
    "unit",
)


def config_label(speed_settings: str) -> str:
    """A configuration (``speed_settings``, JSON) in words, what its environment and workload
    do not say already: 'horovod, aggregate BN, batch 128, fp32'."""
    s = json.loads(speed_settings)
    words = [str(s.get("backend")), f"{s.get('bn')} BN", f"batch {s.get('global_batch')}"]
    words.append(str(s.get("precision", "fp32")))
    if s.get("memory_format") == "channels_last":
        words.append("channels-last")
    if s.get("grad_compression") not in (None, "none"):
        words.append(f"{s['grad_compression']} compression")
    if s.get("device") not in (None, "cpu"):
        words.append(str(s["device"]))
    if s.get("deterministic"):
        words.append("deterministic")
    if s.get("compile") is True:
        words.append("compiled")
    if s.get("decode") in ("cpu", "gpu"):
        words.append(f"decode {s['decode']}")
    for key in ("loss", "optimizer", "shares", "iface", "log_level"):  # where a run sets them
        if s.get(key) is not None:
            words.append(f"{key} {s[key]}")
    return ", ".join(words)


def _value(row: Mapping[str, Any], field: str) -> str:
    value = row.get(field)
    if _missing(value):
        return "unknown"
    if field == "hosts" and isinstance(value, str) and value.startswith("["):
        return ", ".join(json.loads(value)) or "unknown"
    if field == "commit_sha":
        return str(value)[:12] + (" (dirty)" if row.get("dirty") in (1, True) else "")
    return str(value)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def provenance_changes(last_good: Mapping[str, Any], point: Sequence[Mapping[str, Any]]) -> str:
    """What differs in provenance between the entry ``last_good`` and the entries ``point``:
    'torch 2.12.0 -> 2.13.0; driver 550.54 -> 560.35'; the fields compared when nothing does."""
    changes = []
    for field, words in PROVENANCE_FIELDS.items():
        before = _value(last_good, field)
        now = list(dict.fromkeys(_value(row, field) for row in point))
        if now != [before]:
            changes.append(f"{words} {before} \u2192 {' / '.join(now)}")
    if changes:
        return "; ".join(changes)
    return "no recorded change in " + ", ".join(PROVENANCE_FIELDS.values())


def _floats(entries: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [math.nan if _missing(e.get(key)) else float(e[key]) for e in entries]


def _epochs(entry: Mapping[str, Any]) -> int:
    n = entry.get("timed_epochs")
    return 0 if _missing(n) else int(n)


def unit_of(entries: Sequence[Mapping[str, Any]]) -> str:
    """The unit a series' throughput is compared in: ``tokens/s`` where every entry has
    tokens/s (a language model: its records have it on every epoch), else ``images/s``."""
    timed = [e for e in entries if _epochs(e)]
    tokens = [e.get("tokens_per_second_mean") for e in timed]
    return "tokens/s" if tokens and not any(_missing(t) for t in tokens) else "images/s"


def _estimate(entries: Sequence[Mapping[str, Any]], sigma: float, unit: str) -> stats.Estimate:
    mean, sd = UNITS[unit]
    return stats.estimate(
        _floats(entries, mean), _floats(entries, sd), [_epochs(e) for e in entries], sigma
    )


def judge(
    point: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]],
    unit: str = "images/s",
) -> dict[str, Any]:
    """The rule for one point against its reference (both entries of one series), their
    throughput in ``unit`` (:data:`UNITS`)."""
    column = UNITS[unit][0]
    spreads = [stats.run_spread(_floats(e, column)) for e in (reference, point)]
    finite = [x for x in spreads if math.isfinite(x)]
    sigma = max(finite) if finite else math.nan
    new, ref = _estimate(point, sigma, unit), _estimate(reference, sigma, unit)
    slower = stats.difference(ref, new)
    faster = stats.difference(new, ref)
    if slower.beyond is None:
        status = "unjudged"
    else:
        status = "regression" if slower.beyond else "faster" if faster.beyond else "ok"
    return {
        "mean": new.mean,
        "se": new.se,
        "ref_mean": ref.mean,
        "ref_se": ref.se,
        "ref_runs": ref.runs,
        "threshold": ref.mean - stats.Z * slower.se,
        "change": new.mean / ref.mean - 1 if ref.mean else math.nan,
        "status": status,
    }


def series_points(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The points of one series' entries (the store's rows as mappings), oldest first, each
    judged (see the module) in the series' unit (:func:`unit_of`)."""
    by_append: dict[Any, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_append.setdefault(e["append_id"], []).append(e)
    groups = sorted(by_append.items(), key=lambda item: (max(e["date"] for e in item[1]), item[0]))
    unit = unit_of(entries)
    rows: list[dict[str, Any]] = []
    good: list[Mapping[str, Any]] = []  # the entries of every earlier point not flagged
    last_good: Mapping[str, Any] | None = None
    for append_id, point in groups:
        point = sorted(point, key=lambda e: e["date"])
        row = {
            **{k: point[0][k] for k in SERIES_KEY},
            "append_id": append_id,
            "date": point[-1]["date"],
            "runs": ", ".join(str(e["run"]) for e in point),
            "n_runs": len(point),
            "epochs": sum(_epochs(e) for e in point),
            "current": any(bool(e.get("current", False)) for e in point),
            "changed": "",
            "unit": unit,
        }
        if not good:
            est = _estimate(point, math.nan, unit)
            row.update(mean=est.mean, se=est.se, status="first")
        else:
            row.update(judge(point, good, unit))
            if row["status"] == "regression" and last_good is not None:
                row["changed"] = provenance_changes(last_good, point)
        if row["status"] != "regression":
            good += point
            last_good = point[-1]
        rows.append(row)
    return rows


def points(entries: pd.DataFrame) -> pd.DataFrame:
    """Every series' points (:data:`POINT_COLUMNS`), judged by the rule, oldest first within a
    series; series in the order of their first entry."""
    series: dict[tuple, list[dict[str, Any]]] = {}
    used = [c for c in entries.columns if c in ENTRY_COLUMNS]  # to_dict costs per column
    for e in entries[used].to_dict("records") if not entries.empty else []:
        key = tuple(None if _missing(e[k]) else e[k] for k in SERIES_KEY)
        series.setdefault(key, []).append(e)
    rows = [row for group in series.values() for row in series_points(group)]
    out = pd.DataFrame(rows, columns=list(POINT_COLUMNS))
    out["config"] = [config_label(s) for s in out["speed_settings"]]
    for col in ("mean", "se", "ref_mean", "ref_se", "threshold", "change"):
        out[col] = out[col].astype(float)
    return out


def series_name(row: Any) -> str:
    """A point's series in words: 'site / environment / workload / configuration'."""
    return f"{row.site or 'no site'} / {row.environment} / {row.workload} / {row.config}"


def newest_regressions(points_df: pd.DataFrame) -> pd.DataFrame:
    """The newest point of each series, where it is a regression."""
    if points_df.empty:
        return points_df
    newest = points_df.groupby(list(SERIES_KEY), sort=False, dropna=False).tail(1)
    return newest[newest["status"] == "regression"]


def entries_frame(rows: list[dict[str, Any]], current: set[tuple[str, str]] = frozenset()):
    """The store's rows (:func:`clusterbench.history.store.read_runs`) as a DataFrame, with
    ``current``: the entry is one of ``current`` (run_dir, end_time) pairs."""
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    keys = zip(df["run_dir"], df["end_time"], strict=True)
    df["current"] = np.array([key in current for key in keys], dtype=bool)
    return df
