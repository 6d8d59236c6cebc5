"""Elastic training: the session of a run whose ranks may fail or join while it trains.

A run with ``min_workers``/``max_workers`` is launched by Horovod's elastic driver
(:mod:`clusterbench.launch.elastic`) and trains in the same loop as any run
(:mod:`clusterbench.training.loop`); this session gives it what differs, through the
backend's :class:`~clusterbench.backends.ElasticRuntime`:

* **State.** The model, the optimiser and the loop's values (:mod:`clusterbench.training.state`:
  the epoch, the place in it, the records, the training time, the resets) live in the
  backend's elastic state, committed every ``checkpoints.elastic_commit_steps`` steps and at
  each epoch's end.
* **A rank fails.** The others' next collective raises; the backend restores the last commit,
  re-forms the world without the failed host and sends rank 0's state to every rank. The
  steps since the commit are done again.
* **A rank joins** (discovery found a slot): at the next commit every rank is interrupted, the
  world re-forms with the new rank, which receives the state.
* **After each reset** the loop's body starts again: the global batch is split over the new
  number of ranks, the BatchNorm aggregation is made for the new world (``rt.wrap`` again),
  and the LR convention (``batch_scaling``) is unchanged.
* **Records.** Each epoch's metrics record its ``world_size`` at the end, every size it had
  (``world_sizes``) and its ``resets``: when (epoch, step), from and to which size, why, and
  how long the reset took, from the moment this rank was interrupted to training resumed in
  the new world (``seconds``), and from its last commit (``stalled_seconds``: the steps done
  again, the wait until the failure showed, which a failed peer's Gloo timeout bounds, and
  the reset). That time counts in the epoch's time: it is what the run cost.
* **Preemption** works as in a fixed run; a checkpoint's per-rank sums are added to the place
  when it continues (the world may have another size by then).
* Whichever process is rank 0 writes the outputs; if rank 0 fails, the new rank 0 takes over.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from clusterbench.backends import ElasticRuntime, Runtime
from clusterbench.config import worker_bounds
from clusterbench.core.rank_env import (
    CPUS_PER_RANK_VAR,
    GROW_RECORD_VAR,
    RANK_ID_VAR,
    read_grow_record,
)
from clusterbench.training.record import now_iso
from clusterbench.training.state import Clock, Partial
from clusterbench.training.world import (
    LAUNCH_STARTS,
    rank_hours,
    worker_job_events,
    worker_jobs_at_end,
)


def launch_tag() -> str:
    """The launch this rank belongs to (``CLUSTERBENCH_RANK_ID`` = ``<launch tag>.<rank>``)."""
    return os.environ.get(RANK_ID_VAR, "").rpartition(".")[0]


def grow_record() -> dict[str, Any] | None:
    """The launcher's record of the worker jobs, None for a run that does not grow through
    jobs (or before the launcher wrote it)."""
    return read_grow_record(os.environ.get(GROW_RECORD_VAR))


class ElasticSession:
    """The elastic run's session (module docstring); ``commit_every`` steps between commits."""

    def __init__(self, rt: Runtime, run: dict[str, Any], commit_every: int) -> None:
        if not isinstance(rt, ElasticRuntime):
            raise RuntimeError(
                f"run {run['name']!r} is elastic (min_workers/max_workers), but backend "
                f"{rt.name!r} cannot change its world while it trains"
            )
        self.rt: ElasticRuntime = rt
        self.run_settings = run
        self.commit_every = commit_every
        self.committed = time.perf_counter()
        self.size: int | None = None
        self.interrupted: tuple[str, float] | None = None

    def prepare(
        self, values: dict[str, Any], saved_ranks: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """A checkpoint's per-rank sums added to its place: the world may differ now."""
        partials = [r["partial"] for r in saved_ranks or () if r.get("partial")]
        if partials:
            place = values["place"]
            extra = sum(p["loss_sum"] for p in partials)
            values = {**values, "place": replace(place, loss_sum=place.loss_sum + extra)}
        return values

    def make_state(self, model: Any, optimizer: Any, values: dict[str, Any]) -> Any:
        return self.rt.elastic_state(model, optimizer, **values)

    def start(self, state: Any, saved_ranks: list[dict[str, Any]] | None) -> Partial | None:
        return None  # the backend sends rank 0's state to every rank when the body starts

    def run(self, body: Any, state: Any) -> Any:
        errors = self.rt.elastic_errors()

        @self.rt.elastic_run
        def elastic_body(state: Any) -> Any:
            try:
                self.entered(state)
                return body(state)
            except errors as exc:
                self.interrupted = (self.rt.reset_reason(exc), time.perf_counter())
                raise

        return elastic_body(state)

    def entered(self, state: Any) -> None:
        """At each (re)start of the body, on every rank of the new world: its record (this
        launch's start, or the reset), committed at once: a rank that fails before the next
        commit makes the others restore the last one, which must hold it. (A commit is a
        collective: every rank, a joining one too, makes it here.)"""
        self.record_entry(state)
        state.commit()
        self.committed = time.perf_counter()

    def record_entry(self, state: Any) -> None:
        """The new world; after a reset, its record (module docstring)."""
        now = time.perf_counter()
        before = self.size
        self.rt.refresh()
        self.size = self.rt.size
        if self.interrupted is None:
            # this launch's start (a rank that joins later finds it in the state it received)
            tag = launch_tag()
            if not any(e.get("launch") == tag for e in state.timeline):
                why = LAUNCH_STARTS[1] if state.timeline or state.epoch else LAUNCH_STARTS[0]
                entry = {"time": now_iso(), "size": self.size, "why": why, "launch": tag}
                state.timeline = [*state.timeline, entry]
            return
        why, at = self.interrupted
        self.interrupted = None
        stalled = now - self.committed  # the steps done again, the wait, the reset
        state.place = replace(state.place, seconds=state.place.seconds + stalled)
        state.train_seconds += stalled
        reset = {
            "epoch": state.epoch + 1,
            "step": state.place.step,
            "from": before,
            "to": self.rt.size,
            "why": why,
            "seconds": round(now - at, 3),
            "stalled_seconds": round(stalled, 3),
            "time": now_iso(),  # when training went on in the new world
        }
        state.resets = [*state.resets, reset]
        state.timeline = [
            *state.timeline,
            {"time": reset["time"], "size": self.rt.size, "why": why},
        ]
        print(
            f"train: rank {self.rt.rank} of {self.rt.size}: the world was reset ({why}; "
            f"{before} -> {self.rt.size} ranks) in {now - at:.2f} s; going on from epoch "
            f"{state.epoch + 1}, step {state.place.step}",
            flush=True,
        )

    def commit(self, state: Any, clock: Clock, within_epoch: bool) -> None:
        """Commit the state (may raise the backend's interrupt: a rank joins)."""
        now = time.perf_counter()
        if within_epoch:
            state.train_seconds += now - clock.train
            state.place = replace(state.place, seconds=state.place.seconds + now - clock.epoch)
            clock.train = clock.epoch = now
        self.committed = now
        state.commit()

    def extend_record(self, record: dict[str, Any], state: Any) -> dict[str, Any]:
        """The epoch's world: its sizes, its resets (each with its time) and, for a run that
        grows through jobs, the worker jobs that started or ended during it."""
        epoch = record["epoch"]
        extended = {
            **record,
            "world_sizes": list(state.place.sizes),
            "resets": [r for r in state.resets if r["epoch"] == epoch],
        }
        grown = grow_record()
        if grown is not None:
            since = state.records[-1]["time"] if state.records else None
            if since is None and state.timeline:
                since = state.timeline[0]["time"]
            extended["worker_jobs"] = worker_job_events(grown, since, record["time"])
        return extended

    def extend_world(self, world: dict[str, Any], state: Any) -> dict[str, Any]:
        """run.json's ``world.elastic``: the bounds, the sizes by epoch and the resets, the
        world size over time and the rank-hours it used against ``max_workers``'s, the CPUs
        of a rank; for a run that grows through jobs, its worker jobs
        (:mod:`clusterbench.training.world`)."""
        run = self.run_settings
        end = now_iso()
        timeline = [*state.timeline, {"time": end, "size": self.rt.size, "why": "finished"}]
        used, fixed = rank_hours(timeline, worker_bounds(run)[1], state.records)
        cpus = os.environ.get(CPUS_PER_RANK_VAR, "")
        elastic = {
            "min_workers": run["min_workers"],
            "max_workers": run["max_workers"],
            "sizes": [r.get("world_size") for r in state.records],
            "resets": list(state.resets),
            "timeline": timeline,
            "rank_hours": used,
            "max_workers_rank_hours": fixed,
            "cpus_per_rank": int(cpus) if cpus.isdigit() else None,
            "grow": "none",
        }
        grown = grow_record()
        if grown is not None:
            elastic.update(
                grow="jobs",
                worker_job_slots=grown.get("slots"),
                worker_jobs=worker_jobs_at_end(grown, end),
                grow_problem=grown.get("problem"),
            )
        return {**world, "elastic": elastic}
