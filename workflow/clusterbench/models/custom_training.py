"""Your own loss and optimiser: ``loss: "package.module:callable"`` and ``optimizer:
"package.module:callable"``, beside ``model:`` (:mod:`clusterbench.models.custom`), found and
checked the same way.

``loss(outputs, targets)`` gets a batch's network outputs (a classifier's logits ``[N, K]``, a
language model's ``[N, T, V]``) and targets (``[N]``, ``[N, T]``) and returns the loss *summed*
over the batch's units (images, tokens), a scalar tensor, as torch's losses with
``reduction="sum"``: the training divides it by the global batch's units, so the gradient the
backend averages is the mean over the global batch whatever each rank's share. It is the
training and the validation loss; the accuracy stays the task's, and the evaluation stage's
loss stays cross-entropy. Null: cross-entropy.

``optimizer(parameters, lr)`` returns a ``torch.optim.Optimizer`` over ``parameters`` (the
model's trainable parameters, a list) at learning rate ``lr`` (the run's); the run's schedule
sets every param group's ``lr`` at each step (``momentum`` and ``weight_decay`` are SGD's: your
optimiser sets its own). Its state (Adam's moments) goes into every checkpoint. Null: SGD with
the run's ``momentum`` and ``weight_decay``.

As for your own model: before any job (:func:`problems`), the name's form and that its module's
file exists, found without importing it; the module's file is a rerun trigger of the run's
training (its code stamp, :mod:`clusterbench.pipeline.code`) and a digest of the loss's and the
optimiser's files is kept with every checkpoint (:func:`code_digest`): a checkpoint made with
other code is not continued. When the run starts (:func:`build_loss`, :func:`build_optimizer`):
the import and the call, each failure of your code named with the key, ``module:callable`` and
the cause, and what it returns checked (a scalar tensor with a gradient; an optimiser over every
trainable parameter).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from clusterbench.models import ModelError
from clusterbench.models.custom import FORM, load, module_files, raised

#: The run keys that name your own training code, as the messages call them.
KEYS = ("loss", "optimizer")


def own_code(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, name)`` of the run's own model, loss and optimizer (``package.module:callable``
    names: a built-in model or a null key is none)."""
    found = [(key, run[key]) for key in KEYS if run.get(key)]
    model = run.get("model") or ""
    if ":" in model and not model.startswith("torchvision."):
        found.insert(0, ("model", model))
    return found


def problems(run: Mapping[str, Any], where: str) -> list[str]:
    """The run's ``loss`` and ``optimizer`` that are no ``package.module:callable`` whose
    module can be found (without importing it), each naming its key (before any job)."""
    found = []
    for key in KEYS:
        name = run.get(key)
        if not name:
            continue
        if not FORM.fullmatch(name):
            found.append(
                f"{where}.{key}: your own {key} is written 'package.module:callable' (dotted "
                f"Python names, one colon), e.g. 'mytraining.losses:smoothed', got {name!r}"
            )
            continue
        try:
            module_files(name, what=key)
        except ModelError as exc:
            found.append(f"{where}.{key}: {exc}")
    return found


def code_digest(run: Mapping[str, Any]) -> str | None:
    """A sha256 over the module files of the run's own loss and optimizer (None: neither)."""
    names = [(key, run[key]) for key in KEYS if run.get(key)]
    if not names:
        return None
    digest = hashlib.sha256()
    for key, name in names:
        digest.update(f"{key}={name}\0".encode())
        for path in module_files(name, what=key):
            digest.update(f"{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class OwnLoss:
    """A task's objective (:mod:`clusterbench.training.objectives`) with your own loss: its
    ``loss_sum``, the task's ``correct``."""

    def __init__(self, name: str, loss: Any, task: Any) -> None:
        self.name, self.loss_sum, self.correct = name, loss, task.correct


def build_loss(name: str, task: Any, outputs: Any, targets: Any) -> OwnLoss:
    """Your loss ``name`` for ``task``'s objective, checked on a batch's ``outputs`` (a
    training-mode forward, with gradients) and ``targets``: it must give a scalar tensor that
    has a gradient."""
    import torch

    loss = load(name, what="loss")
    try:
        value = loss(outputs, targets)
    except BaseException as exc:  # noqa: BLE001 - sys.exit() in the user's loss too
        raise ModelError(
            f"loss {name!r}: calling it as {name.partition(':')[2]}(outputs "
            f"{list(outputs.shape)}, targets {list(targets.shape)}) failed: {raised(exc)}"
        ) from None
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        got = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ModelError(
            f"loss {name!r}: returned {got}, not a scalar tensor: it must return the loss summed "
            "over the batch (as torch's losses with reduction='sum')"
        )
    if not value.requires_grad:
        raise ModelError(
            f"loss {name!r}: its value has no gradient (computed without autograd, or detached): "
            "the training could not step on it"
        )
    return OwnLoss(name, loss, task)


def build_optimizer(name: str, model: Any, lr: float) -> Any:
    """Your optimiser ``name`` over ``model``'s trainable parameters at learning rate ``lr``,
    checked: a ``torch.optim.Optimizer`` whose param groups hold every trainable parameter."""
    import torch

    builder = load(name, what="optimizer")
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        optimizer = builder(params, lr)
    except BaseException as exc:  # noqa: BLE001
        raise ModelError(
            f"optimizer {name!r}: calling it as {name.partition(':')[2]}(parameters "
            f"({len(params)} tensors), lr={lr:g}) failed: {raised(exc)}"
        ) from None
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ModelError(
            f"optimizer {name!r}: returned {type(optimizer).__name__}, not a torch.optim.Optimizer"
        )
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if missing:
        raise ModelError(
            f"optimizer {name!r}: leaves {len(missing)} trainable parameter(s) out of its param "
            f"groups ({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}): pass it "
            "every parameter it is given"
        )
    return optimizer
