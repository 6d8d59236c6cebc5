"""How an image file becomes pixels, the same whichever way a dataset is read: decoded once
into arrays with Pillow (:mod:`clusterbench.formats.image_folder`, the statistics' sample) or
per batch by the loader with torchvision (:class:`clusterbench.data.folder.FileReader`).

* **The pixel count is checked before decoding:** an image of more than :data:`MAX_PIXELS`
  pixels (its header tells) is not decoded (a decompression bomb: a 30000 x 30000 PNG of a few
  hundred KB would take 2.7 GB); it is a file that cannot be read, named as such.
* **An animated image** (a GIF of several frames, whatever its name) is refused by both, saying
  so (torchvision decodes all its frames, Pillow its first).
* **16-bit images** (PNG) become 8-bit by their high byte (``value >> 8``), in both readers
  (Pillow would clip a 16-bit grey image to 255; torchvision gives uint16).

Pillow is imported where it is used: the config check imports the formats at parse time.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

#: The most pixels an image may have (Pillow's own warning threshold, ``MAX_IMAGE_PIXELS``:
#: 89,478,485, a 9459 x 9459 image).
MAX_PIXELS = 89_478_485
#: Pillow's modes of a 16-bit greyscale image.
WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")
GREY_MODES = ("1", "L", "I", "I;16", "I;16B", "I;16L", "I;16N", "F")


class PixelError(ValueError):
    """An image that is not decoded; the message says why (no file name: the caller adds it)."""


def animated(frames: int) -> PixelError:
    """An image of several frames (an animated GIF, whatever its name says), refused alike by
    both readers: which frame is the sample is no choice to make for the user."""
    return PixelError(f"an animated image of {frames} frames (a GIF?), not a still PNG or JPEG")


def check_size(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise PixelError(
            f"{width} x {height} = {width * height:,} pixels, more than the {MAX_PIXELS:,} "
            "allowed: not decoded (a decompression bomb?)"
        )


#: JPEG markers that start a frame (SOF0..SOF15 but DHT, JPG and DAC), whose header holds the
#: image's height and width.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def dimensions(data: bytes | bytearray) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR or a JPEG's frame header, read from the bytes alone
    (a few microseconds: the loader asks it of every image); None for anything else, or a
    header it cannot read (then Pillow reads it: :func:`header`)."""
    view = memoryview(data)
    if view[:8] == b"\x89PNG\r\n\x1a\n" and view[12:16] == b"IHDR" and len(view) >= 24:
        return int.from_bytes(view[16:20], "big"), int.from_bytes(view[20:24], "big")
    if view[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 4 <= len(view):
        if view[at] != 0xFF:
            return None
        marker = view[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # no length
            at += 2
            continue
        length = int.from_bytes(view[at + 2 : at + 4], "big")
        if marker in _SOF and at + 9 <= len(view):
            height = int.from_bytes(view[at + 5 : at + 7], "big")
            width = int.from_bytes(view[at + 7 : at + 9], "big")
            return width, height
        at += 2 + length
    return None


def pillow() -> Any:
    """Pillow's ``Image``, its own decompression-bomb check off: :func:`check_size` is ours,
    the same for every reader, and names the file instead of raising a traceback."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None
    return Image


def header(data: bytes) -> tuple[str, tuple[int, int]]:
    """An image's Pillow mode and (width, height), from its header alone; :class:`PixelError`
    when it is no image Pillow knows."""
    from PIL import UnidentifiedImageError

    Image = pillow()
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.mode, image.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise PixelError(f"not a readable image ({exc})") from None


def open_checked(data: bytes) -> Any:
    """A Pillow image of ``data``, its pixels loaded, after its size passed :func:`check_size`;
    :class:`PixelError` otherwise."""
    from PIL import UnidentifiedImageError

    Image = pillow()
    try:
        image = Image.open(io.BytesIO(data))
        check_size(*image.size)
        if getattr(image, "n_frames", 1) > 1:
            raise animated(image.n_frames)
        image.load()
    except PixelError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        raise PixelError(f"not a readable image ({exc})") from None
    return image


def to_array(image: Any, grey: bool) -> np.ndarray:
    """A Pillow image as uint8 ``(H, W, C)``, C = 1 (``grey``) or 3; a 16-bit one by its high
    byte (module docstring)."""
    from PIL import Image

    if image.mode in WIDE_MODES:
        wide = np.asarray(image, dtype=np.uint32 if image.mode == "I" else np.uint16)
        image = Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8), mode="L")
    array = np.asarray(image.convert("L" if grey else "RGB"), dtype=np.uint8)
    return array.reshape(array.shape[0], array.shape[1], -1)
