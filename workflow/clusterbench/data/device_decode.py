"""An image folder stored as files decoded and augmented on the training device (the run key
``decode``), for ``format: image-folder`` and ``format: imagenet`` read in place alike.

* **Where.** ``decode: cpu``: the loader processes decode and augment each image
  (:class:`clusterbench.data.folder.FileReader`). ``gpu``: the loader processes read each
  image's bytes and its header (its size, checked against the pixel limit) and draw its crop
  and flip; the training process decodes each batch's JPEGs on the GPU in one call
  (``torchvision.io.decode_jpeg(list, device=...)``, nvJPEG), then crops, resizes and flips them
  there. ``auto``: ``gpu`` where the run trains on GPUs, ``cpu`` on the CPU (:func:`choose`);
  the config check refuses ``gpu`` for a run without GPUs before any job.
* **The same augmentations.** The crop and flip of every image are drawn by the same function
  from the same seed, epoch and index (:meth:`FileReader.crop`), and applied by the same
  function (:meth:`FileReader.transform`): on the CPU the two paths give the same pixels bit for
  bit. On a GPU nvJPEG's decoding and the resize (in float, rounded: CUDA has no 8-bit
  antialiased resize) may differ from the CPU's by a level or so of a pixel's 256.
* **Other images.** A PNG (nvJPEG decodes JPEGs only) is decoded in the loader process and
  copied to the device decoded. A JPEG the GPU cannot decode (a CMYK one, a damaged one) is
  decoded on the CPU instead; one that neither decodes is a bad file, named or skipped as
  ``on_bad_file`` says, as on the CPU path.

Measured: ``make bench``'s decode section (GPU only), and ``make gpu-check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from clusterbench.data.folder import BadFile, FileReader, reason

#: A JPEG's first bytes (its start-of-image marker).
JPEG_MAGIC = b"\xff\xd8\xff"


def choose(setting: str, device_type: str) -> tuple[str, str]:
    """``(cpu | gpu, why)`` for the run key ``decode`` on ``device_type`` (cpu / cuda)."""
    if setting == "cpu":
        return "cpu", "decode: cpu"
    if setting == "gpu":
        if device_type != "cuda":
            raise ValueError(
                "decode: gpu decodes on the run's GPU, and this rank trains on the CPU"
            )
        return "gpu", "decode: gpu"
    if device_type == "cuda":
        return "gpu", "auto: the run trains on a GPU"
    return "cpu", "auto: the run trains on the CPU"


def is_jpeg(data: bytes | bytearray) -> bool:
    return bytes(data[:3]) == JPEG_MAGIC


class ByteReader:
    """The loader processes' side of ``decode: gpu``: reads images by their index in a split as
    ``(item, crop, row)``, ``item`` a JPEG's bytes (uint8, 1-D) or another image decoded
    (``(C, H, W)``), ``crop`` its :meth:`FileReader.crop`; unreadable ones as bad rows."""

    def __init__(self, reader: FileReader) -> None:
        self.reader = reader

    def count(self, split: str) -> int:
        return self.reader.count(split)

    def read(self, split: str, epoch: int | None, idx: np.ndarray) -> tuple[Any, Any, Any, list]:
        import torch

        reader, items, good, bad = self.reader, [], [], []
        for i in idx.tolist():
            row = int(reader.rows[split][i])
            try:
                data, (width, height) = reader.load(row)
                crop = reader.crop(split, epoch, i, height, width)
                item = (
                    torch.frombuffer(data, dtype=torch.uint8)
                    if is_jpeg(data)
                    else reader.decode_bytes(data)
                )
            except (BadFile, RuntimeError, OSError, ValueError) as exc:
                bad.append((row, reason(exc)))
                continue
            items.append((item, crop, row))
            good.append(i)
        kept = np.asarray(good, dtype=np.int64)
        y = torch.from_numpy(reader.labels[reader.rows[split][kept]])
        return items, y, torch.from_numpy(kept), bad


class DeviceDecoder:
    """The training process's side: a batch of :class:`ByteReader` items decoded and augmented
    on ``device`` (module docstring), as uint8 ``(N, H, W, C)`` with its labels and indices."""

    def __init__(self, reader: FileReader, device: Any) -> None:
        self.reader, self.device = reader, device

    def decode_jpegs(self, datas: list[Any]) -> list[Any]:
        """The JPEGs decoded on the device, in one call; where that fails, one at a time, then
        on the CPU: an exception in place of an image that does not decode."""
        from torchvision.io import decode_jpeg

        mode = self.reader.read_mode()
        if not datas:
            return []
        try:
            return list(decode_jpeg(datas, mode=mode, device=self.device))
        except RuntimeError:
            pass
        found: list[Any] = []
        for data in datas:
            try:
                found.append(decode_jpeg(data, mode=mode, device=self.device))
            except RuntimeError:
                try:
                    image = self.reader.decode_bytes(bytearray(data.numpy().tobytes()))
                    found.append(image.to(self.device))
                except (RuntimeError, ValueError) as exc:
                    found.append(exc)
        return found

    def __call__(self, items: list, y: Any, idx: Any) -> tuple[Any, Any, Any, list]:
        import torch

        jpegs = [k for k, (item, _, _) in enumerate(items) if item.dim() == 1]
        decoded = dict(zip(jpegs, self.decode_jpegs([items[k][0] for k in jpegs]), strict=True))
        images, keep, bad = [], [], []
        for k, (item, crop, row) in enumerate(items):
            image = decoded[k] if k in decoded else item.to(self.device, non_blocking=True)
            if isinstance(image, BaseException):
                bad.append((row, reason(image)))
                continue
            images.append(self.reader.transform(image, crop))
            keep.append(k)
        height, width = self.reader.size
        x = (
            torch.stack(images)
            if images
            else torch.empty((0, height, width, self.reader.channels), dtype=torch.uint8)
        )
        if len(keep) < len(items):
            chosen = torch.tensor(keep, dtype=torch.long)
            y, idx = y[chosen], idx[chosen]
        return x, y, idx, bad


def describe(mode: str, why: str) -> Mapping[str, str]:
    """What run.json's ``data`` records of the decoding."""
    return {"decode": mode, "decode_reason": why}
