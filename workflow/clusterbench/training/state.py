"""What a training carries from step to step, across a checkpoint and across an elastic reset.

The state has the model, the optimiser and these values, as attributes:

``epoch``          whole epochs done;
``place``          where training stands within the next epoch (:class:`Place`, summed over
                   all ranks: the same on every rank);
``records``        the finished epochs' metrics (``metrics.jsonl``);
``train_seconds``  training time so far (the ``minutes`` time box counts it);
``resets``         an elastic run's resets of the world so far;
``timeline``       an elastic run's world size over time: ``{"time", "size", "why"}`` when a
                   launch started it and after each reset.

A fixed-size run keeps them in a :class:`PlainState`; an elastic run in the backend's own
state object (:meth:`clusterbench.backends.ElasticRuntime.elastic_state`), which commits them
and restores the last commit after a failure. Values are never changed in place, only
replaced: an elastic commit keeps the objects themselves.

A rank's own sums since the place was last summed over the ranks are its :class:`Partial`:
they go into a checkpoint taken within a stretch of steps (a preemption), one per rank.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Place:
    """Where training stands within an epoch, the same on every rank: ``step`` optimiser steps
    done, the training loss summed over all ranks and ``images`` (global-batch samples) of
    the steps summed so far, the last step's ``lr``, the epoch's training ``seconds`` so far,
    and the world ``sizes`` it had."""

    step: int = 0
    loss_sum: float = 0.0
    images: int = 0
    lr: float = 0.0
    seconds: float = 0.0
    sizes: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sizes": list(self.sizes)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Place:
        return cls(**{**values, "sizes": tuple(values.get("sizes", ()))})


@dataclass(frozen=True)
class Partial:
    """One rank's own sums since the place was last summed over the ranks: its training loss
    (float64) and its first step with a non-finite loss (-1: none)."""

    loss_sum: float = 0.0
    first_bad: int = -1


@dataclass
class PlainState:
    """A fixed-size run's state: the values of the module docstring; ``commit`` does nothing
    (a fixed run's world does not change; its checkpoints are written at epoch ends)."""

    model: Any
    optimizer: Any
    epoch: int = 0
    place: Place = field(default_factory=Place)
    records: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0
    resets: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)

    def commit(self) -> None:
        pass


def values_of(checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """The state's values (module docstring) as a checkpoint recorded them; a fresh start's
    without one."""
    if checkpoint is None:
        return {
            "epoch": 0,
            "place": Place(),
            "records": [],
            "train_seconds": 0.0,
            "resets": [],
            "timeline": [],
        }
    return {
        "epoch": checkpoint["epoch"],
        "place": Place.from_dict(checkpoint["place"]),
        "records": list(checkpoint["metrics"]),
        "train_seconds": checkpoint["train_seconds"],
        "resets": list(checkpoint.get("resets", [])),
        "timeline": list(checkpoint.get("timeline", [])),
    }


@dataclass
class Clock:
    """``perf_counter`` readings: when ``train_seconds`` was last brought up to date, and when
    the current stretch of the epoch's timing began."""

    train: float
    epoch: float

    @classmethod
    def starting(cls) -> Clock:
        now = time.perf_counter()
        return cls(now, now)
