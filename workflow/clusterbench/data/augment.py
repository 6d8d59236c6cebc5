"""Data augmentation of image training data (the run key ``augment``), reproducible: every
random choice is a function of the run's seed, the epoch and the sample's index in the training
split, so a run continued from a checkpoint draws what it would have drawn, and resident and
streamed runs draw alike.

* Arrays (resident or streamed): ``standard`` is a random crop of the image padded by
  :data:`PAD` zero pixels on each side, and a horizontal flip of half of them (the CIFAR
  recipe), done on the training device on the uint8 batch (:func:`crop_flip`), its offsets and
  flips drawn per epoch for every sample (:func:`crop_flip_table`).
* Image files (streamed): ``standard`` is a random-resized-crop (a box of 8% to 100% of the
  image's area, aspect ratio 3/4 to 4/3, resized to the input size; :func:`resized_crop_box`)
  and a horizontal flip for training, and for validation and test a centre crop of
  :data:`CROP_FRACTION` of the image's shorter side's scale (:func:`centre_crop_box`); ``none``
  resizes each image to the input size. Drawn per sample in the loader process
  (:func:`sample_rng`).
* ``auto`` (the default): ``standard`` for an image folder stored as files (the ImageNet-style
  recipe such data is trained with), ``none`` for arrays (what training did before ``augment``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Pixels of zero padding around an array image before its random crop.
PAD = 4
#: Validation and test images of a streamed image folder (augment: standard): the centre
#: crop's share of the image resized so that its shorter side is the input's (224 of 256).
CROP_FRACTION = 0.875
#: The random-resized-crop's range of the box's area (share of the image's) and aspect ratio.
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
#: Tags that keep the augmentation's random streams apart from the epoch's permutation's
#: (``numpy.random.default_rng([seed, epoch])``).
_TABLE_STREAM = 1
_SAMPLE_STREAM = 2


def effective(setting: str, storage: str) -> str:
    """What ``augment: setting`` does for data stored as ``storage`` (module docstring)."""
    if setting == "auto":
        return "standard" if storage == "files" else "none"
    return setting


def crop_flip_table(n: int, seed: int, epoch: int, pad: int = PAD) -> np.ndarray:
    """``(n, 3)`` int64: each training sample's crop offsets (row, column: 0 to ``2 * pad``)
    and flip (0 or 1) in ``epoch``."""
    rng = np.random.default_rng([seed, epoch, _TABLE_STREAM])
    table = np.empty((n, 3), dtype=np.int64)
    table[:, :2] = rng.integers(0, 2 * pad + 1, size=(n, 2))
    table[:, 2] = rng.integers(0, 2, size=n)
    return table


def crop_flip(images: Any, params: Any, pad: int = PAD) -> Any:
    """uint8 ``(N, H, W, C)`` images (a tensor, on any device) padded by ``pad`` zero pixels,
    cropped back to ``H x W`` at each image's offsets and flipped where its flag is set
    (``params``: its rows of :func:`crop_flip_table`, on the same device). One gather, no
    host synchronisation."""
    import torch
    import torch.nn.functional as F

    n, height, width, _ = images.shape
    padded = F.pad(images, (0, 0, pad, pad, pad, pad))
    rows = params[:, 0, None] + torch.arange(height, device=images.device)
    cols = params[:, 1, None] + torch.arange(width, device=images.device)
    cols = torch.where(params[:, 2, None] == 1, cols.flip(1), cols)
    batch = torch.arange(n, device=images.device)[:, None, None]
    return padded[batch, rows[:, :, None], cols[:, None, :]]


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The random stream of training sample ``index`` (of the training split) in ``epoch``."""
    return np.random.default_rng([seed, epoch, index, _SAMPLE_STREAM])


def resized_crop_box(
    rng: np.random.Generator, height: int, width: int
) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of a random-resized-crop of a ``height x width`` image: a box of
    :data:`SCALE` of its area and :data:`RATIO` of aspect (width / height), where one fits in
    10 tries, else the largest centred box within the ratios (torchvision's algorithm)."""
    area = height * width
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        h, w = height, round(height * RATIO[1])
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def centre_crop_box(height: int, width: int, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of the part of a ``height x width`` image that a resize (its
    shorter side scaled to the input's over :data:`CROP_FRACTION`) and a centre crop of
    ``size`` keep: cropping it and resizing it to ``size`` does both in one step."""
    out_h, out_w = size
    scale = max(out_h / height, out_w / width) / CROP_FRACTION
    h = min(height, max(1, round(out_h / scale)))
    w = min(width, max(1, round(out_w / scale)))
    return (height - h) // 2, (width - w) // 2, h, w
