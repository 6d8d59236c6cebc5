"""The schedule of a training, pure: how a global batch is split over the ranks, the order of the
samples in an epoch, and when rank 0 logs its progress (the learning rate of each step:
:mod:`clusterbench.training.lr`).

* Batch and LR convention (``batch_scaling``):
  - ``global`` (default): ``batch_size`` is the global batch, split over the workers (the
    remainder going to the first ranks), and ``lr`` is the rate for that global batch, not
    rescaled by the worker count: runs that differ only in ``workers`` solve the same
    optimisation problem, up to the order of floating-point sums.
  - ``per_worker`` (Horovod's convention): ``batch_size`` per worker, a global batch of
    ``batch_size * workers``, and an LR of ``lr * workers`` reached by a linear per-step warm-up
    over ``warmup_epochs``.
  Each rank scales its summed loss by ``workers / global_batch``, so the gradient the backend
  averages is exactly the global-batch mean gradient, whatever each rank's share. A last global
  batch smaller than the number of workers is dropped.
* Shuffling: one permutation per epoch from ``numpy.random.default_rng([seed, epoch])``,
  identical on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from clusterbench.training.lr import lr_scale

#: Seconds between two progress lines of rank 0 within an epoch (see :func:`progress_due`).
PROGRESS_INTERVAL = 10.0


def shard_sizes(global_batch: int, workers: int) -> list[int]:
    """Samples of a global batch per rank: ``B // W``, plus one for the first ``B % W`` ranks."""
    if workers < 1 or global_batch < 0:
        raise ValueError(f"need workers >= 1 and global_batch >= 0, got {workers}, {global_batch}")
    base, extra = divmod(global_batch, workers)
    return [base + (1 if r < extra else 0) for r in range(workers)]


def shard_bounds(global_batch: int, workers: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous share of a global batch (:func:`shard_sizes`)."""
    sizes = shard_sizes(global_batch, workers)
    start = sum(sizes[:rank])
    return start, start + sizes[rank]


def global_batches(n: int, batch_size: int, workers: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each global batch over ``n`` samples; a last batch smaller than
    ``workers`` is dropped so that every rank gets at least one sample per step."""
    return [
        (start, min(start + batch_size, n))
        for start in range(0, n, batch_size)
        if min(start + batch_size, n) - start >= workers
    ]


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of ``epoch``: reproducible from ``(seed, epoch)``, equal on every rank."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def global_batch_size(run: Mapping[str, Any]) -> int:
    """Images per optimiser step over all workers, under the run's ``batch_scaling``."""
    if run["batch_scaling"] == "per_worker":
        return run["batch_size"] * run["workers"]
    return run["batch_size"]


def effective_settings(run: Mapping[str, Any]) -> dict[str, Any]:
    """What the run's convention makes of its settings (recorded in run.json): the batch and
    LR, and the type its gradients travel in (``grad_compression``; ``none`` for a run of one
    worker, which exchanges none)."""
    exchanges = max(run["workers"], run.get("max_workers") or 0) > 1
    return {
        "batch_scaling": run["batch_scaling"],
        "global_batch": global_batch_size(run),
        "per_worker_batch": shard_sizes(global_batch_size(run), run["workers"]),
        "lr": run["lr"] * lr_scale(run),
        "grad_compression": (run.get("grad_compression") or "none") if exchanges else "none",
    }


def progress_due(
    now: float,
    last: float,
    step: int,
    steps: int,
    printed: bool,
    interval: float = PROGRESS_INTERVAL,
) -> bool:
    """Whether rank 0 logs a progress line after ``step`` of the epoch's ``steps`` (1-based):
    once ``interval`` seconds have passed since ``last`` (its previous line, or the epoch's
    start), and after the last step of an epoch that has ``printed`` no line yet."""
    return now - last >= interval or (step == steps and not printed)


def progress_line(epoch: int, step: int, steps: int, images: int, seconds: float) -> str:
    """``images`` trained (all ranks) in the ``seconds`` of the ``epoch``'s first ``step`` steps
    (1-based), as one log line: the rate and the epoch's ETA at that rate."""
    rate = images / seconds if seconds > 0 else 0.0
    eta = seconds * (steps - step) / step
    return (
        f"train: epoch {epoch} step {step}/{steps} ({100 * step // steps}%), "
        f"{rate:.0f} images/s, ETA {eta:.0f} s"
    )
