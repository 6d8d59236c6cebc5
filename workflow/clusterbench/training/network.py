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
    ``memory_format``), SGD and the names of the parameters a step leaves without a gradient
    (your own model's: :data:`clusterbench.models.custom.UNUSED`)."""
    import torch

    from clusterbench.models import architecture, build_model
    from clusterbench.models.custom import UNUSED

    arch = architecture(run["model"], data.num_classes, data.input_shape)
    torch.manual_seed(run["seed"])
    net = build_model(**arch)
    unused = tuple(getattr(net, UNUSED, ()))
    model = rt.prepare_model(net, run["bn"], device).to(device)
    model = model.to(memory_format=torch_format(memory_format))
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=run["lr"],
        momentum=run["momentum"],
        weight_decay=run["weight_decay"],
    )
    return arch, model, optimizer, unused


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


def user_code_error(model: str, exc: BaseException, when: str = "trained") -> str | None:
    """One line for ``exc`` raised in your own model's code while the run trained (its
    forward, a hook): the model, the file and line of its code where it happened, what it
    raised; a DDP run that met a parameter without a gradient the start's check did not see
    (one unused for some inputs only) is told so. None for an exception of anything else."""
    from clusterbench.models import ModelError
    from clusterbench.models.custom import module_files, raised

    if ":" not in model or model.startswith("torchvision."):
        return None
    if "find_unused_parameters" in str(exc):
        return (
            f"model {model!r}: a training step left parameters without a gradient, which the "
            "check at the run's start (a batch of zeros) did not see: they go unused for some "
            "inputs only. DDP cannot tell them apart as it trains; use backend: horovod, or "
            "make forward use every parameter"
        )
    try:
        mine = {Path(p).resolve() for p in module_files(model)}
    except ModelError:
        return None
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() in mine
    ]
    if not frames:
        return None
    where = frames[-1]
    return (
        f"model {model!r} failed in its own code ({where.filename}:{where.lineno}, in "
        f"{where.name}) while the run {when}: {raised(exc)}"
    )
