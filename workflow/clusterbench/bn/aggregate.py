"""``bn: aggregate`` (the default): as ``local`` in forward and backward, but after every
optimiser step the running mean and variance of all BatchNorm layers are combined across the
workers, weighted by each worker's share of the global batch, in the step's own collective
(:class:`clusterbench.bn._blocks.RunningStatsAggregator`): every rank ends each step with the same
running statistics."""

from __future__ import annotations

from typing import Any

DESCRIPTION = "running statistics combined across workers after every step (one collective)"
ELASTIC = None


def prepare(model: Any, runtime: Any, device: Any) -> Any:
    return model


def aggregator(model: Any) -> Any:
    """The aggregator of ``model``'s BatchNorm layers (None when it has none)."""
    from clusterbench.bn._blocks import RunningStatsAggregator

    agg = RunningStatsAggregator(model)
    return agg if agg.layers else None
