"""The schedule of a training, pure: the global batch and the effective settings a run's
convention makes, and when rank 0 logs its progress (how a global batch is split over the ranks
and the order of the samples in an epoch: :mod:`clusterbench.data.order`; the learning rate of
each step: :mod:`clusterbench.config.lr`).

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterbench.config.lr import lr_scale
from clusterbench.data.order import shard_sizes

#: Seconds between two progress lines of rank 0 within an epoch (see :func:`progress_due`).
PROGRESS_INTERVAL = 10.0


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


def progress_line(
    epoch: int, step: int, steps: int, images: int, seconds: float, tokens: int = 0
) -> str:
    """``images`` trained (all ranks) in the ``seconds`` of the ``epoch``'s first ``step`` steps
    (1-based), as one log line: the rate and the epoch's ETA at that rate. ``tokens``: the
    tokens of a sequence (a language model's rate is in tokens/s); 0: images."""
    rate = images * max(tokens, 1) / seconds if seconds > 0 else 0.0
    eta = seconds * (steps - step) / step
    return (
        f"train: epoch {epoch} step {step}/{steps} ({100 * step // steps}%), "
        f"{rate:.0f} {'tokens' if tokens else 'images'}/s, ETA {eta:.0f} s"
    )
