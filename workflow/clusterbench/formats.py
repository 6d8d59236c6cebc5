"""Decoders of the formats a dataset declared in the config may have (``datasets.<name>.format``).

Each takes the dataset's files (in the order the config lists them) and returns images
``(N, H, W, C)`` uint8 with C = 1 or 3, labels ``(N,)`` int64 and the class names, which come
from the data:

- ``npz``: one ``.npz`` (never pickled) with ``x`` (N,H,W) or (N,H,W,C) uint8 and ``y`` (N,)
  labels: strings (class names: their sorted distinct values) or integers (class names: their
  distinct values, as text), or integers 0..K-1 with a ``classes`` array of K names.
- ``image-folder``: one ``.zip``, ``.tar.gz`` or ``.tgz`` with one folder per class (the folder
  names, sorted, are the classes), optionally all under one top-level folder, of PNG or JPEG
  images; decoded once with Pillow, to greyscale when every image is, else to RGB, and resized
  to ``image_size`` [H, W] (required when the images differ in size).
- ``idx``: MNIST-style gzipped IDX files: images (idx3) then labels (idx1) of the training
  split, optionally followed by those of an official test split.
- ``cifar-binary``: a CIFAR-10-style binary tarball: ``data_batch_*.bin`` (training) and
  ``test_batch.bin`` (test) records of 1 label byte + 3072 bytes CHW 32x32 RGB; class names from
  ``batches.meta.txt`` when present.

Every problem raises :class:`FormatError` naming the file (and, where one applies, the config key).
"""

from __future__ import annotations

import io
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class FormatError(ValueError):
    """A declared dataset's file cannot be read as its format says."""


@dataclass
class Images:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    class_names: tuple[str, ...]


def _classes_from_labels(labels: np.ndarray, where: str) -> tuple[np.ndarray, tuple[str, ...]]:
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


def _check_classes(class_names: Sequence[str], where: str) -> None:
    if len(class_names) < 2:
        raise FormatError(
            f"{where}: {len(class_names)} class(es) {list(class_names)}: a classification "
            "benchmark needs at least 2"
        )


def _as_nhwc(x: np.ndarray, where: str) -> np.ndarray:
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


def decode_npz(files: Sequence[Path], image_size: Sequence[int] | None = None) -> Images:
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
    x = _as_nhwc(arrays["x"], f"{path.name}: x")
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
        labels, names = _classes_from_labels(y, f"{path.name}: y")
    _check_classes(names, path.name)
    return Images(x, labels, None, None, names)


def _archive_images(path: Path) -> list[tuple[PurePosixPath, bytes]]:
    """(path inside the archive, bytes) of every image file in a zip or tar.gz archive."""
    found = []
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    if not info.is_dir() and info.filename.lower().endswith(IMAGE_SUFFIXES):
                        found.append((PurePosixPath(info.filename), archive.read(info)))
        else:
            with tarfile.open(path, "r:gz") as archive:
                for member in archive:
                    if member.isfile() and member.name.lower().endswith(IMAGE_SUFFIXES):
                        found.append(
                            (PurePosixPath(member.name), archive.extractfile(member).read())
                        )
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise FormatError(f"{path.name}: corrupt or truncated archive ({exc})") from exc
    return found


def _class_of(paths: list[PurePosixPath], archive: str) -> list[str]:
    """Each image's class: its folder, under at most one top-level folder common to all."""
    parts = [p.parts for p in paths]
    if any(len(p) < 2 for p in parts):
        loose = next(p for p in paths if len(p.parts) < 2)
        raise FormatError(
            f"{archive}: {loose} is not in a class folder (one folder per class expected)"
        )
    tops = {p[0] for p in parts}
    strip = len(tops) == 1 and all(len(p) >= 3 for p in parts)
    return [p[1] if strip else p[0] for p in parts]


def decode_image_folder(files: Sequence[Path], image_size: Sequence[int] | None = None) -> Images:
    from PIL import Image, UnidentifiedImageError

    (path,) = files
    members = _archive_images(path)
    if not members:
        raise FormatError(f"{path.name}: no PNG or JPEG images in the archive")
    classes = _class_of([p for p, _ in members], path.name)
    names = tuple(sorted(set(classes)))
    _check_classes(names, path.name)
    images = []
    for (member, data), _ in zip(members, classes, strict=True):
        try:
            image = Image.open(io.BytesIO(data))
            image.load()
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise FormatError(f"{path.name}: {member} is not a readable image ({exc})") from exc
        images.append(image)
    grey = all(im.mode in ("1", "L", "I", "I;16", "F") for im in images)
    sizes = {im.size for im in images}  # (width, height)
    if image_size is None and len(sizes) > 1:
        shown = ", ".join(f"{w}x{h}" for w, h in sorted(sizes)[:4])
        raise FormatError(
            f"{path.name}: the images differ in size ({shown}{', ...' if len(sizes) > 4 else ''}, "
            "width x height): set image_size: [height, width] for this dataset to resize them"
        )
    height, width = image_size if image_size is not None else next(iter(sizes))[::-1]
    x = np.empty((len(images), height, width, 1 if grey else 3), dtype=np.uint8)
    for i, image in enumerate(images):
        image = image.convert("L" if grey else "RGB")
        if image.size != (width, height):
            image = image.resize((width, height), Image.Resampling.BILINEAR)
        x[i] = np.asarray(image, dtype=np.uint8).reshape(height, width, -1)
    index = {name: i for i, name in enumerate(names)}
    y = np.array([index[c] for c in classes], dtype=np.int64)
    return Images(_as_nhwc(x, path.name), y, None, None, names)


def _idx_pair(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    from clusterbench.preprocess import PreprocessError, read_idx

    try:
        images, labels = read_idx(images_path, 3), read_idx(labels_path, 1)
    except PreprocessError as exc:
        raise FormatError(str(exc)) from exc
    if len(images) != len(labels):
        raise FormatError(
            f"{images_path.name} has {len(images)} images but {labels_path.name} has "
            f"{len(labels)} labels"
        )
    return _as_nhwc(images, images_path.name), labels


def decode_idx(files: Sequence[Path], image_size: Sequence[int] | None = None) -> Images:
    x_train, y_train = _idx_pair(files[0], files[1])
    x_test = y_test = None
    if len(files) == 4:
        x_test, y_test = _idx_pair(files[2], files[3])
        if x_test.shape[1:] != x_train.shape[1:]:
            raise FormatError(
                f"{files[2].name}: test images are {x_test.shape[1:]}, training images "
                f"{x_train.shape[1:]}"
            )
    labels = y_train if y_test is None else np.concatenate([y_train, y_test])
    index, names = _classes_from_labels(labels, files[1].name)
    _check_classes(names, files[1].name)
    y_train = index[: len(y_train)]
    y_test = None if y_test is None else index[len(y_train) :]
    return Images(x_train, y_train, x_test, y_test, names)


CIFAR_RECORD = 1 + 32 * 32 * 3


def _cifar_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    if not data or len(data) % CIFAR_RECORD:
        raise FormatError(
            f"{where}: {len(data)} bytes is not a whole number of {CIFAR_RECORD}-byte records "
            "(truncated or corrupt)"
        )
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    images = np.ascontiguousarray(rows[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, rows[:, 0].astype(np.int64)


def decode_cifar_binary(files: Sequence[Path], image_size: Sequence[int] | None = None) -> Images:
    (path,) = files
    train, test, meta = [], [], None
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                name = PurePosixPath(member.name).name
                if not member.isfile():
                    continue
                if name.startswith("data_batch_") and name.endswith(".bin"):
                    train.append((name, archive.extractfile(member).read()))
                elif name == "test_batch.bin":
                    test.append((name, archive.extractfile(member).read()))
                elif name == "batches.meta.txt":
                    meta = archive.extractfile(member).read().decode("utf-8", errors="replace")
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise FormatError(f"{path.name}: corrupt or truncated archive ({exc})") from exc
    if not train:
        raise FormatError(f"{path.name}: no data_batch_*.bin in the archive")
    batches = [_cifar_batch(data, f"{path.name}: {name}") for name, data in sorted(train)]
    x_train = np.concatenate([x for x, _ in batches])
    y_train = np.concatenate([y for _, y in batches])
    x_test = y_test = None
    if test:
        x_test, y_test = _cifar_batch(test[0][1], f"{path.name}: test_batch.bin")
    labels = y_train if y_test is None else np.concatenate([y_train, y_test])
    k = int(labels.max()) + 1
    listed = [line.strip() for line in (meta or "").splitlines() if line.strip()]
    names = tuple(listed) if len(listed) >= k else tuple(str(i) for i in range(k))
    _check_classes(names, path.name)
    return Images(x_train, y_train, x_test, y_test, names)


DECODERS: dict[str, Callable[[Sequence[Path], Sequence[int] | None], Images]] = {
    "npz": decode_npz,
    "image-folder": decode_image_folder,
    "idx": decode_idx,
    "cifar-binary": decode_cifar_binary,
}
