"""``backend: ddp``: ``torch.distributed`` with DistributedDataParallel (gloo on the CPU, nccl on
GPUs).

The ranks find each other through the variables ``clusterbench.launch`` sets from the
scheduler's node list (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``): no torchrun, no ssh.
Without them the process is a world of one.

DDP averages the gradients during backward, in buckets (one bucket for a small model;
``grad_allreduce: one``: a single bucket, allreduced when backward has produced every
gradient); its per-forward buffer broadcast is switched off (``broadcast_buffers=False``)
because BatchNorm statistics follow the run's ``bn`` mode instead: ``aggregate`` adds one
``all_reduce`` of the running-statistics contribution, started by the communication hook right
behind the step's last bucket (:func:`bucket_hook`) and waited for before the optimiser step,
so that it adds no round trip after backward.

``grad_compression: fp16 | bf16`` uses PyTorch's own communication hooks
(``ddp_comm_hooks.default_hooks.fp16_compress_hook`` / ``bf16_compress_hook``): each gradient
bucket is cast to the 16-bit type for its allreduce, averaged, and cast back. The BatchNorm
contribution's ``all_reduce`` is no DDP bucket: it stays float32, exact. When steps are timed
(:mod:`clusterbench.training.step_times`) or BatchNorm statistics are aggregated, clusterbench's
hook wraps the compress hook (or DDP's allreduce): each bucket's start is noted, then it is
compressed and exchanged.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from clusterbench.backends import Collectives, DistributedOptimizer, Identity, Runtime, env_int
from clusterbench.backends._grads import ReadyClock, env_mb

if TYPE_CHECKING:
    import torch
    from torch import nn

    from clusterbench.bn._blocks import RunningStatsAggregator

#: The tensors of the last collectives this module handed to Gloo (one per Gloo worker thread).
#: A Gloo worker lets go of a collective's tensors a moment after the collective has completed;
#: if by then Python no longer holds them, letting go needs the GIL, and a worker that asks for
#: it while the interpreter is finalizing is ended by Python, in a destructor: std::terminate,
#: the rank aborts (exit 134) after a successful training. Held here, they are released without
#: Python; :meth:`TorchRuntime.shutdown` waits for Gloo to let go of them before the rank exits.
_HANDED: deque[torch.Tensor] = deque(maxlen=2)
#: How long shutdown waits for Gloo to let go (it takes microseconds to milliseconds).
RELEASE_TIMEOUT_S = 5.0
#: The environment variable that sets DDP's bucket size (MiB; PyTorch's default, 25, unset):
#: a site's tuning knob, no run setting (it changes no result). Measured: benchmarks/README.md.
BUCKET_ENV = "CLUSTERBENCH_DDP_BUCKET_MB"


def bucket_cap_mb(env: Mapping[str, str]) -> float | None:
    """DDP's ``bucket_cap_mb`` from :data:`BUCKET_ENV` (None: PyTorch's default)."""
    return env_mb(env, BUCKET_ENV)


def all_reduce(tensor: torch.Tensor) -> None:
    """``dist.all_reduce`` (a sum, in place), its tensor kept in :data:`_HANDED`."""
    import torch.distributed as dist

    dist.all_reduce(tensor)
    _HANDED.append(tensor)


def released(tensors: Iterable[torch.Tensor], timeout: float) -> bool:
    """Wait until no one but Python holds ``tensors`` (a collective's worker has let go);
    False if one is still held after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(t._use_count() > 1 for t in tensors):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@cache
def allreduce_sum_function() -> type:
    """Sum over the ranks, differentiable: the gradient is the sum of the ranks' gradients.
    (torch.distributed.nn.functional.all_reduce does the same and is deprecated.)"""
    import torch

    class AllreduceSum(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
            out = tensor.clone(memory_format=torch.contiguous_format)
            all_reduce(out)
            return out

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return AllreduceSum.apply(grad)

    return AllreduceSum


class HookState:
    """The state of the DDP communication hook clusterbench registers (:func:`bucket_hook`):
    the clock noting when each bucket was handed to its collective (None: steps are not
    timed), the hook that exchanges it (``inner``: ``grad_compression``'s compress hook; None:
    DDP's allreduce) and, with ``bn: aggregate``, the BatchNorm contribution's allreduce started
    with the step's last bucket (``pending``: its buffer and work, until the step's
    synchronize)."""

    def __init__(
        self,
        clock: ReadyClock | None = None,
        inner: Callable[..., Any] | None = None,
        aggregator: RunningStatsAggregator | None = None,
    ) -> None:
        self.clock, self.inner, self.aggregator = clock, inner, aggregator
        self.pending: tuple[torch.Tensor, Any] | None = None


def bucket_hook(state, bucket):  # noqa: ANN001, ANN201 - DDP checks the annotations
    """The bucket's exchange: DDP's own allreduce (``default_hooks.allreduce_hook``), or the
    compress hook of ``grad_compression`` (the bucket cast to 16 bits, averaged, cast back);
    its start noted where steps are timed (the timing wraps the compression). With the step's
    last bucket the BatchNorm contribution's allreduce starts too, float32, exact: it runs
    behind the bucket's instead of after backward."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if state.clock is not None:
        state.clock.mark()
    exchange = default_hooks.allreduce_hook if state.inner is None else state.inner
    future = exchange(None, bucket)  # None: the default process group
    if state.aggregator is not None and bucket.is_last():
        stats = state.aggregator.contribution()
        state.pending = (stats, dist.all_reduce(stats, async_op=True))
        _HANDED.append(stats)
    return future


class AggregatingOptimizer(DistributedOptimizer):
    """``step()``: DDP averaged the gradients during backward already; with ``bn: aggregate``
    the BatchNorm running statistics' allreduce (started with the last bucket, else now) is
    waited for and applied, then the optimiser steps."""

    def __init__(
        self, inner: torch.optim.Optimizer, aggregator: RunningStatsAggregator | None, hook: Any
    ) -> None:
        super().__init__(inner)
        self.aggregator = aggregator
        self.hook = hook  # the HookState (None: DDP's own allreduce, no hook of ours)

    def gradients_ready(self) -> Any:
        clock = None if self.hook is None else self.hook.clock
        return None if clock is None else clock.last

    def synchronize(self) -> None:
        if self.aggregator is None:
            return
        pending = None if self.hook is None else self.hook.pending
        if pending is None:  # no bucket's hook ran (a world of one)
            stats = self.aggregator.contribution()
            all_reduce(stats)
        else:
            stats, work = pending
            work.wait()
            self.hook.pending = None
        self.aggregator.apply(stats)


class TorchCollectives(Collectives):
    """``torch.distributed``'s ``all_reduce`` (a sum, in place), ``all_gather_single`` (or,
    in a torch without it, ``all_gather_into_tensor``) into one output tensor, ``broadcast``
    from rank 0, on the default process group."""

    def __init__(self, rt: Any, device: Any) -> None:
        import torch.distributed as dist

        super().__init__(rt, device)
        self.library = str(dist.get_backend())

    def prepare(self, op: str, count: int, name: str) -> Callable[[], Any]:
        import torch.distributed as dist

        buf = self.buffer(count)
        if op == "allreduce":
            return lambda: dist.all_reduce(buf)
        if op == "allgather":
            out = self.buffer(count * self.rt.size)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            return lambda: gather(out, buf)
        return lambda: dist.broadcast(buf, src=0)


class TorchRuntime(Runtime):
    name = "ddp"
    GRAD_COMPRESSIONS = ("none", "fp16", "bf16")
    COLLECTIVES = TorchCollectives

    @classmethod
    def start(cls, device_type: str) -> TorchRuntime:
        import torch.distributed as dist

        env = os.environ
        backend = "nccl" if device_type == "cuda" else "gloo"
        # the launcher's --timeout, as it gives it to Horovod's Gloo
        timeout = dt.timedelta(seconds=env_int(env, "HOROVOD_GLOO_TIMEOUT_SECONDS", default=1800))
        if env.get("WORLD_SIZE") in (None, ""):  # started without a launcher: a world of one
            identity = Identity(0, 1, 0, 1, 0, 1)
            dist.init_process_group(
                backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
            )
        else:
            size = env_int(env, "WORLD_SIZE")
            identity = Identity(
                rank=env_int(env, "RANK"),
                size=size,
                local_rank=env_int(env, "LOCAL_RANK"),
                local_size=env_int(env, "LOCAL_WORLD_SIZE", default=size),
                cross_rank=env_int(env, "GROUP_RANK", default=0),
                cross_size=env_int(env, "GROUP_WORLD_SIZE", default=1),
            )
            dist.init_process_group(backend, init_method="env://", timeout=timeout)
        return cls(identity, device_type)

    def shutdown(self) -> None:
        import torch.distributed as dist

        # (destroy_process_group does not end Gloo's workers while DDP still holds the group:
        # they outlive it, to the interpreter's end)
        released(list(_HANDED), RELEASE_TIMEOUT_S)
        if dist.is_initialized():
            dist.destroy_process_group()

    def _allreduce_sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        out = tensor.clone()
        all_reduce(out)
        return out

    def _allreduce_sum_autograd(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        return allreduce_sum_function().apply(tensor)

    def _broadcast_tensors_(self, tensors: Mapping[str, torch.Tensor], root: int) -> None:
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for tensor in tensors.values():
                dist.broadcast(tensor, src=root)

    def _broadcast_object(self, obj: Any, root: int, name: str) -> Any:
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=root)
        return box[0]

    def _allgather_object(self, obj: Any, name: str) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def sync_batchnorm(self, device: torch.device) -> Callable[[nn.BatchNorm2d], nn.BatchNorm2d]:
        import torch
        from torch import nn

        from clusterbench.bn._blocks import batchnorm_factory, cpu_sync_factory

        if torch.device(device).type != "cuda":
            return cpu_sync_factory(self)  # nn.SyncBatchNorm runs on GPUs only
        return batchnorm_factory(nn.SyncBatchNorm)

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
        hook = compress_hook(grad_compression)
        module, state = model, None
        if self.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            params = next(model.parameters())
            cap = bucket_cap_mb(os.environ)
            if grad_allreduce == "one":  # one bucket holding every gradient
                cap = 1 + sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
            module = DistributedDataParallel(
                model,
                device_ids=[params.device.index] if params.is_cuda else None,
                broadcast_buffers=False,
                gradient_as_bucket_view=True,
                bucket_cap_mb=cap,
                # parameters a step leaves without a gradient: DDP would wait for them forever
                # ("Expected to have finished reduction"); it finds them after every forward,
                # a walk of the autograd graph (README, "Your own model")
                find_unused_parameters=unused,
            )
            aggregator = self.aggregator(model, bn)
            # timed: backward's compute ends where the last bucket starts
            clock = ReadyClock(params.is_cuda) if timed else None
            if clock is not None or aggregator is not None:
                state = HookState(clock, hook, aggregator)
                module.register_comm_hook(state, bucket_hook)
            elif hook is not None:
                module.register_comm_hook(None, hook)  # None: the default process group
            return module, AggregatingOptimizer(optimizer, aggregator, state)
        return module, AggregatingOptimizer(optimizer, None, None)


def compress_hook(grad_compression: str) -> Callable[..., Any] | None:
    """DDP's communication hook for ``grad_compression`` (None: DDP's own allreduce)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hooks = {
        "none": None,
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
    }
    if grad_compression not in hooks:
        raise ValueError(
            f"grad_compression {grad_compression!r}: the ddp backend compresses to "
            f"{' or '.join(TorchRuntime.GRAD_COMPRESSIONS)}"
        )
    return hooks[grad_compression]


#: The backend's runtime (clusterbench.backends).
RUNTIME = TorchRuntime
