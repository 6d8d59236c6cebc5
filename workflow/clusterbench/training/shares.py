"""Each worker's share of the global batch (a run's ``shares``), MXNet's ``work_load_list``:
on workers of mixed speed, a slower rank takes fewer samples of each step, so that no rank waits
for it at the step's allreduce.

* ``null``: an even split (:func:`clusterbench.data.order.shard_sizes`).
* A list of weights, one per worker (rank order, any positive scale): each rank's samples of a
  step in proportion (one sample each at least).
* ``auto``: measured. Each start of the training (a launch, a continued checkpoint, an elastic
  run's reset to a new world) splits evenly for its first steps: :data:`SKIP_STEPS` left out
  (the first steps allocate and warm up), then :data:`MEASURE_STEPS` timed on every rank, each
  rank's own work per sample (waiting for its batch, forward and backward up to its last
  gradient: the step-time breakdown's ``data`` and ``compute``,
  :mod:`clusterbench.training.step_times`, not its wait for the others). The shares become
  each rank's samples per second (:func:`balanced`), so that the ranks finish their part of a
  step together; they hold until the next start.

The update is the same whatever the shares: each rank's loss is summed over its samples and
scaled by ``workers / global batch`` (:mod:`clusterbench.training.schedule`), so the average
the backend takes is the global batch's mean gradient (each rank's mean gradient weighted by
its share), and ``bn: aggregate`` weights each rank's BatchNorm statistics by its samples.
(BatchNorm's *forward* in training mode normalises each rank's own samples: with ``bn: local``
or ``aggregate`` the shares change what a step computes, as the worker count does; ``bn: sync``
and models without BatchNorm compute the same update.)

Pure but for :meth:`Balancer.measure` (one gather of small objects).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: ``auto``: steps of a start left out before the timing (allocation, warm-up).
SKIP_STEPS = 2
#: ``auto``: steps timed on every rank.
MEASURE_STEPS = 8


def normalised(weights: Sequence[float]) -> list[float]:
    """``weights`` scaled to sum to 1."""
    total = float(sum(weights))
    return [float(w) / total for w in weights]


def balanced(samples: Sequence[float], seconds: Sequence[float]) -> list[float]:
    """The shares that let ranks finish a step together: each rank's samples per second of its
    own work (``samples`` it took and ``seconds`` it worked over the timed steps), normalised. A
    rank that timed nothing (0 s) keeps its share of the samples (no rate to go by)."""
    rates = [n / s if s > 0 else 0.0 for n, s in zip(samples, seconds, strict=True)]
    if not any(rates):
        return normalised(samples)
    known = [r for r in rates if r > 0]
    fill = sum(known) / len(known)
    return normalised([r if r > 0 else fill for r in rates])


def window(first: int, steps: int) -> tuple[int, int]:
    """``auto``'s steps of an epoch that starts the training at step ``first`` of ``steps``:
    ``(skip_end, measure_end)``, the timing between them; cut to the epoch (at least one step
    timed where one is left)."""
    left = steps - first
    skip = min(SKIP_STEPS, max(0, left - 1))
    return first + skip, first + skip + min(MEASURE_STEPS, left - skip)


class Balancer:
    """A run's shares as the training loop applies them (module docstring): ``current`` (None:
    even), and for ``auto`` the timing of its first steps after each start (:meth:`start`)."""

    def __init__(self, asked: Any, size: int) -> None:
        self.asked = asked
        self.current: list[float] | None = None
        self.record: dict[str, Any] = {"asked": asked}
        self.pending = False
        self.marks: tuple[int, int] = (0, 0)
        self.start(size)

    def start(self, size: int) -> None:
        """A start of the training in a world of ``size`` ranks: a list's shares (its length
        checked before any job: a fixed-size run's workers), or ``auto`` even until measured."""
        if isinstance(self.asked, list):
            self.current = normalised(self.asked)
        else:
            self.current = None
            self.pending = self.asked == "auto" and size > 1
        self.record.update(shares=self.current, size=size)

    def plan(self, first: int, steps: int) -> None:
        """The epoch about to train from step ``first`` of ``steps``: where ``auto`` times."""
        if self.pending:
            self.marks = window(first, steps)

    def stretch_end(self, step: int, end: int) -> int:
        """The end of a stretch of steps starting at ``step``, cut at ``auto``'s marks."""
        if not self.pending:
            return end
        return min([end, *(m for m in self.marks if m > step)])

    def kwargs(self) -> dict[str, Any]:
        """The data source's keyword for the current shares (none: even, for sources that
        predate shares)."""
        return {} if self.current is None else {"shares": self.current}

    def measure(self, rt: Any, own: tuple[int, float], step: int) -> bool:
        """After the stretch that ended at ``step``: at the timing's end, every rank's
        ``own`` (samples, seconds of its own work, over the timed steps) gathered and the
        shares set (:func:`balanced`); whether they changed (the data source must be asked
        again from ``step``)."""
        if not self.pending or step != self.marks[1]:
            return False
        every = rt.allgather_object(own, name="train.shares")
        samples, seconds = [e[0] for e in every], [e[1] for e in every]
        self.current, self.pending = balanced(samples, seconds), False
        per_sample = [s / n if n else None for n, s in every]
        self.record.update(shares=self.current, measured_seconds_per_sample=per_sample)
        if rt.rank == 0:
            words = ", ".join(f"{s:.3f}" for s in self.current)
            timed = self.marks[1] - self.marks[0]
            print(
                f"train: shares auto: {words} (each rank's pace over {timed} step(s))", flush=True
            )
        return True
