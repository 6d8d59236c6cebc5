"""``format: npz``: one ``.npz`` (never pickled) with ``x`` (N,H,W) or (N,H,W,C) uint8 and ``y``
(N,) labels: strings (class names: their sorted distinct values) or integers (class names:
their distinct values, as text), or integers 0..K-1 with a ``classes`` array of K names."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from clusterbench.formats import FormatError, Images, as_nhwc, check_classes, classes_from_labels

FILES = (1,)
SUFFIXES = None
RESIZES = False


def decode(
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    (path,) = files
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise FormatError(
            f"{path.name}: not a readable .npz (truncated or corrupt?): {exc}"
        ) from None
    if missing := [key for key in ("x", "y") if key not in arrays]:
        raise FormatError(f"{path.name}: lacks array(s) {missing} (has {sorted(arrays)})")
    x = as_nhwc(arrays["x"], f"{path.name}: x")
    y = arrays["y"]
    if len(y) != len(x):
        raise FormatError(f"{path.name}: {len(x)} images in x but {len(y)} labels in y")
    if "classes" in arrays:
        names = tuple(str(n) for n in arrays["classes"].tolist())
        if y.dtype.kind not in "iu" or (y.size and (y.min() < 0 or y.max() >= len(names))):
            raise FormatError(
                f"{path.name}: with a 'classes' array of {len(names)} names, y must hold "
                f"integers 0..{len(names) - 1}"
            )
        labels = y.astype(np.int64)
    else:
        labels, names = classes_from_labels(y, f"{path.name}: y")
    check_classes(names, path.name)
    return Images(x, labels, None, None, names)
