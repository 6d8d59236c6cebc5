"""``format: image-folder``: one ``.zip``, ``.tar.gz`` or ``.tgz`` with one folder per class (the
folder names, sorted, are the classes), optionally all under one top-level folder, of PNG or
JPEG images; decoded once with Pillow, to greyscale when every image is, else to RGB, and
resized to ``image_size`` [H, W] (required when the images differ in size)."""

from __future__ import annotations

import io
import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

import numpy as np

from clusterbench.formats import FormatError, Images, as_nhwc, check_classes

FILES = (1,)
#: An image folder is one archive.
SUFFIXES = (".zip", ".tar.gz", ".tgz")
RESIZES = True
#: Can be stored as its image files (``storage: files``), extracted by preprocessing and decoded
#: per batch by a streamed run's loader (clusterbench.config.storage).
EXTRACTS = True
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def iter_archive_images(path: Path) -> Iterator[tuple[PurePosixPath, bytes]]:
    """(path inside the archive, bytes) of each image file in a zip or tar.gz archive, in the
    archive's order, one at a time (an archive larger than memory streams through)."""
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    if not info.is_dir() and info.filename.lower().endswith(IMAGE_SUFFIXES):
                        yield PurePosixPath(info.filename), archive.read(info)
        else:
            with tarfile.open(path, "r:gz") as archive:
                for member in archive:
                    if member.isfile() and member.name.lower().endswith(IMAGE_SUFFIXES):
                        yield PurePosixPath(member.name), archive.extractfile(member).read()
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise FormatError(f"{path.name}: corrupt or truncated archive ({exc})") from exc


def _archive_images(path: Path) -> list[tuple[PurePosixPath, bytes]]:
    """(path inside the archive, bytes) of every image file in a zip or tar.gz archive."""
    return list(iter_archive_images(path))


def class_of(paths: list[PurePosixPath], archive: str) -> list[str]:
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


def decode(
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    from PIL import Image, UnidentifiedImageError

    (path,) = files
    members = _archive_images(path)
    if not members:
        raise FormatError(f"{path.name}: no PNG or JPEG images in the archive")
    classes = class_of([p for p, _ in members], path.name)
    names = tuple(sorted(set(classes)))
    check_classes(names, path.name)
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
    return Images(as_nhwc(x, path.name), y, None, None, names)
