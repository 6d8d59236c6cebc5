"""The training pass of an epoch, step by step, and the validation pass: the hot path.

A step has no host synchronisation of its own: the loss is summed on the device and read once
per stretch of steps (an epoch, or an elastic commit's stretch). Rank 0 logs progress
(:func:`~clusterbench.training.schedule.progress_due`) from its host clock alone: no
collective, no device synchronisation, no loss (reading it would wait for the device); on a
GPU its rate is approximate, the host running a little ahead of the device. Every
``checkpoints.preemption_check_steps`` steps (more often as a time box runs out) the ranks agree
whether any was warned of preemption (:mod:`clusterbench.core.preemption`), whether the time box
ran out and whether an evaluation asked for the weights: one tiny collective
(:mod:`clusterbench.training.agreement`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from clusterbench.backends import Runtime
from clusterbench.config.lr import learning_rate, lr_schedule
from clusterbench.core import preemption
from clusterbench.data.order import global_batches
from clusterbench.training.agreement import agree, first_check
from clusterbench.training.schedule import global_batch_size, progress_due, progress_line
from clusterbench.training.state import Partial


@dataclass
class StepContext:
    """What every step needs: the runtime, the run, the device, the network, the optimiser and
    the data source (:mod:`clusterbench.data.resident`)."""

    rt: Runtime
    run: dict[str, Any]
    device: Any
    model: Any  # the network itself (saved)
    net: Any  # what is called in training (the backend's wrapper around ``model``)
    optimizer: Any
    data: Any
    #: The torch memory format the inputs are given to the network in (None: as they come).
    memory_format: Any = None
    #: This rank's phase times of the epoch's steps (:mod:`clusterbench.training.step_times`).
    step_times: Any = None
    #: Your own loss (:class:`clusterbench.models.custom_training.OwnLoss`; None: the task's).
    own_loss: Any = None
    #: The time box on rank 0's clock (:class:`clusterbench.training.agreement.Box`; None:
    #: no ``minutes``), and rank 0's look for an evaluation's request (None: not watched).
    box: Any = None
    asks: Any = None

    @property
    def objective(self) -> Any:
        """What a step minimises (:mod:`clusterbench.training.objectives`): the data's task's
        loss, or your own."""
        from clusterbench.training.objectives import objective

        return self.own_loss or objective(self.data.task)

    def autocast(self) -> Any:
        import torch

        return torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.run["precision"] == "bf16"
        )

    def batches(self, max_steps: int | None) -> list[tuple[int, int]]:
        """``[start, stop)`` of each global batch of an epoch at the current world size."""
        found = global_batches(self.data.train_size, global_batch_size(self.run), self.rt.size)
        return found if max_steps is None else found[:max_steps]


@dataclass(frozen=True)
class Stretch:
    """Where a stretch of steps ended: ``step`` steps of the epoch done, this rank's own sums
    (``partial``), the epoch's ``images`` so far, the last ``lr``, and why the ranks agreed to
    end it early (``stopped``: ``preempted``, a warning; ``boxed``, the time box ran out;
    ``asked``, an evaluation asked for the weights: :class:`~clusterbench.training.agreement.
    Agreed`), None at ``end``."""

    step: int
    partial: Partial
    images: int
    lr: float
    stopped: str | None


def run_steps(
    ctx: StepContext,
    epoch: int,
    batches: list[tuple[int, int]],
    inputs: Iterator[tuple[Any, Any]],
    begin: Stretch,
    end: int,
    check_every: int,
) -> Stretch:
    """Steps ``begin.step`` to ``end`` (exclusive) of ``epoch`` (0-based), taking each step's
    ``(x, y)`` from ``inputs``; returns where it ended: at ``end``, or (``stopped``) at the
    first check (every ``check_every`` steps, or as the time box needs:
    :mod:`clusterbench.training.agreement`) at which a rank had been warned of preemption, the
    box had run out or an evaluation asked for the weights."""
    import torch

    run, rank, workers = ctx.run, ctx.rt.rank, ctx.rt.size
    schedule, steps = lr_schedule(run), len(batches)
    loss_sum_of, units = ctx.objective.loss_sum, ctx.data.units_per_sample
    tokens = units if ctx.data.task == "language-model" else 0  # the progress lines' unit
    fmt, times, optimizer = ctx.memory_format, ctx.step_times, ctx.optimizer
    ctx.net.train()
    loss_sum = torch.full((), begin.partial.loss_sum, dtype=torch.float64, device=ctx.device)
    # the first step whose loss is not finite (-1: none), tracked on the device: no sync
    first_bad = torch.full((), begin.partial.first_bad, dtype=torch.int64, device=ctx.device)
    lr, images, done, stopped = begin.lr or run["lr"], begin.images, begin.step, None
    started = last = time.monotonic() if rank == 0 else 0.0
    printed = False
    check = first_check(begin.step, check_every, ctx.box is not None)
    for step in range(begin.step, end):
        start, stop = batches[step]
        lr = learning_rate(schedule, epoch, step, steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        times.fetching()
        x, y = next(inputs)
        if fmt is not None:
            x = x.contiguous(memory_format=fmt)
        times.fetched()
        with ctx.autocast():
            summed = loss_sum_of(ctx.net(x), y)
        optimizer.zero_grad()
        # The backend averages over the W workers: W / U * (local sum) makes that average the
        # mean over the global batch's U units (images, tokens), whatever each rank's share.
        (summed * (workers / ((stop - start) * units))).backward()
        times.backward_done(optimizer.gradients_ready())
        optimizer.synchronize()
        times.synchronized()
        optimizer.inner.step()
        times.stepped()
        loss_sum += summed.detach()
        first_bad = torch.where(torch.isfinite(summed.detach()) | (first_bad >= 0), first_bad, step)
        images += stop - start
        done = step + 1
        if rank == 0:
            now = time.monotonic()
            if progress_due(now, last, done, steps, printed):
                line = progress_line(epoch + 1, done, steps, images, now - started, tokens)
                print(line, flush=True)
                last, printed = now, True
        if done == check and done < steps:
            pace = (time.monotonic() - started) / (done - begin.step) if rank == 0 else None
            asked = ctx.asks() if ctx.asks is not None and rank == 0 else False
            agreed = agree(ctx.rt, preemption.warned(), ctx.box, asked, done, check_every, pace)
            check, stopped = agreed.next, agreed.stop
            if stopped:
                break
    partial = Partial(float(loss_sum), int(first_bad))
    return Stretch(done, partial, images, lr, stopped)


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite: every later step would train on garbage."""


def non_finite_message(run: str, epoch: int, first_bad: list[int], steps: int, lr: float) -> str:
    """Where the loss first stopped being finite: ``first_bad[r]`` is rank r's first such step
    (0-based, -1 for none)."""
    where = [(step, rank) for rank, step in enumerate(first_bad) if step >= 0]
    step, rank = min(where) if where else (None, None)
    at = f"step {step + 1}/{steps} (rank {rank})" if step is not None else "a step"
    return (
        f"run {run!r}: the training loss became non-finite (NaN or inf) at epoch {epoch}, {at}, "
        f"learning rate {lr:g}; the run is stopped. Lower the run's lr (or raise warmup_epochs) "
        "and run it again."
    )


def summed_loss(ctx: StepContext, epoch: int, stretch: Stretch, steps: int) -> float:
    """The stretch's training loss summed over the ranks (a collective); a non-finite sum stops
    the run, naming the first rank and step where the loss went bad."""
    import torch

    local = torch.tensor([stretch.partial.loss_sum], dtype=torch.float64)
    total = float(ctx.rt.allreduce_sum(local, "train.loss"))
    if not math.isfinite(total):
        bad = ctx.rt.allgather_object(stretch.partial.first_bad, name="train.first_bad")
        raise NonFiniteLossError(
            non_finite_message(ctx.run["name"], epoch + 1, bad, steps, stretch.lr)
        )
    return total


def validate(ctx: StepContext) -> tuple[float, float]:
    """Validation loss and accuracy (per unit: image, token) over the whole val split, sharded
    over the ranks."""
    import torch

    objective = ctx.objective
    ctx.model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
    correct = torch.zeros((), dtype=torch.float64, device=ctx.device)
    count = 0
    with torch.no_grad(), ctx.autocast():
        for x, y in ctx.data.val_batches(ctx.rt.rank, ctx.rt.size):
            if ctx.memory_format is not None:
                x = x.contiguous(memory_format=ctx.memory_format)
            logits = ctx.model(x).float()
            loss_sum += objective.loss_sum(logits, y)
            correct += objective.correct(logits, y)
            count += y.numel()
    local = torch.stack([loss_sum, correct]).cpu()
    local = torch.cat([local, torch.tensor([float(count)], dtype=torch.float64)])
    loss, right, n = ctx.rt.allreduce_sum(local, name="val.totals").tolist()
    return loss / n, right / n
