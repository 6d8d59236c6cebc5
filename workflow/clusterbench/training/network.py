"""The network a run trains, and what the training checks of it: built (seeded: equal on every
rank, its parameters a step leaves without a gradient named), the same on every rank
(:func:`same_network`, before the first broadcast), and a failure in your own model's code
told as one line naming it (:func:`user_code_error`), not as a traceback or a message about
something else."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from clusterbench.backends import Runtime
from clusterbench.training.memory_format import torch_format


def build(
    rt: Runtime, run: dict[str, Any], data: Any, device: Any, memory_format: str
) -> tuple[dict, Any, Any, tuple[str, ...]]:
    """The run's architecture description, model (seeded: equal on every rank; in
    ``memory_format``), optimiser (SGD, or your own ``optimizer``:
    :func:`clusterbench.models.custom_training.build_optimizer`) and the names of the
    parameters a step leaves without a gradient (your own model's:
    :data:`clusterbench.models.custom.UNUSED`)."""
    import torch

    from clusterbench.models import architecture, build_model
    from clusterbench.models.custom import UNUSED
    from clusterbench.models.custom_training import build_optimizer

    arch = architecture(run["model"], data.num_classes, data.input_shape)
    torch.manual_seed(run["seed"])
    net = build_model(**arch)
    unused = tuple(getattr(net, UNUSED, ()))
    model = rt.prepare_model(net, run["bn"], device).to(device)
    model = model.to(memory_format=torch_format(memory_format))
    if run.get("optimizer"):
        return arch, model, build_optimizer(run["optimizer"], model, run["lr"]), unused
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=run["lr"],
        momentum=run["momentum"],
        weight_decay=run["weight_decay"],
    )
    return arch, model, optimizer, unused


def own_loss(run: dict[str, Any], model: Any, data: Any, device: Any, memory_format: Any) -> Any:
    """Your own ``loss`` as the objective of the data's task
    (:class:`clusterbench.models.custom_training.OwnLoss`), checked on a forward of a batch of
    two zero samples in evaluation mode (no BatchNorm statistic moves); None without one."""
    import torch

    from clusterbench.models.custom_training import build_loss
    from clusterbench.training.objectives import objective

    if not run.get("loss"):
        return None
    tokens = data.task == "language-model"
    shape = [2, *data.input_shape]
    x = torch.zeros(shape, dtype=torch.long if tokens else torch.float32, device=device)
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    targets = torch.zeros(shape[:2] if tokens else shape[:1], dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    try:
        return build_loss(run["loss"], objective(data.task), model(x).float(), targets)
    finally:
        model.train(was_training)


def same_network(rt: Runtime, model: Any, name: str) -> None:
    """Every rank built the same network (its weights' and buffers' names, shapes and types;
    one small gather): :class:`~clusterbench.models.ModelError` naming the model and the
    ranks that differ otherwise."""
    import hashlib
    import math

    entries = [(k, tuple(v.shape), str(v.dtype)) for k, v in model.state_dict().items()]
    digest = hashlib.sha256(repr(entries).encode()).hexdigest()[:16]
    values = sum(math.prod(shape) for _, shape, _ in entries)
    every = rt.allgather_object((digest, len(entries), values), name="train.network")
    if all(found[0] == every[0][0] for found in every):
        return
    from clusterbench.models import ModelError

    built = "; ".join(f"rank {r}: {n} tensors, {v:,} values" for r, (_, n, v) in enumerate(every))
    raise ModelError(
        f"model {name!r} built a different network on different ranks ({built}): build() "
        "must give the same network on every rank (does it depend on the host, the rank, the "
        "time, or random numbers other than the run's seed?)"
    )


def unused_note(run: dict[str, Any], unused: tuple[str, ...], backend: str) -> str:
    """The log's line for a model whose training step leaves parameters without a gradient."""
    names = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
    how = {
        "ddp": "DDP is told to find them after every forward (find_unused_parameters=True): a "
        "walk of the autograd graph per step, time a model without them does not spend",
        "horovod": "Horovod allreduces zeros for them in the step's fused buffer (no extra "
        "collective, their bytes on the wire)",
    }.get(backend, "the backend exchanges zeros for them")
    return (
        f"train: note: model {run['model']!r} leaves {len(unused)} trainable parameter(s) "
        f"without a gradient in a training step ({names}); {how}"
    )


def user_code_error(
    model: str, exc: BaseException, when: str = "trained", run: dict[str, Any] | None = None
) -> str | None:
    """One line for ``exc`` raised in your own code while the run trained (your model's forward
    or a hook, your loss, your optimiser's step: ``run``'s own code,
    :func:`clusterbench.models.custom_training.own_code`; without ``run``, the model's alone):
    what it is, the file and line of its code where it happened, what it raised; a DDP run that
    met a parameter without a gradient the start's check did not see (one unused for some
    inputs only) is told so. None for an exception of anything else."""
    from clusterbench.models.custom import raised
    from clusterbench.models.custom_training import own_code

    named = own_code(run if run is not None else {"model": model})
    if not named:
        return None
    if "find_unused_parameters" in str(exc) and named[0][0] == "model":
        return (
            f"model {model!r}: a training step left parameters without a gradient, which the "
            "check at the run's start (a batch of zeros) did not see: they go unused for some "
            "inputs only. DDP cannot tell them apart as it trains; use backend: horovod, or "
            "make forward use every parameter"
        )
    files = own_files(named)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):  # the innermost first
        path = Path(frame.filename).resolve()
        holders = [(what, name) for what, name in named if path in files[name]]
        if holders:  # a module of several: the one whose callable this is, else the first
            what, name = next(
                (h for h in holders if h[1].partition(":")[2] == frame.name), holders[0]
            )
            return (
                f"{what} {name!r} failed in its own code ({frame.filename}:{frame.lineno}, in "
                f"{frame.name}) while the run {when}: {raised(exc)}"
            )
    return None


def own_files(named: list[tuple[str, str]]) -> dict[str, set[Path]]:
    """The resolved module files of each of your own code's ``(what, name)`` (none where the
    module cannot be found now)."""
    from clusterbench.models import ModelError
    from clusterbench.models.custom import module_files

    files: dict[str, set[Path]] = {}
    for what, name in named:
        try:
            files[name] = {Path(p).resolve() for p in module_files(name, what=what)}
        except ModelError:
            files[name] = set()
    return files
