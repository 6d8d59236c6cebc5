"""``format: idx``: MNIST-style gzipped IDX files: images (idx3) then labels (idx1) of the
training split, optionally followed by those of an official test split (the built-in
``mnist``)."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from clusterbench.formats import (
    FormatError,
    Images,
    as_nhwc,
    check_classes,
    gunzip,
    labels_as_classes,
)

FILES = (2, 4)
SUFFIXES = None
RESIZES = False


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """An unsigned-byte IDX array (magic ``0x000008<ndim>``) from a gzipped file."""
    data = gunzip(path)
    header = 4 + 4 * ndim
    if len(data) < header:
        raise FormatError(f"{path.name}: {len(data)} bytes is too short for an IDX header")
    if data[:2] != b"\0\0" or data[2] != 0x08 or data[3] != ndim:
        raise FormatError(
            f"{path.name}: bad IDX magic number 0x{data[:4].hex()}, expected "
            f"0x000008{ndim:02x} (unsigned bytes, {ndim} dimension(s))"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = math.prod(dims)
    if len(data) - header != expected:
        raise FormatError(
            f"{path.name}: header dimensions {dims} need {expected} data bytes, the file has "
            f"{len(data) - header} (truncated or corrupt)"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def idx_pair(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    images, labels = read_idx(images_path, 3), read_idx(labels_path, 1)
    if len(images) != len(labels):
        raise FormatError(
            f"{images_path.name} has {len(images)} images but {labels_path.name} has "
            f"{len(labels)} labels"
        )
    return as_nhwc(images, images_path.name), labels


def decode(
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    x_train, y_train = idx_pair(files[0], files[1])
    x_test = y_test = None
    if len(files) == 4:
        x_test, y_test = idx_pair(files[2], files[3])
        if x_test.shape[1:] != x_train.shape[1:]:
            raise FormatError(
                f"{files[2].name}: test images are {x_test.shape[1:]}, training images "
                f"{x_train.shape[1:]}"
            )
    if class_names is not None:  # each split's labels index the known classes
        y_train, names = labels_as_classes(y_train, class_names, files[1].name)
        if y_test is not None:
            y_test, _ = labels_as_classes(y_test, class_names, files[3].name)
    else:
        labels = y_train if y_test is None else np.concatenate([y_train, y_test])
        index, names = labels_as_classes(labels, None, files[1].name)
        y_train, y_test = index[: len(y_train)], None if y_test is None else index[len(y_train) :]
    check_classes(names, files[1].name)
    return Images(x_train, y_train, x_test, y_test, names)
