"""Your own model: ``model: "package.module:callable"``.

The callable must be importable from the workflow's working directory or the environment (the
jobs run with the working directory first on ``sys.path``). It is called as
``callable(num_classes, input_shape)`` (``input_shape`` = ``[C, H, W]``) and returns an
``nn.Module`` that maps a batch of images ``[N, C, H, W]`` to logits ``[N, num_classes]``.

The name's form is checked before any job (:func:`resolve`); the import, the call and the
output's shape when the run starts (:func:`build`), each failure named with the module, the
callable and the cause, without a traceback wall.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from clusterbench.models import ModelError, ModelSpec

#: ``package.module:callable``: dotted Python identifiers, one colon.
FORM = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
HINT = "your own 'package.module:callable' (config/README.md, 'Your own model')"


def resolve(name: str) -> ModelSpec | None:
    if ":" not in name or name.startswith("torchvision."):  # torchvision's: its family says
        return None
    if not FORM.fullmatch(name):
        raise ModelError(
            f"model {name!r}: your own model is written 'package.module:callable' (dotted "
            "Python names, one colon), e.g. 'mynets.small:build'"
        )
    return ModelSpec(name, lambda classes, shape: build(name, classes, shape), convolutional=False)


def load(name: str) -> Any:
    """The callable ``name`` names, imported with the working directory on ``sys.path``."""
    module_name, _, attribute = name.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise ModelError(
            f"model {name!r}: cannot import module {module_name!r} "
            f"({type(exc).__name__}: {exc}); it must be importable from {os.getcwd()} or the "
            "environment"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ModelError(
            f"model {name!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has "
            f"no {attribute!r}"
        ) from None


def build(name: str, num_classes: int, input_shape: Sequence[int]) -> Any:
    """Import and call the user's builder, and check what it returns on a batch of 2."""
    import torch
    from torch import nn

    builder = load(name)
    try:
        model = builder(num_classes, list(input_shape))
    except Exception as exc:  # noqa: BLE001
        raise ModelError(
            f"model {name!r}: calling it as {name.partition(':')[2]}(num_classes={num_classes}, "
            f"input_shape={list(input_shape)}) failed: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"model {name!r}: returned {type(model).__name__}, not a torch.nn.Module")
    check_output(name, model, num_classes, input_shape, torch)
    return model


def check_output(name: str, model: Any, num_classes: int, shape: Sequence[int], torch: Any) -> None:
    """The model maps a batch ``[2, *shape]`` to ``[2, num_classes]`` (in eval mode, on the CPU,
    without gradients; its state is left as it was)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(2, *shape))
    except Exception as exc:  # noqa: BLE001
        raise ModelError(
            f"model {name!r}: a batch of shape {[2, *shape]} fails in forward: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    finally:
        model.train(was_training)
    got = list(getattr(out, "shape", []))
    if got != [2, num_classes]:
        raise ModelError(
            f"model {name!r}: a batch of shape {[2, *shape]} gives output shape {got}, expected "
            f"[2, {num_classes}] (one logit per class)"
        )


MODELS: dict[str, ModelSpec] = {}
