"""The models a run can train, by name: families of models, one plugin module per family.

A run's ``model`` is one of:

* a name a family module of this package gives (:mod:`clusterbench.core.registry`): ``small_cnn``
  and ``resnet`` (:mod:`clusterbench.models.cnn`), ...;
* ``torchvision.<name>``: a classification model torchvision builds, randomly initialised
  (:mod:`clusterbench.models.torchvision`; weights are never downloaded);
* ``gpt-tiny``, ``gpt2-small``, ``gpt2-medium``: decoder-only language models on byte tokens
  (:mod:`clusterbench.models.gpt`);
* ``package.module:callable``, the user's own model: a callable importable from the working
  directory or the environment, called as ``callable(num_classes, input_shape)`` and
  returning an ``nn.Module`` (:mod:`clusterbench.models.custom`).

A family module defines ``MODELS``, a mapping of names to :class:`ModelSpec`, and may define
``resolve(name) -> ModelSpec | None`` for names it answers by pattern (``torchvision.<name>``).
Family modules import nothing heavy at import time: the config check resolves every run's
model while the Snakefile is parsed; a spec's ``build`` imports torch when called.

Every model is built as ``build(num_classes, input_shape)``: ``input_shape`` is ``[C, H, W]``
for images and ``[T]`` (the sequence length) for tokens. ``model.pt``'s ``arch`` is
``{"model", "num_classes", "input_shape"}``: :func:`build_model` rebuilds the network from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterbench.core.registry import Registry, unknown_message

#: Model families: the modules of this package.
FAMILIES = Registry("clusterbench.models", "model family", underscores=True)

#: What a model learns from its input: classes of images, or the next token of a text.
TASKS = ("classification", "language-model")


class ModelError(ValueError):
    """A model name that names no model, or a model that cannot be built as asked."""


@dataclass(frozen=True)
class ModelSpec:
    """One model: how to build it and what it trains on.

    ``build(num_classes, input_shape)`` returns the untrained ``nn.Module``. ``task`` is one of
    :data:`TASKS`: ``classification`` models take images ``[C, H, W]`` and give one logit per
    class; ``language-model`` models take tokens ``[T]`` and give, per position, one logit per
    vocabulary entry. ``convolutional``: its convolutions are faster in the channels-last memory
    format (``channels_last: auto`` picks it). ``input_size``: the ``[H, W]`` the model is made
    for, used by data that has no size of its own (synthetic data, images resized on the fly);
    None: any. ``channels``: the image channels it takes (None: any); ``min_size``: the
    smallest image side it takes. ``context``: the longest sequence a language model takes
    (its learned positions), also the length of data that has none of its own.
    ``sides``: why the network cannot take images of ``height`` x ``width`` (None: it can),
    beyond ``min_size`` (a vision transformer's square side, a multiple of its patch): pure,
    checked before any job where the data's size is known, and again when it is built.
    """

    name: str
    build: Callable[[int, Sequence[int]], Any]
    task: str = "classification"
    convolutional: bool = True
    input_size: tuple[int, int] | None = None
    description: str = ""
    channels: int | None = None
    min_size: int = 1
    context: int | None = None
    sides: Callable[[int, int], str | None] | None = None


#: Why a run key or model name asking for pretrained weights is refused.
NO_WEIGHTS = (
    "weights are never downloaded: every model trains from random initialisation (drop "
    "'weights'/'pretrained')"
)


def builtin_models() -> dict[str, ModelSpec]:
    """Every model a family names, by name."""
    found: dict[str, ModelSpec] = {}
    for module in FAMILIES.modules().values():
        found.update(getattr(module, "MODELS", {}))
    return found


def resolve(name: str) -> ModelSpec:
    """The spec of model ``name``; :class:`ModelError` naming the closest names otherwise."""
    if not isinstance(name, str) or not name:
        raise ModelError(f"a model is a name, got {name!r}")
    named = builtin_models()
    if name in named:
        return named[name]
    for module in FAMILIES.modules().values():
        answer = getattr(module, "resolve", None)
        spec = answer(name) if answer is not None else None
        if spec is not None:
            return spec
    raise ModelError(unknown_message("model", name, sorted(named)) + suggestions(name))


def suggestions(name: str) -> str:
    """What else a model name may be: names the families answering by pattern find close to
    ``name`` (``suggest(name)``: ``resnet50`` -> ``torchvision.resnet50``), then their hints."""
    near = [
        found
        for module in FAMILIES.modules().values()
        for found in (getattr(module, "suggest", None) or (lambda _: []))(name)
    ]
    return (f"; did you mean {' or '.join(near)}" if near else "") + family_hints()


def family_hints() -> str:
    """What else a model name may be, from the families that answer by pattern."""
    hints = [
        getattr(module, "HINT", "")
        for module in FAMILIES.modules().values()
        if getattr(module, "HINT", "")
    ]
    return "".join(f"; or {hint}" for hint in hints)


def problems(name: Any, where: str) -> list[str]:
    """A message naming ``where`` if ``name`` is no model (checked before any job)."""
    try:
        resolve(name)
    except ModelError as exc:
        return [f"{where}: {exc}"]
    return []


def fit_problems(model: str, task: str, input_shape: Sequence[int] | None) -> list[str]:
    """Why model ``model`` cannot train on data of ``task`` whose network input is
    ``input_shape`` (``[C, H, W]``, ``[T]``; None: known only once the data is read): each a
    sentence without a key path (the caller names the keys). Nothing for a model that is no
    model (:func:`problems` names it)."""
    try:
        spec = resolve(model)
    except ModelError:
        return []
    data = {"classification": "images", "language-model": "token sequences"}
    kind = {"classification": "a classification model", "language-model": "a language model"}
    if spec.task != task:
        return [
            f"{model!r} is {kind[spec.task]}, which trains on {data[spec.task]}, but the "
            f"dataset holds {data[task]}: pair it with a dataset of {data[spec.task]}"
        ]
    if input_shape is None:
        return []
    if task == "language-model":
        (length,) = input_shape
        if spec.context is not None and length > spec.context:
            return [
                f"sequences of {length} tokens are longer than the context of {model!r} "
                f"({spec.context} tokens: its learned positions)"
            ]
        return []
    channels, *sides = input_shape
    found = []
    if spec.channels is not None and channels is not None and channels != spec.channels:
        found.append(f"{model!r} takes {spec.channels}-channel images, the data has {channels}")
    if min(sides) < spec.min_size:
        found.append(
            f"{model!r} takes images of at least {spec.min_size}x{spec.min_size} pixels, the "
            f"data's are {sides[0]}x{sides[1]}"
        )
    elif spec.sides is not None and (why := spec.sides(*sides)):
        found.append(f"{model!r} {why}")
    return found


def architecture(model: str, num_classes: int, input_shape: Sequence[int]) -> dict[str, Any]:
    """``model.pt``'s ``arch``: what :func:`build_model` needs to build the network again."""
    return {"model": model, "num_classes": int(num_classes), "input_shape": list(input_shape)}


def arch_from(arch: Mapping[str, Any]) -> dict[str, Any]:
    """An ``arch`` as :func:`architecture` writes it; an older ``model.pt``'s ``{"model",
    "in_channels", "num_classes", "image_size"}`` is read as the same network."""
    if "input_shape" in arch:
        return dict(arch)
    size = arch["image_size"]
    height, width = (size, size) if isinstance(size, int) else size
    return architecture(arch["model"], arch["num_classes"], [arch["in_channels"], height, width])


def build_model(model: str, num_classes: int, input_shape: Sequence[int]) -> Any:
    """The untrained network ``model`` for ``num_classes`` classes (or vocabulary entries) and
    inputs of ``input_shape``; the arguments are ``model.pt``'s ``arch``."""
    spec = resolve(model)
    if num_classes < 2:
        raise ModelError(f"model {model!r}: need num_classes >= 2, got {num_classes}")
    return spec.build(int(num_classes), [int(s) for s in input_shape])
