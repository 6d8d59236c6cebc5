"""BatchNorm across workers, backend-neutral: the building blocks of the ``bn`` modes
(:mod:`clusterbench.bn`).

``bn: local``     every worker normalises with, and keeps running statistics of, its own shard.
``bn: aggregate`` (default) as ``local`` in forward and backward, but after every optimiser step
                  the running mean and variance of *all* BN layers are combined across workers
                  in ONE collective (:class:`RunningStatsAggregator`), weighted by each worker's
                  share of the global batch ``f_i = n_i / N``::

                      mean = sum_i f_i mu_i
                      var  = sum_i f_i (sigma_i^2 + (mu_i - mean)^2)

                  so every rank ends each step with identical running statistics.
``bn: sync``      exact full-batch statistics in forward and backward (:class:`CPUSyncBatchNorm`
                  on the CPU; the backend's own CUDA implementation on GPUs).

Collectives come from the runtime (:class:`clusterbench.backends.Runtime`): this module never
imports Horovod or ``torch.distributed``.

:class:`CPUSyncBatchNorm`: each worker computes its shard's per-channel count ``n_i``, mean
``mu_i`` and biased variance ``sigma_i^2``; one differentiable allreduce (sum of a
``(workers, 2C+1)`` table in which each worker filled its own row) gives every worker all rows,
and :func:`combine_moments` merges them. The allreduce's backward is an allreduce-sum of the
incoming gradients, so forward output, running statistics and input gradients equal those of one
``nn.BatchNorm2d`` applied to the whole global batch. Names are stable (``syncbn.K``, K numbering
the modules in construction order, the same on every rank) so Horovod's response cache serves
them. In eval mode the running statistics are used and nothing is communicated.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn


class SyncComm(Protocol):
    """What :class:`CPUSyncBatchNorm` needs from the runtime."""

    rank: int
    size: int

    def allreduce_sum_autograd(self, tensor: torch.Tensor, name: str) -> torch.Tensor: ...


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


class CPUSyncBatchNorm(nn.BatchNorm2d):
    """Drop-in ``nn.BatchNorm2d`` whose training-mode statistics span all workers of ``comm``."""

    _ids = itertools.count()

    def __init__(self, *args: Any, comm: SyncComm | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.comm = comm
        self.sync_name = f"syncbn.{next(self._ids)}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        comm = self.comm
        if not self.training or comm is None or comm.size == 1:
            return super().forward(x)

        channels = x.shape[1]
        n_local = x.numel() // channels if channels else 0
        if n_local:
            mu = x.mean(dim=(0, 2, 3))
            var = x.var(dim=(0, 2, 3), unbiased=False)
        else:  # an empty shard contributes nothing (its weight f_i is 0)
            mu = var = x.new_zeros(channels)
        own_row = torch.cat([x.new_tensor([float(n_local)]), mu, var])
        rows = [own_row if r == comm.rank else torch.zeros_like(own_row) for r in range(comm.size)]
        table = comm.allreduce_sum_autograd(torch.stack(rows), self.sync_name)
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


def batchnorm_factory(cls: type[nn.Module], **extra: Any) -> Callable[[nn.BatchNorm2d], Any]:
    """Makes a ``cls`` (a BatchNorm class) with the arguments of a given BatchNorm, plus
    ``extra`` keyword arguments: the ``make`` of :func:`convert_batchnorm`."""

    def make(bn: nn.BatchNorm2d) -> Any:
        return cls(bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats, **extra)

    return make


def cpu_sync_factory(comm: SyncComm | None) -> Callable[[nn.BatchNorm2d], nn.BatchNorm2d]:
    """Makes a :class:`CPUSyncBatchNorm` over ``comm`` with the arguments of a BatchNorm."""
    return batchnorm_factory(CPUSyncBatchNorm, comm=comm)


def convert_batchnorm(
    model: nn.Module, make: Callable[[nn.BatchNorm2d], nn.BatchNorm2d]
) -> nn.Module:
    """Replace every ``nn.BatchNorm2d`` in ``model`` with ``make(bn)``, keeping parameters,
    running statistics, training flag and the device they live on (state_dict keys do not
    change). Returns ``model`` (or the replacement, when ``model`` itself is a BatchNorm)."""
    if isinstance(model, nn.BatchNorm2d):
        new = make(model)
        if type(new) is type(model):
            return model
        tensors = [*model.parameters(), *model.buffers()]
        if tensors:
            new.to(tensors[0].device)
        new.load_state_dict(model.state_dict())
        new.train(model.training)
        return new
    for name, child in model.named_children():
        setattr(model, name, convert_batchnorm(child, make))
    return model


# --------------------------------------------------------------------------------------------
# bn: aggregate


class RunningStatsAggregator:
    """Combines the running statistics of every BatchNorm layer across workers.

    :meth:`contribution` packs this worker's part of one sum-allreduce; :meth:`apply` unpacks
    the summed buffer into every layer. Each worker contributes, per layer and channel,
    ``n_i``, ``n_i d_i`` and ``n_i (v_i + d_i^2)`` with ``d_i = mu_i - c``, ``v_i`` its running
    variance and ``c`` the (identical on every rank) aggregated mean of the previous step, so
    that after the sum ``mean = c + sum n_i d_i / N`` and ``var = sum n_i (v_i + d_i^2) / N -
    (mean - c)^2`` are exactly the weighted formula, computed around a shared centre to avoid
    cancellation. ``n_i`` is the number of samples the layer normalised on this worker in its
    last training forward (so ``f_i = n_i / N``); the buffer may also be averaged instead of
    summed: only ratios are used.

    The buffer is ``[n of each layer | n d of every channel | n (v + d^2) of every channel]``,
    made and unpacked with a few operations on all layers' channels at once (not a few per
    layer: a ResNet's 20 layers took 0.9 ms of CPU per step that way).
    """

    def __init__(self, model: nn.Module) -> None:
        self.layers = [
            m
            for m in model.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        ]
        self.samples = [0] * len(self.layers)
        for i, layer in enumerate(self.layers):
            layer.register_forward_pre_hook(self._counter(i))
        self.sizes = [layer.num_features for layer in self.layers]
        #: each channel's layer (to spread the layers' counts over their channels)
        self.layer_of = torch.repeat_interleave(
            torch.arange(len(self.layers)), torch.tensor(self.sizes, dtype=torch.long)
        )
        self.centre = torch.zeros(0)
        self._counts: tuple[tuple[int, ...], torch.Tensor, torch.Tensor] | None = None
        self.reset_centres()

    def _counter(self, i: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            if module.training:
                self.samples[i] = int(args[0].shape[0])

        return hook

    def __len__(self) -> int:
        """Number of values in one contribution."""
        return sum(1 + 2 * layer.num_features for layer in self.layers)

    def _means(self) -> list[torch.Tensor]:
        return [layer.running_mean for layer in self.layers]

    def _vars(self) -> list[torch.Tensor]:
        return [layer.running_var for layer in self.layers]

    def reset_centres(self) -> None:
        """Take the current running means as centres (call when they are equal on all ranks)."""
        if self.layers:
            self.centre = torch.cat(self._means()).detach()

    def _index(self, device: torch.device) -> torch.Tensor:
        """``layer_of`` on ``device`` (copied there once, not at every step)."""
        if self.layer_of.device != device:
            self.layer_of = self.layer_of.to(device)
        return self.layer_of

    def counts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n of each layer, n of each channel)`` as tensors beside the statistics, made
        again only when the samples change (a copy to a GPU each step would cost a wait)."""
        key = tuple(self.samples)
        if self._counts is None or self._counts[0] != key:
            ref = self.layers[0].running_mean
            per_layer = torch.tensor(key, dtype=ref.dtype).to(ref.device)
            self._counts = (key, per_layer, per_layer[self._index(ref.device)])
        return self._counts[1], self._counts[2]

    @torch.no_grad()
    def contribution(self) -> torch.Tensor:
        if not self.layers:
            return torch.zeros(0)
        per_layer, per_channel = self.counts()
        d = torch.cat(self._means()) - self.centre
        v = torch.cat(self._vars())
        return torch.cat([per_layer, per_channel * d, per_channel * (v + d * d)])

    @torch.no_grad()
    def apply(self, summed: torch.Tensor) -> None:
        if not self.layers:
            return
        n, c = len(self.layers), len(self.centre)
        total = summed[:n][self._index(summed.device)]
        mean_d = summed[n : n + c] / total
        second = summed[n + c : n + 2 * c] / total
        mean = self.centre + mean_d
        var = (second - mean_d * mean_d).clamp_min_(0)
        torch._foreach_copy_(self._means(), list(mean.split(self.sizes)))
        torch._foreach_copy_(self._vars(), list(var.split(self.sizes)))
        self.centre = mean
