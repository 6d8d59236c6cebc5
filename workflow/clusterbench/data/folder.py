"""An image folder stored as files (:mod:`clusterbench.data.extract`), read by the loader: its
``index.json``, and each image decoded and transformed at the input size in a loader process.

The input size (``[H, W]``, :func:`input_size`) is the dataset's ``image_size`` where it gives
one, else the model's own (``ModelSpec.input_size``), else the images' own size when they all
share it. Each image is decoded (``torchvision.io.decode_image``: JPEG, PNG) to the dataset's
channels, then cropped and resized (bilinear, antialiased) as ``augment`` says
(:mod:`clusterbench.data.augment`): for training a random-resized-crop and a flip
(``standard``), keyed by the seed, the epoch and the image's index in the training split; for
validation and test a centre crop (``standard``); with ``none``, the whole image resized.

An image that cannot be read or decoded is returned as bad (its row and the reason), never
raised in the loader process: the training names its file (``on_bad_file: fail``) or leaves it
out of its batch and counts it (``skip``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.core import integrity
from clusterbench.data import DataError
from clusterbench.data import augment as augmentation

SPLITS = ("train", "val", "test")
COLUMNS = ("path", "member", "size", "sha256", "label", "split")


@dataclass(frozen=True)
class FolderIndex:
    """``index.json`` of the data dir ``root``: the columns, one entry per image."""

    root: Path
    paths: list[str]
    members: list[str]
    sizes: list[int]
    sha256: list[str]
    labels: np.ndarray
    splits: np.ndarray

    def rows(self, split: str) -> np.ndarray:
        """The index rows of ``split``'s images, in index order (sample i is row rows[i])."""
        return np.flatnonzero(self.splits == split)

    def name(self, row: int) -> str:
        """An image, as an error names it: its file and its name in the archive."""
        return f"{self.root / self.paths[row]} (archive member {self.members[row]})"

    def records(self) -> dict[str, dict[str, Any]]:
        """Each image's ``{"size", "sha256"}`` by its path (what staging checks a copy against)."""
        return {
            path: {"size": size, "sha256": digest}
            for path, size, digest in zip(self.paths, self.sizes, self.sha256, strict=True)
        }


def read_index(data_dir: Path, meta: Mapping[str, Any]) -> FolderIndex:
    """``index.json`` of ``data_dir``, checked against ``meta.json``'s record of it and its
    columns against each other and the meta's classes and counts."""
    marker = data_dir / "meta.json"
    integrity.check(marker, "files", integrity.remake_command(marker), prefix="index.json")
    path = data_dir / "index.json"
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
        columns = {key: index["files"][key] for key in COLUMNS}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: not the index preprocessing writes ({exc})") from None
    lengths = {key: len(value) for key, value in columns.items()}
    if len(set(lengths.values())) != 1:
        raise DataError(f"{path}: its columns differ in length: {lengths}")
    labels = np.asarray(columns["label"], dtype=np.int64)
    splits = np.asarray(columns["split"], dtype=object)
    if len(labels) and (labels.min() < 0 or labels.max() >= meta["num_classes"]):
        raise DataError(f"{path}: labels outside 0..{meta['num_classes'] - 1}")
    counts = {split: int((splits == split).sum()) for split in SPLITS}
    if counts != {split: meta["counts"][split] for split in SPLITS}:
        raise DataError(f"{path}: splits hold {counts}, meta.json says {meta['counts']}")
    return FolderIndex(
        data_dir,
        list(columns["path"]),
        list(columns["member"]),
        list(columns["size"]),
        list(columns["sha256"]),
        labels,
        splits,
    )


def input_size(meta: Mapping[str, Any], model_size: Sequence[int] | None, model: str) -> list[int]:
    """The ``[H, W]`` images are decoded at (module docstring); a :class:`DataError` naming
    the keys to set where nothing gives one."""
    for size in (meta.get("image_size"), model_size, meta.get("native_size")):
        if size:
            return [int(s) for s in size]
    raise DataError(
        f"dataset {meta.get('dataset')!r}: its images differ in size and neither the dataset "
        f"(image_size) nor model {model!r} gives an input size: set datasets."
        f"{meta.get('dataset')}.image_size: [height, width]"
    )


def reason(exc: BaseException) -> str:
    """Why an image could not be read, in one line: the decoder's message without the source
    location torchvision puts first (``decode_image, /.../decode_image.cpp:60, ...``)."""
    text = re.sub(r"^\w+, \S+\.(?:cpp|h):\d+, ", "", " ".join(str(exc).split()))
    return text.split(". ")[0].rstrip(".")[:200] or type(exc).__name__


class FileReader:
    """Reads images of an image folder stored as files by their index in a split, decoded and
    transformed at ``size`` (module docstring). Made in the training process and sent to each
    loader process (it holds only arrays and settings)."""

    def __init__(
        self,
        index: FolderIndex,
        size: Sequence[int],
        channels: int,
        augment: str,
        seed: int,
    ) -> None:
        self.root = str(index.root)
        self.paths = np.asarray(index.paths, dtype="S")
        self.labels = index.labels
        self.rows = {split: index.rows(split) for split in SPLITS}
        self.size = (int(size[0]), int(size[1]))
        self.channels, self.augment, self.seed = channels, augment, seed
        import torchvision.io  # noqa: F401 (here: the loader processes forked later have it)

    def count(self, split: str) -> int:
        return len(self.rows[split])

    def read(self, split: str, epoch: int | None, idx: np.ndarray) -> tuple[Any, Any, Any, list]:
        """Images ``idx`` of ``split``: uint8 ``(n, H, W, C)``, their labels and indices (the
        readable ones), and ``(row, reason)`` of each that could not be read."""
        import torch

        images, good, bad = [], [], []
        for i in idx.tolist():
            row = int(self.rows[split][i])
            try:
                images.append(self.image(split, epoch, i, row))
            except (RuntimeError, OSError, ValueError) as exc:
                bad.append((row, reason(exc)))
                continue
            good.append(i)
        height, width = self.size
        x = (
            torch.stack(images)
            if images
            else torch.empty((0, height, width, self.channels), dtype=torch.uint8)
        )
        kept = np.asarray(good, dtype=np.int64)
        y = torch.from_numpy(self.labels[self.rows[split][kept]])
        return x, y, torch.from_numpy(kept), bad

    def image(self, split: str, epoch: int | None, i: int, row: int) -> Any:
        """Image ``i`` of ``split`` (index row ``row``): uint8 ``(H, W, C)``."""
        import torch
        import torch.nn.functional as F
        from torchvision.io import ImageReadMode, decode_image, read_file

        mode = ImageReadMode.GRAY if self.channels == 1 else ImageReadMode.RGB
        image = decode_image(read_file(f"{self.root}/{self.paths[row].decode()}"), mode=mode)
        _, height, width = image.shape
        flip = False
        if self.augment == "standard" and split == "train":
            rng = augmentation.sample_rng(self.seed, epoch or 0, i)
            top, left, h, w = augmentation.resized_crop_box(rng, height, width)
            flip = bool(rng.integers(0, 2))
        elif self.augment == "standard":
            top, left, h, w = augmentation.centre_crop_box(height, width, self.size)
        else:
            top, left, h, w = 0, 0, height, width
        box = image[None, :, top : top + h, left : left + w]
        box = box.contiguous(memory_format=torch.channels_last)
        if (h, w) != self.size:
            box = F.interpolate(box, size=self.size, mode="bilinear", antialias=True)
        if flip:
            box = box.flip(-1)
        return box[0].permute(1, 2, 0).contiguous()


class EvalBatches:
    """A split of an image folder stored as files, for the evaluate stage: ``(images, labels)``
    as NumPy arrays, ``batch_size`` at a time, decoded by loader processes as the model was
    trained to take them; unreadable images stop it naming the file (``on_bad_file: fail``) or
    are left out and counted in ``skipped``."""

    def __init__(
        self, reader: FileReader, index: FolderIndex, split: str, batch_size: int, on_bad: str
    ) -> None:
        self.reader, self.index, self.split = reader, index, split
        self.batch_size, self.on_bad_file = batch_size, on_bad
        self.skipped: dict[str, str] = {}

    def __iter__(self) -> Any:
        import os

        from torch.utils.data import DataLoader

        from clusterbench.data.stream import Items, Reads

        items = Items()
        count = self.reader.count(self.split)
        items.items = [
            (self.split, None, np.arange(start, min(start + self.batch_size, count)))
            for start in range(0, count, self.batch_size)
        ]
        workers = max(0, min(4, len(os.sched_getaffinity(0)) - 1))
        loader = DataLoader(Reads(self.reader), batch_size=None, sampler=items, num_workers=workers)
        for x, y, _, bad in loader:
            for row, reason in bad:
                name = self.index.name(row)
                if self.on_bad_file == "fail":
                    raise DataError(f"{name} is not a readable image ({reason})")
                print(f"evaluate: skipping {name}: not a readable image ({reason})", flush=True)
                self.skipped[name] = reason
            if len(y):
                yield x.numpy(), y.numpy()


def eval_batches(
    data_dir: Path, split: str, batch_size: int, ckpt: Mapping[str, Any]
) -> tuple[dict[str, Any], EvalBatches]:
    """The ``meta`` (``image_shape``: what the images are made) and batches of ``split`` for
    the model of ``ckpt`` (``model.pt``: its input shape, and its ``input``: the run's
    ``augment`` and ``on_bad_file``)."""
    from clusterbench.config.storage import read_meta

    meta = read_meta(data_dir)
    index = read_index(data_dir, meta)
    _, height, width = ckpt["arch"]["input_shape"]
    settings = {"augment": "none", "on_bad_file": "fail", **(ckpt.get("input") or {})}
    reader = FileReader(index, (height, width), int(meta["channels"]), settings["augment"], 0)
    batches = EvalBatches(reader, index, split, batch_size, settings["on_bad_file"])
    return {**meta, "image_shape": [height, width, int(meta["channels"])]}, batches
