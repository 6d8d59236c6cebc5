"""Dataset formats: how a dataset's files are decoded, one plugin module per format.

A built-in dataset names its format (:mod:`clusterbench.config.datasets`); a dataset declared in the
config gives one (``datasets.<name>.format``). Each module of this package is one format
(:mod:`clusterbench.core.registry`; ``image-folder`` is ``image_folder.py``) and provides:

``FILES``       how many files the format takes (a tuple of the allowed counts; ``(0,)``: none);
``SUFFIXES``    the file-name endings it accepts (None: any);
``RESIZES``     whether ``image_size`` applies (images resized to it);
``TASK``        what its data trains (:data:`clusterbench.models.TASKS`): ``classification``
                (images and labels; the default) or ``language-model`` (token sequences);
``SYNTHETIC``   True for data generated where it trains (no files; the preprocess stage
                writes ``meta.json`` alone, :mod:`clusterbench.data.synthetic`);
``KEYS``, ``OPTIONAL_KEYS``  the dataset keys of :data:`FORMAT_KEYS` it requires and takes;
                the others are refused for it;
``EXTRACTS``    (optional) its images can be stored as files, extracted and decoded per batch
                by a streamed run's loader (``storage: files``: :mod:`clusterbench.config.storage`);

and, to read its files, an image format
``decode(files, image_size, class_names)``  the dataset's files (in the config's order) ->
                :class:`Images`; ``class_names`` (a built-in dataset's, known in advance) makes
                integer labels indices into them, else the classes come from the data;

a token format ``tokens(files)`` -> the files' byte tokens, one uint8 array.

Decoders return images ``(N, H, W, C)`` uint8 with C = 1 or 3, labels ``(N,)`` int64 and the
class names, which come from the data; an official test split when the files hold one. Every
problem raises :class:`FormatError` naming the file. The preprocess stage
(:mod:`clusterbench.preprocess`) splits and writes them.

The modules import only the standard library and NumPy at import time (the config check reads
``FILES``, ``SUFFIXES`` and ``RESIZES`` while the Snakefile is parsed).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from clusterbench.core.registry import Registry

#: The dataset formats: the schema's choices of a declared dataset's ``format``.
FORMATS = Registry("clusterbench.formats", "dataset format")


#: Dataset keys only some formats take (a format's ``KEYS`` and ``OPTIONAL_KEYS``).
FORMAT_KEYS = ("shape", "classes", "samples", "seq_len")


def format_module(name: str) -> ModuleType:
    """The module of format ``name``."""
    return FORMATS.module(name)


def task_of(name: str) -> str:
    """What data of format ``name`` trains: ``classification`` or ``language-model``."""
    return getattr(format_module(name), "TASK", "classification")


def is_synthetic(name: str) -> bool:
    """Whether data of format ``name`` is generated where it trains (it has no files)."""
    return bool(getattr(format_module(name), "SYNTHETIC", False))


def keys_of(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The keys of :data:`FORMAT_KEYS` format ``name`` requires, and those it also takes."""
    module = format_module(name)
    return tuple(getattr(module, "KEYS", ())), tuple(getattr(module, "OPTIONAL_KEYS", ()))


def decode(
    name: str,
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    """``files`` decoded as format ``name``."""
    return format_module(name).decode(list(files), image_size, class_names)


class FormatError(ValueError):
    """A dataset's file cannot be read as its format says."""


@dataclass
class Images:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    class_names: tuple[str, ...]


def classes_from_labels(labels: np.ndarray, where: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Label indices 0..K-1 and the K class names from arbitrary labels (sorted distinct)."""
    if labels.ndim != 1:
        raise FormatError(f"{where}: labels must be one-dimensional, got shape {labels.shape}")
    if labels.dtype.kind in "US":
        values = labels.astype(str)
    elif labels.dtype.kind in "iu":
        values = labels
    else:
        raise FormatError(f"{where}: labels must be integers or strings, got dtype {labels.dtype}")
    names, index = np.unique(values, return_inverse=True)
    return index.astype(np.int64), tuple(str(n) for n in names)


def labels_as_classes(
    labels: np.ndarray, class_names: Sequence[str] | None, where: str
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Label indices and class names: with ``class_names`` known in advance, integer labels
    must index them (0..K-1); without, they come from the labels (:func:`classes_from_labels`)."""
    if class_names is None:
        return classes_from_labels(labels, where)
    k = len(class_names)
    if labels.dtype.kind not in "iu" or (labels.size and (labels.min() < 0 or labels.max() >= k)):
        found = f"{labels.min()}..{labels.max()}" if labels.size else "none"
        raise FormatError(f"{where}: labels must lie in 0..{k - 1}, found {found}")
    return labels.astype(np.int64), tuple(class_names)


def check_classes(class_names: Sequence[str], where: str) -> None:
    if len(class_names) < 2:
        raise FormatError(
            f"{where}: {len(class_names)} class(es) {list(class_names)}: a classification "
            "benchmark needs at least 2"
        )


def as_nhwc(x: np.ndarray, where: str) -> np.ndarray:
    if x.dtype != np.uint8:
        raise FormatError(f"{where}: images must be uint8 (0..255), got dtype {x.dtype}")
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[-1] not in (1, 3):
        raise FormatError(
            f"{where}: images must be (N, H, W) or (N, H, W, C) with C = 1 or 3, "
            f"got shape {x.shape}"
        )
    if min(x.shape[1:3]) < 4:
        raise FormatError(f"{where}: images of {x.shape[1]}x{x.shape[2]} are too small (< 4)")
    return np.ascontiguousarray(x)


def gunzip(path: Path) -> bytes:
    """The gunzipped bytes of ``path``; :class:`FormatError` naming it if they cannot be read."""
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(f"{path.name}: corrupt or truncated gzip data ({exc})") from exc
