"""The distributed backends: one small interface, :class:`Runtime`, and one plugin module each.

The training loop talks only to :class:`Runtime`: rank and size, allreduce, broadcast, wrapping
the model and optimiser, BatchNorm across workers. It never imports Horovod or
``torch.distributed`` itself and has no backend branches.

========== ============================================ =========================================
backend    module                                       collectives
========== ============================================ =========================================
horovod    :mod:`clusterbench.backends.horovod`         Horovod (Gloo on CPU, NCCL on GPU);
                                                        elastic (:class:`ElasticRuntime`)
ddp        :mod:`clusterbench.backends.ddp`             ``torch.distributed`` + DDP (gloo / nccl)
========== ============================================ =========================================

A backend is a module of this package (:mod:`clusterbench.core.registry`) defining
``RUNTIME``, its :class:`Runtime` class (with the comm stage's collectives: ``COLLECTIVES``);
the config's choices of ``backend`` are this package's modules. Adding a backend is adding
that one module.

A :class:`Runtime` knows who this rank is (:class:`Identity`), offers the few collectives the
trainer needs (allreduce, broadcast, gather of small objects) and turns a model and optimiser
into a data-parallel pair with :meth:`Runtime.wrap`:

* gradients are averaged over the workers once per step;
* BatchNorm follows the run's ``bn`` mode, a plugin of :mod:`clusterbench.bn`: the mode
  prepares the model before training (``sync`` converts its layers) and may give an
  aggregator that the optimiser's step feeds (``aggregate``: running statistics combined in
  the step's collective);
* ``optimizer.step()`` of the returned optimiser does all of it: the training loop is the same
  for every backend.

A backend that can change its world while it trains (Horovod elastic) also implements
:class:`ElasticRuntime`: the training loop (:mod:`clusterbench.training.loop`) gets its commit
and reset hooks from it, and nothing else in the loop differs.

Nothing here, and no backend module, imports torch or the backend's library at import time
(the config check asks ``RUNTIME`` whether it is elastic while the Snakefile is parsed): they
are imported when the runtime starts or a method needs them.

Both backends are started by ``clusterbench.launch``, which gives every rank the Horovod
variables (``HOROVOD_RANK`` ...) *and* the ``torch.distributed`` ones (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``). A single process started without a launcher is a world of one under either
backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from clusterbench.core.registry import Registry

if TYPE_CHECKING:
    import torch
    from torch import nn

    from clusterbench.bn._blocks import RunningStatsAggregator


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

    #: How many gradient buffers a step allreduces (None: the backend does not say).
    buffers: int | None = None

    def __init__(self, inner: torch.optim.Optimizer) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def synchronize(self) -> None:
        """Make this step's gradients (and BN statistics) equal on every worker. A backend
        that already did it during backward (DDP) waits here for nothing."""

    def gradients_ready(self) -> Any:
        """When the last gradient of this step was ready, where the backend communicates while
        backward still computes (a host time on the CPU, a CUDA event on a GPU); None where it
        communicates after backward (:mod:`clusterbench.training.step_times`)."""
        return None

    def step(self) -> None:
        self.synchronize()
        self.inner.step()


def contiguous_state(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors as a backend's broadcast takes them: Horovod refuses any that is not
    contiguous (a channels-last convolution's weight), so such a one is given as a contiguous
    copy, to be copied back with :func:`copy_back`."""
    return {k: t if t.is_contiguous() else t.contiguous() for k, t in tensors.items()}


def copy_back(received: Mapping[str, torch.Tensor], tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy the broadcast's contiguous copies back into the tensors that were not
    contiguous (see :func:`contiguous_state`)."""
    import torch

    with torch.no_grad():
        for key, tensor in tensors.items():
            if received[key] is not tensor:
                tensor.copy_(received[key])


class Collectives:
    """One backend's collectives as the comm stage (:mod:`clusterbench.comm`) times them, on
    buffers of one operation and size: :meth:`prepare` makes the buffers and returns the call
    doing one operation (``allreduce``, ``allgather`` or ``broadcast``)."""

    library = "gloo"

    def __init__(self, rt: Any, device: Any) -> None:
        self.rt, self.device = rt, device

    def buffer(self, count: int) -> Any:
        import torch

        return torch.zeros(count, dtype=torch.float32, device=self.device)

    def prepare(self, op: str, count: int, name: str) -> Callable[[], Any]:
        raise NotImplementedError


class Runtime(ABC):
    """One backend's collectives and data-parallel wrapping (see the module docstring)."""

    name: ClassVar[str]
    #: The run's ``grad_compression`` choices this backend's step can apply to the gradients'
    #: allreduce (``none``: full precision).
    GRAD_COMPRESSIONS: ClassVar[tuple[str, ...]] = ("none",)
    #: The comm stage's collectives of this backend (None: it has none to time).
    COLLECTIVES: ClassVar[type[Collectives] | None] = None

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
        import torch

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
        """Overwrite ``tensors`` in place with rank ``root``'s values (any memory format)."""
        if self.size > 1:
            dense = contiguous_state(tensors)
            self._broadcast_tensors_(dense, root)
            copy_back(dense, tensors)

    def broadcast_object(self, obj: Any, root: int = 0, name: str = "object") -> Any:
        """Rank ``root``'s picklable ``obj`` on every rank."""
        return obj if self.size == 1 else self._broadcast_object(obj, root, name)

    def allgather_object(self, obj: Any, name: str = "gather") -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        return [obj] if self.size == 1 else self._allgather_object(obj, name)

    def any_rank(self, flag: bool, name: str) -> bool:
        """Whether ``flag`` is true on any rank (a collective: every rank calls it)."""
        import torch

        local = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64)
        return float(self.allreduce_sum(local, name=name)) > 0

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
        from clusterbench import bn as bn_modes

        return bn_modes.mode(bn).prepare(model, self, device)

    def broadcast_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Rank 0's weights, buffers and optimiser state on every rank."""
        self.broadcast_tensors_(model.state_dict())
        state = self.broadcast_object(
            optimizer.state_dict() if self.rank == 0 else None, name="optimizer.state"
        )
        if self.rank != 0:
            optimizer.load_state_dict(state)

    def choose_grad_allreduce(
        self, asked: str, model: nn.Module, device_type: str
    ) -> tuple[str, str]:
        """``(mode, why)`` for a run's ``grad_allreduce`` (``asked``: auto, one or buckets):
        ``one`` buffer allreduced after backward, or ``buckets`` allreduced during backward;
        ``none`` in a world of one rank (nothing is exchanged). ``auto`` is the backend's
        :meth:`auto_grad_allreduce`, given the bytes of ``model``'s trainable gradients."""
        if self.size == 1:
            return "none", "1 worker: no gradient is exchanged"
        if asked != "auto":
            return asked, f"grad_allreduce: {asked}"
        grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        return self.auto_grad_allreduce(grads, device_type)

    def auto_grad_allreduce(self, grad_bytes: int, device_type: str) -> tuple[str, str]:
        """``grad_allreduce: auto``'s choice for gradients of ``grad_bytes`` on ``device_type``
        (cpu / cuda), with why: buckets during backward, as DDP and ``hvd.DistributedOptimizer``
        do, unless the backend measured otherwise."""
        return "buckets", "auto: buckets during backward"

    @abstractmethod
    def wrap(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        bn: str,
        grad_compression: str = "none",
        timed: bool = False,
        grad_allreduce: str = "buckets",
        unused: bool = False,
    ) -> tuple[nn.Module, DistributedOptimizer]:
        """``(module to call in training, optimiser to step)`` for data-parallel training.

        Call after :meth:`broadcast_state`: the ranks must start equal. The returned module
        shares its parameters and buffers with ``model`` (save ``model``, not the wrapper).
        ``grad_compression`` (one of :attr:`GRAD_COMPRESSIONS`): the 16-bit type the gradients
        travel in; the BatchNorm statistics always travel exact. ``timed``: the training times
        its steps (:mod:`clusterbench.training.step_times`), so the optimiser's
        :meth:`DistributedOptimizer.gradients_ready` must tell when backward's compute ended
        where the backend communicates during backward. ``grad_allreduce`` (from
        :meth:`choose_grad_allreduce`): ``one`` buffer after backward or ``buckets`` during it.
        ``unused``: some trainable parameters get no gradient in a step
        (:data:`clusterbench.models.custom.UNUSED`): a backend that waits for every gradient
        must be told (DDP's ``find_unused_parameters``).
        """

    def aggregator(self, model: nn.Module, bn: str) -> RunningStatsAggregator | None:
        """What the optimiser's step feeds for the ``bn`` mode (None: nothing)."""
        from clusterbench import bn as bn_modes

        return None if self.size == 1 else bn_modes.mode(bn).aggregator(model)


class ElasticRuntime(Runtime):
    """A runtime whose world may change while it trains: ranks fail and leave, others join.

    The training loop runs its body under :meth:`elastic_run` with its state in
    :meth:`elastic_state`; it commits that state every few steps, and after a reset
    (:meth:`elastic_errors` interrupted a rank) the body runs again from the last commit in the
    new world, after :meth:`refresh`.
    """

    @abstractmethod
    def refresh(self) -> None:
        """Read rank and size again after a reset of the world."""

    @abstractmethod
    def elastic_state(self, model: nn.Module, optimizer: Any, **values: Any) -> Any:
        """An object holding ``model``, ``optimizer`` and ``values`` as attributes, with
        ``commit()``: restored to the last commit after a failure, sent from rank 0 to every
        rank at each (re)start."""

    @abstractmethod
    def elastic_run(self, func: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``func(state)``, run again after each reset of the world."""

    @abstractmethod
    def elastic_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions with which the backend interrupts a rank for a reset."""

    @staticmethod
    def reset_reason(exc: BaseException) -> str:
        """Why the backend interrupted the rank: a rank failed, or the hosts changed."""
        return "a rank failed"


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


#: The backends: the schema's choices of a run's ``backend``.
BACKENDS = Registry("clusterbench.backends", "backend")


def runtime_class(backend: str) -> type[Runtime]:
    """The :class:`Runtime` class of ``backend``."""
    return BACKENDS.get(backend, "RUNTIME")


def is_elastic(backend: str) -> bool:
    """Whether ``backend`` can train while its world changes (an :class:`ElasticRuntime`)."""
    return issubclass(runtime_class(backend), ElasticRuntime)


def grad_compression_problems(run: Mapping[str, Any], where: str = "run") -> list[str]:
    """A ``grad_compression`` the run's backend cannot apply, named (before any job)."""
    wanted = run.get("grad_compression") or "none"
    if run["backend"] not in BACKENDS.names():
        return []  # the schema names an unknown backend
    able = runtime_class(run["backend"]).GRAD_COMPRESSIONS
    if wanted in able:
        return []
    others = [b for b in BACKENDS.names() if wanted in runtime_class(b).GRAD_COMPRESSIONS]
    return [
        f"{where}.grad_compression: backend {run['backend']!r} cannot compress gradients to "
        f"{wanted} (it takes {', '.join(able)})"
        + (f": use backend {' or '.join(others)} for {wanted}" if others else "")
    ]


def init(backend: str, device_type: str) -> Runtime:
    """Start the runtime of ``backend`` for ranks computing on ``device_type`` (cpu / cuda)."""
    return runtime_class(backend).start(device_type)
