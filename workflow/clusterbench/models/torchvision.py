"""torchvision's classification models by name: ``model: torchvision.<name>`` (e.g.
``torchvision.resnet50``, ``torchvision.vit_b_16``), randomly initialised.

Answered by pattern (:func:`resolve`) from a static table of torchvision 0.28.0's
classification models (:data:`CLASSIFIERS`, checked against the installed torchvision by
tests/test_torchvision_models.py), so the config check imports no torchvision. Each is built
with ``torchvision.models.get_model(name, weights=None, num_classes=K)`` for the data's input
shape:

* weights are never downloaded: a name asking for them (``torchvision.resnet50(weights=...)``,
  ``...pretrained...``) is refused, as is a ``weights`` or ``pretrained`` run key
  (:data:`clusterbench.models.NO_WEIGHTS`);
* the model's own input size (``ModelSpec.input_size``, the side its torchvision weights were
  trained at: 224, ``inception_v3`` 299, ``efficientnet_b7`` 600) is used by data without a size
  of its own (synthetic images without ``shape``); data of another size is taken as it is where
  the network allows (its smallest side, ``ModelSpec.min_size``, is checked before any job; the
  vision transformers are built for the data's side, which must be square and a multiple of
  their patch);
* ``inception_v3`` and ``googlenet`` are built without their auxiliary classifiers
  (``aux_logits=False``): in training they give the main logits alone, and no parameter goes
  without a gradient (which DDP and Horovod would wait for);
* they take 3-channel (RGB) images.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from clusterbench.models import NO_WEIGHTS, ModelError, ModelSpec

#: The torchvision release whose models :data:`CLASSIFIERS` lists (pyproject.toml pins it).
TORCHVISION_VERSION = "0.28.0"

#: torchvision 0.28.0's classification models
#: (``torchvision.models.list_models(module=torchvision.models)``): name -> (input size: the
#: smallest side its weights were trained at; the smallest image side the network takes).
CLASSIFIERS: dict[str, tuple[int, int]] = {
    "alexnet": (224, 63),
    "convnext_base": (224, 32),
    "convnext_large": (224, 32),
    "convnext_small": (224, 32),
    "convnext_tiny": (224, 32),
    "densenet121": (224, 29),
    "densenet161": (224, 29),
    "densenet169": (224, 29),
    "densenet201": (224, 29),
    "efficientnet_b0": (224, 1),
    "efficientnet_b1": (240, 1),
    "efficientnet_b2": (288, 1),
    "efficientnet_b3": (300, 1),
    "efficientnet_b4": (380, 1),
    "efficientnet_b5": (456, 1),
    "efficientnet_b6": (528, 1),
    "efficientnet_b7": (600, 1),
    "efficientnet_v2_l": (480, 33),
    "efficientnet_v2_m": (480, 33),
    "efficientnet_v2_s": (384, 33),
    "googlenet": (224, 15),
    "inception_v3": (299, 75),
    "maxvit_t": (224, 224),
    "mnasnet0_5": (224, 1),
    "mnasnet0_75": (224, 1),
    "mnasnet1_0": (224, 1),
    "mnasnet1_3": (224, 1),
    "mobilenet_v2": (224, 1),
    "mobilenet_v3_large": (224, 1),
    "mobilenet_v3_small": (224, 1),
    "regnet_x_16gf": (224, 1),
    "regnet_x_1_6gf": (224, 1),
    "regnet_x_32gf": (224, 1),
    "regnet_x_3_2gf": (224, 1),
    "regnet_x_400mf": (224, 1),
    "regnet_x_800mf": (224, 1),
    "regnet_x_8gf": (224, 1),
    "regnet_y_128gf": (224, 1),
    "regnet_y_16gf": (224, 1),
    "regnet_y_1_6gf": (224, 1),
    "regnet_y_32gf": (224, 1),
    "regnet_y_3_2gf": (224, 1),
    "regnet_y_400mf": (224, 1),
    "regnet_y_800mf": (224, 1),
    "regnet_y_8gf": (224, 1),
    "resnet101": (224, 1),
    "resnet152": (224, 1),
    "resnet18": (224, 1),
    "resnet34": (224, 1),
    "resnet50": (224, 1),
    "resnext101_32x8d": (224, 1),
    "resnext101_64x4d": (224, 1),
    "resnext50_32x4d": (224, 1),
    "shufflenet_v2_x0_5": (224, 1),
    "shufflenet_v2_x1_0": (224, 1),
    "shufflenet_v2_x1_5": (224, 1),
    "shufflenet_v2_x2_0": (224, 1),
    "squeezenet1_0": (224, 21),
    "squeezenet1_1": (224, 17),
    "swin_b": (224, 1),
    "swin_s": (224, 1),
    "swin_t": (224, 1),
    "swin_v2_b": (256, 1),
    "swin_v2_s": (256, 1),
    "swin_v2_t": (256, 1),
    "vgg11": (224, 32),
    "vgg11_bn": (224, 32),
    "vgg13": (224, 32),
    "vgg13_bn": (224, 32),
    "vgg16": (224, 32),
    "vgg16_bn": (224, 32),
    "vgg19": (224, 32),
    "vgg19_bn": (224, 32),
    "vit_b_16": (224, 16),
    "vit_b_32": (224, 32),
    "vit_h_14": (224, 14),
    "vit_l_16": (224, 16),
    "vit_l_32": (224, 32),
    "wide_resnet101_2": (224, 1),
    "wide_resnet50_2": (224, 1),
}

PREFIX = "torchvision."
HINT = (
    "torchvision.<name> (a classification model of torchvision 0.28.0, e.g. torchvision.resnet50)"
)

#: Models whose training forward also returns auxiliary logits unless built without them.
AUX_LOGITS = ("inception_v3", "googlenet")
#: A name with a call: ``torchvision.resnet50(weights=...)``.
CALL = re.compile(r"(?P<name>[^()]*)\((?P<args>.*)\)\s*")
#: What in a name asks for pretrained weights.
WEIGHTS_WORDS = re.compile(r"weights|pretrained|imagenet|swag", re.IGNORECASE)

MODELS: dict[str, ModelSpec] = {}


def resolve(name: str) -> ModelSpec | None:
    """The spec of ``torchvision.<name>``; None for a name without the prefix."""
    if not name.startswith(PREFIX):
        return None
    short = name[len(PREFIX) :]
    call = CALL.fullmatch(short)
    if WEIGHTS_WORDS.search(short):
        raise ModelError(f"model {name!r}: {NO_WEIGHTS}; write {PREFIX}<name> alone")
    if call is not None:
        raise ModelError(
            f"model {name!r}: a model takes no arguments: write "
            f"{PREFIX}{call.group('name').strip()} (num_classes comes from the data, the input "
            "size from the data or the model)"
        )
    if re.match(r"models[.:]", short):
        raise ModelError(f"model {name!r}: write {PREFIX}{short[len('models.') :]}")
    if short not in CLASSIFIERS:
        near = difflib.get_close_matches(short, list(CLASSIFIERS), n=3, cutoff=0.5)
        closest = f"closest: {', '.join(PREFIX + n for n in near)}; " if near else ""
        raise ModelError(
            f"unknown torchvision model {name!r} ({closest}any of torchvision "
            f"{TORCHVISION_VERSION}'s {len(CLASSIFIERS)} classification models, listed by "
            "torchvision.models.list_models(module=torchvision.models))"
        )
    size, smallest = CLASSIFIERS[short]
    return ModelSpec(
        name,
        lambda classes, shape: build(short, classes, shape),
        convolutional=not short.startswith(("vit_", "swin")),
        input_size=(size, size),
        description=f"torchvision {short}, randomly initialised",
        channels=3,
        min_size=smallest,
        sides=(lambda h, w: patch_problem(short, h, w)) if short.startswith("vit_") else None,
    )


def patch_problem(name: str, height: int, width: int) -> str | None:
    """Why vision transformer ``name`` (``vit_b_16``) cannot take images of ``height`` x
    ``width``: it is built for square images whose side is a multiple of its patch."""
    patch = int(name.rsplit("_", 1)[1])
    if height == width and height % patch == 0:
        return None
    return (
        f"takes square images whose side is a multiple of its patch ({patch}), got {height}x{width}"
    )


def suggest(name: str) -> list[str]:
    """``torchvision.<name>`` for a name that is (close to) one of torchvision's but lacks the
    prefix: ``resnet50``, ``ResNet-50``."""
    plain = name.lower().replace("-", "")
    return [PREFIX + n for n in difflib.get_close_matches(plain, list(CLASSIFIERS), 3, 0.7)]


def build(name: str, num_classes: int, input_shape: Sequence[int]) -> Any:
    """torchvision's ``name`` for ``num_classes`` classes and images of ``input_shape``,
    randomly initialised; a batch of one such image is passed through it (in eval mode,
    without gradients) so that an input the network cannot take is named now, not at the
    first step."""
    import torch
    from torchvision import models

    if len(input_shape) != 3:
        raise ModelError(
            f"model torchvision.{name} takes images [C, H, W], got input shape {list(input_shape)}"
        )
    channels, height, width = input_shape
    kwargs: dict[str, Any] = {"num_classes": num_classes}
    if name.startswith("vit_"):
        problem = patch_problem(name, height, width)
        if problem:
            raise ModelError(f"model torchvision.{name}: {problem}")
        kwargs["image_size"] = height
    elif name == "maxvit_t":
        kwargs["input_size"] = (height, width)
    elif name in AUX_LOGITS:
        kwargs.update(aux_logits=False, init_weights=True)
    try:
        model = models.get_model(name, weights=None, **kwargs)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise cannot_take(name, input_shape, exc) from None
    check_forward(name, model, input_shape, torch)
    return model


def cannot_take(name: str, input_shape: Sequence[int], exc: BaseException) -> ModelError:
    """The network's own reason for refusing ``input_shape``, in one line."""
    reason = " ".join(str(exc).split())
    return ModelError(
        f"model 'torchvision.{name}' cannot take images of shape {list(input_shape)}: "
        f"{type(exc).__name__}: {reason}"
    )


def check_forward(name: str, model: Any, input_shape: Sequence[int], torch: Any) -> None:
    """A batch of one zero image through ``model`` (eval mode, CPU, no gradients; its mode is
    restored): :class:`ModelError` naming the model, the shape and the cause if it fails."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, *input_shape))
    except Exception as exc:  # noqa: BLE001 - the network's own reason, in one line
        raise cannot_take(name, input_shape, exc) from None
    finally:
        model.train(was_training)
