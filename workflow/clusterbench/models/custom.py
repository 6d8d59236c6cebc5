"""Your own model: ``model: "package.module:callable"``.

The callable must be importable from the workflow's working directory or the environment (the
jobs run with the working directory first on ``sys.path``). It is called as
``callable(num_classes, input_shape)`` (``input_shape`` = ``[C, H, W]``) and returns an
``nn.Module`` that maps a batch of images ``[N, C, H, W]`` to logits ``[N, num_classes]``.

Before any job (:func:`resolve`): the name's form, and that the module's file exists, found
without importing it (:func:`module_files`: nothing of the user's runs while the Snakefile is
parsed). The module's file (and its packages' ``__init__.py``) is then a rerun trigger of the
run's training (its code stamp, :mod:`clusterbench.pipeline.code`) and a digest of it is kept
with every checkpoint and the model (:func:`code_digest`): a checkpoint or model of other code
is not taken for this one.

When the run starts (:func:`build`): the import and the call, each failure of the user's code
(an exception, ``sys.exit``, ``KeyboardInterrupt``) named with the module, the callable and the
cause, without a traceback wall; what it returns (an ``nn.Module``, with a parameter to train);
its output's shape in evaluation and in training mode, for batches of two sizes (a forward that
hard-codes the batch size, or gives another number of logits in training, is named now, not at
the first step); and the parameters a training step leaves without a gradient
(:data:`UNUSED`), which DDP must be told of.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterbench.models import ModelError, ModelSpec

#: ``package.module:callable``: dotted Python identifiers, one colon.
FORM = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
HINT = "your own 'package.module:callable' (config/README.md, 'Your own model')"
#: The attribute :func:`build` sets on the module it returns: the names of the parameters a
#: training step leaves without a gradient (a tuple; empty for most models).
UNUSED = "clusterbench_unused_parameters"
#: The batch sizes the output is checked with (two: a forward that hard-codes one fails).
CHECK_BATCHES = (2, 3)


def resolve(name: str) -> ModelSpec | None:
    if ":" not in name or name.startswith("torchvision."):  # torchvision's: its family says
        return None
    if not FORM.fullmatch(name):
        raise ModelError(
            f"model {name!r}: your own model is written 'package.module:callable' (dotted "
            "Python names, one colon), e.g. 'mynets.small:build'"
        )
    module_files(name)
    return ModelSpec(name, lambda classes, shape: build(name, classes, shape), convolutional=False)


def search_path() -> list[str]:
    """Where the jobs look for the module: the working directory first, then ``sys.path``."""
    return [os.getcwd(), *(p or os.getcwd() for p in sys.path)]


def module_files(name: str, search: Sequence[str] | None = None, what: str = "model") -> list[Path]:
    """The files of ``name``'s module, found as the import would find them, without importing
    anything (no code of the user's runs): each package's ``__init__.py`` on the way and the
    module's own file (a namespace package has none; a built-in module no file at all).
    :class:`ModelError` when there is no such module, naming ``what`` it is (your own model,
    loss or optimizer: :mod:`clusterbench.models.custom_training`)."""
    path = tuple(search if search is not None else search_path())
    return list(_found_files(name, path, what))


@functools.lru_cache(maxsize=64)
def _found_files(name: str, search: tuple[str, ...], what: str = "model") -> tuple[Path, ...]:
    """:func:`module_files` for one search path (looked up once per process: the config check
    asks for every run)."""
    parts = name.partition(":")[0].split(".")
    if parts[0] in sys.builtin_module_names:
        return ()
    path, files = list(search), []
    for i, part in enumerate(parts, start=1):
        found = find_in(part, path) or (find_top(part) if i == 1 else None)
        if found is None:
            raise ModelError(
                f"{what} {name!r}: no module {'.'.join(parts[:i])!r} to import, from "
                f"{os.getcwd()} or the environment (searched without importing it): check the "
                "name, or run from the folder that holds it"
            )
        origin, path = found
        files += [] if origin is None else [origin]
        if i < len(parts) and path is None:
            raise ModelError(
                f"{what} {name!r}: {'.'.join(parts[:i])!r} ({origin}) is a module, not a "
                "package: it holds no module"
            )
    return tuple(files)


#: What a module's file may end in, in the order the import system prefers them.
SUFFIXES = (
    *importlib.machinery.EXTENSION_SUFFIXES,
    *importlib.machinery.SOURCE_SUFFIXES,
    *importlib.machinery.BYTECODE_SUFFIXES,
)


def find_in(part: str, path: Sequence[str]) -> tuple[Path | None, list[str] | None] | None:
    """``(its file, its folders if a package)`` of module ``part`` in the folders ``path``,
    as the import's path finder finds it (a package's ``__init__``, else a module file, in
    the first folder that has one; else a namespace package of every such folder); None."""
    portions = []
    for folder in path:
        base = os.path.join(folder, part)
        if os.path.isdir(base):
            init = next(
                (f"{base}/__init__{s}" for s in SUFFIXES if os.path.isfile(f"{base}/__init__{s}")),
                None,
            )
            if init is not None:
                return Path(init), [base]
            portions.append(base)
        module = next((base + s for s in SUFFIXES if os.path.isfile(base + s)), None)
        if module is not None:
            return Path(module), None
    return (None, portions) if portions else None


def find_top(part: str) -> tuple[Path | None, list[str] | None] | None:
    """A top-level module that no folder of the path holds but an installed finder knows (an
    editable install's), asked without importing anything; None."""
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(part, None)
        except Exception:  # noqa: BLE001 - a finder that cannot answer: not this module
            continue
        if spec is not None and spec.origin not in (None, "built-in", "frozen"):
            locations = spec.submodule_search_locations
            return Path(spec.origin), None if locations is None else list(locations)
    return None


def code_digest(name: str) -> str | None:
    """A sha256 over the model's module files (:func:`module_files`: path and content); None
    for a model that is not your own."""
    if ":" not in name or name.startswith("torchvision."):
        return None
    digest = hashlib.sha256()
    for path in module_files(name):
        digest.update(f"{path.name}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def load(name: str, what: str = "model") -> Any:
    """The callable ``name`` names, imported with the working directory on ``sys.path``;
    failures named as ``what``'s (your own model, loss or optimizer)."""
    module_name, _, attribute = name.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - sys.exit() or Ctrl-C in the user's import too
        raise ModelError(
            f"{what} {name!r}: importing module {module_name!r} failed ({raised(exc)}); it must "
            f"be importable from {os.getcwd()} or the environment"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ModelError(
            f"{what} {name!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has "
            f"no {attribute!r}"
        ) from None


def raised(exc: BaseException) -> str:
    """What the user's code raised, in words: ``ValueError: bad``, ``sys.exit(3)``."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    if isinstance(exc, KeyboardInterrupt):
        return "it raised KeyboardInterrupt"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def build(name: str, num_classes: int, input_shape: Sequence[int]) -> Any:
    """Import and call the user's builder, and check what it returns (module docstring)."""
    import torch
    from torch import nn

    builder = load(name)
    try:
        model = builder(num_classes, list(input_shape))
    except BaseException as exc:  # noqa: BLE001 - sys.exit("bye") in build() too
        raise ModelError(
            f"model {name!r}: calling it as {name.partition(':')[2]}(num_classes={num_classes}, "
            f"input_shape={list(input_shape)}) failed: {raised(exc)}"
        ) from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"model {name!r}: returned {type(model).__name__}, not a torch.nn.Module")
    params = list(model.parameters())
    if not any(p.requires_grad for p in params):
        have = f"{len(params)} parameter(s), all frozen (requires_grad=False)" if params else ""
        raise ModelError(
            f"model {name!r}: has no parameter to train ({have or 'no parameters at all'}): "
            "data-parallel training averages gradients, and this model has none"
        )
    unused = check_output(name, model, num_classes, input_shape, torch)
    setattr(model, UNUSED, unused)
    return model


def check_output(
    name: str, model: Any, num_classes: int, shape: Sequence[int], torch: Any
) -> tuple[str, ...]:
    """The model maps batches ``[N, *shape]`` to ``[N, num_classes]`` for each of
    :data:`CHECK_BATCHES`, in evaluation mode and in training mode (on the CPU, zeros); a
    training step's backward then shows the trainable parameters it leaves without a
    gradient: their names. The model's weights, buffers (BatchNorm's statistics), gradients
    and mode and the random state are left as they were."""
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    was_training, rng = model.training, torch.random.get_rng_state()
    try:
        for training in (False, True):
            model.train(training)
            for batch in CHECK_BATCHES:
                out = forward(name, model, [batch, *shape], training, torch)
                expect_shape(name, out, [batch, *shape], num_classes, training)
        return unused_parameters(model, out)
    finally:
        model.zero_grad(set_to_none=True)
        model.load_state_dict(saved)
        model.train(was_training)
        torch.random.set_rng_state(rng)


def forward(name: str, model: Any, batch: list[int], training: bool, torch: Any) -> Any:
    """``model`` on a zero batch of shape ``batch`` (with gradients in training mode)."""
    try:
        with torch.set_grad_enabled(training):
            return model(torch.zeros(*batch))
    except BaseException as exc:  # noqa: BLE001
        mode = "training" if training else "evaluation"
        hint = ""
        if batch[0] != CHECK_BATCHES[0]:  # another batch size went through
            hint = (
                f" (a batch of {CHECK_BATCHES[0]} went through: a model must take any batch "
                "size, each rank's share of a batch and an epoch's last batch differ)"
            )
        raise ModelError(
            f"model {name!r}: a batch of shape {batch} fails in forward ({mode} mode): "
            f"{raised(exc)}{hint}"
        ) from None


def expect_shape(name: str, out: Any, batch: list[int], num_classes: int, training: bool) -> None:
    got = list(getattr(out, "shape", []))
    if got != [batch[0], num_classes]:
        mode = "training" if training else "evaluation"
        raise ModelError(
            f"model {name!r}: a batch of shape {batch} gives output shape {got} in {mode} "
            f"mode, expected [{batch[0]}, {num_classes}] (one logit per class)"
        )


def unused_parameters(model: Any, out: Any) -> tuple[str, ...]:
    """The trainable parameters that get no gradient from ``out`` (a training-mode output)."""
    model.zero_grad(set_to_none=True)
    out.float().sum().backward()
    return tuple(n for n, p in model.named_parameters() if p.requires_grad and p.grad is None)
