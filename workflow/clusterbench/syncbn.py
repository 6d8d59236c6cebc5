"""Synchronised BatchNorm: batch statistics combined across all Horovod workers every step.

On GPU, :class:`horovod.torch.SyncBatchNorm` does this with CUDA kernels, but it refuses CPU
tensors. :class:`CPUSyncBatchNorm` is the portable equivalent: each worker computes its shard's
per-channel count ``n_i``, mean ``mu_i`` and biased variance ``sigma_i^2``; one Horovod allreduce
(sum of a ``(workers, 2C+1)`` table in which each worker filled its own row) gives every worker
all rows, and :func:`combine_moments` merges them with weights ``f_i = n_i / N``::

    mean = sum_i f_i mu_i
    var  = sum_i f_i (sigma_i^2 + (mu_i - mean)^2)        (biased, as used for normalising)

That allreduce is differentiable: its backward is an allreduce-sum of the incoming gradients
(as ``horovod.torch.allreduce``'s own backward), so the gradient of every worker's loss reaches
every worker's input through the shared statistics: forward output, running statistics and
input gradients equal those of one ``nn.BatchNorm2d`` applied to the whole global batch.
Unlike ``hvd.allreduce``, whose backward is anonymous, both directions use stable names
(``syncbn.K`` / ``syncbn.K.grad``, K numbering the modules in construction order, which is the
same on every rank), so Horovod's response cache serves them instead of negotiating a new name
every step. In eval mode the running statistics are used and nothing is communicated.
"""

from __future__ import annotations

import itertools
from typing import Any

import horovod.torch as hvd
import torch
from torch import nn


def combine_moments(
    counts: torch.Tensor, means: torch.Tensor, variances: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge per-worker statistics into those of the union of the workers' samples.

    ``counts``: ``(W,)`` samples per channel on each worker (may contain zeros, not all);
    ``means``, ``variances``: ``(W, C)`` per-worker mean and *biased* variance.
    Returns ``(mean, biased variance, total count)`` with shapes ``(C,), (C,), ()``.
    Differentiable in ``means`` and ``variances``.
    """
    total = counts.sum()
    weights = (counts / total).unsqueeze(1)
    mean = (weights * means).sum(0)
    var = (weights * (variances + (means - mean) ** 2)).sum(0)
    return mean, var, total


class _AllreduceSum(torch.autograd.Function):
    """Sum over all workers, differentiable (backward: sum of the gradients), with stable names."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str) -> torch.Tensor:
        ctx.name = name
        return hvd.allreduce(tensor, op=hvd.Sum, name=name)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return hvd.allreduce(grad, op=hvd.Sum, name=f"{ctx.name}.grad"), None


class CPUSyncBatchNorm(nn.BatchNorm2d):
    """Drop-in ``nn.BatchNorm2d`` whose training-mode statistics span all Horovod workers."""

    _ids = itertools.count()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sync_name = f"syncbn.{next(self._ids)}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        if not self.training or not hvd.is_initialized() or hvd.size() == 1:
            return super().forward(x)

        channels = x.shape[1]
        n_local = x.numel() // channels if channels else 0
        if n_local:
            mu = x.mean(dim=(0, 2, 3))
            var = x.var(dim=(0, 2, 3), unbiased=False)
        else:  # an empty shard contributes nothing (its weight f_i is 0)
            mu = var = x.new_zeros(channels)
        own_row = torch.cat([x.new_tensor([float(n_local)]), mu, var])
        rows = [
            own_row if r == hvd.rank() else torch.zeros_like(own_row) for r in range(hvd.size())
        ]
        table = _AllreduceSum.apply(torch.stack(rows), self.sync_name)
        counts, means, variances = table.split([1, channels, channels], dim=1)
        mean, var, total = combine_moments(counts.squeeze(1), means, variances)
        n_total = int(round(total.item()))
        if n_total <= 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got {n_total} in total"
            )

        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                if self.momentum is None:  # cumulative moving average, as nn.BatchNorm2d
                    factor = 1.0 / float(self.num_batches_tracked)
                else:
                    factor = self.momentum
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                unbiased = var.detach() * (n_total / (n_total - 1))
                self.running_var.mul_(1 - factor).add_(unbiased, alpha=factor)

        shape = (1, channels, 1, 1)
        out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out


def sync_batchnorm_class(device: torch.device | str) -> type[nn.BatchNorm2d]:
    """The synchronised BatchNorm for ``device``: Horovod's on CUDA, else ours."""
    return hvd.SyncBatchNorm if torch.device(device).type == "cuda" else CPUSyncBatchNorm


def convert_sync_batchnorm(model: nn.Module, device: torch.device | str) -> nn.Module:
    """Replace every ``nn.BatchNorm2d`` in ``model`` with the synchronised variant for ``device``,
    keeping parameters, running statistics, training flag and the device they live on
    (the state_dict keys do not change). Returns ``model`` (or the replacement, when ``model``
    itself is a BatchNorm)."""
    cls = sync_batchnorm_class(device)
    if isinstance(model, nn.BatchNorm2d) and not isinstance(model, cls):
        new = cls(
            model.num_features, model.eps, model.momentum, model.affine, model.track_running_stats
        )
        tensors = [*model.parameters(), *model.buffers()]
        if tensors:
            new.to(tensors[0].device)
        new.load_state_dict(model.state_dict())
        new.train(model.training)
        return new
    for name, child in model.named_children():
        setattr(model, name, convert_sync_batchnorm(child, device))
    return model
