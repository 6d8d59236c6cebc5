"""Runs on one wall clock, pure: each elastic run's ranks over time from ``run.json``'s
timeline (``world.elastic.timeline``), a fixed run's from its epochs, the ranks of every run
stacked at every moment, and the events to mark: worker jobs' starts and ends (a take-back
apart) and priority changes (``run.json``'s ``priority``). The page that draws them is
:mod:`clusterbench.report.pages.one_clock`; the per-run chart,
:mod:`clusterbench.report.pages.world_size`, reads the timeline here too.

A run's *steps* are ``[(time, ranks), ...]``: the run holds ``ranks`` from ``time`` (seconds
since the epoch) until the next step's time, and none after the last step (whose ranks are 0).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: A run's ranks over time (see the module's docstring).
Steps = list[tuple[float, int]]

#: The kinds of event a mark is: a worker job's start, its end, its end because the scheduler
#: took its GPUs back for another job, a change of the run's priority.
STARTED, ENDED, TAKEN_BACK, PRIORITY = "started", "ended", "taken back", "priority"


@dataclass(frozen=True)
class Mark:
    """An event of a run at ``time`` (seconds since the epoch): its ``kind`` and a text drawn
    beside it ('P0→P5' for a priority change, else empty)."""

    time: float
    kind: str
    text: str = ""


def seconds(value: Any) -> float | None:
    """Seconds since the epoch of an ISO 8601 time of run.json (None: none, or unreadable); a
    time without a zone is UTC."""
    try:
        when = dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def timeline(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """run.json's world size over time (empty before it was recorded)."""
    elastic = (info.get("world") or {}).get("elastic") or {}
    return [t for t in elastic.get("timeline") or [] if seconds(t.get("time")) is not None]


def elastic_steps(points: Sequence[Mapping[str, Any]], record_times: Sequence[Any] = ()) -> Steps:
    """The steps of an elastic run's timeline (:func:`timeline`): each entry's size holds
    until the next entry, and the last entry (``finished``) ends the run. Before an entry that
    a later launch ``resumed``, the run held no ranks from its last epoch record
    (``record_times``) before that entry: the time between is no training (as run.json's
    ``rank_hours`` counts it)."""
    marks = sorted(t for t in map(seconds, record_times) if t is not None)
    steps: Steps = []
    for entry, after in zip(points, [*points[1:], None], strict=False):
        start = seconds(entry["time"])
        if after is None:
            steps.append((start, 0))
            continue
        steps.append((start, int(entry.get("size") or 0)))
        if after.get("why") == "resumed":
            done = [t for t in marks if start <= t <= seconds(after["time"])]
            steps.append((done[-1] if done else start, 0))
    return steps


def fixed_steps(epochs: Sequence[Mapping[str, Any]], ranks: int) -> Steps:
    """The steps of a fixed run: ``ranks`` from its first epoch's start (that epoch's end,
    ``time``, less its ``epoch_seconds``) to its last epoch's end; none without epoch times."""
    ends = [(seconds(e.get("time")), e.get("epoch_seconds")) for e in epochs]
    ends = [(t, s) for t, s in ends if t is not None and isinstance(s, int | float)]
    if not ends:
        return []
    return [(ends[0][0] - float(ends[0][1]), ranks), (ends[-1][0], 0)]


def ranks_at(steps: Steps, when: float) -> int:
    """The ranks a run held at ``when``: those of its last step at or before it."""
    held = 0
    for time, ranks in steps:
        if time > when:
            break
        held = ranks
    return held


def stacked(lanes: Mapping[str, Steps]) -> tuple[list[float], dict[str, list[int]]]:
    """Every time at which some run's ranks change, and each run's ranks from each of those
    times on (the stack's layers, in the order of ``lanes``; their sum is the total)."""
    times = sorted({time for steps in lanes.values() for time, _ in steps})
    return times, {name: [ranks_at(steps, t) for t in times] for name, steps in lanes.items()}


def overlaps(steps: Steps, start: float, end: float) -> bool:
    """Whether a run's steps hold ranks at some time between ``start`` and ``end``."""
    return bool(steps) and steps[0][0] < end and steps[-1][0] > start


def taken_back(why: Any) -> bool:
    """Whether a worker job ended because the scheduler took its resources back: Slurm's
    ``preempted``, or SGE's suspension (``taken back (suspended)``)."""
    return isinstance(why, str) and (why == "preempted" or why.startswith("taken back"))


def marks(info: Mapping[str, Any]) -> list[Mark]:
    """A run's events, in time order: its worker jobs' starts and ends (``world.elastic``'s
    ``worker_jobs``; an end :data:`TAKEN_BACK` where :func:`taken_back`) and the changes of
    its priority (``priority``'s ``changes``, 'P<from>→P<to>')."""
    elastic = (info.get("world") or {}).get("elastic") or {}
    found = []
    for job in elastic.get("worker_jobs") or []:
        if not isinstance(job, Mapping):
            continue
        start, end = seconds(job.get("start")), seconds(job.get("end"))
        if start is not None:
            found.append(Mark(start, STARTED))
        if end is not None:
            found.append(Mark(end, TAKEN_BACK if taken_back(job.get("why")) else ENDED))
    for change in (info.get("priority") or {}).get("changes") or []:
        when = seconds(change.get("time")) if isinstance(change, Mapping) else None
        if when is not None:
            found.append(Mark(when, PRIORITY, f"P{change.get('from')}\u2192P{change.get('to')}"))
    return sorted(found, key=lambda m: m.time)


@dataclass(frozen=True)
class Hours:
    """The device-hours a run used (``used``) and those a fixed allocation of its
    ``max_workers`` would have held over the same time (``fixed``), in ``unit``-hours
    (``GPU``, or ``CPU``: a rank's CPUs)."""

    run: str
    used: float
    fixed: float
    unit: str


def device_hours(rows: Sequence[Mapping[str, Any]]) -> tuple[list[Hours], dict[str, Hours]]:
    """The runs' device-hours (runs.csv's ``device_hours``, ``fixed_device_hours``,
    ``device_hours_unit``; a row without them is left out), and their totals by unit
    (GPU-hours and CPU-hours are never added together)."""
    each = []
    for row in rows:
        used, fixed, unit = (
            row.get(k) for k in ("device_hours", "fixed_device_hours", "device_hours_unit")
        )
        numbers = all(isinstance(v, int | float) and v == v for v in (used, fixed))  # not NaN
        if numbers and isinstance(unit, str) and unit:
            each.append(Hours(str(row["run"]), float(used), float(fixed), unit))
    totals = {}
    for unit in dict.fromkeys(h.unit for h in each):
        mine = [h for h in each if h.unit == unit]
        totals[unit] = Hours("total", sum(h.used for h in mine), sum(h.fixed for h in mine), unit)
    return each, totals
