"""The convolutional models for small images: ``small_cnn`` (digits, MNIST) and ``resnet`` (a
CIFAR-style ResNet-20); the networks are in :mod:`clusterbench.models._cnn_nets`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusterbench.models import ModelError, ModelSpec

#: Smallest image side the models accept (two 2x down-samplings must leave >= 2 pixels).
MIN_IMAGE_SIZE = 4


def image_channels(name: str, input_shape: Sequence[int]) -> int:
    """The channels of ``[C, H, W]``, checked: both sides at least :data:`MIN_IMAGE_SIZE`."""
    if len(input_shape) != 3:
        raise ModelError(f"model {name!r} takes images [C, H, W], got input shape {input_shape}")
    channels, *hw = input_shape
    if channels < 1 or min(hw) < MIN_IMAGE_SIZE:
        raise ModelError(
            f"model {name!r}: input shape {list(input_shape)} is too small: need >= 1 channel "
            f"and both sides >= {MIN_IMAGE_SIZE}"
        )
    return channels


def small_cnn(num_classes: int, input_shape: Sequence[int]) -> Any:
    from clusterbench.models._cnn_nets import SmallCNN

    return SmallCNN(image_channels("small_cnn", input_shape), num_classes)


def resnet(num_classes: int, input_shape: Sequence[int]) -> Any:
    from clusterbench.models._cnn_nets import ResNet

    return ResNet(image_channels("resnet", input_shape), num_classes)


MODELS = {
    "small_cnn": ModelSpec(
        "small_cnn", small_cnn, description="three conv-BN-ReLU stages, global pooling"
    ),
    "resnet": ModelSpec("resnet", resnet, description="CIFAR-style ResNet-20"),
}
