"""The gradients of a data-parallel step as views of flat buffers, and when they were ready: the
building blocks of the Horovod backend's two ways to allreduce them (``grad_allreduce``):

``one``      every gradient is a view of ONE flat buffer (with, at its end, room for the
             BatchNorm statistics of ``bn: aggregate``), allreduced once after backward;
``buckets``  the gradients are views of several buffers ("buckets" of about
             :data:`BUCKET_MB` MiB, the last layers' first, as DDP cuts them), each allreduced
             as soon as backward has produced its last gradient (a hook on every parameter,
             :meth:`torch.Tensor.register_post_accumulate_grad_hook`), while backward still
             computes the earlier layers'.

Gradients as views (DDP's ``gradient_as_bucket_view``): backward accumulates into the buffers
themselves, and the allreduce reads and writes them in place. Copying the gradients into a new
flat tensor each step and back (``torch.cat``, then a copy per parameter) cost 39 + 10 ms of a
230 ms ResNet-18 step on the 2-core reference CPU (a fresh 43 MiB tensor each step: the kernel
maps and zeroes its pages); zeroing the buffers costs 2.7 ms (benchmarks/README.md). Hence
:meth:`GradBuckets.zero` replaces the optimiser's ``zero_grad``: the views stay, zeroed.

A gradient that is not its view (something set it to ``None`` or replaced it) is copied into
its view and the view put back (:meth:`GradBuckets.attach`), so the buffers hold every
gradient whatever happened to ``.grad``; a parameter without a gradient contributes zeros,
as every rank must contribute the same layout.

:class:`ReadyClock` notes when a bucket was handed to the collective: the last such moment of a
step is when backward's compute ended (the step-time breakdown's ``compute`` / ``comm`` split,
:mod:`clusterbench.training.step_times`); DDP's communication hook uses it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

#: The size of a bucket (MiB of gradients), as DDP's default ``bucket_cap_mb``.
BUCKET_MB = 25.0
#: The environment variable that sets the Horovod backend's bucket size (MiB; unset:
#: :data:`BUCKET_MB`): a site's tuning knob, no run setting.
BUCKET_ENV = "CLUSTERBENCH_HOROVOD_BUCKET_MB"


def env_mb(env: Mapping[str, str], name: str) -> float | None:
    """The MiB in ``env[name]`` (None where it is unset or empty); an error naming it unless
    it is a number above 0."""
    value = env.get(name, "")
    if not value:
        return None
    try:
        mb = float(value)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise ValueError(f"${name} must be a number of MiB above 0, got {value!r}")
    return mb


def bucket_mb(env: Mapping[str, str]) -> float:
    """The Horovod backend's bucket size: :data:`BUCKET_ENV`, else :data:`BUCKET_MB`."""
    found = env_mb(env, BUCKET_ENV)
    return BUCKET_MB if found is None else found


class ReadyClock:
    """When the last bucket of a step was handed to its collective (backward's compute is done
    then): a host time on the CPU, a CUDA event recorded in the stream on a GPU."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.last: Any = None

    def mark(self) -> None:
        if self.cuda:
            import torch

            self.last = torch.cuda.Event(enable_timing=True)
            self.last.record()
        else:
            self.last = time.perf_counter()


def dense_strides(param: torch.Tensor) -> tuple[int, ...]:
    """The strides of ``param``'s gradient view: ``param``'s own where its memory is dense (a
    channels-last weight's too: backward's accumulation and the optimiser then read both alike),
    else contiguous."""
    import torch

    formats = [torch.contiguous_format]
    formats += {4: [torch.channels_last], 5: [torch.channels_last_3d]}.get(param.dim(), [])
    if any(param.is_contiguous(memory_format=f) for f in formats):
        return tuple(param.stride())
    return tuple(torch.empty(param.shape, device="meta").stride())


class Bucket:
    """Some parameters' gradients as views of one flat buffer (``tail`` more values at its end:
    the BatchNorm statistics' room)."""

    def __init__(self, params: Sequence[nn.Parameter], tail: int = 0) -> None:
        import torch

        self.params = list(params)
        self.numel = sum(p.numel() for p in self.params)
        first = self.params[0]
        self.buffer = torch.zeros(self.numel + tail, dtype=first.dtype, device=first.device)
        self.views: list[torch.Tensor] = []
        offset = 0
        for p in self.params:
            self.views.append(self.buffer.as_strided(p.shape, dense_strides(p), offset))
            offset += p.numel()
        self.attach()
        self.pending = len(self.params)  # gradients not yet ready in this step
        self.handle: Any = None  # the collective in flight (the backend's)

    @property
    def grads(self) -> torch.Tensor:
        """The gradients' part of the buffer (without the tail)."""
        return self.buffer[: self.numel]

    @property
    def tail(self) -> torch.Tensor:
        return self.buffer[self.numel :]

    def attach(self) -> None:
        """Every gradient its view: a foreign one copied in, a missing one zeros."""
        import torch

        with torch.no_grad():
            for p, view in zip(self.params, self.views, strict=True):
                grad = p.grad
                if grad is not None and grad.data_ptr() == view.data_ptr():
                    continue
                if grad is None:
                    view.zero_()
                else:
                    view.copy_(grad)
                p.grad = view


class GradBuckets:
    """The trainable parameters' gradients as views of buckets of at most ``cap_mb`` MiB (None:
    one bucket), cut in reverse order of the parameters (backward produces the last layers'
    gradients first); ``tail`` more values at the end of the last bucket."""

    def __init__(self, params: Sequence[nn.Parameter], cap_mb: float | None, tail: int = 0) -> None:
        trainable = [p for p in params if p.requires_grad]
        groups: list[list[nn.Parameter]] = []
        size = 0
        cap = None if cap_mb is None else cap_mb * 2**20
        for p in reversed(trainable):
            nbytes = p.numel() * p.element_size()
            if not groups or (cap is not None and size + nbytes > cap and groups[-1]):
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += nbytes
        self.buckets = [
            Bucket(g, tail if i == len(groups) - 1 else 0) for i, g in enumerate(groups)
        ]
        self.of = {p: i for i, b in enumerate(self.buckets) for p in b.params}
        self.hooks: list[Any] = []

    def __len__(self) -> int:
        return len(self.buckets)

    @property
    def last(self) -> Bucket:
        return self.buckets[-1]

    def zero(self) -> None:
        """Every gradient zero, still its view (the optimiser's ``zero_grad``)."""
        for bucket in self.buckets:
            bucket.buffer.zero_()
            bucket.attach()
            bucket.pending = len(bucket.params)

    def on_ready(self, launch: Callable[[int], None]) -> None:
        """Call ``launch(i)`` as soon as backward has produced every gradient of bucket ``i``."""
        for p, i in self.of.items():
            self.hooks.append(p.register_post_accumulate_grad_hook(self._hook(i, launch)))

    def _hook(self, i: int, launch: Callable[[int], None]) -> Callable[[Any], None]:
        bucket = self.buckets[i]

        def ready(param: Any) -> None:
            bucket.pending -= 1
            if bucket.pending == 0:
                bucket.attach()  # a gradient made anew (after a set_to_none) into its view
                launch(i)

        return ready

    def detach(self) -> None:
        """Remove the hooks (the optimiser is wrapped again: an elastic reset)."""
        for handle in self.hooks:
            handle.remove()
        self.hooks = []
