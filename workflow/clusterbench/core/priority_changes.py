"""A run's priority changes while it trains: ``results/runs/<run>/priority.json``.

``python -m clusterbench.priority RUN N`` changes the priority of a run's job and of its
worker jobs in the scheduler's queue, and records each change here; rank 0 copies the changes
that were made to the job it trained in into ``run.json``'s ``priority`` when the run ends
(a retry of the run is a new job, submitted with the config's priority: the earlier job's
changes are not its own). The file::

    {"changes": [{"time": "2026-12-07T08:01:02.345+00:00", "from": 0, "to": 5,
                  "jobs": ["123", "124"]}]}

``time`` is when the scheduler took the change (ISO 8601, UTC), ``from`` and ``to`` are
clusterbench priorities (higher goes first: Slurm's nice is ``-P``, SGE's ``-p`` is ``P``),
``jobs`` the job ids changed, the run's own job first. Rewritten whole and atomically; an
unreadable file is named, never silently used.

Standard library only (the training and the command both read it).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterbench.core.atomic import write_json

#: The file, beside the run's other outputs.
FILE = "priority.json"


class PriorityFileError(ValueError):
    """``priority.json`` exists but is not a record of changes."""


def read_changes(run_dir: str | Path) -> list[dict[str, Any]]:
    """The changes recorded for the run in ``run_dir`` (none: no file); a
    :class:`PriorityFileError` naming the file when it is damaged."""
    path = Path(run_dir) / FILE
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise PriorityFileError(f"{path}: not a priority record ({exc})") from None
    changes = record.get("changes") if isinstance(record, dict) else None
    if not isinstance(changes, list) or not all(_is_change(c) for c in changes):
        raise PriorityFileError(
            f"{path}: expected {{'changes': [{{time, from, to, jobs}}, ...]}}, got {record!r:.200}"
        )
    return changes


def _is_change(change: Any) -> bool:
    return (
        isinstance(change, dict)
        and isinstance(change.get("time"), str)
        and isinstance(change.get("to"), int)
        and isinstance(change.get("jobs"), list)
    )


def add_change(
    run_dir: str | Path, before: int | None, after: int, jobs: Sequence[str], when: float
) -> dict[str, Any]:
    """Record a change from ``before`` to ``after`` of ``jobs`` at ``when`` (seconds since the
    epoch); the change."""
    change = {
        "time": dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="milliseconds"),
        "from": before,
        "to": after,
        "jobs": [str(job) for job in jobs],
    }
    changes = read_changes(run_dir)
    write_json(Path(run_dir) / FILE, {"changes": [*changes, change]})
    return change


def changes_of_job(run_dir: str | Path, job: str | None) -> list[dict[str, Any]]:
    """The recorded changes that were made to the run's job ``job`` (none: no job, no file);
    a :class:`PriorityFileError` when the file is damaged."""
    if not job:
        return []
    return [c for c in read_changes(run_dir) if str(job) in c["jobs"]]
