"""``backend: horovod``: Horovod collectives (Gloo on the CPU, NCCL on GPUs when built with it).

One step costs ONE Horovod allreduce: every gradient, plus (``bn: aggregate``) the BatchNorm
running-statistics contribution, is packed into a single flat buffer and averaged with
``hvd.allreduce_`` (see :class:`FusedAllreduceOptimizer`). We fuse ourselves instead of relying
on ``hvd.DistributedOptimizer``'s per-parameter hooks plus Horovod's tensor fusion: those hooks
enqueue one request per parameter as backward produces them, and how many of them land in one
fusion cycle depends on timing, so a small model could cost several negotiated allreduces per
step. With one request per step, Horovod's fusion threshold (``HOROVOD_FUSION_THRESHOLD``,
default 64 MiB) never splits or delays it, and its response cache (default on) makes the
negotiation a bit-vector exchange.

The cost left is Horovod's background cycle (``HOROVOD_CYCLE_TIME``): a request waits for the
next cycle to be negotiated, and *every* cycle, busy or idle, runs a small coordination
collective. On CPUs the ranks' compute threads and these background threads share the cores, so
a short cycle costs throughput: on the 2-core reference machine 2 ranks trained the demo's
small CNN and a ResNet-20 (CIFAR-shaped) at these fractions of plain DDP (medians of 4-5
interleaved runs; benchmarks/README.md):

=====================  ======  ======  ======  ======
HOROVOD_CYCLE_TIME     1 ms    2 ms    3 ms    5 ms
small_cnn, digits      0.93    1.01    0.94    0.86
ResNet-20, CIFAR-like  ~0.85   0.95    0.91    0.96
=====================  ======  ======  ======  ======

So CPU runs default to :data:`CYCLE_TIME_MS` (2 ms); GPU runs keep Horovod's own default (1 ms),
where a step is shorter and cores are plenty. A value in the environment always wins.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from clusterbench.backends import (
    Collectives,
    DistributedOptimizer,
    ElasticRuntime,
    Identity,
    flat_grads,
    unflatten_into,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from clusterbench.bn._blocks import RunningStatsAggregator

#: Horovod background-cycle time (ms) of CPU runs unless HOROVOD_CYCLE_TIME is set (see above).
CYCLE_TIME_MS = "2"


class FusedAllreduceOptimizer(DistributedOptimizer):
    """``step()``: one averaged allreduce of [all gradients | BN contribution], then step.

    With ``grad_compression: fp16`` the gradients' flat buffer is cast to float16 for the
    allreduce and back (``hvd.Compression.fp16``, as ``hvd.DistributedOptimizer(...,
    compression=hvd.Compression.fp16)`` does per tensor), and the BatchNorm contribution, which
    must stay exact (sums of sample counts and second moments), goes in its own float32
    allreduce, started at the same time: both are negotiated in the same background cycle.
    """

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        runtime: HorovodRuntime,
        aggregator: RunningStatsAggregator | None,
        grad_compression: str = "none",
    ) -> None:
        super().__init__(inner)
        self.runtime = runtime
        self.aggregator = aggregator
        self.params = [p for group in inner.param_groups for p in group["params"]]
        self.compression = compressor(runtime.hvd, grad_compression)

    def synchronize(self) -> None:
        if self.runtime.size == 1:
            return
        import torch

        if self.compression is not None:
            return self.synchronize_compressed()
        parts = list(flat_grads(self.params))
        if self.aggregator is not None:
            parts.append(self.aggregator.contribution().to(parts[0]))
        flat = torch.cat(parts)
        self.runtime.hvd.allreduce_(flat, op=self.runtime.hvd.Average, name="step")
        used = unflatten_into(flat, self.params)
        if self.aggregator is not None:
            self.aggregator.apply(flat[used:])

    def synchronize_compressed(self) -> None:
        """The gradients compressed in one allreduce, the BN contribution exact in another."""
        import torch

        hvd = self.runtime.hvd
        grads = torch.cat(list(flat_grads(self.params)))
        wire, context = self.compression.compress(grads)
        handles = [hvd.allreduce_async_(wire, op=hvd.Average, name="step")]
        if self.aggregator is not None:
            stats = self.aggregator.contribution().to(grads)
            handles.append(hvd.allreduce_async_(stats, op=hvd.Average, name="step.bn"))
        for handle in handles:
            hvd.synchronize(handle)
        unflatten_into(self.compression.decompress(wire, context), self.params)
        if self.aggregator is not None:
            self.aggregator.apply(stats)


class HorovodCollectives(Collectives):
    """``hvd.allreduce_`` (a sum, in place), ``hvd.allgather``, ``hvd.broadcast_`` from rank
    0; each operation and size under its own name, as a training's tensors are (Horovod's
    response cache then negotiates each again in a bit)."""

    def __init__(self, rt: Any, device: Any) -> None:
        super().__init__(rt, device)
        hvd = rt.hvd
        if self.device.type == "cuda" and hvd.nccl_built():
            self.library = "nccl"

    def prepare(self, op: str, count: int, name: str) -> Callable[[], Any]:
        hvd, buf = self.rt.hvd, self.buffer(count)
        if op == "allreduce":
            return lambda: hvd.allreduce_(buf, op=hvd.Sum, name=name)
        if op == "allgather":
            return lambda: hvd.allgather(buf, name=name)
        return lambda: hvd.broadcast_(buf, root_rank=0, name=name)


class HorovodRuntime(ElasticRuntime):
    name = "horovod"
    #: Horovod 0.28.1's allreduce refuses bfloat16 tensors ("Tensor type
    #: torch.BFloat16Tensor is not supported"), under Gloo and NCCL alike: fp16 only.
    GRAD_COMPRESSIONS = ("none", "fp16")
    COLLECTIVES = HorovodCollectives

    def __init__(self, identity: Identity, device_type: str, hvd: Any) -> None:
        super().__init__(identity, device_type)
        self.hvd = hvd
        self._autograd = _autograd_allreduce(hvd)

    @classmethod
    def start(cls, device_type: str) -> HorovodRuntime:
        if device_type == "cpu":
            os.environ.setdefault("HOROVOD_CYCLE_TIME", CYCLE_TIME_MS)
        import horovod.torch as hvd

        hvd.init()
        return cls(_identity(hvd), device_type, hvd)

    # -- Horovod elastic (ElasticRuntime) ----------------------------------------------------
    def refresh(self) -> None:
        """Read rank and size again: after an elastic reset (``hvd.init`` in a new world)."""
        self.identity = _identity(self.hvd)

    def elastic_state(self, model: nn.Module, optimizer: Any, **values: Any) -> Any:
        """``hvd.elastic.TorchState`` of ``model``, ``optimizer`` and ``values``: committed,
        restored after a failure, and sent from rank 0 to every rank at each (re)start. The
        model and optimiser are sent through this runtime (:func:`use_runtime_handlers`):
        Horovod's own handlers refuse a channels-last weight (not contiguous)."""
        use_runtime_handlers(self)
        return self.hvd.elastic.TorchState(model=model, optimizer=optimizer, **values)

    def elastic_run(self, func: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``hvd.elastic.run(func)``: ``func(state)`` again after each reset of the world."""
        return self.hvd.elastic.run(func)

    def elastic_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions with which Horovod interrupts a rank for an elastic reset."""
        from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

        return (HorovodInternalError, HostsUpdatedInterrupt)

    @staticmethod
    def reset_reason(exc: BaseException) -> str:
        return "hosts changed" if type(exc).__name__ == "HostsUpdatedInterrupt" else "a rank failed"

    # -- collectives ----------------------------------------------------------------------
    def shutdown(self) -> None:
        self.hvd.shutdown()

    def _allreduce_sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        return self.hvd.allreduce(tensor, op=self.hvd.Sum, name=name)

    def _allreduce_sum_autograd(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        return self._autograd.apply(tensor, name)

    def _broadcast_tensors_(self, tensors: Mapping[str, torch.Tensor], root: int) -> None:
        self.hvd.broadcast_parameters(dict(tensors), root_rank=root)

    def _broadcast_object(self, obj: Any, root: int, name: str) -> Any:
        return self.hvd.broadcast_object(obj, root_rank=root, name=name)

    def _allgather_object(self, obj: Any, name: str) -> list[Any]:
        return list(self.hvd.allgather_object(obj, name=name))

    # -- model and optimiser --------------------------------------------------------------
    def sync_batchnorm(self, device: torch.device) -> Callable[[nn.BatchNorm2d], nn.BatchNorm2d]:
        import torch

        from clusterbench.bn._blocks import batchnorm_factory, cpu_sync_factory

        if torch.device(device).type != "cuda":
            return cpu_sync_factory(self)  # hvd.SyncBatchNorm refuses CPU tensors
        return batchnorm_factory(self.hvd.SyncBatchNorm)

    def wrap(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        bn: str,
        grad_compression: str = "none",
        timed: bool = False,
    ) -> tuple[nn.Module, DistributedOptimizer]:
        aggregator = self.aggregator(model, bn)
        return model, FusedAllreduceOptimizer(optimizer, self, aggregator, grad_compression)


#: The backend's runtime (clusterbench.backends).
RUNTIME = HorovodRuntime


def use_runtime_handlers(runtime: HorovodRuntime) -> None:
    """Make Horovod elastic send a model's weights and an optimiser's state through
    ``runtime`` (its broadcasts take any memory format), instead of ``broadcast_parameters``
    and ``broadcast_optimizer_state``, which refuse tensors that are not contiguous."""
    from horovod.torch.elastic import state as elastic
    from torch import nn, optim

    # A sync comes right after a reset re-formed the world: the runtime reads it first.
    class ModelHandler(elastic.ModelStateHandler):
        def sync(self) -> None:
            runtime.refresh()
            runtime.broadcast_tensors_(self.value.state_dict())

    class OptimizerHandler(elastic.OptimizerStateHandler):
        def sync(self) -> None:
            runtime.refresh()
            sent = runtime.broadcast_object(
                self.value.state_dict() if runtime.rank == 0 else None, name="elastic.optimizer"
            )
            if runtime.rank != 0:
                self.value.load_state_dict(sent)

    others = [
        (kind, handler)
        for kind, handler in elastic.get_handler_registry()
        if kind not in (nn.Module, optim.Optimizer)
    ]
    elastic.set_handler_registry(
        [(nn.Module, ModelHandler), (optim.Optimizer, OptimizerHandler), *others]
    )


def compressor(hvd: Any, grad_compression: str) -> Any:
    """Horovod's compressor for ``grad_compression`` (None: no compression)."""
    if grad_compression == "none":
        return None
    if grad_compression == "fp16":
        return hvd.Compression.fp16
    raise ValueError(
        f"grad_compression {grad_compression!r}: the horovod backend compresses to "
        f"{' or '.join(HorovodRuntime.GRAD_COMPRESSIONS)} (Horovod's allreduce takes no "
        "bfloat16 tensors)"
    )


def _identity(hvd: Any) -> Identity:
    return Identity(
        rank=hvd.rank(),
        size=hvd.size(),
        local_rank=hvd.local_rank(),
        local_size=hvd.local_size(),
        cross_rank=hvd.cross_rank(),
        cross_size=hvd.cross_size(),
    )


def _autograd_allreduce(hvd: Any) -> type:
    import torch

    class AllreduceSum(torch.autograd.Function):
        """Sum over all workers, differentiable (backward: sum of the gradients), with stable
        names (``hvd.allreduce``'s own backward is anonymous, defeating the response cache)."""

        @staticmethod
        def forward(ctx: Any, tensor: torch.Tensor, name: str) -> torch.Tensor:
            ctx.name = name
            return hvd.allreduce(tensor, op=hvd.Sum, name=name)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
            return hvd.allreduce(grad, op=hvd.Sum, name=f"{ctx.name}.grad"), None

    return AllreduceSum
