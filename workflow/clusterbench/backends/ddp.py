"""``backend: ddp``: ``torch.distributed`` with DistributedDataParallel (gloo on the CPU, nccl on
GPUs).

The ranks find each other through the variables ``clusterbench.launch`` sets from the
scheduler's node list (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``): no torchrun, no ssh.
Without them the process is a world of one.

DDP averages the gradients during backward, in buckets (one bucket for a small model); its
per-forward buffer broadcast is switched off (``broadcast_buffers=False``) because BatchNorm
statistics follow the run's ``bn`` mode instead: ``aggregate`` adds one ``all_reduce`` of the
running-statistics contribution after each optimiser step.

``grad_compression: fp16 | bf16`` registers PyTorch's own communication hook on the DDP module
(``ddp_comm_hooks.default_hooks.fp16_compress_hook`` / ``bf16_compress_hook``): each gradient
bucket is cast to the 16-bit type for its allreduce, averaged, and cast back. The BatchNorm
contribution's ``all_reduce`` is no DDP bucket: it stays float32, exact. When steps are timed
(:mod:`clusterbench.training.step_times`) the timed hook wraps the compress hook: each bucket's
start is noted, then it is compressed and exchanged.
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
    value = env.get(BUCKET_ENV, "")
    if not value:
        return None
    try:
        mb = float(value)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise ValueError(f"${BUCKET_ENV} must be a number of MiB above 0, got {value!r}")
    return mb


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


class ReadyClock:
    """The state of DDP's communication hook when steps are timed: when each gradient bucket
    was handed to the collective (the last one: backward's compute is done), and the hook that
    then exchanges it (``inner``: ``grad_compression``'s compress hook; None: DDP's allreduce)."""

    def __init__(self, cuda: bool, inner: Callable[..., Any] | None = None) -> None:
        self.cuda = cuda
        self.inner = inner
        self.last: Any = None

    def mark(self) -> None:
        if self.cuda:
            import torch

            self.last = torch.cuda.Event(enable_timing=True)
            self.last.record()
        else:
            self.last = time.perf_counter()


def timed_allreduce_hook(clock, bucket):  # noqa: ANN001, ANN201 - DDP checks the annotations
    """The bucket's exchange, its start noted: DDP's own allreduce
    (``default_hooks.allreduce_hook``), or the compress hook of ``grad_compression`` (the
    bucket cast to 16 bits, averaged, cast back): the timing wraps the compression."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    clock.mark()
    exchange = default_hooks.allreduce_hook if clock.inner is None else clock.inner
    return exchange(None, bucket)  # None: the default process group


class AggregatingOptimizer(DistributedOptimizer):
    """``step()``: DDP averaged the gradients during backward already; with ``bn: aggregate``
    one all_reduce of the BatchNorm running statistics, then the optimiser step."""

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        aggregator: RunningStatsAggregator | None,
        clock: ReadyClock | None = None,
    ) -> None:
        super().__init__(inner)
        self.aggregator = aggregator
        self.clock = clock

    def gradients_ready(self) -> Any:
        return None if self.clock is None else self.clock.last

    def synchronize(self) -> None:
        if self.aggregator is not None:
            buf = self.aggregator.contribution()
            all_reduce(buf)
            self.aggregator.apply(buf)


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
    ) -> tuple[nn.Module, DistributedOptimizer]:
        hook = compress_hook(grad_compression)
        module, clock = model, None
        if self.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            params = next(model.parameters())
            module = DistributedDataParallel(
                model,
                device_ids=[params.device.index] if params.is_cuda else None,
                broadcast_buffers=False,
                gradient_as_bucket_view=True,
                bucket_cap_mb=bucket_cap_mb(os.environ),
            )
            if timed:  # when backward's compute ends: the last bucket's start
                clock = ReadyClock(params.is_cuda, hook)
                module.register_comm_hook(clock, timed_allreduce_hook)
            elif hook is not None:
                module.register_comm_hook(None, hook)  # None: the default process group
        return module, AggregatingOptimizer(optimizer, self.aggregator(model, bn), clock)


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
