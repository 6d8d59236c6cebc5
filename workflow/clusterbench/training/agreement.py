"""What the ranks agree on within an epoch, at a check every few steps, in one tiny collective
(four numbers, summed): whether any rank was warned of preemption
(:mod:`clusterbench.core.preemption`), whether the run's time box (``minutes``) has run out,
whether an evaluation beside the training asked for the weights
(:mod:`clusterbench.training.lending`), and after which step they check again. The box and the
request are rank 0's to say (its clock is the box's, as at an epoch's end); the others add
zeros.

When they check (:func:`first_check`, :func:`next_check`):

* without a time box, every ``checkpoints.preemption_check_steps`` steps of the epoch;
* with one, after the first step of each stretch of steps, then as late as rank 0's clock
  allows: after as many steps as fit in the seconds left at the stretch's pace so far (at
  least one, at most the usual interval). A box that runs out within a step is seen at that
  step's end: the run stops at most one step after its box, then writes its checkpoint.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Box:
    """The time box on rank 0's clock: when it runs out, as a ``time.perf_counter`` reading."""

    deadline: float

    def left(self) -> float:
        return self.deadline - time.perf_counter()


@dataclass(frozen=True)
class Agreed:
    """What the ranks agreed at a check: a rank was ``warned``, the box ran out (``boxed``), an
    evaluation ``asked`` for the weights; ``next``: the step after which they check again."""

    warned: bool
    boxed: bool
    asked: bool
    next: int

    @property
    def stop(self) -> str | None:
        """Why the stretch stops here: ``preempted``, ``boxed``, ``asked``; None: it goes on."""
        for reason, flag in (("preempted", self.warned), ("boxed", self.boxed)):
            if flag:
                return reason
        return "asked" if self.asked else None


def first_check(begin: int, every: int, boxed: bool) -> int:
    """The step after which the ranks of a stretch starting at step ``begin`` check first:
    the next multiple of ``every``, or with a time box (``boxed``) after its first step."""
    return begin + 1 if boxed else (begin // every + 1) * every


def next_check(done: int, every: int, left: float | None, step_seconds: float | None) -> int:
    """The step after which they check again, after step ``done``: the next multiple of
    ``every``; with ``left`` seconds of a time box, after as many steps of ``step_seconds`` as
    fit in them (at least 1, at most ``every``)."""
    if left is None:
        return (done // every + 1) * every
    if not step_seconds or step_seconds <= 0 or not math.isfinite(left):
        return done + 1
    return done + max(1, min(every, int(left // step_seconds)))


def agree(
    rt: Any,
    warned: bool,
    box: Box | None,
    asked: bool,
    done: int,
    every: int,
    step_seconds: float | None,
) -> Agreed:
    """The check after step ``done`` (a collective: every rank calls it). ``warned``: this
    rank's; ``box``, ``asked`` and ``step_seconds`` (its pace over the stretch) count on rank 0
    alone."""
    import torch

    mine = [1.0 if warned else 0.0, 0.0, 0.0, 0.0]
    if rt.rank == 0:
        left = None if box is None else box.left()
        mine[1] = 1.0 if left is not None and left <= 0 else 0.0
        mine[2] = 1.0 if asked else 0.0
        mine[3] = float(next_check(done, every, left, step_seconds))
    total = rt.allreduce_sum(torch.tensor(mine, dtype=torch.float64), "train.agree").tolist()
    return Agreed(total[0] > 0, total[1] > 0, total[2] > 0, int(total[3]))
