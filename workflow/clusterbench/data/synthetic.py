"""Synthetic data (``format: synthetic``, ``synthetic-text``), generated on the device that
uses it: every rank of a run generates the same data from the dataset's ``split_seed``, and
the evaluate stage the same test split, without any file.

Every byte (pixel, token) and label is a hash of the seed, the split, what it is and its
index: integer arithmetic, exact on any device, so the data is the same on a CPU and a GPU,
whatever the number of ranks, and costs no random-number state (a resumed run gets it again).
Pixels and tokens are uniform over 0..255 and labels over the classes, all independent: a
model can learn nothing from them (the report says "synthetic: accuracy not meaningful"), and
the throughput is what a benchmark measures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from clusterbench.data.resident import ResidentImages

#: The splits' numbers in the hash.
SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
#: What is hashed: pixels or tokens, labels.
BYTES, LABELS = 1, 2
#: Mean and standard deviation of uniform bytes 0..255 on the 0..1 scale (per channel).
PIXEL_MEAN = 127.5 / 255
PIXEL_STD = math.sqrt((256**2 - 1) / 12) / 255
#: Hashes made at once (int64 intermediates: 8 bytes each).
CHUNK = 1 << 22
_M32 = 0xFFFFFFFF


def _mix(x: Any) -> Any:
    """A 32-bit integer hash of each element of ``x`` (int64 holding values below 2**32; no
    product exceeds 2**59, so nothing overflows on any device)."""
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M32
    return x ^ (x >> 16)


def stream_key(seed: int, split: str, what: int) -> int:
    """The hash key of one stream of values: a seed, a split, pixels/tokens or labels."""
    import torch

    parts = torch.tensor([seed & _M32, (seed >> 32) & _M32, SPLIT_IDS[split] * 4 + what])
    key = 0
    for part in parts.tolist():
        key = int(_mix(torch.tensor(key ^ part)))
    return key


def _hash_range(start: int, stop: int, key: int, device: Any) -> Any:
    """The 32-bit hashes (int64) of the indices ``start..stop-1`` under ``key``; an index
    above 2**32 changes the key of its upper half."""
    import torch

    i = torch.arange(start, stop, device=device)
    return _mix((i & _M32) ^ _mix((i >> 32) ^ key))


def hashed(count: int, key: int, device: Any) -> Any:
    """``count`` 32-bit hashes (int64) of the indices 0..count-1 under ``key``, on
    ``device``."""
    import torch

    out = torch.empty(count, dtype=torch.int64, device=device)
    for start in range(0, count, CHUNK):
        stop = min(start + CHUNK, count)
        out[start:stop] = _hash_range(start, stop, key, device)
    return out


def uniform_bytes(count: int, key: int, device: Any) -> Any:
    """``count`` uint8 values, uniform over 0..255: the four bytes of each hash, written a
    chunk at a time (no int64 copy of the whole)."""
    import torch

    out = torch.empty((count + 3) // 4 * 4, dtype=torch.uint8, device=device)
    words = out.view(torch.int32)
    for start in range(0, len(words), CHUNK):
        stop = min(start + CHUNK, len(words))
        h = _hash_range(start, stop, key, device)
        words[start:stop] = torch.where(h >= 2**31, h - 2**32, h).to(torch.int32)
    return out[:count]


def images(
    seed: int, split: str, samples: int, shape: Sequence[int], classes: int, device: Any
) -> tuple[Any, Any]:
    """``samples`` uint8 images ``(N, H, W, C)`` (as preprocessed images are stored) of
    ``shape`` ``[C, H, W]`` and their int64 labels in ``0..classes-1``, on ``device``."""
    channels, height, width = shape
    x = uniform_bytes(samples * channels * height * width, stream_key(seed, split, BYTES), device)
    y = hashed(samples, stream_key(seed, split, LABELS), device) % classes
    return x.view(samples, height, width, channels), y


def sequences(seed: int, split: str, samples: int, seq_len: int, device: Any) -> tuple[Any, Any]:
    """``samples`` uint8 token sequences ``(N, T)`` and their next tokens ``(N, T)`` (views of
    ``N`` sequences of ``T + 1``), on ``device``."""
    tokens = uniform_bytes(samples * (seq_len + 1), stream_key(seed, split, BYTES), device)
    tokens = tokens.view(samples, seq_len + 1)
    return tokens[:, :-1], tokens[:, 1:]


def split_counts(meta: Mapping[str, Any]) -> dict[str, int]:
    return {split: int(n) for split, n in meta["counts"].items()}


class SyntheticImages(ResidentImages):
    """Synthetic images resident on the training device: served as preprocessed images are
    (:class:`~clusterbench.data.resident.ResidentImages`), normalised with the mean and
    standard deviation of uniform bytes."""

    def __init__(
        self,
        meta: Mapping[str, Any],
        shape: Sequence[int],
        device: Any,
        seed: int,
        augment: str = "none",
    ) -> None:
        import torch

        counts, data_seed = split_counts(meta), int(meta["seed"])
        classes = int(meta["num_classes"])
        self.device, self.seed, self.augment = device, seed, augment
        self.train_x, self.train_y = images(
            data_seed, "train", counts["train"], shape, classes, device
        )
        self.val_x, self.val_y = images(data_seed, "val", counts["val"], shape, classes, device)
        channels = int(shape[0])
        self.mean = torch.full((channels,), PIXEL_MEAN, dtype=torch.float32, device=device)
        self.std = torch.full((channels,), PIXEL_STD, dtype=torch.float32, device=device)
        self.num_classes = classes
        self.input_shape = [int(s) for s in shape]
        self.normalisation = {"mean": [PIXEL_MEAN] * channels, "std": [PIXEL_STD] * channels}
