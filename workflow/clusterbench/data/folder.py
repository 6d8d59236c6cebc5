"""An image folder stored as files (:mod:`clusterbench.data.indexing`), read by the loader: its
index (:mod:`clusterbench.data.index`), each image's bytes read where they are (a folder's
file, an archive's member at its offset, the workflow's extracted copy), decoded and
transformed at the input size in a loader process.

The input size (``[H, W]``, :func:`input_size`) is the dataset's ``image_size`` where it gives
one, else the model's own (``ModelSpec.input_size``), else the images' own size when they all
share it. Each image is decoded (``torchvision.io.decode_image``: JPEG, PNG; a 16-bit PNG by
its high byte, as :mod:`clusterbench.formats._pixels` says for every reader) to the dataset's
channels, then cropped and resized (bilinear, antialiased) as ``augment`` says
(:mod:`clusterbench.data.augment`): for training a random-resized-crop and a flip
(``standard``), keyed by the seed, the epoch and the image's index in the training split; for
validation and test a centre crop (``standard``); with ``none``, the whole image resized.

An image that cannot be read or decoded is returned as bad (its row and the reason), never
raised in the loader process: the training names its file (``on_bad_file: fail``) or leaves it
out of its batch and counts it (``skip``). So is an image larger than the pixel limit (its
header is read first), one whose name is no PNG or JPEG, and a folder's file whose size or
modification time is no longer what the index recorded (changed since it was indexed: the
workflow indexes the folder again at its next invocation).
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.core import integrity
from clusterbench.data import DataError
from clusterbench.data import augment as augmentation
from clusterbench.data import index as images_index
from clusterbench.data.index import SPLITS, ImageIndex, copy_path

#: In a node-local copy (clusterbench.data.staging): where each root of the index was copied.
STAGED_ROOTS = "roots.json"


class BadFile(Exception):
    """An image that cannot be read; the message says why."""


def read_index(data_dir: Path, meta: Mapping[str, Any]) -> ImageIndex:
    """``index.npz`` of ``data_dir``, checked against ``meta.json``'s record of it and its
    splits against the meta's classes and counts."""
    marker = data_dir / "meta.json"
    integrity.check(marker, "files", integrity.remake_command(marker), prefix=images_index.NAME)
    path = data_dir / images_index.NAME
    try:
        index = images_index.read(path)
    except images_index.IndexError_ as exc:
        raise DataError(str(exc)) from None
    labels = index.columns["label"]
    if len(labels) and (labels.min() < 0 or labels.max() >= meta["num_classes"]):
        raise DataError(f"{path}: labels outside 0..{meta['num_classes'] - 1}")
    counts = index.counts()
    if counts != {split: meta["counts"][split] for split in SPLITS}:
        raise DataError(f"{path}: splits hold {counts}, meta.json says {meta['counts']}")
    return index


def resolved_roots(data_dir: Path, index: ImageIndex) -> list[str]:
    """Where each root of ``index`` is read: a node-local copy's own (its ``roots.json``),
    else the folder or archive recorded, or ``data_dir`` for the workflow's extracted copy."""
    staged = data_dir / STAGED_ROOTS
    if staged.exists():
        return [str(data_dir / r) for r in json.loads(staged.read_text())]
    return [str(data_dir) if r["kind"] == "copy" else r["path"] for r in index.roots]


class Sources:
    """Reads an image's bytes by its index row, wherever they are (module docstring). Sent to
    each loader process: it holds arrays and paths, and opens the archives in the process that
    reads them."""

    def __init__(self, data_dir: Path, index: ImageIndex) -> None:
        self.data_dir = Path(data_dir)
        self.roots = resolved_roots(self.data_dir, index)
        self.kinds = [r["kind"] for r in index.roots]
        self.stamps = [(r.get("size"), r.get("mtime")) for r in index.roots]
        cols = index.columns
        self.root, self.size, self.mtime = cols["root"], cols["size"], cols["mtime"]
        self.offset, self.length, self.method = cols["offset"], cols["length"], cols["method"]
        self.blob, self.offsets = index.name_blob, index.name_offsets
        self.staged = (self.data_dir / STAGED_ROOTS).exists()
        self._open: dict[int, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_open": {}}

    def name(self, row: int) -> str:
        return images_index.unpack_name(self.blob, self.offsets, row)

    def describe(self, row: int) -> str:
        """An image as an error names it: its file, and its name in the archive."""
        k, name = int(self.root[row]), self.name(row)
        if self.kinds[k] == "folder":
            return f"{self.roots[k]}/{name}"
        if self.kinds[k] == "copy":
            return f"{self.roots[k]}/{copy_path(row, name)} (archive member {name})"
        return f"{self.roots[k]} (member {name})"

    def read(self, row: int) -> bytes:
        """Image ``row``'s bytes; :class:`BadFile` saying why they cannot be had."""
        k = int(self.root[row])
        size = int(self.size[row])
        if self.kinds[k] == "archive":
            return self.member(k, row, size)
        if self.kinds[k] == "folder":
            path = f"{self.roots[k]}/{self.name(row)}"
            stamp = None if self.staged else int(self.mtime[row])
        else:
            path = f"{self.roots[k]}/{copy_path(row, self.name(row))}"
            stamp = None
        return read_file(path, size, stamp)

    def archive(self, k: int) -> int:
        """The open archive of root ``k`` (checked once per process against its record)."""
        fd = self._open.get(k)
        if fd is None:
            try:
                fd = os.open(self.roots[k], os.O_RDONLY)
            except OSError as exc:
                raise BadFile(f"its archive cannot be read ({exc.strerror or exc})") from None
            st = os.fstat(fd)
            size, mtime = self.stamps[k]
            if not self.staged and (st.st_size, st.st_mtime_ns) != (size, mtime):
                os.close(fd)
                raise BadFile(
                    "its archive changed since it was indexed (size or modification time)"
                )
            self._open[k] = fd
        return fd

    def member(self, k: int, row: int, size: int) -> bytes:
        fd = self.archive(k)
        length, method = int(self.length[row]), int(self.method[row])
        data = os.pread(fd, length, int(self.offset[row]))
        if len(data) != length:
            raise BadFile(f"its archive ends before it ({len(data)} of {length} bytes)")
        if method == 0:
            return bytearray(data)
        if method != 8:
            return self.zip_member(k, row, size)
        try:
            inflate = zlib.decompressobj(-15)
            data = inflate.decompress(data, size + 1)
        except zlib.error as exc:
            raise BadFile(f"its deflated bytes are damaged ({exc})") from None
        if len(data) != size:
            raise BadFile(f"it inflates to {len(data)} bytes, not the {size} its archive says")
        return bytearray(data)

    def zip_member(self, k: int, row: int, size: int) -> bytes:
        """A zip member compressed otherwise than deflate (bzip2, lzma): through zipfile."""
        import zipfile

        try:
            with zipfile.ZipFile(self.roots[k]) as archive, archive.open(self.name(row)) as fh:
                data = fh.read(size + 1)
        except (OSError, zipfile.BadZipFile, KeyError, EOFError, RuntimeError) as exc:
            raise BadFile(f"not readable from its archive ({exc})") from None
        if len(data) != size:
            raise BadFile(f"it inflates to {len(data)} bytes, not the {size} its archive says")
        return bytearray(data)


def read_file(path: str, size: int, mtime: int | None) -> bytearray:
    """The bytes of the file ``path``, which must still have ``size`` bytes (and modification
    time ``mtime``, ns, where given)."""
    try:
        with open(path, "rb", buffering=0) as fh:
            st = os.fstat(fh.fileno())
            if st.st_size != size or (mtime is not None and st.st_mtime_ns != mtime):
                raise BadFile(
                    f"changed since the folder was indexed ({st.st_size:,} bytes, {size:,} "
                    "recorded; or its modification time): run the workflow again, it indexes "
                    "the folder again"
                )
            data = bytearray(size)
            got = fh.readinto(data)
    except OSError as exc:
        raise BadFile(f"cannot be read ({exc.strerror or exc})") from None
    if got != size:
        raise BadFile(f"holds {got} bytes, {size} recorded")
    return data


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
        sources: Sources,
        index: ImageIndex,
        size: Sequence[int],
        channels: int,
        augment: str,
        seed: int,
    ) -> None:
        from clusterbench.formats._layout import is_image_name

        self.sources = sources
        self.labels = index.columns["label"].astype(np.int64)
        self.rows = {split: index.rows(split) for split in SPLITS}
        names = index.names()
        #: Rows whose name is no PNG or JPEG (a sample all the same: on_bad_file decides).
        self.not_images = {i for i, n in enumerate(names) if not is_image_name(n)}
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
            except (BadFile, RuntimeError, OSError, ValueError) as exc:
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

    def load(self, row: int) -> tuple[bytearray, tuple[int, int]]:
        """Image ``row``'s bytes and its ``(width, height)`` from its header, checked against
        the pixel limit (module docstring): :class:`BadFile` saying why they cannot be had."""
        from clusterbench.formats._pixels import PixelError, check_size, dimensions, header

        if row in self.not_images:
            raise BadFile("not a PNG or JPEG file (by its name)")
        data = self.sources.read(row)
        try:
            size = dimensions(data) or header(data)[1]
            check_size(*size)
        except PixelError as exc:
            raise BadFile(str(exc)) from None
        return data, (int(size[0]), int(size[1]))

    def decode_bytes(self, data: bytearray) -> Any:
        """An image's bytes decoded on the CPU: uint8 ``(C, H, W)`` (module docstring)."""
        import torch
        from torchvision.io import decode_image

        from clusterbench.formats._pixels import animated

        image = decode_image(torch.frombuffer(data, dtype=torch.uint8), mode=self.read_mode())
        if image.ndim == 4:  # an animated GIF: its frames
            raise BadFile(str(animated(image.shape[0])))
        if image.dtype == torch.uint16:  # a 16-bit PNG: its high byte, as Pillow's readers
            image = (image.to(torch.int32) >> 8).to(torch.uint8)
        return image

    def read_mode(self) -> Any:
        """The dataset's channels as torchvision's decoders take them."""
        from torchvision.io import ImageReadMode

        return ImageReadMode.GRAY if self.channels == 1 else ImageReadMode.RGB

    def decode(self, row: int) -> Any:
        """Image ``row`` decoded: uint8 ``(C, H, W)`` (module docstring)."""
        return self.decode_bytes(self.load(row)[0])

    def crop(self, split: str, epoch: int | None, i: int, height: int, width: int) -> tuple:
        """``(top, left, h, w, flip)`` of image ``i`` of ``split`` (``height x width``) in
        ``epoch``, as ``augment`` says (module docstring)."""
        flip = False
        if self.augment == "standard" and split == "train":
            rng = augmentation.sample_rng(self.seed, epoch or 0, i)
            top, left, h, w = augmentation.resized_crop_box(rng, height, width)
            flip = bool(rng.integers(0, 2))
        elif self.augment == "standard":
            top, left, h, w = augmentation.centre_crop_box(height, width, self.size)
        else:
            top, left, h, w = 0, 0, height, width
        return top, left, h, w, flip

    def transform(self, image: Any, crop: tuple) -> Any:
        """A decoded ``(C, H, W)`` image (on any device) cropped to ``crop`` (:meth:`crop`),
        resized to the input size and flipped: uint8 ``(H, W, C)``."""
        import torch

        top, left, h, w, flip = crop
        box = image[None, :, top : top + h, left : left + w]
        box = box.contiguous(memory_format=torch.channels_last)
        if (h, w) != self.size:
            box = resize(box, self.size)
        if flip:
            box = box.flip(-1)
        return box[0].permute(1, 2, 0).contiguous()

    def image(self, split: str, epoch: int | None, i: int, row: int) -> Any:
        """Image ``i`` of ``split`` (index row ``row``): uint8 ``(H, W, C)``."""
        image = self.decode(row)
        _, height, width = image.shape
        return self.transform(image, self.crop(split, epoch, i, height, width))


def resize(box: Any, size: tuple[int, int], integer: bool | None = None) -> Any:
    """uint8 ``(1, C, h, w)`` resized to ``size`` (bilinear, antialiased). ``integer`` (the
    default on the CPU): in 8-bit arithmetic, as the CPU path always did; else (CUDA has no
    8-bit antialiased resize) in float32, rounded back to uint8."""
    import torch
    import torch.nn.functional as F

    if integer is None:
        integer = box.device.type == "cpu"
    if integer:
        return F.interpolate(box, size=size, mode="bilinear", antialias=True)
    out = F.interpolate(box.float(), size=size, mode="bilinear", antialias=True)
    return out.round_().clamp_(0, 255).to(torch.uint8)


class EvalBatches:
    """A split of an image folder stored as files, for the evaluate stage: ``(images, labels)``
    as NumPy arrays, ``batch_size`` at a time, decoded by loader processes as the model was
    trained to take them; unreadable images stop it naming the file (``on_bad_file: fail``) or
    are left out and counted in ``skipped``."""

    def __init__(self, reader: FileReader, split: str, batch_size: int, on_bad: str) -> None:
        self.reader, self.split = reader, split
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
                name = self.reader.sources.describe(row)
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
    sources = Sources(data_dir, index)
    channels = int(meta["channels"])
    reader = FileReader(sources, index, (height, width), channels, settings["augment"], 0)
    batches = EvalBatches(reader, split, batch_size, settings["on_bad_file"])
    return {**meta, "image_shape": [height, width, int(meta["channels"])]}, batches
