"""A comm job's ``comm.json`` (the comm stage, :mod:`clusterbench.comm`): its format, which the
stage writes from here, and its reader.

``comm.json``: ``{"format": FORMAT, "name", "backend", "library", "site", "environment":
{"workers", "nodes", "gpus_per_node", "device", ...}, "rows": [{"op", "size", "bytes", ...}]}``,
one row per operation and message size; ``comm.csv`` holds the same rows under :data:`COLUMNS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterbench.core.params import read_json_object
from clusterbench.records.runs import require

#: comm.json's format (a reader refuses another).
FORMAT = 1
#: The operations, in the order they are timed.
OPS = ("allreduce", "allgather", "broadcast")
#: The columns that say which job measured a row: its name, backend and where it ran.
JOB_COLUMNS = ("name", "backend", "library", "workers", "nodes", "gpus_per_node", "device")
#: The fields of a row every reader takes, all numbers.
ROW_FIELDS = (
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
#: comm.csv's columns: one row per operation and size.
COLUMNS = (
    *JOB_COLUMNS,
    "op",
    "size",
    "bytes",
    "count",
    "iterations",
    "samples",
    "time_s",
    "time_min_s",
    "time_median_s",
    "time_max_s",
    "time_sd_s",
    "algbw_gbps",
    "busbw_gbps",
    "busbw_min_gbps",
    "busbw_max_gbps",
)
#: The columns of :func:`read_comm`'s rows: the job (and where it ran), then each row's
#: operation and fields.
READ_COLUMNS = ("name", "site", *JOB_COLUMNS[1:], "op", *ROW_FIELDS)


def read_comm(path: Path) -> list[dict[str, Any]]:
    """One comm job's ``comm.json`` as rows of :data:`READ_COLUMNS`; an error naming the file
    and the field when it is not one."""
    info = read_json_object(path, "results of the comm stage")
    if info.get("format") != FORMAT:
        raise ValueError(f"{path}: comm.json format {info.get('format')!r}, expected {FORMAT}")
    require(info, ("name", "backend", "environment", "site", "rows"), path)
    env = info["environment"]
    if not isinstance(env, dict) or not isinstance(info["rows"], list):
        raise ValueError(f"{path}: 'environment' must be an object and 'rows' a list")
    require(env, ("workers", "nodes", "gpus_per_node", "device"), path, " in 'environment'")
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
        require(entry, ("op", *ROW_FIELDS), path, f" in rows[{i}]")
        bad = [k for k in ROW_FIELDS if not isinstance(entry[k], int | float)]
        if entry["op"] not in OPS or bad:
            raise ValueError(f"{path}: rows[{i}]: unknown op {entry['op']!r} or no number in {bad}")
        rows.append({**job, "op": entry["op"], **{k: entry[k] for k in ROW_FIELDS}})
    return rows
