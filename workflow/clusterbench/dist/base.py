"""The distributed-runtime interface, and what both backends share.

A :class:`Runtime` knows who this rank is (:class:`Identity`), offers the few collectives the
trainer needs (allreduce, broadcast, gather of small objects) and turns a model and optimiser
into a data-parallel pair with :meth:`Runtime.wrap`:

* gradients are averaged over the workers once per step, in one fused collective;
* BatchNorm follows the run's ``bn`` mode (:mod:`clusterbench.syncbn`): ``sync`` layers are
  converted before training by :meth:`Runtime.prepare_model`; ``aggregate`` combines the
  running statistics after every optimiser step in one collective;
* ``optimizer.step()`` of the returned optimiser does all of it: the training loop is the same
  for every backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from clusterbench.syncbn import BN_MODES, RunningStatsAggregator, convert_batchnorm


@dataclass(frozen=True)
class Identity:
    """Where this rank sits: in the world, on its node, and among the nodes."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


class DistributedOptimizer:
    """An optimiser whose ``step()`` first makes the gradients (and, with ``bn: aggregate``,
    the BatchNorm running statistics) the same on every worker, then steps.

    Everything else (``param_groups``, ``state_dict``, ``zero_grad`` ...) is the wrapped
    optimiser's, so checkpoints hold a plain optimiser state under every backend.
    """

    def __init__(self, inner: torch.optim.Optimizer) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self) -> None:
        raise NotImplementedError


def flat_grads(params: list[nn.Parameter]) -> Iterator[torch.Tensor]:
    """Every parameter's gradient, flattened; a missing one is created as zeros (every rank
    must contribute the same layout)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        yield p.grad.reshape(-1)


def unflatten_into(flat: torch.Tensor, params: list[nn.Parameter]) -> int:
    """Copy ``flat``'s leading values back into the gradients; returns how many were used."""
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n
    return offset


class Runtime(ABC):
    """One backend's collectives and data-parallel wrapping (see the module docstring)."""

    name: ClassVar[str]

    def __init__(self, identity: Identity, device_type: str) -> None:
        self.identity = identity
        self.device_type = device_type

    # -- start / stop ---------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def start(cls, device_type: str) -> Runtime:
        """Initialise the backend in this process (a world of one without a launcher)."""

    @abstractmethod
    def shutdown(self) -> None:
        """Leave the world; pending collectives of the other ranks then fail, not hang."""

    def finish(self) -> None:
        """Leave the world together after a success: no rank tears down while another still
        talks to it (Gloo can abort a rank whose peer closed its pairs mid-teardown)."""
        try:
            self.allreduce_sum(torch.zeros(1, device=self.device_type), name="finish")
        finally:
            self.shutdown()

    # -- identity -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.identity.rank

    @property
    def size(self) -> int:
        return self.identity.size

    @property
    def local_rank(self) -> int:
        return self.identity.local_rank

    @property
    def local_size(self) -> int:
        return self.identity.local_size

    # -- collectives ----------------------------------------------------------------------
    # In a world of one rank a collective has nothing to exchange: it is answered here, without
    # the backend (whose call would still cost a round trip, e.g. a Horovod background cycle:
    # per epoch, a 1-worker run would pay for collectives a hand-written loop does not have).
    # The backends implement the underscored methods.
    def allreduce_sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """The element-wise sum over all ranks (a new tensor; not differentiable)."""
        if self.size == 1:
            return tensor.detach().clone()
        return self._allreduce_sum(tensor, name)

    def allreduce_sum_autograd(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """As :meth:`allreduce_sum`, differentiable: the backward is a sum of the gradients."""
        if self.size == 1:
            return tensor.clone()
        return self._allreduce_sum_autograd(tensor, name)

    def broadcast_tensors_(self, tensors: Mapping[str, torch.Tensor], root: int = 0) -> None:
        """Overwrite ``tensors`` in place with rank ``root``'s values."""
        if self.size > 1:
            self._broadcast_tensors_(tensors, root)

    def broadcast_object(self, obj: Any, root: int = 0, name: str = "object") -> Any:
        """Rank ``root``'s picklable ``obj`` on every rank."""
        return obj if self.size == 1 else self._broadcast_object(obj, root, name)

    def allgather_object(self, obj: Any, name: str = "gather") -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        return [obj] if self.size == 1 else self._allgather_object(obj, name)

    @abstractmethod
    def _allreduce_sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor: ...

    @abstractmethod
    def _allreduce_sum_autograd(self, tensor: torch.Tensor, name: str) -> torch.Tensor: ...

    @abstractmethod
    def _broadcast_tensors_(self, tensors: Mapping[str, torch.Tensor], root: int) -> None: ...

    @abstractmethod
    def _broadcast_object(self, obj: Any, root: int, name: str) -> Any: ...

    @abstractmethod
    def _allgather_object(self, obj: Any, name: str) -> list[Any]: ...

    # -- model and optimiser --------------------------------------------------------------
    @abstractmethod
    def sync_batchnorm(self, device: torch.device) -> Callable[[nn.BatchNorm2d], nn.BatchNorm2d]:
        """A factory making this backend's synchronised BatchNorm for ``device``."""

    def prepare_model(self, model: nn.Module, bn: str, device: torch.device) -> nn.Module:
        """``model`` with its BatchNorm layers as the ``bn`` mode needs them (before ``wrap``)."""
        if bn not in BN_MODES:
            raise ValueError(f"unknown bn mode {bn!r} (choose from: {', '.join(BN_MODES)})")
        if bn == "sync" and self.size > 1:
            model = convert_batchnorm(model, self.sync_batchnorm(device))
        return model

    def broadcast_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Rank 0's weights, buffers and optimiser state on every rank."""
        self.broadcast_tensors_(model.state_dict())
        state = self.broadcast_object(
            optimizer.state_dict() if self.rank == 0 else None, name="optimizer.state"
        )
        if self.rank != 0:
            optimizer.load_state_dict(state)

    @abstractmethod
    def wrap(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, bn: str
    ) -> tuple[nn.Module, DistributedOptimizer]:
        """``(module to call in training, optimiser to step)`` for data-parallel training.

        Call after :meth:`broadcast_state`: the ranks must start equal. The returned module
        shares its parameters and buffers with ``model`` (save ``model``, not the wrapper).
        """

    def aggregator(self, model: nn.Module, bn: str) -> RunningStatsAggregator | None:
        """The running-statistics aggregator for ``bn: aggregate`` with more than one rank."""
        if bn != "aggregate" or self.size == 1:
            return None
        agg = RunningStatsAggregator(model)
        return agg if agg.layers else None


def env_int(env: Mapping[str, str], *names: str, default: int | None = None) -> int:
    """The first of ``names`` set in ``env``, as an int (``default`` when none is set)."""
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"${name} must be an integer, got {value!r}") from None
    if default is None:
        raise ValueError(
            f"none of ${', $'.join(names)} is set: start the ranks with clusterbench-launch"
        )
    return default
