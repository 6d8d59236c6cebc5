"""A run's network compiled with ``torch.compile`` (the run key ``compile``), and its compile
time kept apart from the timed epochs.

* **What is compiled.** The module the steps call (:meth:`clusterbench.backends.Runtime.wrap`'s:
  the DDP wrapper, or the network itself under Horovod, whose hooks on the parameters fire after
  the compiled backward as after an eager one). The network itself (``state.model``) stays the
  uncompiled module: checkpoints, ``model.pt``, validation and the elastic state hold its own
  ``state_dict``, with the names an eager run gives them, so a compiled run continues from an
  eager run's checkpoint and the other way round.
* **When it compiles.** ``torch.compile`` compiles at the first call. So before the first
  epoch's clock starts, every rank runs one forward and backward per distinct size of its
  share of a step's batch (:func:`local_sizes`; a last, smaller batch would otherwise be
  compiled again inside a timed epoch) on a batch of zeros, with the gradients' exchange as a
  step does it, and no optimiser step; the BatchNorm buffers and the random state are put
  back and the gradients zeroed (:func:`warm_up`). Training then goes on exactly as an eager
  run's, and the time of this warm-up is the run's ``compile_seconds`` (run.json; after each
  elastic reset, which wraps the network again, it is added).
* **auto** compiles where it was measured faster (:data:`MEASURED_FASTER`, by device type
  and model); nowhere else. The measurements: docs/benchmarks.md, "Compiled models".
* **A compile that fails** (no C++ compiler for the CPU's kernels, an operation Inductor cannot
  take) stops a run that asked ``compile: true`` with the cause in one line; under ``auto``
  the run trains eager, and run.json says why.

The choice and its reason are recorded in ``run.json`` (``effective.compile``,
``effective.compile_reason``) and shown on the report's runs page with the compile time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from clusterbench.data.order import shard_sizes
from clusterbench.training.device import rng_state, set_rng_state, synchronize

#: ``(device type, model)`` pairs whose training steps were measured faster compiled, with
#: the compile time kept apart (docs/benchmarks.md, "Compiled models"): what ``auto`` compiles.
MEASURED_FASTER: frozenset[tuple[str, str]] = frozenset()


class CompileError(RuntimeError):
    """``compile: true``, and ``torch.compile`` could not compile the network."""


def choose(run: Mapping[str, Any], device_type: str) -> tuple[bool, str]:
    """``(compile?, why)`` for ``run`` training on ``device_type`` (cpu / cuda)."""
    asked = run.get("compile", "auto")
    if asked is True:
        return True, "compile: true"
    if asked is False:
        return False, "compile: false"
    if (device_type, run["model"]) in MEASURED_FASTER:
        return True, f"auto: {run['model']} measured faster compiled on {device_type}"
    return False, f"auto: {run['model']} not measured faster compiled on {device_type}"


def compile_module(net: Any) -> Any:
    """``net`` compiled (``torch.compile``, its default mode: it compiles at the first call),
    Inductor's compile workers as many as the rank's torch threads (its share of the node's
    CPUs): Inductor's default, a pool of a worker per CPU of the machine, took 260 s to compile
    small_cnn against 75 s without a pool on the 2 shared cores of the reference machine."""
    import torch
    from torch._inductor import config

    config.compile_threads = max(1, torch.get_num_threads())
    return torch.compile(net)


def local_sizes(batches: list[tuple[int, int]], workers: int, rank: int) -> list[int]:
    """The distinct sizes of ``rank``'s share of the global ``batches`` of an epoch, in their
    order (pure: :func:`clusterbench.data.order.shard_sizes`)."""
    sizes = (shard_sizes(stop - start, workers)[rank] for start, stop in batches)
    return list(dict.fromkeys(sizes))


def zero_batch(data: Any, n: int, device: Any, memory_format: Any = None) -> tuple[Any, Any]:
    """``n`` samples of zeros as the loop gives them to the network, strides included (a
    compiled graph is specialised on them): images ``[n, C, H, W]``, float, the permuted view
    of ``(n, H, W, C)`` memory that :func:`clusterbench.data.images.normalize_images` gives,
    made contiguous in ``memory_format``, with class 0; or token sequences ``[n, T]`` (long)
    with their next tokens 0."""
    import torch

    if data.task == "language-model":
        x = torch.zeros((n, *data.input_shape), dtype=torch.long, device=device)
        return x, torch.zeros_like(x)
    channels, height, width = data.input_shape
    x = torch.zeros((n, height, width, channels), device=device).permute(0, 3, 1, 2)
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    return x, torch.zeros(n, dtype=torch.long, device=device)


def warm_up(ctx: Any, sizes: list[int]) -> float:
    """Compile the step's network (``ctx.net``) for each batch size in ``sizes``: a forward and
    backward on zeros and the gradients' exchange, no optimiser step; the model's buffers, the
    random state and the gradients as they were (module docstring). Every rank calls it (the
    exchange is a collective). Returns the seconds it took, the device synchronised."""
    import torch

    start = time.perf_counter()
    buffers = {name: b.detach().clone() for name, b in ctx.model.named_buffers()}
    rng = rng_state()
    ctx.net.train()
    try:
        for n in sizes:
            x, y = zero_batch(ctx.data, n, ctx.device, ctx.memory_format)
            ctx.optimizer.zero_grad()
            with ctx.autocast():
                summed = ctx.objective.loss_sum(ctx.net(x), y)
            summed.backward()
            ctx.optimizer.synchronize()
    finally:  # a compile that failed leaves the state as it found it too
        ctx.optimizer.zero_grad()
        with torch.no_grad():
            for name, b in ctx.model.named_buffers():
                b.copy_(buffers[name])
        set_rng_state(rng)
    synchronize(ctx.device)
    return time.perf_counter() - start


def failure(exc: BaseException) -> str:
    """The first line of a compile error (torch's are pages long)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


class Compiled:
    """One run's compilation: whether it compiles and why (:func:`choose`), and the seconds its
    warm-ups took (module docstring)."""

    def __init__(self, run: Mapping[str, Any], device_type: str) -> None:
        self.run = run
        self.enabled, self.reason = choose(run, device_type)
        self.seconds = 0.0

    def prepare(self, ctx: Any, batches: list[tuple[int, int]]) -> None:
        """Compile ``ctx.net`` and warm it up for this rank's batch sizes of ``batches``; a
        failure under ``auto`` leaves ``ctx.net`` eager (said here and in run.json), under
        ``compile: true`` raises :class:`CompileError`."""
        if not self.enabled:
            return
        eager = ctx.net
        ctx.net = compile_module(eager)
        try:
            seconds = warm_up(ctx, local_sizes(batches, ctx.rt.size, ctx.rt.rank))
        except Exception as exc:  # noqa: BLE001 - dynamo and Inductor raise many kinds
            why = failure(exc)
            ctx.net = eager
            if self.run.get("compile") is True:
                raise CompileError(
                    f"run {self.run['name']!r} asks for compile: true, and torch.compile could "
                    f"not compile model {self.run['model']!r}: {why}; use compile: false"
                ) from None
            self.enabled, self.reason = False, f"auto: torch.compile failed ({why}): eager"
            if ctx.rt.rank == 0:
                print(f"train: {self.reason}", flush=True)
            return
        self.seconds += seconds  # after an elastic reset, added to the launch's earlier ones
        if ctx.rt.rank == 0:
            print(f"train: compiled the network in {seconds:.1f} s ({self.reason})", flush=True)

    def record(self) -> dict[str, Any]:
        """run.json's ``effective`` entries."""
        return {"compile": self.enabled, "compile_reason": self.reason}
