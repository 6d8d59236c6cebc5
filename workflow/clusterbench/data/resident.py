"""A run's data resident on its training device: every rank holds the whole training and
validation splits as tensors and takes its shard of each global batch by indexing them.

The training loop (:mod:`clusterbench.training.loop`) asks a data source for

- ``epoch_batches(epoch, batches, first, rank, size, shares=None)``: this rank's ``(inputs,
  targets)`` of each global batch ``[start, stop)`` of the epoch's sample order, from step
  ``first`` on (its share of each: :func:`clusterbench.data.order.shard_bounds`; ``shares``,
  uneven workers' weights, is given only where a run sets them);
- ``val_batches(rank, size)``: this rank's shard of the validation split, in slices;

and for ``task`` (:mod:`clusterbench.training.objectives`), ``units_per_sample`` (1 image; a
sequence's tokens), ``train_size``, ``num_classes``, ``input_shape`` (the network's) and
``normalisation`` (what ``model.pt`` records to prepare inputs again). Where a source has them,
``describe()`` (this rank's facts for ``run.json``'s ``data``, :mod:`clusterbench.data.source`)
and ``close()`` (called on every way out: a streamed source's loader processes end).

``augment: standard`` crops and flips each training batch on the device
(:mod:`clusterbench.data.augment`), drawn per epoch from the run's seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from clusterbench.data import augment as augmentation
from clusterbench.data.arrays import TrainingSplits
from clusterbench.data.images import input_shape, normalize_images
from clusterbench.data.order import epoch_permutation, shard_bounds

#: Validation batch size (per rank); inference only, so larger than any training batch.
EVAL_BATCH = 1024


class ResidentImages:
    """Images and labels of a preprocessed dataset, on ``device``; the network gets them
    normalised, in NCHW shape (channels-last in memory: the loop makes them contiguous in the
    run's memory format, :mod:`clusterbench.training.memory_format`)."""

    task = "classification"
    #: Units a sample counts for in the loss and throughput (one image).
    units_per_sample = 1

    def __init__(self, splits: TrainingSplits, device: Any, seed: int, augment: str = "none"):
        import torch

        def tensor(a: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device)

        meta = splits.meta
        self.device, self.seed, self.augment = device, seed, augment
        self.train_x, self.train_y = tensor(splits.train.x), tensor(splits.train.y)
        self.val_x, self.val_y = tensor(splits.val.x), tensor(splits.val.y)
        self.mean = torch.tensor(meta["mean"], dtype=torch.float32, device=device)
        self.std = torch.tensor(meta["std"], dtype=torch.float32, device=device)
        self.num_classes = int(meta["num_classes"])
        self.input_shape = input_shape(meta["image_shape"])
        self.normalisation = {
            "mean": [float(m) for m in meta["mean"]],
            "std": [float(s) for s in meta["std"]],
        }

    @property
    def train_size(self) -> int:
        return len(self.train_y)

    def inputs(self, images: Any) -> Any:
        """uint8 NHWC images on the device -> the normalised network input (an NCHW view of
        channels-last memory)."""
        return normalize_images(images, self.mean, self.std)

    def epoch_batches(
        self,
        epoch: int,
        batches: list[tuple[int, int]],
        first: int,
        rank: int,
        size: int,
        shares: list[float] | None = None,
    ) -> Iterator[tuple[Any, Any]]:
        import torch

        order = torch.from_numpy(epoch_permutation(self.train_size, self.seed, epoch))
        order = order.to(self.device)
        table = None
        if self.augment == "standard":
            table = augmentation.crop_flip_table(self.train_size, self.seed, epoch)
            table = torch.from_numpy(table).to(self.device)
        for start, stop in batches[first:]:
            lo, hi = shard_bounds(stop - start, size, rank, shares)
            idx = order[start + lo : start + hi]
            images = self.train_x[idx]
            if table is not None:
                images = augmentation.crop_flip(images, table[idx])
            yield self.inputs(images), self.train_y[idx]

    def val_batches(self, rank: int, size: int) -> Iterator[tuple[Any, Any]]:
        lo, hi = shard_bounds(len(self.val_y), size, rank)
        for start in range(lo, hi, EVAL_BATCH):
            stop = min(start + EVAL_BATCH, hi)
            yield self.inputs(self.val_x[start:stop]), self.val_y[start:stop]

    def describe(self) -> dict[str, Any]:
        """This rank's facts for ``run.json``'s ``data``."""
        return {"source": "resident", "augment": self.augment}

    def close(self) -> None:
        pass
