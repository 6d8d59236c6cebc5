"""The learning rate of every step, pure: the warm-up, then the run's ``lr_schedule``.

* Warm-up (``batch_scaling: per_worker`` only, :mod:`clusterbench.training.schedule`): linear
  per step from ``lr`` to the peak ``lr * workers`` over ``warmup_epochs``. Under ``global``
  the peak is ``lr`` and there is nothing to ramp.
* Then ``lr_schedule``, from the peak, its clock starting where the warm-up ends (as PyTorch's
  ``SequentialLR`` of a warm-up and the schedule):

  ================  ============================================================================
  ``constant``      the peak LR
  ``cosine``        down to ``lr_min`` along half a cosine, per step, over the run's epochs
                    left after the warm-up (``CosineAnnealingLR`` with ``T_max`` those epochs,
                    ``eta_min`` = ``lr_min``, stepped per optimiser step)
  ``step``          times ``lr_gamma`` every ``lr_step_size`` epochs (``StepLR``'s
                    ``step_size`` and ``gamma``, stepped once per epoch)
  ``inverse_time``  ``peak / (1 + lr_decay * iteration)``, the iteration counted in optimiser
                    steps (seed 001's decay; Keras' ``InverseTimeDecay`` with decay_steps 1)
  ================  ============================================================================

* A time box alone (``minutes``, ``epochs: null``) gives the cosine no length: the steps a run
  will take are known only when it ends, and an LR that followed the clock would make two equal
  runs (and a resumed run and an uninterrupted one) train differently. Such a run is refused
  before any job (:func:`schedule_problems`). With both ``epochs`` and ``minutes``, the cosine
  spans the epochs and the time box may stop the run before the LR reaches ``lr_min``.

Every LR is a function of (epoch, step, steps per epoch) alone: a run continued from a
checkpoint steps with exactly the LRs of an uninterrupted one. Imported while the Snakefile is
parsed (the config check): the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The choices of ``lr_schedule`` (the schema's enum; module docstring).
LR_SCHEDULES = ("constant", "cosine", "step", "inverse_time")


def lr_scale(run: Mapping[str, Any]) -> int:
    """Factor from ``lr`` to the effective (peak) LR: ``workers`` under ``per_worker``, else 1."""
    return run["workers"] if run["batch_scaling"] == "per_worker" else 1


@dataclass(frozen=True)
class LRSchedule:
    """A run's LR per step: ``lr`` ramped to ``lr * scale`` over ``warmup_epochs`` (nothing to
    ramp when ``scale`` is 1), then ``kind`` (:data:`LR_SCHEDULES`) with its settings;
    ``epochs`` is the run's (the cosine's length)."""

    lr: float
    scale: int = 1
    warmup_epochs: float = 0.0
    kind: str = "constant"
    epochs: int | None = None
    step_size: int | None = None
    gamma: float = 0.1
    decay: float | None = None
    lr_min: float = 0.0

    @property
    def warmup(self) -> float:
        """Epochs of warm-up: none where there is nothing to ramp."""
        return self.warmup_epochs if self.scale != 1 and self.warmup_epochs > 0 else 0.0

    @property
    def peak(self) -> float:
        """The LR the warm-up reaches: where the schedule starts."""
        return self.lr * self.scale


def lr_schedule(run: Mapping[str, Any]) -> LRSchedule:
    """The run's :class:`LRSchedule`; keys an older ``--run`` lacks read as their defaults."""
    return LRSchedule(
        lr=run["lr"],
        scale=lr_scale(run),
        warmup_epochs=run["warmup_epochs"],
        kind=run.get("lr_schedule") or "constant",
        epochs=run["epochs"],
        step_size=run.get("lr_step_size"),
        gamma=run.get("lr_gamma") or 0.1,
        decay=run.get("lr_decay"),
        lr_min=run.get("lr_min") or 0.0,
    )


def learning_rate(schedule: LRSchedule, epoch: int, step: int, steps_per_epoch: int) -> float:
    """The LR of ``step`` (0-based) of ``epoch`` (0-based) in an epoch of ``steps_per_epoch``
    steps: the warm-up, then the schedule from the peak (module docstring)."""
    done = epoch + step / steps_per_epoch  # epochs trained before this step
    warmup, peak = schedule.warmup, schedule.peak
    if done < warmup:
        return schedule.lr + (peak - schedule.lr) * done / warmup
    since = done - warmup  # epochs of the schedule before this step
    kind = schedule.kind
    if kind == "constant":
        return peak
    if kind == "step":
        # rounded first: float error must not move a boundary of whole epochs by a step
        decays = math.floor(round(since / _needed(schedule.step_size), 9))
        return peak * schedule.gamma**decays
    if kind == "inverse_time":
        return peak / (1.0 + _needed(schedule.decay) * since * steps_per_epoch)
    if kind == "cosine":
        length = _needed(schedule.epochs) - warmup
        progress = min(1.0, since / length) if length > 0 else 1.0
        floor = schedule.lr_min
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr_schedule {kind!r} (known: {', '.join(LR_SCHEDULES)})")


def _needed(value: Any) -> Any:
    if value is None:  # schedule_problems refuses such a run before any job
        raise ValueError("the run's lr_schedule lacks a setting it needs (schedule_problems)")
    return value


def schedule_problems(run: Mapping[str, Any], where: str = "run") -> list[str]:
    """What the run's ``lr_schedule`` needs that the schema cannot check, each problem naming
    its key (checked before any job, and by the train stage)."""
    kind = run.get("lr_schedule") or "constant"
    problems = []
    if kind == "step" and run.get("lr_step_size") is None:
        problems.append(
            f"{where}.lr_step_size: lr_schedule step needs lr_step_size, the epochs between two "
            "decays of the LR by lr_gamma (PyTorch StepLR's step_size)"
        )
    if kind == "inverse_time" and run.get("lr_decay") is None:
        problems.append(
            f"{where}.lr_decay: lr_schedule inverse_time needs lr_decay, the decay per "
            "optimiser step in lr / (1 + lr_decay * iteration)"
        )
    if kind == "cosine":
        problems += cosine_problems(run, where)
    return problems


def cosine_problems(run: Mapping[str, Any], where: str) -> list[str]:
    """A cosine needs the run's length in epochs, some left after the warm-up, and a floor
    below the LR it starts from."""
    if run["epochs"] is None:
        return [
            f"{where}.lr_schedule: cosine decays the LR over the run's epochs, and epochs is "
            "null (a time box alone gives the cosine no length): set epochs (minutes may still "
            "stop the run earlier), or use lr_schedule constant, step or inverse_time"
        ]
    schedule = lr_schedule(run)
    problems = []
    if schedule.warmup >= run["epochs"]:
        problems.append(
            f"{where}.warmup_epochs: a warm-up of {schedule.warmup:g} epochs leaves none of the "
            f"run's {run['epochs']} epochs for the cosine to decay over"
        )
    if schedule.lr_min >= schedule.peak:
        problems.append(
            f"{where}.lr_min: the cosine decays to lr_min={schedule.lr_min:g}, which must be "
            f"below the LR it starts from ({schedule.peak:g})"
        )
    return problems
