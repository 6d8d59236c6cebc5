"""An elastic run's world over time, as ``metrics.jsonl`` and ``run.json`` record it: pure.

The *timeline* is a list of ``{"time", "size", "why"}`` (ISO 8601 UTC times): an entry when a
launch starts the run (``started``, or ``resumed`` from a checkpoint), one after each reset
(its reason: a rank failed, hosts changed, ...) and, in ``run.json``, one when it finished.
From it: the rank-hours the run used (the world size integrated over its time) against those
a fixed run of ``max_workers`` would have held over the same time (:func:`rank_hours`).

The *worker jobs* of a run that grows through jobs (``grow: jobs``) come from the launcher's
record (:mod:`clusterbench.launch.grow`): each one's id, node, submission, start, end and why it
ended. A job still queued or running when the training ended is recorded as ended then, by
:data:`RUN_ENDED` (the launcher cancels it as the run ends; its own record, beside, has the
exact time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Why a worker job that was still queued or running when the training ended ended.
RUN_ENDED = "the run ended"
#: The timeline's reasons for an entry that starts a launch.
LAUNCH_STARTS = ("started", "resumed")


def seconds(value: str | None) -> float | None:
    """Seconds since the epoch of an ISO 8601 time (None: None or unreadable)."""
    if not value:
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def rank_hours(
    timeline: Sequence[Mapping[str, Any]],
    max_workers: int,
    records: Iterable[Mapping[str, Any]] = (),
) -> tuple[float, float]:
    """``(used, fixed)``: the world size integrated over the timeline (rank-hours), and
    ``max_workers`` over the same time. Each entry's size holds until the next entry; one
    that a later launch resumes (a stop: preemption, a failure) holds only until the last
    epoch record (``records``' ``time``) before that resume: the time between is no
    training."""
    marks = sorted(t for t in (seconds(r.get("time")) for r in records) if t is not None)
    used = span = 0.0
    for entry, after in zip(timeline, timeline[1:], strict=False):
        start, end = seconds(entry.get("time")), seconds(after.get("time"))
        if start is None or end is None or end < start:
            continue
        if after.get("why") == "resumed":
            done = [t for t in marks if start <= t <= end]
            end = done[-1] if done else start
        used += (end - start) * int(entry.get("size") or 0)
        span += end - start
    return used / 3600, span * max_workers / 3600


def worker_jobs_at_end(record: Mapping[str, Any] | None, now: str) -> list[dict[str, Any]]:
    """The launcher's record of the worker jobs (``jobs``), those not ended yet marked ended
    at ``now`` by :data:`RUN_ENDED`."""
    jobs = []
    for job in (record or {}).get("jobs") or []:
        if not isinstance(job, Mapping):
            continue
        job = dict(job)
        if job.get("state") != "ended":
            job.update(state="ended", end=job.get("end") or now, why=job.get("why") or RUN_ENDED)
        jobs.append(job)
    return jobs


def worker_job_events(
    record: Mapping[str, Any] | None, since: str | None, until: str
) -> list[dict[str, Any]]:
    """The worker jobs' starts and ends between ``since`` (exclusive; None: from the
    beginning) and ``until`` (inclusive), in time order: ``{"job", "node", "event": "started"
    | "ended", "time", "why"}`` (``why`` for ends only)."""
    low = seconds(since) if since else float("-inf")
    high = seconds(until) or float("inf")
    events = []
    for job in (record or {}).get("jobs") or []:
        if not isinstance(job, Mapping):
            continue
        for event, key in (("started", "start"), ("ended", "end")):
            when = seconds(job.get(key))
            if when is not None and low < when <= high:
                entry = {"job": job.get("job"), "node": job.get("node"), "event": event}
                entry["time"] = job.get(key)
                if event == "ended":
                    entry["why"] = job.get("why")
                events.append(entry)
    return sorted(events, key=lambda e: seconds(e["time"]) or 0.0)
