"""uint8 images as stored -> the normalised float input of a network."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def normalize_images(images: Any, mean: Sequence[float] | Any, std: Sequence[float] | Any) -> Any:
    """uint8 ``(N, H, W, C)`` images -> float32 NCHW ``(x / 255 - mean) / std`` per channel.

    ``images`` may be a NumPy array or a tensor (on any device; the result stays there). The
    result is a permuted view of channels-last memory: NCHW in shape, channels-last in strides
    (``.contiguous()`` makes it NCHW in memory too).
    """
    import torch

    x = torch.as_tensor(images)
    if x.ndim != 4:
        raise ValueError(f"expected (N, H, W, C) images, got shape {tuple(x.shape)}")
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    x = x.permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
    return (x - mean_t) / std_t


def input_shape(image_shape: Sequence[int]) -> list[int]:
    """The network's ``[C, H, W]`` of images stored ``[H, W, C]``."""
    height, width, channels = image_shape
    return [channels, height, width]
