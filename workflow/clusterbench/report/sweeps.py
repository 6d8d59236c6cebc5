"""The sweep heatmaps' tables, pure pandas: which pairs of swept keys are drawn, the values the
other dimensions are held at, and one grid per pair and measure.

A sweep's heatmap shows two swept keys; every other dimension of the experiment (the other
swept keys, the environment, the site) is held at the best run's value (chosen on validation,
:func:`clusterbench.report.tables.best_run`), so that no cell averages runs that differ in
anything but their seed. A grid has a row (column) for every value its key takes anywhere in
the experiment, in order (numbers ascending, ``null`` last), so the accuracy and the time grid
of a pair have the same cells; a cell no run fills is NaN.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.config.experiments import format_value
from clusterbench.report.tables import best_run, swept_keys

#: The most heatmap pairs (pages) one experiment gets; the page says which pairs it leaves out.
MAX_PAIRS = 6


@dataclass(frozen=True)
class Pair:
    """One heatmap pair: ``rows`` x ``cols``, with the other dimensions held at ``held``
    (swept key, ``environment`` or ``site`` -> value)."""

    rows: str
    cols: str
    held: dict[str, Any]


def _same(a: Any, b: Any) -> bool:
    """Equal as the points wrote them (1, 1.0 and true differ; null equals null)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def ordered_values(values: Iterable[Any]) -> list[Any]:
    """The distinct values (by their text in a run name), numbers ascending, then the other
    values in the order met, ``None`` (null) last."""
    seen: dict[str, Any] = {}
    for v in values:
        seen.setdefault(format_value(v), v)

    def is_number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    numbers = [v for v in seen.values() if is_number(v)]
    others = [v for v in seen.values() if v is not None and not is_number(v)]
    nulls = [v for v in seen.values() if v is None]
    return sorted(numbers) + others + nulls


def varying_keys(table: pd.DataFrame, keys: list[str]) -> list[str]:
    """The swept keys of ``keys`` that take at least two values in ``table`` (a point table)."""
    return [k for k in keys if len(ordered_values(table[k])) > 1]


def pairs(runs_df: pd.DataFrame, experiment: str, table: pd.DataFrame) -> list[Pair]:
    """Every pair of the experiment's swept keys that vary, in the order the points name
    them, each with the other dimensions held at the best run's values (the other swept keys,
    and the environment and the site where the experiment has several)."""
    part = runs_df[runs_df["experiment"] == experiment]
    keys = varying_keys(table, swept_keys(part).get(experiment, []))
    best = best_run(part)
    point = json.loads(best["point"])
    out = []
    for rows, cols in itertools.combinations(keys, 2):
        held = {k: point.get(k) for k in keys if k not in (rows, cols)}
        for dim in ("environment", "site"):
            if table[dim].nunique() > 1:
                held[dim] = best[dim]
        out.append(Pair(rows, cols, held))
    return out


def held_text(held: dict[str, Any]) -> str:
    """'momentum=0.9, env=cpu, site=east' (the held values as the report names them)."""
    names = {"environment": "env"}
    return ", ".join(f"{names.get(k, k)}={format_value(v)}" for k, v in held.items())


def grid(table: pd.DataFrame, pair: Pair, value: str) -> pd.DataFrame:
    """``value`` (a column of the point table) over ``pair.rows`` x ``pair.cols`` at the held
    values: one row and column per value the key takes in ``table``, labelled as in a run name
    (``null`` too); NaN where no point at the held values has one."""
    rows = ordered_values(table[pair.rows])
    cols = ordered_values(table[pair.cols])
    out = pd.DataFrame(
        np.nan,
        index=pd.Index([format_value(v) for v in rows], name=pair.rows),
        columns=pd.Index([format_value(v) for v in cols], name=pair.cols),
        dtype=float,
    )
    for _, r in table.iterrows():
        if all(_same(r[k], v) for k, v in pair.held.items()):
            cell = (format_value(r[pair.rows]), format_value(r[pair.cols]))
            if np.isfinite(r[value]):
                out.loc[cell] = float(r[value])
    return out


def best_cell(accuracy: pd.DataFrame) -> tuple[int, int] | None:
    """(row, column) of the highest value of a grid (the first of equals); None if empty."""
    values = accuracy.to_numpy(dtype=float)
    if not np.isfinite(values).any():
        return None
    row, col = np.unravel_index(np.nanargmax(values), values.shape)
    return int(row), int(col)
