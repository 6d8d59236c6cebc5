"""The network a run's ranks talked over and the communication log level, as run.json's
``network`` records them (:func:`clusterbench.training.record.network_record`): runs.csv's
columns, and the provenance page's note in words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from clusterbench.report.text import list_runs


def network_columns(info: Mapping[str, Any]) -> dict[str, str]:
    """runs.csv's ``iface`` and ``log_level`` (``""``: not recorded, an older run.json, or
    none in force) and where each came from (``iface_from``: ``config``, ``--iface``,
    ``$CLUSTERBENCH_IFACE``, or ``chosen`` by the launcher; ``log_level_from`` likewise,
    ``""`` for the libraries' defaults)."""
    net = info.get("network") or {}
    iface = str(net.get("iface") or "")
    came = net.get("iface_from")
    return {
        "iface": iface,
        "iface_from": str(came or ("chosen" if iface else "")),
        "log_level": str(net.get("log_level") or ""),
        "log_level_from": str(net.get("log_level_from") or ""),
    }


def network_words(row: Any) -> str:
    """One run's network in words: 'interface lo (chosen by the launcher), log level info
    ($CLUSTERBENCH_LOG_LEVEL)'; '' where run.json has no record."""
    if not row.iface:
        return ""
    came = "chosen by the launcher" if row.iface_from == "chosen" else row.iface_from
    words = f"interface {row.iface} ({came})"
    if row.log_level:
        words += f", log level {row.log_level} ({row.log_level_from})"
    return words


def network_note(runs_df: pd.DataFrame) -> str | None:
    """The runs' network in words, runs alike grouped: 'Network: interface lo (chosen by the
    launcher) for a and b; interface ib0 (config), log level info (config) for c.' None
    where no run recorded it."""
    if "iface" not in runs_df:
        return None
    groups: dict[str, list[str]] = {}
    for row in runs_df.itertuples(index=False):
        words = network_words(row)
        if words:
            groups.setdefault(words, []).append(str(row.run))
    if not groups:
        return None
    if len(groups) == 1:
        return f"Network: {next(iter(groups))} for every run."
    return "Network: " + "; ".join(f"{w} for {list_runs(r, 3)}" for w, r in groups.items()) + "."
