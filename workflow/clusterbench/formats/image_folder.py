"""``format: image-folder``: images in one folder per class (the folder names, sorted, are the
classes), optionally all under one top-level folder: one ``.zip``, ``.tar``, ``.tar.gz`` or
``.tgz`` (``files``), or a folder read where it is (``path``: one folder per class, or
``train/``, ``val/`` and ``test/`` folders of class folders). Which files are images, and
what is left out or refused: :mod:`clusterbench.formats._layout`.

Stored as arrays, the archive's images are decoded once with Pillow (:func:`decode`), to
greyscale when every image is, else to RGB, and resized to ``image_size`` [H, W] (required
when the images differ in size); each image's pixel count is checked before it is decoded, and
a 16-bit PNG becomes 8-bit by its high byte (:mod:`clusterbench.formats._pixels`). Stored as
files (a run streams it; a folder always is), nothing is decoded here
(:mod:`clusterbench.data.indexing`).
"""

from __future__ import annotations

import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from clusterbench.formats import FormatError, Images, as_nhwc, check_classes
from clusterbench.formats._layout import (
    IMAGE_SUFFIXES,
    MAX_RATIO,
    Layout,
    LayoutError,
    check_member,
    class_layout,
)

FILES = (1,)
#: An image folder is one archive (or, read in place, a folder: ``path``).
SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
RESIZES = True
#: Can be stored as its image files (``storage: files``), indexed by preprocessing and decoded
#: per batch by a streamed run's loader (clusterbench.config.storage).
EXTRACTS = True
#: May be read in place from a folder (``datasets.<name>.path``) instead of ``files``.
PATH = "optional"
__all__ = ["IMAGE_SUFFIXES", "archive_samples", "decode"]


def compressed(path: Path) -> bool:
    """Whether the archive is a gzip stream (a member cannot be read at an offset)."""
    return path.name.endswith((".tar.gz", ".tgz"))


def _tar_files(path: Path) -> tuple[list[tarfile.TarInfo], list[str]]:
    with tarfile.open(path, "r:*") as archive:
        members = archive.getmembers()
    return [m for m in members if m.isfile()], [m.name for m in members if m.isdir()]


def archive_samples(path: Path) -> tuple[Layout, list[tuple[str, int]], Iterator[bytes]]:
    """An archive's images: their layout (classes, labels, what was left out), each sample's
    name and size, and an iterator of their bytes in that order, read one at a time (an
    archive larger than memory streams through). Member names that leave the folder, members
    too large to be images and archives that inflate like a bomb are refused first, naming
    them."""
    where = path.name
    try:
        if path.name.endswith(".zip"):
            archive = zipfile.ZipFile(path)
            infos = archive.infolist()
            files = [i for i in infos if not i.is_dir()]
            layout = class_layout(
                [i.filename for i in files], [i.filename for i in infos if i.is_dir()], where
            )
            chosen = [files[k] for k in layout.samples]
            for info in chosen:
                check_member(info.filename, info.file_size, info.compress_size, where)
            named = [(i.filename, i.file_size) for i in chosen]
            return layout, named, _zip_bytes(archive, chosen, where)
        members, folders = _tar_files(path)
        layout = class_layout([m.name for m in members], folders, where)
        chosen = [members[k] for k in layout.samples]
        total = sum(m.size for m in chosen)
        stored = path.stat().st_size
        for member in chosen:
            check_member(member.name, member.size, member.size, where)
        if compressed(path) and total > 1 << 20 and total > MAX_RATIO * stored:
            raise LayoutError(
                f"{where}: its images would inflate from {stored:,} to {total:,} bytes "
                f"({total / stored:,.0f} times; images inflate at most {MAX_RATIO} times): "
                "refused (a decompression bomb?)"
            )
        return layout, [(m.name, m.size) for m in chosen], _tar_bytes(path, chosen, where)
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise FormatError(f"{where}: corrupt or truncated archive ({exc})") from exc


def _zip_bytes(archive: zipfile.ZipFile, infos: list, where: str) -> Iterator[bytes]:
    with archive:
        for info in infos:
            try:
                with archive.open(info) as fh:
                    data = fh.read(info.file_size + 1)
            except (OSError, EOFError, zlib.error, zipfile.BadZipFile, RuntimeError) as exc:
                raise FormatError(f"{where}: {info.filename} cannot be read ({exc})") from exc
            if len(data) != info.file_size:
                raise FormatError(f"{where}: {info.filename} is not the size its archive says")
            yield data


def _tar_bytes(path: Path, chosen: list[tarfile.TarInfo], where: str) -> Iterator[bytes]:
    wanted = {m.offset: m.size for m in chosen}
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if member.offset in wanted and member.isfile():
                    fh = archive.extractfile(member)
                    yield fh.read(wanted[member.offset]) if fh is not None else b""
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise FormatError(f"{where}: corrupt or truncated archive ({exc})") from exc


def decode(
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    from clusterbench.formats._pixels import GREY_MODES, PixelError, open_checked, to_array

    (path,) = files
    try:
        layout, names, data = archive_samples(path)
    except LayoutError as exc:
        raise FormatError(str(exc)) from None
    check_classes(layout.classes, path.name)
    images = []
    for (member, _), blob in zip(names, data, strict=True):
        try:
            images.append(open_checked(blob))
        except PixelError as exc:
            raise FormatError(f"{path.name}: {member} is {_said(exc)}") from None
    grey = all(im.mode in GREY_MODES for im in images)
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
        array = to_array(image, grey)
        if array.shape[:2] != (height, width):
            from PIL import Image

            resized = Image.fromarray(array.squeeze(-1) if grey else array)
            array = np.asarray(resized.resize((width, height), Image.Resampling.BILINEAR))
        x[i] = array.reshape(height, width, -1)
    y = np.asarray(layout.labels, dtype=np.int64)
    return Images(as_nhwc(x, path.name), y, None, None, tuple(layout.classes))


def _said(exc: Exception) -> str:
    text = str(exc)
    return text if text.startswith("not a readable image") else f"not decoded: {text}"
