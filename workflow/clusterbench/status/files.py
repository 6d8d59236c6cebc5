"""What a run has written so far, read (never written, never locked) for the status.

``results/runs/<run>/``: the launcher's lock file ``train.lock`` (its holder: host, pid and
scheduler job, when it started, and how it ended: :mod:`clusterbench.launch.exclusive`),
``metrics.jsonl`` (a line per epoch, rewritten atomically at each epoch's end: the rate, the
ranks, the time), ``worker_jobs.json`` (``grow: jobs``: every worker job the launcher
submitted, :mod:`clusterbench.launch.grow`) and ``checksums.json``, the train stage's done
marker (written last). A file that is missing is None; one that cannot be read (being
rewritten, damaged) is None too, and named in :attr:`RunFiles.problems`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The train stage's done marker (clusterbench.core.integrity writes it last).
DONE_MARKER = "checksums.json"


@dataclass
class RunFiles:
    """A run's files, as read now."""

    lock: dict[str, Any] | None = None  # train.lock's record
    epochs: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl's records
    worker_jobs: list[dict[str, Any]] = field(default_factory=list)  # worker_jobs.json's jobs
    done: bool = False  # the done marker exists
    problems: list[str] = field(default_factory=list)

    @property
    def holder(self) -> dict[str, Any]:
        """The lock's holder (host, pid, job), or an empty mapping."""
        holder = (self.lock or {}).get("holder")
        return holder if isinstance(holder, dict) else {}


def _json_object(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(f"{path}: {exc.strerror or exc}")
        return None
    try:
        value = json.loads(text)
    except ValueError:
        if text.strip():  # an empty lock file: a launcher is writing it
            problems.append(f"{path}: not JSON")
        return None
    return value if isinstance(value, dict) else None


def read_epochs(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl`` (those that are JSON objects)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        problems.append(f"{path}: {exc.strerror or exc}")
        return []
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            problems.append(f"{path}, line {number}: not JSON")
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def read_run(run_dir: Path) -> RunFiles:
    """The files of the run in ``run_dir`` (``results/runs/<run>``)."""
    files = RunFiles()
    files.lock = _json_object(run_dir / "train.lock", files.problems)
    files.epochs = read_epochs(run_dir / "metrics.jsonl", files.problems)
    grown = _json_object(run_dir / "worker_jobs.json", files.problems) or {}
    jobs = grown.get("jobs")
    files.worker_jobs = [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []
    files.done = (run_dir / DONE_MARKER).is_file()
    return files
