"""The status as text: a header and one line per training, in the config's order (pure).

The columns are separated by two spaces or more, and no value holds two spaces in a row, so
``re.split(r"\\s{2,}", line)`` splits a line into them; a value not known is ``-``:

=========  =====================================================================================
RUN        the run's name
STATE      waiting, queued, running, suspended, ending, done, preempted, failed, stopped,
           unknown (:mod:`clusterbench.status.collect`)
JOB        ``slurm 123`` / ``sge 45`` (the train job in the queue), ``job 123`` (the lock
           file's, not in the queue), ``pid 678`` (a launcher of this machine)
RANKS      the ranks of its latest epoch (before one: its ``workers``); an elastic run's bounds
           in brackets, ``2 (1-4)``
EPOCH      whole epochs done ``/`` its ``epochs``; a time box's minutes, ``3 (0.25 min box)``
RATE       the latest epoch's ``images/s`` or ``tokens/s``
TIME       the time so far of its launch, ``h:mm:ss``
LEFT       an estimate of the time left (a running training's): its epochs to come at the pace
           of those done, or what is left of its time box
WORKERS    ``grow: jobs``: its worker jobs queued or running, ``124 running, 125 queued``
=========  =====================================================================================
"""

from __future__ import annotations

from collections.abc import Sequence

from clusterbench.status.collect import RunStatus

HEADER = ("RUN", "STATE", "JOB", "RANKS", "EPOCH", "RATE", "TIME", "LEFT", "WORKERS")


def clock(seconds: float | None) -> str:
    """``h:mm:ss`` (``-``: not known)."""
    if seconds is None:
        return "-"
    whole = int(round(max(0.0, seconds)))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def epoch_text(status: RunStatus) -> str:
    """``3/15``, ``3 (0.25 min box)``, ``3/15 (0.25 min box)``."""
    text = f"{status.epoch}/{status.epochs}" if status.epochs else str(status.epoch)
    if status.minutes is not None:
        text += f" ({status.minutes:g} min box)"
    return text


def fields(status: RunStatus) -> tuple[str, ...]:
    """The values of one line (:data:`HEADER`'s columns)."""
    ranks = "-" if status.ranks is None else str(status.ranks)
    if status.bounds is not None:
        ranks += f" ({status.bounds[0]}-{status.bounds[1]})"
    rate = "-" if status.rate is None else f"{status.rate:.0f} {status.unit}"
    workers = ", ".join(f"{job} {state}" for job, state in status.workers) or "-"
    return (
        status.run,
        status.state,
        status.job or "-",
        ranks,
        epoch_text(status),
        rate,
        clock(status.elapsed),
        clock(status.left),
        workers,
    )


def table(statuses: Sequence[RunStatus], notes: Sequence[str] = ()) -> str:
    """The header, a line per run, then a ``note:`` line for each queue that could not be
    read and each file that could not."""
    rows = [HEADER, *(fields(s) for s in statuses)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    for note in [*notes, *(n for s in statuses for n in s.notes)]:
        lines.append(f"note: {note}")
    return "\n".join(lines)
