"""``backend: horovod``: Horovod collectives (Gloo on the CPU, NCCL on GPUs when built with it).

A step's gradients are views of flat buffers (:mod:`clusterbench.backends._grads`), averaged by
:class:`GradAllreduceOptimizer` in one of two ways (the run's ``grad_allreduce``):

``one``      ONE ``hvd.allreduce_`` per step, after backward, of every gradient plus (``bn:
             aggregate``) the BatchNorm running-statistics contribution. With one request per
             step, Horovod's fusion threshold (``HOROVOD_FUSION_THRESHOLD``, default 64 MiB)
             never splits or delays it, and its response cache makes the negotiation a
             bit-vector exchange; but the whole allreduce waits for backward's end.
``buckets``  a ``hvd.allreduce_async_`` per bucket of about 25 MiB (the last layers' first),
             from a hook on every parameter as soon as backward has produced the bucket's last
             gradient: the allreduce overlaps the rest of backward, as DDP's buckets and
             ``hvd.DistributedOptimizer``'s per-parameter hooks do (ours hand Horovod a few
             buckets, not a request per tensor, so how many land in one fusion cycle does not
             depend on timing).

``auto`` (:meth:`HorovodRuntime.auto_grad_allreduce`): one buffer on the CPU, buckets on
GPUs. On the 2-core reference CPU (2 ranks, steps of both kinds interleaved in one job)
buckets were never faster: level for ResNet-20 (1 MiB of gradients: one bucket anyway) and
ResNet-18 (43 MiB: 1.015 and 0.995 of one buffer's speed), 0.96 for ResNet-50 (90 MiB); the
ranks' compute and the collective's copies and sums share the same cores, so there is nothing
to overlap with. On GPUs backward runs on the device while the collective runs on the network,
as DDP's buckets and ``hvd.DistributedOptimizer`` overlap them; that side of the rule is not
measured on the reference machine (it has no GPU): ``make gpu-check`` trains both ways on every
GPU of a machine and prints each one's exposed communication (benchmarks/README.md, "Gradients
in one buffer or in buckets").

Horovod's background cycle (``HOROVOD_CYCLE_TIME``, Horovod's default 1 ms): a request waits
for the next cycle to be negotiated, and *every* cycle, busy or idle, runs a small coordination
exchange. On CPUs the ranks' compute threads fill the cores, and each cycle's wake pre-empted
a rank's forward or backward. So :meth:`HorovodRuntime.wrap` (CPU, one buffer) makes those
threads quiet (:mod:`clusterbench.backends._background`): they run only where a core is idle,
which is when a rank waits for its allreduce. Then a short cycle no longer costs compute, and
CPU runs keep Horovod's own default, as GPU runs do. On the 2-core reference machine, 2 ranks,
ratios to plain DDP in the same round (3 interleaved rounds, medians; benchmarks/README.md,
"Horovod's background threads kept quiet"):

===============================  ===========================  =============================
                                 before: threads awake, 2 ms  quiet, 1 ms (Horovod default)
ResNet-20, CIFAR-like, bn agg.   0.845 (0.80-0.87)            0.944 (0.89-0.96)
small_cnn, digits, bn aggregate  1.005 (1.00-1.04)            1.22 (1.09-1.36)
ResNet-20, bn sync               0.384 (0.36-0.39)            0.471 (0.45-0.48)
===============================  ===========================  =============================

A value of ``HOROVOD_CYCLE_TIME`` in the environment always wins; ``CLUSTERBENCH_HOROVOD_QUIET=0``
keeps the threads awake (for nodes whose cores other work shares).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from clusterbench.backends import Collectives, DistributedOptimizer, ElasticRuntime, Identity
from clusterbench.backends._background import (
    BackgroundThreads,
    install_sleeping_wait,
    quiet_wanted,
)
from clusterbench.backends._grads import Bucket, GradBuckets, ReadyClock, bucket_mb

if TYPE_CHECKING:
    import torch
    from torch import nn

    from clusterbench.bn._blocks import RunningStatsAggregator

#: The optimiser each inner optimiser was last wrapped in (an elastic reset wraps it again).
_WRAPPED: weakref.WeakKeyDictionary[Any, GradAllreduceOptimizer] = weakref.WeakKeyDictionary()


class GradAllreduceOptimizer(DistributedOptimizer):
    """``step()``: the gradients averaged over the workers (with ``bn: aggregate``, the
    BatchNorm running-statistics contribution too), then the optimiser's step.

    The gradients are views of flat buffers (:class:`clusterbench.backends._grads.GradBuckets`):
    with ``grad_allreduce: one`` ONE buffer, allreduced after backward (named ``step``); with
    ``buckets`` several, each allreduced from a hook as soon as backward has produced its last
    gradient (named ``grad.<i>``), while backward computes on. The BatchNorm contribution rides
    at the end of the last buffer (the first layers', ready last). :meth:`zero_grad` zeroes the
    buffers (the views stay). With ``grad_compression: fp16`` each buffer's gradients travel as
    float16 (``hvd.Compression.fp16``, as ``hvd.DistributedOptimizer(...,
    compression=hvd.Compression.fp16)`` sends each tensor) and the BatchNorm contribution, which
    must stay exact (sums of sample counts and second moments), in its own float32 allreduce.
    """

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        runtime: HorovodRuntime,
        aggregator: RunningStatsAggregator | None,
        grad_compression: str = "none",
        mode: str = "one",
        clock: ReadyClock | None = None,
    ) -> None:
        super().__init__(inner)
        self.runtime = runtime
        self.aggregator = aggregator
        self.compression = compressor(runtime.hvd, grad_compression)
        self.mode = mode
        self.clock = clock
        params = [p for group in inner.param_groups for p in group["params"]]
        tail = len(aggregator) if aggregator is not None and self.compression is None else 0
        cap = bucket_mb(os.environ) if mode == "buckets" else None
        self.buckets = GradBuckets(params, cap, tail)
        self.buffers = len(self.buckets)
        self._pending: list[tuple[Bucket, Any, Any, Any]] = []
        if mode == "buckets":
            self.buckets.on_ready(self._launch_ready)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the gradients, which stay views of the buffers (``set_to_none`` is ignored)."""
        self.buckets.zero()
        if self.clock is not None:
            self.clock.last = None

    def gradients_ready(self) -> Any:
        return None if self.clock is None else self.clock.last

    def _launch_ready(self, i: int) -> None:
        self.launch(i)
        if self.clock is not None:
            self.clock.mark()

    def launch(self, i: int) -> None:
        """Hand bucket ``i`` to Horovod (averaged, in place or through its 16-bit copy)."""
        hvd = self.runtime.hvd
        bucket = self.buckets.buckets[i]
        name = "step" if self.mode == "one" else f"grad.{i}"
        if bucket.tail.numel():
            bucket.tail.copy_(self.aggregator.contribution())
        if self.compression is None:
            handle = hvd.allreduce_async_(bucket.buffer, op=hvd.Average, name=name)
            self._pending.append((bucket, handle, None, None))
        else:
            wire, context = self.compression.compress(bucket.grads)
            handle = hvd.allreduce_async_(wire, op=hvd.Average, name=name)
            self._pending.append((bucket, handle, wire, context))
        bucket.handle = handle

    def synchronize(self) -> None:
        hvd = self.runtime.hvd
        for i, bucket in enumerate(self.buckets.buckets):
            if bucket.handle is None:  # one buffer, or a bucket with a gradient never made
                bucket.attach()
                self.launch(i)
        stats = None
        if self.aggregator is not None and self.compression is not None:
            stats = self.aggregator.contribution()
            stats_handle = hvd.allreduce_async_(stats, op=hvd.Average, name="step.bn")
        for bucket, handle, wire, context in self._pending:
            hvd.synchronize(handle)
            if wire is not None:
                bucket.grads.copy_(self.compression.decompress(wire, context))
            bucket.handle = None
            bucket.pending = len(bucket.params)
        self._pending = []
        if self.aggregator is not None:
            if stats is not None:
                hvd.synchronize(stats_handle)
            self.aggregator.apply(stats if stats is not None else self.buckets.last.tail)


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

    def __init__(
        self,
        identity: Identity,
        device_type: str,
        hvd: Any,
        background: BackgroundThreads | None = None,
    ) -> None:
        super().__init__(identity, device_type)
        self.hvd = hvd
        #: The threads ``hvd.init()`` started (:mod:`clusterbench.backends._background`).
        self.background = background or BackgroundThreads(frozenset())
        self._autograd = _autograd_allreduce(hvd)

    @classmethod
    def start(cls, device_type: str) -> HorovodRuntime:
        import horovod.torch as hvd

        background = BackgroundThreads.started_by(hvd.init)
        return cls(_identity(hvd), device_type, hvd, background)

    # -- Horovod elastic (ElasticRuntime) ----------------------------------------------------
    def refresh(self) -> None:
        """Read rank and size again: after an elastic reset (``hvd.init`` in a new world)."""
        self.identity = _identity(self.hvd)

    def _reset(self) -> None:
        """Horovod elastic's reset (``hvd.shutdown()``, ``hvd.init()``), noting the threads
        the new ``hvd.init()`` started: :meth:`wrap`, called again, quiets them."""
        self.hvd.shutdown()
        self.background = BackgroundThreads.started_by(self.hvd.init)

    def elastic_state(self, model: nn.Module, optimizer: Any, **values: Any) -> Any:
        """``hvd.elastic.TorchState`` of ``model``, ``optimizer`` and ``values``: committed,
        restored after a failure, and sent from rank 0 to every rank at each (re)start. The
        model and optimiser are sent through this runtime (:func:`use_runtime_handlers`):
        Horovod's own handlers refuse a channels-last weight (not contiguous)."""
        use_runtime_handlers(self)
        return self.hvd.elastic.TorchState(model=model, optimizer=optimizer, **values)

    def elastic_run(self, func: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``hvd.elastic.run(func)``: ``func(state)`` again after each reset of the world (the
        reset being :meth:`_reset`, Horovod's own plus the note of its new threads)."""
        from horovod.common.elastic import run_fn

        return run_fn(func, self._reset)

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
    def auto_grad_allreduce(self, grad_bytes: int, device_type: str) -> tuple[str, str]:
        """One buffer on the CPU, buckets on GPUs (the module docstring)."""
        mib = grad_bytes / 2**20
        if device_type == "cuda":
            return "buckets", f"auto: {mib:.1f} MiB of gradients on GPUs: buckets during backward"
        return "one", f"auto: {mib:.1f} MiB of gradients on the CPU: one buffer after backward"

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
        grad_allreduce: str = "one",
        unused: bool = False,
    ) -> tuple[nn.Module, DistributedOptimizer]:
        # a parameter without a gradient is allreduced as zeros (its buffer's part; a bucket
        # that misses one is sent at the step): nothing waits for it, ``unused`` changes nothing
        previous = _WRAPPED.pop(optimizer, None)
        if previous is not None:  # wrapped again (an elastic reset): its hooks go
            previous.buckets.detach()
        compressor(self.hvd, grad_compression)  # refuses what Horovod cannot send
        if self.size == 1:
            return model, DistributedOptimizer(optimizer)
        aggregator = self.aggregator(model, bn)
        # buckets are sent during backward; $CLUSTERBENCH_HOROVOD_QUIET=0: a site's opt-out
        if grad_allreduce == "one" and self.device_type == "cpu" and quiet_wanted(os.environ):
            self.quiet_background()
        overlap = grad_allreduce == "buckets"
        clock = ReadyClock(self.device_type == "cuda") if timed and overlap else None
        wrapped = GradAllreduceOptimizer(
            optimizer, self, aggregator, grad_compression, grad_allreduce, clock
        )
        _WRAPPED[optimizer] = wrapped
        return model, wrapped

    def quiet_background(self) -> None:
        """Horovod's background threads only where a core is idle, and every wait for a
        Horovod handle asleep (:mod:`clusterbench.backends._background`): for CPU training
        with one gradient buffer, where nothing needs them while the ranks compute."""
        from horovod.torch import mpi_ops

        install_sleeping_wait(mpi_ops)
        self.background.quiet()


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
