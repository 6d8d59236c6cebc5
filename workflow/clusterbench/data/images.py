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
    mean_t = torch.as_tensor(mean, dtype=torch.float32).tolist()
    std_t = torch.as_tensor(std, dtype=torch.float32).tolist()
    # (x / 255 - mean) / std in float32, channel by channel in place: the same operations as
    # broadcasting the per-channel (1, C, 1, 1) values (bit for bit), without the slow loop
    # of a broadcast over a last dimension of 3 (on the CPU, the loader's consumer)
    y = x.to(torch.float32).div_(255.0)
    for c, (m, s) in enumerate(zip(mean_t, std_t, strict=True)):
        y[..., c].sub_(m).div_(s)
    return y.permute(0, 3, 1, 2)


def input_shape(image_shape: Sequence[int]) -> list[int]:
    """The network's ``[C, H, W]`` of images stored ``[H, W, C]``."""
    height, width, channels = image_shape
    return [channels, height, width]
