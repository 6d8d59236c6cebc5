"""Where a step's time goes, on every rank, without adding synchronisation.

Each training step is split into four phases:

``data``       waiting for the batch: the data source's next batch, in the run's memory format
               (a streamed source's loader wait shows here);
``compute``    forward and backward, up to the moment the last gradient was ready;
``comm``       gradient communication left exposed: the wait on the collective after backward
               (Horovod with ``grad_allreduce: one``: the step's one allreduce; where buckets
               are reduced while backward still computes, Horovod's ``buckets`` and DDP's: from
               the last bucket ready to backward's end, plus the wait for the buckets still in
               flight and the BatchNorm statistics of ``bn: aggregate``);
``optimizer``  the optimiser's step.

On the CPU the phases are ``time.perf_counter`` readings around the waits; on a GPU, CUDA events
recorded in the stream (no synchronisation: they are read at the epoch's end, where the loop
synchronises anyway) and the host's wait for the batch. The "last gradient ready" of a backend
that communicates during backward is taken where it hands the last bucket over (DDP's
communication hook, Horovod's gradient hooks:
:meth:`clusterbench.backends.DistributedOptimizer.gradients_ready`).

Every rank sums its phases over the epoch's steps; at the epoch's end one gather gives the
record's ``step_seconds``: per phase, the mean and the max over the ranks of the seconds per
step (a straggler shows as max > mean), the steps timed, and each rank's own work per step
(``work``: its ``data`` and ``compute``). A run started again within an
epoch times the steps of its own attempt. ``CLUSTERBENCH_STEP_TIMES=off`` turns the timing
off (it changes no result; ``make bench``'s F12 measures what it costs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: The phases of a step, in their order within it.
PHASES = ("data", "compute", "comm", "optimizer")
#: ``off`` turns step timing off (a site's or a benchmark's switch; no run setting).
ENV = "CLUSTERBENCH_STEP_TIMES"


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    value = env.get(ENV, "on").strip().lower()
    if value not in ("on", "off"):
        raise ValueError(f"${ENV} must be on or off, got {value!r}")
    return value == "on"


class StepTimes:
    """One rank's phase times over an epoch's steps (the module docstring).

    The loop calls, in each step: :meth:`fetching` before it asks for the batch,
    :meth:`fetched` when it has it, :meth:`backward_done` after backward (with the host time
    the last gradient was ready, where the backend knows it), :meth:`synchronized` after the
    gradients' collective and :meth:`stepped` after the optimiser's step.
    """

    def __init__(self, device: Any, on: bool = True) -> None:
        self.on = on
        self.cuda = on and getattr(device, "type", "cpu") == "cuda"
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.steps = 0
        self._marks: list[float] = []
        self._ready: Any = None
        self._events: list[tuple[Any, ...]] = []

    # -- the step's marks --------------------------------------------------------------------
    def fetching(self) -> None:
        if self.on:
            self._marks = [time.perf_counter()]

    def fetched(self) -> None:
        if self.on:
            self._marks.append(time.perf_counter())
            if self.cuda:
                self._events.append((self._event(),))

    def backward_done(self, ready_at: Any = None) -> None:
        """``ready_at``: when the last gradient was ready (a host time on the CPU, a recorded
        CUDA event on a GPU), where communication overlaps backward; else None."""
        if self.on:
            self._marks.append(time.perf_counter())
            self._ready = ready_at
            if self.cuda:
                self._events[-1] += (self._event(), ready_at)

    def synchronized(self) -> None:
        if self.on:
            self._marks.append(time.perf_counter())
            if self.cuda:
                self._events[-1] += (self._event(),)

    def stepped(self) -> None:
        if not self.on:
            return
        self._marks.append(time.perf_counter())
        self.steps += 1
        if self.cuda:
            self._events[-1] += (self._event(),)
            self.totals["data"] += self._marks[1] - self._marks[0]  # the host's wait
            return
        fetch, got, backward, synced, stepped = self._marks
        ready = backward if self._ready is None else min(max(self._ready, got), backward)
        self.totals["data"] += got - fetch
        self.totals["compute"] += ready - got
        self.totals["comm"] += backward - ready + synced - backward
        self.totals["optimizer"] += stepped - synced

    @staticmethod
    def _event() -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    # -- the epoch's sums --------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        """This rank's seconds per phase summed over its timed steps (reads the CUDA events:
        call after the device has been synchronised)."""
        if self.cuda:
            for got, backward, ready, synced, stepped in self._events:
                mid = ready if ready is not None else backward
                self.totals["compute"] += got.elapsed_time(mid) / 1000
                self.totals["comm"] += mid.elapsed_time(synced) / 1000
                self.totals["optimizer"] += synced.elapsed_time(stepped) / 1000
            self._events = []
        return {"steps": self.steps, **self.totals}


def summarise(per_rank: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The epoch record's ``step_seconds`` from every rank's :meth:`StepTimes.result`: per
    phase the mean and max over the ranks of the seconds per step; None when no step was
    timed."""
    timed = [r for r in per_rank if r and r.get("steps")]
    if not timed:
        return None
    out: dict[str, Any] = {"steps": max(r["steps"] for r in timed), "ranks": len(timed)}
    for phase in PHASES:
        per_step = [r[phase] / r["steps"] for r in timed]
        out[phase] = {"mean": sum(per_step) / len(per_step), "max": max(per_step)}
    # each rank's own work per step (waiting for its batch, forward and backward), in rank
    # order (None: a rank that timed no step): uneven workers show here (training.shares)
    out["work"] = [
        (r["data"] + r["compute"]) / r["steps"] if r and r.get("steps") else None for r in per_rank
    ]
    return out
