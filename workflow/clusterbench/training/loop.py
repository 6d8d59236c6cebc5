"""The training loop: one loop for every run, fixed-size and elastic alike.

:func:`fit` trains a run on every rank; rank 0 writes the outputs
(:mod:`clusterbench.training.outputs`). What differs between a fixed-size run and an elastic one
is a :class:`Session`: how the state is kept and started, how the body is run, how often the
state is committed within an epoch, and what a reset of the world records
(:mod:`clusterbench.training.elastic`). The loop itself is the same:

* Continue from the newest intact checkpoint of the run's training slice, if there is one
  (:func:`clusterbench.training.checkpoints.newest_valid`). The epoch-keyed shuffling and LR
  schedule,
  and each rank's saved RNG and partial sums, make the result identical to an uninterrupted
  run, weights and ``metrics.jsonl`` alike.
* Each epoch: the training pass in stretches of steps (the whole epoch, or an elastic run's
  commit interval), the loss summed over the ranks at each stretch's end, then validation,
  the epoch's record, rank 0's checkpoint, metrics and events.
* Timing: each epoch's clock starts after the device is synchronised, before its first step,
  and stops after the device is synchronised at its last, before validation.
* Stops after ``epochs`` epochs, or once ``minutes`` have run out, whichever comes first (rank 0
  decides, every rank follows): checked at each epoch's end and, within an epoch, at the ranks'
  checks (:mod:`clusterbench.training.agreement`), which come often enough that a run stops at
  most one step after its time box, then writes a checkpoint there; the partial epoch is
  validated after the time used and recorded as partial (``partial``: its steps of the epoch's).
* Each worker's share of a global batch (``shares``: :mod:`clusterbench.training.shares`): even,
  a list, or ``auto``, timed over the first steps of each start.
* A run the workflow watches (``--watched``: ``evaluate.every_minutes``) lends its weights to the
  evaluation beside it when asked, between two steps or at an epoch's end
  (:mod:`clusterbench.training.lending`), the time it takes counted nowhere.
* Preemption (:mod:`clusterbench.core.preemption`): on a warning signal the ranks agree at the next
  check, rank 0 writes a checkpoint at that step (each rank's own sums and RNG in it), and
  every rank raises :class:`~clusterbench.core.preemption.Preempted`; the same command continues.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from clusterbench.backends import Runtime
from clusterbench.core import preemption
from clusterbench.core.atomic import atomic_path
from clusterbench.data.order import shard_sizes
from clusterbench.models import custom_training
from clusterbench.models.custom import code_digest
from clusterbench.training import checkpoints, compiled, flops, memory_format, peaks, step_times
from clusterbench.training.agreement import Box
from clusterbench.training.device import rng_state, set_rng_state, setup_device, synchronize
from clusterbench.training.lending import Lender
from clusterbench.training.memory_format import torch_format
from clusterbench.training.network import build, own_loss, same_network, unused_note
from clusterbench.training.outputs import Outputs, cpu_state, rank_entry
from clusterbench.training.record import (
    epoch_line,
    epoch_record,
    network_record,
    now_iso,
    priority_record,
    rank_provenance,
    run_provenance,
    step_work_record,
    throughput_summary,
    time_box_record,
    world_record,
)
from clusterbench.training.schedule import effective_settings
from clusterbench.training.shares import Balancer
from clusterbench.training.state import Clock, Partial, Place, values_of
from clusterbench.training.steps import StepContext, Stretch, run_steps, summed_loss, validate


class Session(Protocol):
    """How a run keeps its state and runs the loop's body: fixed-size or elastic."""

    #: Steps between two commits within an epoch (None: an epoch is one stretch).
    commit_every: int | None

    def prepare(
        self, values: dict[str, Any], saved_ranks: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """The state's values to start from, given a checkpoint's (rank 0 only)."""

    def make_state(self, model: Any, optimizer: Any, values: dict[str, Any]) -> Any: ...

    def start(self, state: Any, saved_ranks: list[dict[str, Any]] | None) -> Partial | None:
        """Make every rank's state rank 0's; return this rank's own sums to continue from."""

    def run(self, body: Any, state: Any) -> Any: ...

    def commit(self, state: Any, clock: Clock, within_epoch: bool) -> None:
        """Commit the state: between two stretches of an epoch, or at the epoch's end."""

    def extend_record(self, record: dict[str, Any], state: Any) -> dict[str, Any]: ...

    def extend_world(self, world: dict[str, Any], state: Any) -> dict[str, Any]: ...


class FixedSession:
    """A run whose world keeps its size: the state is a plain object, made equal on every rank
    by broadcasts at the start (once every rank is known to have built the same network: a
    model whose ``build`` differs between ranks is named, not met as a broadcast of mismatched
    shapes); an epoch is one stretch of steps."""

    commit_every = None

    def __init__(self, rt: Runtime, model: str = "") -> None:
        self.rt, self.model = rt, model

    def prepare(
        self, values: dict[str, Any], saved_ranks: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        return values

    def make_state(self, model: Any, optimizer: Any, values: dict[str, Any]) -> Any:
        from clusterbench.training.state import PlainState

        return PlainState(model, optimizer, **values)

    def start(self, state: Any, saved_ranks: list[dict[str, Any]] | None) -> Partial | None:
        rt = self.rt
        same_network(rt, state.model, self.model)
        rt.broadcast_state(state.model, state.optimizer)
        keys = ("epoch", "place", "records", "train_seconds", "resets", "timeline")
        values = rt.broadcast_object({k: getattr(state, k) for k in keys}, name="train.state")
        for key in keys:
            setattr(state, key, values[key])
        saved = rt.broadcast_object(saved_ranks, name="train.ranks")
        if saved is None or len(saved) != rt.size:
            return None
        set_rng_state(saved[rt.rank]["rng"])
        mine = saved[rt.rank]["partial"]
        return None if mine is None else Partial(**mine)

    def run(self, body: Any, state: Any) -> Any:
        return body(state)

    def commit(self, state: Any, clock: Clock, within_epoch: bool) -> None:
        pass

    def extend_record(self, record: dict[str, Any], state: Any) -> dict[str, Any]:
        return record

    def extend_world(self, world: dict[str, Any], state: Any) -> dict[str, Any]:
        return world


def make_session(rt: Runtime, run: dict[str, Any], settings: dict[str, Any]) -> Session:
    """The session of ``run``: elastic when it sets ``min_workers``/``max_workers``."""
    from clusterbench.config import is_elastic

    if not is_elastic(run):
        if rt.size != run["workers"]:
            raise RuntimeError(
                f"run.workers={run['workers']} but the {rt.name} backend has {rt.size} "
                "process(es): launch with clusterbench-launch --np WORKERS"
            )
        return FixedSession(rt, run["model"])
    from clusterbench.training.elastic import ElasticSession

    return ElasticSession(rt, run, settings["elastic_commit_steps"])


def fit(
    rt: Runtime,
    run: dict[str, Any],
    make_data: Any,
    out_dir: Path,
    device_type: str,
    dump_dir: Path | None = None,
    max_steps: int | None = None,
    data_id: str | None = None,
    watched: bool = False,
) -> dict[str, Any]:
    """Train ``run`` on every rank; rank 0 writes the outputs. Returns the last epoch's record.

    ``make_data(device)`` gives the data source (:mod:`clusterbench.data.resident`). Raises
    :class:`~clusterbench.core.preemption.Preempted` on every rank after a preemption warning, once
    rank 0 has written the checkpoint to continue from. ``dump_dir`` (debug): every rank saves
    its final weights as ``<dump_dir>/<run>/rank-R.pt``. ``max_steps`` (debug): at most this many
    optimiser steps per epoch. ``data_id``: the data's identity (:func:`clusterbench.data.
    source.identity`), kept with each checkpoint; a checkpoint of other data is passed over.
    ``watched``: an evaluation beside the training may ask for its weights
    (:mod:`clusterbench.training.lending`). No collective before the session starts: an
    elastic run's joining rank starts there too, while the others are resetting.
    """
    settings = checkpoints.checkpoint_settings()
    session = make_session(rt, run, settings)
    device = setup_device(run, device_type, rt.local_rank, rt.local_size)
    data = make_data(device)
    layout = memory_format.choose(run, device_type, data.task)
    # before the modules' own code runs (it may chdir)
    code, training_code = code_digest(run["model"]), custom_training.code_digest(run)
    arch, model, optimizer, unused = build(rt, run, data, device, layout[0])
    fmt = torch_format(layout[0]) if data.task == "classification" else None
    loss = own_loss(run, model, data, device, fmt)
    found = None
    if rt.rank == 0:
        found = checkpoints.newest_valid(
            out_dir,
            run,
            fits=lambda ckpt: (
                checkpoints.model_problem(ckpt, model, code, training_code)
                or checkpoints.data_problem(ckpt, data_id)
            ),
        )
    ckpt = found[1] if found else None
    if found is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        print(f"train: continuing from the checkpoint {found[0].describe()}", flush=True)
    saved_ranks = ckpt["ranks"] if ckpt else None
    state = session.make_state(model, optimizer, session.prepare(values_of(ckpt), saved_ranks))
    trainer = Trainer(rt, run, data, Path(out_dir), session, device, settings)
    trainer.layout = layout
    trainer.compiled = compiled.Compiled(run, device_type)
    trainer.partial = session.start(state, saved_ranks)
    trainer.resumed = found is not None
    trainer.arch, trainer.dump_dir, trainer.max_steps = arch, dump_dir, max_steps
    trainer.unused, trainer.code, trainer.data_id = unused, code, data_id
    trainer.training_code, trainer.own_loss, trainer.watched = training_code, loss, watched
    if unused and rt.rank == 0:
        print(unused_note(run, unused, rt.name), flush=True)
    return session.run(trainer.body, state)


class Trainer:
    """The loop's body and its parts, run on every rank (module docstring)."""

    def __init__(
        self,
        rt: Runtime,
        run: dict[str, Any],
        data: Any,
        out_dir: Path,
        session: Session,
        device: Any,
        settings: dict[str, Any],
    ) -> None:
        self.rt, self.run, self.data, self.out_dir = rt, run, data, out_dir
        self.session, self.device = session, device
        self.check_every = settings["preemption_check_steps"]
        self.keep = settings["keep"]
        self.partial: Partial | None = None  # this rank's own sums to continue an epoch with
        self.resumed = False
        self.arch: dict[str, Any] = {}
        self.dump_dir: Path | None = None
        self.max_steps: int | None = None
        self.layout = (memory_format.CONTIGUOUS, "")  # the memory format and why
        self.compiled: compiled.Compiled | None = None  # torch.compile, and its seconds
        self.unused: tuple[str, ...] = ()  # parameters a step leaves without a gradient
        self.code: str | None = None  # your own model's code digest (checkpoints, model.pt)
        self.data_id: str | None = None  # the data's identity (checkpoints)
        self.training_code: str | None = None  # your own loss's and optimiser's (checkpoints)
        self.own_loss: Any = None  # your own loss (None: the task's)
        self.balancer = Balancer(run.get("shares"), rt.size)  # each worker's share of a batch
        self.timed_from = 0.0  # auto shares: this rank's own work before the timed steps
        self.watched = False  # an evaluation beside the training may ask for the weights
        self.lender: Lender | None = None
        self.boxed = False  # the time box ran out within an epoch
        self.time_steps = step_times.enabled()
        self.grad_allreduce = ("none", "")  # how the gradients are allreduced, and why
        self.grad_buffers: int | None = None  # in how many buffers (None: not known)
        self._outputs: Outputs | None = None

    def outputs(self, state: Any) -> Outputs | None:
        """Rank 0's writer, made by whichever process is rank 0 now."""
        if self.rt.rank != 0:
            return None
        if self._outputs is None:
            resumed = self.resumed or bool(state.records)
            self._outputs = Outputs(
                self.out_dir, self.run, state.records, resumed, self.keep, self.code, self.data_id
            )
            self._outputs.training_code = self.training_code
        return self._outputs

    def body(self, state: Any) -> dict[str, Any]:
        """Train to the end from ``state``; in an elastic run, again after each reset."""
        rt = self.rt
        compression = self.run.get("grad_compression") or "none"
        asked = self.run.get("grad_allreduce") or "auto"
        self.grad_allreduce = rt.choose_grad_allreduce(asked, state.model, self.device.type)
        mode = self.grad_allreduce[0]
        net, optimizer = rt.wrap(
            state.model,
            state.optimizer,
            self.run["bn"],
            compression,
            timed=self.time_steps,
            # only when they matter: a backend plugin written before them still takes the call
            **({"grad_allreduce": mode} if mode != "none" else {}),
            **({"unused": True} if self.unused else {}),
        )
        self.grad_buffers = optimizer.buffers
        ctx = StepContext(rt, self.run, self.device, state.model, net, optimizer, self.data)
        ctx.memory_format = (
            torch_format(self.layout[0]) if self.data.task == "classification" else None
        )
        ctx.own_loss = self.own_loss
        peak = peaks.device_peak(self.device, self.run["precision"])  # before any compile
        if self.compiled is not None:  # before the clock: its time is recorded apart
            self.compiled.prepare(ctx, ctx.batches(self.max_steps))
        facts = rt.allgather_object(
            {**rank_provenance(rt.rank, rt.local_rank, self.device), "peak": peak},
            name="train.provenance",
        )
        self.balancer.start(rt.size)  # auto: timed again after each start (an elastic reset)
        if self.watched:
            self.lender = Lender(self.out_dir, {f["host"] for f in facts}, facts[0]["host"])
            ctx.asks = self.lender.asked
        self.outputs(state)
        clock = Clock.starting()
        record: dict[str, Any] = state.records[-1] if state.records else {}
        while not self.finished(state, clock):
            record = self.epoch(ctx, state, clock)
        self.finish(state, facts)
        return record

    def finished(self, state: Any, clock: Clock) -> bool:
        """Rank 0 decides (its clock is the time box's); every rank stops after that epoch.
        The time since the epoch's end (its outputs, its checkpoint) counts, in the time box
        and in ``train_seconds`` alike: the record is what the time box saw. A run the time box
        stopped within an epoch has ended (its time used is the stop's). An evaluation's
        request is answered here too, at an epoch's end (a watched run)."""
        if self.boxed:
            return True
        now = time.perf_counter()
        state.train_seconds += now - clock.train
        clock.train = now
        stop = asked = False
        if self.rt.rank == 0:
            run = self.run
            stop = run["epochs"] is not None and state.epoch >= run["epochs"]
            stop = stop or run["minutes"] is not None and state.train_seconds >= 60 * run["minutes"]
            asked = not stop and self.lender is not None and self.lender.asked()
        stop, asked = self.rt.broadcast_object((stop, asked), name="train.stop")
        if asked:
            self.lend(state, clock, 0)
        return stop

    def epoch(self, ctx: StepContext, state: Any, clock: Clock) -> dict[str, Any]:
        """One epoch (or the rest of one), its validation and its record."""
        rt, place = self.rt, state.place
        if rt.size not in place.sizes:
            state.place = place = replace(place, sizes=(*place.sizes, rt.size))
        if place.step == 0 and rt.any_rank(preemption.warned(), "train.warned"):
            raise self.preempted(checkpoints.Position(state.epoch))
        batches = ctx.batches(self.max_steps)
        self.balancer.plan(place.step, len(batches))
        self.timed_from = 0.0
        timed = self.time_steps or self.balancer.pending
        ctx.step_times = step_times.StepTimes(self.device, timed)
        synchronize(self.device)
        clock.epoch = time.perf_counter()
        self.boxed = self.train_pass(ctx, state, clock, batches)
        synchronize(self.device)
        seconds = state.place.seconds + time.perf_counter() - clock.epoch
        if self.boxed:  # the time used ends here: its checkpoint, then the partial epoch's record
            self.box_checkpoint(state, clock, seconds)
        record = epoch_record(
            self.run, state.epoch + 1, state.place, seconds, validate(ctx), rt.size, self.data
        )
        if self.boxed:
            record["partial"] = {"steps": state.place.step, "of": len(batches)}
        if self.time_steps:  # every rank's phases: one small gather per epoch
            phases = rt.allgather_object(ctx.step_times.result(), name="train.step_times")
            record["step_seconds"] = step_times.summarise(phases)
        record = self.session.extend_record(record, state)
        if self.boxed:
            return self.partial_record(state, record)
        state.epoch += 1
        state.records = [*state.records, record]
        state.place = Place(sizes=(rt.size,))
        now = time.perf_counter()
        state.train_seconds += now - clock.train
        clock.train = now
        ranks = rt.allgather_object(rank_entry(rng_state(), None), name="train.rank_state")
        out = self.outputs(state)
        if out is not None:
            out.epoch(state, ranks)
            print(epoch_line(record), flush=True)
        self.session.commit(state, clock, within_epoch=False)
        return record

    def train_pass(self, ctx: StepContext, state: Any, clock: Clock, batches: list) -> bool:
        """The epoch's steps from ``state.place`` on, in stretches: the loss is summed over the
        ranks at each stretch's end, and the state committed between stretches. Between two
        stretches the weights are lent to an evaluation that asked, and ``auto`` shares are
        set once timed. Returns whether the time box stopped the epoch."""
        every = self.session.commit_every
        partial, self.partial = self.partial or Partial(), None
        inputs = self.inputs(state, batches)
        while True:
            place = state.place
            end = len(batches) if every is None else min(len(batches), place.step + every)
            end = self.balancer.stretch_end(place.step, end)
            ctx.box = self.box(state, clock)
            begin = Stretch(place.step, partial, place.images, place.lr, None)
            stretch = run_steps(ctx, state.epoch, batches, inputs, begin, end, self.check_every)
            if stretch.stopped == "preempted":  # a checkpoint at this step, then every rank stops
                raise self.stop(state, clock, stretch)
            total = summed_loss(ctx, state.epoch, stretch, len(batches))
            state.place = replace(
                place,
                step=stretch.step,
                loss_sum=place.loss_sum + total,
                images=stretch.images,
                lr=stretch.lr,
            )
            partial = Partial()
            if stretch.stopped == "boxed":
                return True
            if stretch.stopped == "asked":
                self.lend(state, clock, len(batches))
            if self.balance(ctx, batches, stretch.step):  # auto shares set: the data again
                inputs = self.inputs(state, batches)
            if stretch.step >= len(batches):
                return False
            self.session.commit(state, clock, within_epoch=True)

    def inputs(self, state: Any, batches: list) -> Any:
        """This rank's batches of the epoch from ``state.place``'s step, at the current shares."""
        rt, kwargs = self.rt, self.balancer.kwargs()
        return self.data.epoch_batches(
            state.epoch, batches, state.place.step, rt.rank, rt.size, **kwargs
        )

    def box(self, state: Any, clock: Clock) -> Box | None:
        """The time box on this rank's clock (rank 0's decides), None without ``minutes``."""
        minutes = self.run["minutes"]
        return None if minutes is None else Box(clock.train + 60 * minutes - state.train_seconds)

    def balance(self, ctx: StepContext, batches: list, step: int) -> bool:
        """``auto`` shares: this rank's own work noted where the timed steps start, the shares
        set where they end (:meth:`clusterbench.training.shares.Balancer.measure`); whether they
        changed."""
        balancer = self.balancer
        if not balancer.pending or step not in balancer.marks:
            return False
        synchronize(self.device)
        found = ctx.step_times.result()
        work = found["data"] + found["compute"]
        if step == balancer.marks[0] and step != balancer.marks[1]:
            self.timed_from = work
            return False
        rt, first, last = self.rt, *balancer.marks
        sizes = (shard_sizes(b - a, rt.size, balancer.current) for a, b in batches[first:last])
        samples = sum(size[rt.rank] for size in sizes)
        return balancer.measure(rt, (samples, work - self.timed_from), step)

    def lend(self, state: Any, clock: Clock, steps: int) -> None:
        """The weights lent to the evaluation that asked (:mod:`clusterbench.training.lending`),
        between two steps (``steps``: the epoch's; 0 at an epoch's end); the time it takes is
        taken out of the epoch's clock and the time box's."""
        synchronize(self.device)
        began = time.perf_counter()
        where = {
            "train_seconds": state.train_seconds + began - clock.train,
            "epoch": state.epoch,
            "step": state.place.step if steps else 0,
            "steps": steps,
            "time": now_iso(),
        }
        model_file = self.model_file(state) if self.rt.rank == 0 else {}
        assert self.lender is not None
        self.lender.lend(self.rt, model_file, where)
        took = time.perf_counter() - began
        clock.train += took
        clock.epoch += took

    def stop(self, state: Any, clock: Clock, stretch: Stretch) -> preemption.Preempted:
        """A checkpoint at the step where the ranks agreed on a preemption warning (each
        rank's own sums and RNG in it); then every rank stops."""
        synchronize(self.device)
        now = time.perf_counter()
        state.place = replace(
            state.place,
            step=stretch.step,
            images=stretch.images,
            lr=stretch.lr,
            seconds=state.place.seconds + now - clock.epoch,
        )
        state.train_seconds += now - clock.train
        clock.train = now
        ranks = self.rt.allgather_object(
            rank_entry(rng_state(), stretch.partial), name="train.rank_state"
        )
        where = checkpoints.Position(state.epoch, stretch.step)
        out = self.outputs(state)
        if out is not None:
            out.checkpoint(state, where, ranks)
        return self.preempted(where)

    def box_checkpoint(self, state: Any, clock: Clock, seconds: float) -> None:
        """The time box ran out within the epoch: the time used ends with the checkpoint at
        this step (each rank's RNG; its sums are in the place), written before the partial
        epoch's validation."""
        state.place = replace(state.place, seconds=seconds)
        ranks = self.rt.allgather_object(rank_entry(rng_state(), None), name="train.rank_state")
        out = self.outputs(state)
        if out is not None:
            out.checkpoint(state, checkpoints.Position(state.epoch, state.place.step), ranks)
        now = time.perf_counter()
        state.train_seconds += now - clock.train
        clock.train = now

    def partial_record(self, state: Any, record: dict[str, Any]) -> dict[str, Any]:
        """The partial epoch's record (``partial``: its steps), in metrics.jsonl and the events
        after the checkpoint; the run ends."""
        state.records = [*state.records, record]
        out = self.outputs(state)
        if out is not None:
            out.record(state.records)
            part = record["partial"]
            print(f"{epoch_line(record)} (partial: {part['steps']}/{part['of']} steps; time box)")
        return record

    def preempted(self, where: checkpoints.Position) -> preemption.Preempted:
        self.rt.broadcast_object(None, name="train.checkpointed")  # rank 0 has written it
        message = preemption.Preempted(where.describe())
        print(f"train: rank {self.rt.rank} {message}", flush=True)
        return message

    def finish(self, state: Any, facts: list[dict[str, Any]]) -> None:
        """Every rank's weights (debug), then rank 0's ``run.json`` (with how every rank read its
        data) and ``model.pt``."""
        import torch

        from clusterbench.data import record

        rt = self.rt
        if self.dump_dir is not None:  # debug: every rank's final weights, to compare
            with atomic_path(Path(self.dump_dir) / self.run["name"] / f"rank-{rt.rank}.pt") as tmp:
                torch.save(cpu_state(state.model), tmp)
        data = rt.allgather_object(record.rank_record(self.data), name="train.data")
        # the devices' peak again, after training: each rank's better of the two is its peak
        ends = rt.allgather_object(peaks.device_peak(self.device, self.run["precision"]), "peak")
        out = self.outputs(state)
        if out is None:
            return
        world = world_record(rt.name, rt.size, self.device, facts)
        provenance = run_provenance(facts)
        throughput = throughput_summary(state.records, self.device.type)
        summary = {
            "world": self.session.extend_world(world, state),
            "effective": {
                **effective_settings(self.run),
                "memory_format": self.layout[0],
                "memory_format_reason": self.layout[1],
                "grad_allreduce": self.grad_allreduce[0],
                "grad_allreduce_reason": self.grad_allreduce[1],
                "grad_buffers": self.grad_buffers,
                # trainable parameters a step leaves without a gradient (your own model's)
                "unused_parameters": list(self.unused),
                **(self.compiled.record() if self.compiled else {}),
            },
            "compile_seconds": self.compiled.seconds if self.compiled else 0.0,
            "flops": flops.run_record(self.arch, self.data, facts, ends),
            "step_work": step_work_record(
                state.model, self.data, self.run, rt.size, self.max_steps
            ),
            # the interface and the communication log level, and where each came from
            "network": network_record(self.run, os.environ),
            "epochs_completed": sum(1 for r in state.records if "partial" not in r),
            # the time box and each worker's share (clusterbench.training.shares), where set
            **time_box_record(self.run, state.records, state.train_seconds),
            **({"shares": self.balancer.record} if self.run.get("shares") else {}),
            "throughput": throughput,  # Horovod's summary lines and their figures
            "train_seconds": state.train_seconds,
            # the changes made to this job's priority while it was queued or ran
            "priority": priority_record(self.out_dir),
            "versions": provenance["versions"],  # rank 0's, as before provenance existed
            "provenance": provenance,
            "data": record.merge(data),  # how it read its data (clusterbench.data.record)
        }
        out.finish(summary, self.model_file(state))
        for line in throughput["lines"] if throughput else []:
            print(line, flush=True)
        part = (state.records[-1] if state.records else {}).get("partial")
        print(
            f"train: {state.epoch} epoch(s)"
            + (f" and {part['steps']}/{part['of']} steps (time box)" if part else "")
            + f" in {state.train_seconds:.1f} s"
            + (f", {len(state.resets)} reset(s)" if state.resets else "")
            + f" -> {self.out_dir}",
            flush=True,
        )

    def model_file(self, state: Any) -> dict[str, Any]:
        """What ``model.pt`` holds (and the weights lent to an evaluation): the architecture,
        the weights on the CPU, the data's normalisation and your own model's code digest
        (the evaluation builds the same code, or says so)."""
        return {
            "arch": self.arch,
            "state_dict": cpu_state(state.model),
            **self.data.normalisation,
            **({"model_code": self.code} if self.code else {}),
        }
