"""``format: digits-csv``: scikit-learn's ``digits.csv.gz`` (the built-in ``digits``): rows of 64
pixel values 0..16 (8x8 greyscale) then the label; pixels are scaled to 0..255."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from clusterbench.formats import FormatError, Images, check_classes, gunzip, labels_as_classes

FILES = (1,)
SUFFIXES = (".csv.gz",)
RESIZES = False
#: Height, width and channels of one image.
SHAPE = (8, 8, 1)


def decode(
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    (path,) = files
    h, w, c = SHAPE
    text = gunzip(path).decode("ascii", errors="replace")
    try:
        table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.int64, ndmin=2)
    except ValueError as exc:
        raise FormatError(f"{path.name}: not a table of integers ({exc})") from exc
    if table.shape[0] == 0 or table.shape[1] != h * w * c + 1:
        raise FormatError(
            f"{path.name}: expected rows of {h * w * c} pixels + 1 label, got shape {table.shape}"
        )
    pixels = table[:, :-1]
    if pixels.min() < 0 or pixels.max() > 16:
        raise FormatError(f"{path.name}: pixel values must lie in 0..16")
    scaled = np.rint(pixels * (255 / 16)).astype(np.uint8).reshape(-1, h, w, c)
    labels, names = labels_as_classes(table[:, -1], class_names, path.name)
    check_classes(names, path.name)
    return Images(scaled, labels, None, None, names)
